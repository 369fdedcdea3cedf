//! The RoleSet controller: observes a RoleSet's pods and PodSets from the shared caches, asks
//! the planner (`crate::planner::roleset::decide`) for the pass — what to create, delete
//! and patch in place, and what to tell the user — carries it out, and writes the status.
//!
//! Roles are plain pods (`podGroupSize` ≤ 1; stateless, or stateful with one pod per slot)
//! or PodSets (one per slot), updated by `Recreate` or — plain-pod roles only —
//! `InPlaceIfPossible` (image-only changes patched into the live pods; anything else falls
//! back to recreating, with an `InPlaceFallback` event), under `Sequential`, `Parallel` and
//! `Interleave` ordering, holding back a role's `rollout.partition`
//! (docs/rollouts.md#the-pooled-canary-the-role-rollout-block).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::kit::children::{ChildKind, Created, OnConflict, Writes, owned_children, uids};
use super::kit::context::Context;
use super::kit::error::Error;
use super::kit::expectations::PendingCreate;
use super::kit::owner::Owner;
use super::podgroups;
use super::wall_clock;
use crate::admission::validation::validate_roleset;
use crate::api::RoleSpec;
use crate::api::cached::meta::Labelled;
use crate::api::cached::pod::CachedPod;
use crate::api::drain::{Drain, DrainQuery};
use crate::api::keys::{
    ANNOTATION_DRAIN_IN_FLIGHT, ANNOTATION_DRAIN_POLICY, ANNOTATION_DRAIN_STARTED,
    ANNOTATION_IN_PLACE_PENDING_REASON, CONDITION_IN_PLACE_READY, CONDITION_PAIRING_SERVABLE,
    FINALIZER_ROLESET, LABEL_ROLE_NAME, LABEL_ROLE_TEMPLATE_HASH, LABEL_ROLESET_NAME,
};
use crate::api::{PodSet, RoleSet};
use crate::controller::analysis::InFlightAsk;
use crate::planner::availability::Availability;
use crate::planner::podgroup::Gang;
use crate::planner::podgroup::roleset_gang_size;
use crate::planner::render::role_revision_labels;
use crate::planner::requeue;
use crate::planner::roleset::adoption::relabel_patch;
use crate::planner::roleset::children::role_children;
use crate::planner::roleset::drain::{DrainUnit, DrainWrites, Reading};
use crate::planner::roleset::in_place::complete_patch;
use crate::planner::roleset::status::{
    Failure, Obstacles, ROLESET_COUNTERS, failure, roleset_status, roleset_status_unwritten,
};
use crate::planner::roleset::{NewChild, Pass, PassInput, Pending, RoleWrites, decide};
use crate::planner::serving::Gangs;
use crate::planner::serving::Gate;
use crate::planner::status::Reason;

impl Owner for RoleSet {
    const CONTROLLER: &'static str = "roleset";
    const FINALIZER: &'static str = FINALIZER_ROLESET;
    const CHILD_LABEL: &'static str = LABEL_ROLESET_NAME;
    const CHILDREN: &'static [ChildKind] = &[ChildKind::PodSets, ChildKind::Pods];

    fn apply(
        &self,
        ctx: &Context,
    ) -> impl std::future::Future<Output = Result<Action, Error>> + Send {
        apply(self, ctx)
    }

    fn before_deletion(
        &self,
        ctx: &Context,
    ) -> impl std::future::Future<Output = Result<(), Error>> + Send {
        drain_before_deletion(self, ctx)
    }
}

/// The RoleSet's own pods.
fn owned_pods(roleset: &RoleSet, ctx: &Context) -> Vec<Arc<CachedPod>> {
    owned_children(&ctx.caches.pods, roleset)
}

/// The RoleSet's own PodSets (multi-node roles).
fn owned_podsets(roleset: &RoleSet, ctx: &Context) -> Vec<Arc<PodSet>> {
    owned_children(&ctx.caches.podsets, roleset)
}

/// Whether squall holds serving gates on the RoleSet's pods: roles are paired, its
/// `servingGate` is set (docs/rollouts.md#the-serving-gate), or a role drains
/// (docs/rollouts.md#drain-before-delete).
fn gates_in_use(roleset: &RoleSet, drains: bool) -> bool {
    roleset.spec.serving_gate.is_some()
        || roleset.spec.pairing.as_ref().is_some_and(|g| !g.is_empty())
        || drains
}

/// Whether the RoleSet drains children: a role of it drains, or a child was created to
/// drain (its role may be gone from the spec).
fn drains(roleset: &RoleSet, pods: &[Arc<CachedPod>], podsets: &[Arc<PodSet>]) -> bool {
    let created_to = |child: &dyn Labelled| child.annotation(ANNOTATION_DRAIN_POLICY).is_some();
    roleset
        .spec
        .roles
        .iter()
        .flatten()
        .any(|r| r.drain.is_some())
        || pods.iter().any(|p| created_to(&**p))
        || podsets.iter().any(|p| created_to(&**p))
}

/// The drain starts this controller wrote on the RoleSet's children that the cache does not
/// show yet.
fn written_drains(
    key: &str,
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
    ctx: &Context,
) -> BTreeMap<String, i64> {
    let shows = |child: &dyn Labelled| child.annotation(ANNOTATION_DRAIN_STARTED).is_some();
    let seen: HashMap<&str, bool> = pods
        .iter()
        .map(|p| (Some(p.name()), shows(&**p)))
        .chain(
            podsets
                .iter()
                .map(|p| (p.metadata.name.as_deref(), shows(&**p))),
        )
        .filter_map(|(name, shown)| Some((name?, shown)))
        .collect();
    ctx.expectations
        .observe_drains(key, |name| seen.get(name).copied())
}

/// The requests in flight of the RoleSet's draining children whose drain reads them (their
/// role's, or for a role removed from the spec the one they were created with), as answered
/// so far (a PodSet's: the sum over its pods, once every one is read).
fn readings(
    roleset: &RoleSet,
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
    gangs: &Gangs<'_>,
    ctx: &Context,
) -> BTreeMap<String, Reading> {
    let specs: Vec<&RoleSpec> = roleset.spec.roles.iter().flatten().collect();
    // A child (named `name`, being deleted or not) draining now, with its role and the
    // query of its drain.
    fn draining<'m, C: Labelled>(
        child: &'m C,
        name: &'m str,
        deleting: bool,
        specs: &[&RoleSpec],
    ) -> Option<(&'m str, &'m str, DrainQuery)> {
        if deleting || child.annotation(ANNOTATION_DRAIN_STARTED).is_none() {
            return None;
        }
        let role = child.label(LABEL_ROLE_NAME)?;
        let drain = match specs.iter().find(|r| r.name == role) {
            Some(spec) => spec.drain.clone(),
            None => Drain::of_child(child),
        };
        Some((name, role, drain?.query?))
    }
    // Each draining child with its role, its query and its pods.
    let units: Vec<(&str, &str, DrainQuery, Vec<&CachedPod>)> = pods
        .iter()
        .filter_map(|pod| {
            let (name, role, query) = draining(&**pod, pod.name(), pod.is_deleting(), &specs)?;
            Some((name, role, query, vec![&**pod]))
        })
        .chain(podsets.iter().filter_map(|podset| {
            let meta = &podset.metadata;
            let (name, role, query) = draining(
                &**podset,
                meta.name.as_deref()?,
                meta.deletion_timestamp.is_some(),
                &specs,
            )?;
            Some((name, role, query, gangs.members(name)?.to_vec()))
        }))
        .collect();
    let asks: Vec<InFlightAsk<'_>> = units
        .iter()
        .flat_map(|(_, role, query, members)| {
            members.iter().filter_map(move |pod| {
                Some(InFlightAsk {
                    pod: pod.name(),
                    pod_uid: pod.metadata.uid.as_deref()?,
                    role,
                    query,
                })
            })
        })
        .collect();
    if asks.is_empty() {
        return BTreeMap::new();
    }
    let read = ctx.providers.in_flight(roleset, asks);
    units
        .into_iter()
        .filter_map(|(unit, _, _, members)| {
            let mut sum: Result<f64, String> = Ok(0.0);
            let mut at = i64::MAX;
            for pod in members {
                let (value, sent) = read.get(pod.name())?;
                at = at.min(*sent);
                sum = match (sum, value) {
                    (Ok(total), Ok(value)) => Ok(total + value),
                    (Err(why), _) => Err(why),
                    (_, Err(why)) => Err(why.clone()),
                };
            }
            (at != i64::MAX).then(|| (unit.to_string(), Reading { value: sum, at }))
        })
        .collect()
}

/// The pairing conditions this controller wrote on the RoleSet's pods (and its gangs') that
/// the cache does not show yet, when roles are paired.
fn written_gates(
    gates: bool,
    key: &str,
    pods: &[Arc<CachedPod>],
    gang_pods: &[Arc<CachedPod>],
    ctx: &Context,
) -> BTreeMap<String, bool> {
    if !gates {
        return BTreeMap::new();
    }
    let seen: HashMap<&str, Option<bool>> = pods
        .iter()
        .chain(gang_pods)
        .map(|pod| {
            let gate = pod.condition(CONDITION_PAIRING_SERVABLE);
            (pod.name(), gate.map(|s| s == "True"))
        })
        .collect();
    ctx.expectations
        .observe_gates(key, |name| seen.get(name).copied())
}

/// The pods of its PodSets, when serving gates are in use: a gang's gate is on them
/// (docs/rollouts.md#pairing). Each PodSet's by owner UID, from the cache's index.
fn paired_gang_pods(gates: bool, podsets: &[Arc<PodSet>], ctx: &Context) -> Vec<Arc<CachedPod>> {
    if !gates {
        return Vec::new();
    }
    podsets
        .iter()
        .flat_map(|podset| owned_children(&ctx.caches.pods, &**podset))
        .collect()
}

async fn apply(roleset: &RoleSet, ctx: &Context) -> Result<Action, Error> {
    Ok(match run(roleset, ctx).await?.due {
        Some(wait) => Action::requeue(wait),
        None => Action::await_change(),
    })
}

/// What a pass left to come back for.
struct Ran {
    /// When it is due again; None: on a change only.
    due: Option<Duration>,
    /// Some child is out of traffic for its drain (docs/rollouts.md#drain-before-delete).
    draining: bool,
}

/// A RoleSet being deleted drains its children first (docs/rollouts.md#drain-before-delete):
/// a pass over it as if every role were scaled to 0 drains and deletes them, and the
/// ordered deletion waits until no drain runs.
async fn drain_before_deletion(roleset: &RoleSet, ctx: &Context) -> Result<(), Error> {
    let (pods, podsets) = (owned_pods(roleset, ctx), owned_podsets(roleset, ctx));
    if !drains(roleset, &pods, &podsets) {
        return Ok(());
    }
    let mut leaving = roleset.clone();
    for role in leaving.spec.roles.iter_mut().flatten() {
        role.replicas = Some(0);
    }
    let ran = run(&leaving, ctx).await?;
    if ran.draining {
        return Err(Error::Draining(ran.due.unwrap_or(requeue::RESYNC)));
    }
    Ok(())
}

/// One pass: observe, decide, write.
async fn run(roleset: &RoleSet, ctx: &Context) -> Result<Ran, Error> {
    let now = wall_clock();
    if let Some(message) = ctx.invalid_spec(roleset, |roleset| validate_roleset(roleset, None)) {
        let failure = Failure::ReconcileError(format!("invalid spec: {message}"));
        let due = write_status(roleset, ctx, &Pass::default(), Some(failure), now).await?;
        return Ok(Ran {
            due,
            draining: false,
        });
    }
    // Observe: the cached children, what earlier passes issued that the cache does not show
    // yet, and the stable revisions partitions keep pods on.
    let pods = owned_pods(roleset, ctx);
    let podsets = owned_podsets(roleset, ctx);
    let drains = drains(roleset, &pods, &podsets);
    let gates = gates_in_use(roleset, drains);
    let gang_pods = paired_gang_pods(gates, &podsets, ctx);
    let key = Context::key(roleset);
    let written_gates = written_gates(gates, &key, &pods, &gang_pods, ctx);
    let written_drains = written_drains(&key, &pods, &podsets, ctx);
    let clock = Availability::new(roleset.spec.min_ready_seconds, now);
    let roles = role_children(roleset, &pods, &podsets, clock);
    let readings = if drains {
        let gangs = Gangs::new(&podsets, &gang_pods);
        readings(roleset, &pods, &podsets, &gangs, ctx)
    } else {
        BTreeMap::new()
    };
    let mut pending = Vec::with_capacity(roles.len());
    let mut stable = Vec::with_capacity(roles.len());
    for role in &roles {
        let seen = role
            .children
            .iter()
            .map(|v| (v.name.clone(), v.terminating));
        let expectation = ctx.expectations.observe(&key, &role.role, seen);
        pending.push(Pending {
            creates: expectation.pending_creates(false),
            stable_creates: expectation.pending_creates(true),
            slots: expectation.pending_slots(),
            deletes: expectation.deletes,
        });
        stable.push(match &role.stable_revision {
            Some(name) => Some(stable_revision(roleset, name, ctx).await?),
            None => None,
        });
    }
    // The gang's PodGroup comes before its pods: they wait for it when its scheduler is
    // there, and are created without it (said in the status) when it is not.
    let gang = podgroups::sync(
        ctx,
        roleset,
        LABEL_ROLESET_NAME,
        roleset.spec.scheduling_strategy.as_ref(),
        roleset_gang_size(&roleset.spec),
    )
    .await?;
    // Decide.
    let pass = decide(PassInput {
        roleset,
        pods: &pods,
        podsets: &podsets,
        gang_pods: &gang_pods,
        written_gates: &written_gates,
        roles,
        pending,
        stable,
        gang,
        clock,
        written_drains: &written_drains,
        readings: &readings,
    });
    // Write.
    if let Some(sequence) = &pass.sequence
        && ctx.once_per_generation(roleset, "upgrade sequence")
    {
        // The reconcile's span names the RoleSet.
        tracing::info!(%sequence, "sequential upgrade order");
    }
    let pod_writes = Writes::<Pod>::beside(ctx, roleset);
    let podset_writes = Writes::<PodSet>::beside(ctx, roleset);
    // A drain's start is on its child before its gate closes: a restart in between finds
    // it draining, not serving again.
    write_drains(roleset, &pass.drain, &pod_writes, &podset_writes, ctx, now).await?;
    // Gates first: a pod stops serving before the partner it relies on goes.
    for gate in &pass.gates {
        set_serving_condition(&pod_writes, gate, now).await?;
        ctx.expectations.expect_gate(&key, &gate.pod, gate.servable);
    }
    let pod_uids = uids(pods.iter().map(|p| &**p));
    let podset_uids = uids(podsets.iter().map(|p| &**p));
    if !pass.retired_pods.is_empty() || !pass.retired_podsets.is_empty() {
        tracing::info!(
            pods = pass.retired_pods.len(),
            podsets = pass.retired_podsets.len(),
            "deleting children of removed roles"
        );
    }
    for name in pass.orphan_pods.iter().chain(&pass.retired_pods) {
        pod_writes.delete(name, pod_uids.get(name)).await?;
    }
    for name in pass.orphan_podsets.iter().chain(&pass.retired_podsets) {
        podset_writes.delete(name, podset_uids.get(name)).await?;
    }
    // Creates the API server refused, by role: the status says so (ReplicaFailure,
    // FailedCreate, like a ReplicaSet's) and the RoleSet is retried with backoff.
    let mut refused: Vec<String> = Vec::new();
    for role in &pass.roles {
        adopt_pods(roleset, role, &pod_writes, &podset_writes, ctx).await?;
        update_in_place(roleset, role, &pods, &pod_writes, ctx, now).await?;
        for name in &role.action.delete {
            if role.gang {
                podset_writes.delete(name, podset_uids.get(name)).await?;
            } else {
                pod_writes.delete(name, pod_uids.get(name)).await?;
            }
            ctx.expectations.expect_delete(&key, &role.role, name);
        }
        for create in &role.creates {
            // A slot's child has a deterministic name: taken means already created.
            let on_conflict = match create.slot {
                Some(_) => OnConflict::Exists,
                None => OnConflict::Fail,
            };
            let created = match &create.child {
                NewChild::Pod(pod) => named(&**pod, pod_writes.create(pod, on_conflict).await?),
                NewChild::PodSet(podset) => {
                    named(&**podset, podset_writes.create(podset, on_conflict).await?)
                }
            };
            let name = match created {
                Ok(name) => name,
                Err(message) => {
                    refused.push(format!("role {}: {message}", role.role));
                    break;
                }
            };
            ctx.expectations.expect_create(
                &key,
                &role.role,
                &name,
                PendingCreate {
                    slot: create.slot,
                    stable: create.stable,
                },
            );
        }
        if !role.action.is_empty() {
            tracing::info!(role = %role.role, created = role.action.creates(),
                deleted = role.action.delete.len(), kind = if role.gang { "PodSets" } else { "pods" },
                "children");
        }
    }
    if let Some((pods, podsets)) = pass.topology_pending
        && ctx.once_per_generation(roleset, "topology pending")
    {
        ctx.warn(
            roleset,
            "TopologyPolicyPendingPodReplacement",
            "TopologyPolicy",
            format!(
                "TopologyPolicy changes do not update {pods} active Pod(s) and \
                 {podsets} PodSet template(s); they will use the new affinity after \
                 replacement or recreation."
            ),
        )
        .await;
    }

    let podgroup_crd_missing = match gang {
        Gang::Unserved(scheduler) => Some(scheduler),
        Gang::Foreign(_) => None,
        // Role-level strategies: one PodGroup per PodSet, whose controller cannot say it.
        _ => roleset.spec.roles.iter().flatten().find_map(|role| {
            (role.pod_group_size_or_default() > 1)
                .then(|| {
                    ctx.caches
                        .podgroups
                        .unserved(role.scheduling_strategy.as_ref())
                })
                .flatten()
        }),
    }
    .map(|scheduler| {
        format!(
            "schedulingStrategy.{} asks for a PodGroup, but the CRD {} is not installed: \
             pods are created without the gang guarantee",
            scheduler.strategy_field(),
            scheduler.crd_name()
        )
    });
    let failure = failure(Obstacles {
        refused: refused.clone(),
        problems: pass.problems.clone(),
        podgroup_conflict: match gang {
            Gang::Foreign(scheduler) => Some(Gang::foreign_message(scheduler, &roleset.name_any())),
            _ => None,
        },
        podgroup_crd_missing,
    });
    if let Some(Failure::PodGroupCrdMissing(message)) = &failure
        && ctx.once_per_generation(roleset, "podgroup crd missing")
    {
        ctx.warn(
            roleset,
            Reason::PodGroupCrdMissing.as_str(),
            "SyncPodGroup",
            message.clone(),
        )
        .await;
    }
    let wait = write_status(roleset, ctx, &pass, failure, now).await?;
    if !refused.is_empty() {
        return Err(Error::Refused(refused.join("; ")));
    }
    // Back at the soonest of a held-back status write, a gang's PodGroup recheck (its
    // cache shows the PodGroup shortly, or the foreign one may go; the pods follow) and a
    // child becoming available or warm pods going (no event says so).
    let due = pass.wake_at.map(|at| requeue::until_second(at, now));
    Ok(Ran {
        due: Some(requeue::soonest([wait, gang.recheck(), due]).unwrap_or(requeue::RESYNC)),
        draining: !pass.drain.out.is_empty(),
    })
}

/// Carries out the drains of a pass (docs/rollouts.md#drain-before-delete): records the
/// drains that start and the readings that changed on their children, ends the drains of
/// children kept after all, and warns of each child let go at its timeout.
async fn write_drains(
    roleset: &RoleSet,
    drain: &DrainWrites,
    pod_writes: &Writes<'_, Pod>,
    podset_writes: &Writes<'_, PodSet>,
    ctx: &Context,
    now: Timestamp,
) -> Result<(), Error> {
    let key = Context::key(roleset);
    let annotate = |unit: &DrainUnit, annotations: serde_json::Value| {
        let patch = json!({"metadata": {"annotations": annotations}});
        let (pods, podsets) = (pod_writes, podset_writes);
        let name = unit.name.clone();
        let gang = unit.gang;
        async move {
            if gang {
                podsets.patch(&name, &Patch::Merge(&patch)).await.map(drop)
            } else {
                pods.patch(&name, &Patch::Merge(&patch)).await.map(drop)
            }
        }
    };
    for unit in &drain.start {
        annotate(unit, json!({ANNOTATION_DRAIN_STARTED: now.to_string()})).await?;
        ctx.expectations
            .expect_drain(&key, &unit.name, now.as_second());
    }
    for (unit, in_flight) in &drain.note {
        annotate(
            unit,
            json!({ANNOTATION_DRAIN_IN_FLIGHT: in_flight.to_string()}),
        )
        .await?;
    }
    for unit in &drain.cancel {
        let ended = json!({ANNOTATION_DRAIN_STARTED: null, ANNOTATION_DRAIN_IN_FLIGHT: null});
        annotate(unit, ended).await?;
    }
    if !drain.start.is_empty() || !drain.cancel.is_empty() {
        tracing::info!(
            started = drain.start.len(),
            ended = drain.cancel.len(),
            "drains"
        );
    }
    for (unit, last) in &drain.timed_out {
        let in_flight = match last {
            Some(n) => format!("{n} request(s) still in flight"),
            None => "no reading of its requests in flight".to_string(),
        };
        let kind = if unit.gang { "PodSet" } else { "pod" };
        ctx.warn(
            roleset,
            "DrainTimedOut",
            "Drain",
            format!(
                "{kind} {} of role {} reached its drain timeout with {in_flight}; it goes now",
                unit.name, unit.role
            ),
        )
        .await;
    }
    Ok(())
}

/// The name of a child a create made or found there (`Err`: the API server's refusal).
fn named<K: Resource>(sent: &K, created: Created<K>) -> Result<String, String> {
    match created {
        Created::New(child) => Ok(child.meta().name.clone().unwrap_or_default()),
        Created::Exists => Ok(sent.meta().name.clone().unwrap_or_default()),
        Created::Refused(message) => Err(message),
    }
}

/// Derives the RoleSet's status from this pass and writes it when it changed (or says when
/// to come back to write a held-back count).
async fn write_status(
    roleset: &RoleSet,
    ctx: &Context,
    pass: &Pass,
    failure: Option<Failure>,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let stored = roleset.status.as_ref();
    let (generation, inputs, paired) = (
        roleset.metadata.generation,
        &pass.inputs,
        pass.pairing.as_ref(),
    );
    let status = roleset_status(generation, inputs, failure, paired, stored, now);
    let unwritten = roleset_status_unwritten(generation, inputs, paired.is_some());
    ctx.status
        .write(
            roleset,
            stored,
            Some(&unwritten),
            &status,
            Some(ROLESET_COUNTERS),
        )
        .await
}

/// Relabels the children whose version labels are stale (role-revision labels, the pairing
/// key), then adopts the pods the pass found already matching the role's template under
/// another hash (AIBrix's, after a cut-over): squall's hash and role-revision labels (on a
/// multi-node role's PodSets, the hash), nothing else — the pods keep running. Said once per
/// pass in an `Adopted` event.
async fn adopt_pods(
    roleset: &RoleSet,
    role: &RoleWrites,
    pods: &Writes<'_, Pod>,
    podsets: &Writes<'_, PodSet>,
    ctx: &Context,
) -> Result<(), Error> {
    if !role.relabel.is_empty() {
        let patch = relabel_patch(roleset, &role.role, role.gang);
        for name in &role.relabel {
            if role.gang {
                podsets.patch(name, &Patch::Merge(&patch)).await?;
            } else {
                pods.patch(name, &Patch::Merge(&patch)).await?;
            }
        }
    }
    if role.adopted.is_empty() {
        return Ok(());
    }
    if role.gang {
        // A PodSet carries the hash; its pods are the PodSet's business.
        let patch = json!({"metadata": {"labels": {LABEL_ROLE_TEMPLATE_HASH: role.target_hash}}});
        for name in &role.adopted {
            podsets.patch(name, &Patch::Merge(&patch)).await?;
        }
    } else {
        let patch = complete_patch(
            &role.target_hash,
            &role_revision_labels(roleset, &role.role),
        );
        for name in &role.adopted {
            pods.patch(name, &Patch::Merge(&patch)).await?;
        }
    }
    tracing::info!(role = %role.role, children = role.adopted.len(), hash = %role.target_hash,
        "adopted running children that already match the template");
    ctx.publish(
        roleset,
        None,
        "Adopted",
        "Adopt",
        format!(
            "role {}: {} running {} already match template {} and were relabelled, not \
             restarted: {}{}",
            role.role,
            role.adopted.len(),
            if role.gang { "PodSet(s)" } else { "pod(s)" },
            role.target_hash,
            // An event's note holds 1 KiB.
            role.adopted[..role.adopted.len().min(5)].join(", "),
            if role.adopted.len() > 5 { ", ..." } else { "" }
        ),
    )
    .await;
    Ok(())
}

/// Carries out the in-place writes of a role (docs/rollouts.md#in-place-image-updates): completes
/// finished updates, records pending reasons, starts new updates, and reports a fallback.
async fn update_in_place(
    roleset: &RoleSet,
    role: &RoleWrites,
    pods: &[Arc<CachedPod>],
    api: &Writes<'_, Pod>,
    ctx: &Context,
    now: Timestamp,
) -> Result<(), Error> {
    let writes = &role.in_place;
    let reference = |name: &str| {
        pods.iter()
            .find(|p| p.name() == name)
            .map(|p| p.object_reference())
    };
    if let Some(reason) = &writes.fallback {
        ctx.publish(
            roleset,
            None,
            "InPlaceFallback",
            "InPlaceFallback",
            format!("role {}: {reason}; falling back to recreate", role.role),
        )
        .await;
    }
    let target = &role.target_hash;
    let complete = complete_patch(target, &role_revision_labels(roleset, &role.role));
    for (name, gated) in &writes.complete {
        api.patch(name, &Patch::Merge(&complete)).await?;
        if *gated {
            set_in_place_condition(api, name, true, now).await?;
        }
        ctx.publish(
            roleset,
            reference(name),
            "InPlaceUpdateCompleted",
            "InPlaceUpdateCompleted",
            format!("pod {name} of role {} runs template {target}", role.role),
        )
        .await;
    }
    for (name, reason) in &writes.pending {
        let patch = json!({"metadata": {"annotations": {
            ANNOTATION_IN_PLACE_PENDING_REASON: reason}}});
        api.patch(name, &Patch::Merge(&patch)).await?;
    }
    for start in &writes.start {
        let name = &start.pod;
        if start.gated {
            set_in_place_condition(api, name, false, now).await?;
        }
        api.patch(name, &Patch::Strategic(&start.patch)).await?;
        ctx.publish(
            roleset,
            reference(name),
            "InPlaceUpdateStarted",
            "InPlaceUpdateStarted",
            format!(
                "pod {name} of role {} moves to template {target}",
                role.role
            ),
        )
        .await;
    }
    if !writes.start.is_empty() || !writes.complete.is_empty() {
        tracing::info!(role = %role.role, started = writes.start.len(),
            completed = writes.complete.len(), pending = role.action.in_place_pending.len(),
            "in-place updates");
    }
    Ok(())
}

/// Sets the in-place readiness-gate condition (and, when it turns False, Ready with it).
async fn set_in_place_condition(
    api: &Writes<'_, Pod>,
    name: &str,
    ready: bool,
    now: Timestamp,
) -> Result<(), Error> {
    let now = now.to_string();
    let mut conditions = vec![json!({"type": CONDITION_IN_PLACE_READY,
        "status": if ready { "True" } else { "False" },
        "reason": if ready { Reason::InPlaceUpdateCompleted } else { Reason::InPlaceUpdating }.as_str(),
        "lastTransitionTime": now})];
    if !ready {
        conditions.push(json!({"type": "Ready", "status": "False",
            "reason": Reason::InPlaceUpdating.as_str(), "lastTransitionTime": now}));
    }
    api.patch_status(
        name,
        &Patch::Strategic(json!({"status": {"conditions": conditions}})),
    )
    .await?;
    Ok(())
}

/// Sets a gated pod's serving condition (docs/rollouts.md#the-serving-gate) — and, when it
/// turns False, Ready with it, so endpoints stop listing the pod now rather than when its
/// kubelet next syncs. True leaves Ready to the kubelet, which checks the containers too.
async fn set_serving_condition(
    api: &Writes<'_, Pod>,
    gate: &Gate,
    now: Timestamp,
) -> Result<(), Error> {
    let now = now.to_string();
    let reason = gate.reason.as_str();
    let mut conditions = vec![json!({"type": CONDITION_PAIRING_SERVABLE,
        "status": if gate.servable { "True" } else { "False" },
        "reason": reason, "lastTransitionTime": now})];
    if !gate.servable {
        conditions.push(json!({"type": "Ready", "status": "False", "reason": reason,
            "lastTransitionTime": now}));
    }
    api.patch_status(
        &gate.pod,
        &Patch::Strategic(json!({"status": {"conditions": conditions}})),
    )
    .await?;
    Ok(())
}

/// A stable ControllerRevision (docs/rollouts.md#the-pooled-canary-the-role-rollout-block):
/// StormServices' revisions are cached; one written by someone else is read. One that is not
/// there is the role's problem (its status says so); a read that fails is retried rather than
/// taken for a missing revision.
async fn stable_revision(
    roleset: &RoleSet,
    name: &str,
    ctx: &Context,
) -> Result<Result<Arc<ControllerRevision>, String>, Error> {
    let namespace = roleset.namespace().unwrap_or_default();
    if let Some(cached) = ctx.caches.revisions.get(&namespace, name) {
        return Ok(Ok(Arc::new(cached.to_revision())));
    }
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(api
        .get_opt(name)
        .await?
        .map(Arc::new)
        .ok_or_else(|| format!("the stable ControllerRevision {name} is not found")))
}
