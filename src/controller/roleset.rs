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
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::podgroups::{self, Gang};
use super::{
    Context, Error, PendingCreate, delete_child, delete_remaining, finalized, going, live_children,
    owned_children, refusal, uids, wall_clock,
};
use crate::admission::validation::validate_roleset;
use crate::api::keys::{
    ANNOTATION_IN_PLACE_PENDING_REASON, CONDITION_IN_PLACE_READY, FINALIZER_ROLESET,
    LABEL_ROLE_TEMPLATE_HASH, LABEL_ROLESET_NAME,
};
use crate::api::pod::CachedPod;
use crate::api::{PodSet, RoleSet};
use crate::planner::podgroup::roleset_gang_size;
use crate::planner::render::role_revision_labels;
use crate::planner::requeue;
use crate::planner::roleset::children::role_children;
use crate::planner::roleset::in_place::complete_patch;
use crate::planner::roleset::roles::RoleInput;
use crate::planner::roleset::status::{
    Failure, ROLESET_COUNTERS, roleset_status, roleset_status_unwritten,
};
use crate::planner::roleset::{NewChild, PassInput, Pending, RoleWrites, decide};

/// Reconciles one RoleSet.
pub async fn reconcile(roleset: Arc<RoleSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    finalized(
        roleset,
        ctx,
        FINALIZER_ROLESET,
        |object, ctx| async move { apply(&object, &ctx).await },
        |object, ctx| async move { cleanup(&object, &ctx).await },
    )
    .await
}

/// The RoleSet's own pods.
fn owned_pods(roleset: &RoleSet, ctx: &Context) -> Vec<Arc<CachedPod>> {
    owned_children(&ctx.caches.pods, roleset)
}

/// The RoleSet's own PodSets (multi-node roles).
fn owned_podsets(roleset: &RoleSet, ctx: &Context) -> Vec<Arc<PodSet>> {
    owned_children(&ctx.caches.podsets, roleset)
}

/// Ordered deletion: every PodSet and pod first; the finalizer goes once none is left —
/// in the cache, then on the API server ([`live_children`]).
async fn cleanup(roleset: &RoleSet, ctx: &Context) -> Result<Action, Error> {
    let mut podsets = going(&owned_podsets(roleset, ctx));
    let mut pods = going(&owned_pods(roleset, ctx));
    if podsets.is_empty() && pods.is_empty() {
        podsets = live_children::<PodSet>(ctx, roleset, LABEL_ROLESET_NAME).await?;
        pods = live_children::<Pod>(ctx, roleset, LABEL_ROLESET_NAME).await?;
        if podsets.is_empty() && pods.is_empty() {
            ctx.forget(roleset);
            return Ok(Action::await_change());
        }
    }
    delete_remaining::<PodSet>(ctx, roleset, &podsets, "roleset", "podsets").await?;
    delete_remaining::<Pod>(ctx, roleset, &pods, "roleset", "pods").await?;
    // Deletions are watched; the requeue is a backstop.
    Err(Error::Waiting(format!(
        "{} PodSets and {} pods still terminating",
        podsets.len(),
        pods.len()
    )))
}

async fn delete_pod(
    api: &Api<Pod>,
    name: &str,
    uids: &HashMap<String, String>,
    ctx: &Context,
) -> Result<(), Error> {
    delete_child(api, name, uids.get(name), ctx, "roleset", "pods").await
}

async fn apply(roleset: &RoleSet, ctx: &Context) -> Result<Action, Error> {
    let now = wall_clock();
    let report = validate_roleset(roleset, None);
    if !report.is_valid() {
        let failure = (
            "ReconcileError",
            format!("invalid spec: {}", report.error_message()),
        );
        return Ok(
            match write_status(roleset, ctx, &[], Some(failure), now).await? {
                Some(wait) => Action::requeue(wait),
                None => Action::await_change(),
            },
        );
    }
    // Observe: the cached children, what earlier passes issued that the cache does not show
    // yet, and the stable revisions partitions keep pods on.
    let pods = owned_pods(roleset, ctx);
    let podsets = owned_podsets(roleset, ctx);
    let key = Context::key(roleset);
    let roles = role_children(roleset, &pods, &podsets);
    let mut pending = Vec::with_capacity(roles.len());
    let mut stable = Vec::with_capacity(roles.len());
    for role in &roles {
        let seen = role
            .children
            .iter()
            .map(|v| (v.name.clone(), v.terminating));
        let expectation = ctx.observe(&key, &role.role, seen);
        pending.push(Pending {
            creates: expectation.pending_creates(false),
            stable_creates: expectation.pending_creates(true),
            slots: expectation.pending_slots(),
            deletes: expectation.deletes,
        });
        stable.push(match &role.stable_revision {
            Some(name) => Some(
                stable_revision(roleset, name, ctx)
                    .await
                    .map_err(|e| e.to_string()),
            ),
            None => None,
        });
    }
    // The gang's PodGroup comes before its pods: they wait for it when its scheduler is
    // there, and are created without it (said in the status) when it is not.
    let gang = podgroups::sync(
        ctx,
        "roleset",
        roleset,
        LABEL_ROLESET_NAME,
        roleset.spec.scheduling_strategy.as_ref(),
        roleset_gang_size(&roleset.spec),
    )
    .await?;
    // Decide.
    let mut pass = decide(PassInput {
        roleset,
        pods: &pods,
        podsets: &podsets,
        roles,
        pending,
        stable,
    });
    if gang.holds_pods() {
        for role in &mut pass.roles {
            role.creates.clear();
        }
    }
    // Write.
    if let Some(sequence) = &pass.sequence
        && ctx.once_per_generation(roleset, "upgrade sequence")
    {
        // The reconcile's span names the RoleSet.
        tracing::info!(%sequence, "sequential upgrade order");
    }
    let namespace = roleset.namespace().unwrap_or_default();
    let pods_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let podsets_api: Api<PodSet> = Api::namespaced(ctx.client.clone(), &namespace);
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
        delete_pod(&pods_api, name, &pod_uids, ctx).await?;
    }
    for name in pass.orphan_podsets.iter().chain(&pass.retired_podsets) {
        let uid = podset_uids.get(name);
        delete_child(&podsets_api, name, uid, ctx, "roleset", "podsets").await?;
    }
    // Creates the API server refused, by role: the status says so (ReplicaFailure,
    // FailedCreate, like a ReplicaSet's) and the RoleSet is retried with backoff.
    let mut refused: Vec<String> = Vec::new();
    for role in &pass.roles {
        adopt_pods(roleset, role, &pods_api, ctx).await?;
        update_in_place(roleset, role, &pods, &pods_api, ctx, now).await?;
        for name in &role.action.delete {
            if role.gang {
                let uid = podset_uids.get(name);
                delete_child(&podsets_api, name, uid, ctx, "roleset", "podsets").await?;
            } else {
                delete_pod(&pods_api, name, &pod_uids, ctx).await?;
            }
            ctx.expect_delete(&key, &role.role, name);
        }
        for create in &role.creates {
            let created = match &create.child {
                NewChild::Pod(pod) => pods_api
                    .create(&PostParams::default(), pod)
                    .await
                    .map(|created| (created.name_any(), "pods")),
                NewChild::PodSet(podset) => podsets_api
                    .create(&PostParams::default(), podset)
                    .await
                    .map(|created| (created.name_any(), "podsets")),
            };
            let (name, resource) = match created {
                Ok(created) => created,
                // A slot's child has a deterministic name: already there means already
                // created.
                Err(kube::Error::Api(status)) if status.code == 409 && create.slot.is_some() => {
                    match &create.child {
                        NewChild::Pod(pod) => (pod.name_any(), "pods"),
                        NewChild::PodSet(podset) => (podset.name_any(), "podsets"),
                    }
                }
                Err(e) => match refusal(&e) {
                    Some(message) => {
                        refused.push(format!("role {}: {message}", role.role));
                        break;
                    }
                    None => return Err(e.into()),
                },
            };
            ctx.metrics.api_write("roleset", "create", resource);
            ctx.expect_create(
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
            "roleset",
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

    let failure = if !refused.is_empty() {
        Some(("FailedCreate", refused.join("; ")))
    } else if !pass.problems.is_empty() {
        Some(("ReconcileError", pass.problems.join("; ")))
    } else if let Gang::Foreign(scheduler) = gang {
        Some((
            "PodGroupConflict",
            Gang::foreign_message(scheduler, &roleset.name_any()),
        ))
    } else if let Some(scheduler) = match gang {
        Gang::Unserved(scheduler) => Some(scheduler),
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
    } {
        let message = format!(
            "schedulingStrategy.{} asks for a PodGroup, but the CRD {} is not installed: \
             pods are created without the gang guarantee",
            scheduler.strategy_field(),
            scheduler.crd_name()
        );
        if ctx.once_per_generation(roleset, "podgroup crd missing") {
            ctx.warn(
                "roleset",
                roleset,
                "PodGroupCRDMissing",
                "SyncPodGroup",
                message.clone(),
            )
            .await;
        }
        Some(("PodGroupCRDMissing", message))
    } else {
        None
    };
    let wait = write_status(roleset, ctx, &pass.inputs, failure, now).await?;
    if !refused.is_empty() {
        return Err(Error::Refused(refused.join("; ")));
    }
    // Back at the sooner of a held-back status write and a gang's PodGroup recheck (its
    // cache shows the PodGroup shortly, or the foreign one may go; the pods follow).
    Ok(Action::requeue(
        requeue::soonest([wait, gang.recheck()]).unwrap_or(requeue::RESYNC),
    ))
}

/// Derives the RoleSet's status from this pass and writes it when it changed (or says when
/// to come back to write a held-back count).
async fn write_status(
    roleset: &RoleSet,
    ctx: &Context,
    inputs: &[RoleInput],
    failure: Option<Failure>,
    now: Timestamp,
) -> Result<Option<Duration>, Error> {
    let stored = roleset.status.as_ref();
    let status = roleset_status(roleset.metadata.generation, inputs, failure, stored, now);
    let unwritten = roleset_status_unwritten(roleset.metadata.generation, inputs);
    ctx.write_status(
        "roleset",
        roleset,
        stored,
        Some(&unwritten),
        &status,
        Some(ROLESET_COUNTERS),
    )
    .await
}

/// Adopts the pods the pass found already matching the role's template under another hash
/// (AIBrix's, after a cut-over): squall's hash and role-revision labels (on a multi-node
/// role's PodSets, the hash), nothing else — the pods keep running. Said once per pass in an
/// `Adopted` event.
async fn adopt_pods(
    roleset: &RoleSet,
    role: &RoleWrites,
    api: &Api<Pod>,
    ctx: &Context,
) -> Result<(), Error> {
    if !role.relabel.is_empty() {
        let labels = role_revision_labels(roleset, &role.role);
        let patch = json!({"metadata": {"labels": labels.into_iter().collect::<BTreeMap<_, _>>()}});
        for name in &role.relabel {
            patch_pod(api, name, &Patch::Merge(patch.clone()), ctx).await?;
        }
    }
    if role.adopted.is_empty() {
        return Ok(());
    }
    if role.gang {
        // A PodSet carries the hash; its pods are the PodSet's business.
        let podsets: Api<PodSet> =
            Api::namespaced(ctx.client.clone(), &roleset.namespace().unwrap_or_default());
        let patch = json!({"metadata": {"labels": {LABEL_ROLE_TEMPLATE_HASH: role.target_hash}}});
        for name in &role.adopted {
            podsets
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            ctx.metrics.api_write("roleset", "patch", "podsets");
        }
    } else {
        let patch = complete_patch(
            &role.target_hash,
            &role_revision_labels(roleset, &role.role),
        );
        for name in &role.adopted {
            patch_pod(api, name, &Patch::Merge(patch.clone()), ctx).await?;
        }
    }
    tracing::info!(role = %role.role, children = role.adopted.len(), hash = %role.target_hash,
        "adopted running children that already match the template");
    ctx.publish(
        "roleset",
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
    api: &Api<Pod>,
    ctx: &Context,
    now: Timestamp,
) -> Result<(), Error> {
    let writes = &role.in_place;
    let reference = |name: &str| {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .map(|p| p.object_ref(&()))
    };
    if let Some(reason) = &writes.fallback {
        ctx.publish(
            "roleset",
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
        patch_pod(api, name, &Patch::Merge(complete.clone()), ctx).await?;
        if *gated {
            set_in_place_condition(api, name, true, ctx, now).await?;
        }
        ctx.publish(
            "roleset",
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
        patch_pod(api, name, &Patch::Merge(patch), ctx).await?;
    }
    for start in &writes.start {
        let name = &start.pod;
        if start.gated {
            set_in_place_condition(api, name, false, ctx, now).await?;
        }
        patch_pod(api, name, &Patch::Strategic(start.patch.clone()), ctx).await?;
        ctx.publish(
            "roleset",
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

async fn patch_pod(
    api: &Api<Pod>,
    name: &str,
    patch: &Patch<serde_json::Value>,
    ctx: &Context,
) -> Result<(), Error> {
    api.patch(name, &PatchParams::default(), patch).await?;
    ctx.metrics.api_write("roleset", "patch", "pods");
    Ok(())
}

/// Sets the in-place readiness-gate condition (and, when it turns False, Ready with it).
async fn set_in_place_condition(
    api: &Api<Pod>,
    name: &str,
    ready: bool,
    ctx: &Context,
    now: Timestamp,
) -> Result<(), Error> {
    let now = now.to_string();
    let mut conditions = vec![json!({"type": CONDITION_IN_PLACE_READY,
        "status": if ready { "True" } else { "False" },
        "reason": if ready { "InPlaceUpdateCompleted" } else { "InPlaceUpdating" },
        "lastTransitionTime": now})];
    if !ready {
        conditions.push(json!({"type": "Ready", "status": "False",
            "reason": "InPlaceUpdating", "lastTransitionTime": now}));
    }
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": conditions}})),
    )
    .await?;
    ctx.metrics.api_write("roleset", "patch", "pods/status");
    Ok(())
}

/// A stable ControllerRevision (docs/rollouts.md#the-pooled-canary-the-role-rollout-block):
/// StormServices' revisions are cached; one written by someone else is read.
async fn stable_revision(
    roleset: &RoleSet,
    name: &str,
    ctx: &Context,
) -> Result<Arc<ControllerRevision>, Error> {
    let namespace = roleset.namespace().unwrap_or_default();
    if let Some(cached) = ctx.caches.revisions.get(&namespace, name) {
        return Ok(cached);
    }
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(Arc::new(api.get(name).await?))
}
