//! The RoleSet controller: observes a RoleSet's pods, asks the planner
//! (`crate::planner::roleset`) what to create and delete, carries it out, and writes status.
//!
//! Roles are plain pods (`podGroupSize` ≤ 1; stateless, or stateful with one pod per slot)
//! or PodSets (one per slot), updated by `Recreate` or — plain-pod roles only —
//! `InPlaceIfPossible` (image-only changes patched into the live pods; anything else falls
//! back to recreating, with an `InPlaceFallback` event), under `Sequential`, `Parallel` and
//! `Interleave` ordering, holding back a role's `rollout.partition` (SPEC §5.2).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{
    Context, Error, PendingCreate, delete_child, delete_remaining, finalized, is_ready,
    owned_children, refusal,
};
use crate::api::keys::{
    ANNOTATION_IN_PLACE_PENDING_REASON, ANNOTATION_IN_PLACE_TARGET_HASH, CONDITION_IN_PLACE_READY,
    FINALIZER_ROLESET, LABEL_ROLE_NAME, LABEL_ROLE_REPLICA_INDEX, LABEL_ROLE_TEMPLATE_HASH,
};
use crate::api::validation::validate_roleset;
use crate::api::{
    PodSet, PodSetPhase, RoleSet, RoleSetUpdateStrategy, RoleSpec, RoleUpdateStrategyType,
};
use crate::planner::budget::{Budget, resolve_fenceposts};
use crate::planner::in_place::{
    complete_patch, eligibility, has_readiness_gate, pending_reason, start_patch,
};
use crate::planner::render::{
    has_affinity, podset_for_slot, stateful_pod, stateless_pod, template_hash, topology_affinity,
};
use crate::planner::revision::role_template;
use crate::planner::roleset::{PodView, RoleAction, RoleInput, plan, retire, upgrade_sequence};
use crate::planner::status::{Failure, ROLESET_COUNTERS, roleset_status, roleset_status_unwritten};

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
fn owned_pods(roleset: &RoleSet, ctx: &Context) -> Vec<Arc<Pod>> {
    owned_children(&ctx.caches.pods, roleset)
}

/// The RoleSet's own PodSets (multi-node roles).
fn owned_podsets(roleset: &RoleSet, ctx: &Context) -> Vec<Arc<PodSet>> {
    owned_children(&ctx.caches.podsets, roleset)
}

/// Ordered deletion: every PodSet and pod first; the finalizer goes once none is left.
async fn cleanup(roleset: &RoleSet, ctx: &Context) -> Result<Action, Error> {
    let podsets = owned_podsets(roleset, ctx);
    if !podsets.is_empty() {
        delete_remaining(ctx, roleset, &podsets, "roleset", "podsets").await?;
        return Err(Error::Waiting(format!(
            "{} PodSets still terminating",
            podsets.len()
        )));
    }
    let pods = owned_pods(roleset, ctx);
    if pods.is_empty() {
        ctx.forget(roleset);
        return Ok(Action::await_change());
    }
    delete_remaining(ctx, roleset, &pods, "roleset", "pods").await?;
    // Pod deletions are watched; the requeue is a backstop.
    Err(Error::Waiting(format!(
        "{} pods still terminating",
        pods.len()
    )))
}

async fn delete_pod(api: &Api<Pod>, name: &str, ctx: &Context) -> Result<(), Error> {
    delete_child(api, name, ctx, "roleset", "pods").await
}

/// A PodSet seen as one replica of its role: Ready when its phase is Ready, gone from the
/// active set when Failed.
fn podset_view(podset: &PodSet) -> PodView {
    let phase = podset.status.as_ref().and_then(|s| s.phase);
    PodView {
        name: podset.name_any(),
        hash: podset
            .labels()
            .get(LABEL_ROLE_TEMPLATE_HASH)
            .cloned()
            .unwrap_or_default(),
        running: phase != Some(PodSetPhase::Failed),
        terminating: podset.metadata.deletion_timestamp.is_some(),
        ready: phase == Some(PodSetPhase::Ready),
        created: podset
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        slot: slot_of(podset.labels()),
        in_place_target: None,
        in_place_pending: None,
    }
}

fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    PodView {
        name: pod.name_any(),
        hash: pod
            .labels()
            .get(LABEL_ROLE_TEMPLATE_HASH)
            .cloned()
            .unwrap_or_default(),
        running: !matches!(phase, Some("Succeeded" | "Failed")),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        ready: is_ready(pod),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second()),
        slot: slot_of(pod.labels()),
        in_place_target: in_place_target(pod).cloned(),
        in_place_pending: in_place_target(pod).and_then(|_| pending_reason(pod)),
    }
}

fn slot_of(labels: &std::collections::BTreeMap<String, String>) -> Option<u32> {
    labels
        .get(LABEL_ROLE_REPLICA_INDEX)
        .and_then(|i| i.parse().ok())
}

fn in_place_target(pod: &Pod) -> Option<&String> {
    pod.annotations().get(ANNOTATION_IN_PLACE_TARGET_HASH)
}

async fn apply(roleset: &RoleSet, ctx: &Context) -> Result<Action, Error> {
    let report = validate_roleset(roleset, None);
    if !report.is_valid() {
        let failure = (
            "ReconcileError",
            format!("invalid spec: {}", report.error_message()),
        );
        return Ok(
            match write_status(roleset, ctx, &[], Some(failure)).await? {
                Some(wait) => Action::requeue(wait),
                None => Action::await_change(),
            },
        );
    }
    let pods = owned_pods(roleset, ctx);
    let podsets = owned_podsets(roleset, ctx);
    let key = Context::key(roleset);
    let mut orphan_pods = Vec::new();
    let mut orphan_podsets = Vec::new();
    let roles = roleset.spec.roles.clone().unwrap_or_default();
    let mut problems = Vec::new();
    let mut inputs = Vec::new();
    let mut handled = Vec::new();
    for role in &roles {
        let desired = u32::try_from(role.replicas_or_default()).unwrap_or(0);
        let strategy = role.update_strategy.as_ref();
        let budget = |v: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
            v.and_then(|v| Budget::parse(v).ok())
        };
        let budgets = resolve_fenceposts(
            budget(strategy.and_then(|s| s.max_surge.as_ref())),
            budget(strategy.and_then(|s| s.max_unavailable.as_ref())),
            desired,
        );
        let of_role = |labels: &std::collections::BTreeMap<String, String>| {
            labels.get(LABEL_ROLE_NAME) == Some(&role.name)
        };
        let role_pods: Vec<&Pod> = pods
            .iter()
            .filter(|p| of_role(p.labels()))
            .map(|p| &**p)
            .collect();
        let role_podsets: Vec<&PodSet> = podsets
            .iter()
            .filter(|p| of_role(p.labels()))
            .map(|p| &**p)
            .collect();
        let gang = role.pod_group_size_or_default() > 1;
        // Children of the other kind are left over from a podGroupSize change.
        let views: Vec<PodView> = if gang {
            orphan_pods.extend(role_pods.iter().map(|p| p.name_any()));
            role_podsets.iter().map(|p| podset_view(p)).collect()
        } else {
            orphan_podsets.extend(role_podsets.iter().map(|p| p.name_any()));
            role_pods.iter().map(|p| pod_view(p)).collect()
        };
        let expectation = ctx.observe(
            &key,
            &role.name,
            views.iter().map(|v| (v.name.clone(), v.terminating)),
        );
        let rollout = role.rollout.as_ref();
        let partition = rollout
            .and_then(|r| r.partition)
            .map_or(0, |p| u32::try_from(p).unwrap_or(0).min(desired));
        let stable = match rollout.and_then(|r| r.stable_revision.as_deref()) {
            Some(revision) if partition > 0 => {
                match stable_role(roleset, role, revision, ctx).await {
                    Ok(stable) => Some(stable),
                    Err(e) => {
                        problems.push(format!("role {}: {e}", role.name));
                        None
                    }
                }
            }
            _ => None,
        };
        let target_hash = template_hash(&role.template.clone().unwrap_or_default());
        let in_place = role.update_strategy_type() == RoleUpdateStrategyType::InPlaceIfPossible;
        let ineligible = if !in_place {
            BTreeMap::new()
        } else if gang {
            // Multi-node roles always recreate their PodSets (AIBRIX-REFERENCE §2.3.6).
            views
                .iter()
                .filter(|v| v.hash != target_hash)
                .map(|v| {
                    (
                        v.name.clone(),
                        "a PodSet (podGroupSize > 1) cannot be updated in place".to_string(),
                    )
                })
                .collect()
        } else {
            ineligible_pods(roleset, role, &target_hash, &role_pods)
        };
        inputs.push(RoleInput {
            name: role.name.clone(),
            desired,
            budgets,
            target_hash,
            pods: views,
            stateful: gang || role.stateful == Some(true),
            pending_creates: expectation.pending_creates(false),
            pending_stable_creates: expectation.pending_creates(true),
            partition,
            stable_hash: stable.as_ref().map(|(_, hash)| hash.clone()),
            pending_slots: expectation.pending_slots(),
            pending_deletes: expectation.deletes.clone(),
            in_place,
            ineligible,
        });
        handled.push((role, stable));
    }

    let strategy = roleset.spec.update_strategy.unwrap_or_default();
    let sequence = upgrade_sequence(
        &handled
            .iter()
            .map(|(r, _)| r.upgrade_order_or_default())
            .collect::<Vec<_>>(),
    );
    // A rollout is under way when some live pod is off its role's template.
    let rolling = inputs.iter().any(|role| {
        role.pods
            .iter()
            .any(|p| !p.terminating && p.hash != role.target_hash)
    });
    if strategy == RoleSetUpdateStrategy::Sequential
        && rolling
        && ctx.once_per_generation(roleset, "upgrade sequence")
    {
        let order: Vec<String> = sequence
            .iter()
            .map(|&i| {
                format!(
                    "{}({})",
                    handled[i].0.name,
                    handled[i].0.upgrade_order_or_default()
                )
            })
            .collect();
        tracing::info!(namespace = %roleset.namespace().unwrap_or_default(), roleset = %roleset.name_any(),
            sequence = %order.join(" -> "), "sequential upgrade order");
    }
    let actions = plan(strategy, &inputs, &sequence);
    let retired = retired_children(&roles, &pods, &podsets);

    let pods_api: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &roleset.namespace().unwrap_or_default());
    let podsets_api: Api<PodSet> =
        Api::namespaced(ctx.client.clone(), &roleset.namespace().unwrap_or_default());
    for name in &orphan_pods {
        delete_pod(&pods_api, name, ctx).await?;
    }
    for name in &orphan_podsets {
        delete_child(&podsets_api, name, ctx, "roleset", "podsets").await?;
    }
    if !retired.pods.is_empty() || !retired.podsets.is_empty() {
        tracing::info!(namespace = %roleset.namespace().unwrap_or_default(), roleset = %roleset.name_any(),
            pods = retired.pods.len(), podsets = retired.podsets.len(), "deleting children of removed roles");
    }
    for name in &retired.pods {
        delete_pod(&pods_api, name, ctx).await?;
    }
    for name in &retired.podsets {
        delete_child(&podsets_api, name, ctx, "roleset", "podsets").await?;
    }
    // Creates the API server refused, by role: the status says so (ReplicaFailure,
    // FailedCreate, like a ReplicaSet's) and the RoleSet is retried with backoff.
    let mut refused: Vec<String> = Vec::new();
    for (((role, stable), input), action) in handled.iter().zip(&inputs).zip(&actions) {
        let gang = role.pod_group_size_or_default() > 1;
        if input.in_place {
            update_in_place(roleset, role, input, action, &pods, &pods_api, ctx).await?;
        }
        // The role and hash a new child of a slot (None: stateless) is rendered from.
        let template_for = |slot: Option<u32>, from_stable: bool| match stable {
            Some((stable_role, hash)) if from_stable || input.stable_slot(slot) => {
                (stable_role, hash.as_str(), true)
            }
            _ => (*role, input.target_hash.as_str(), false),
        };
        for name in &action.delete {
            ctx.expect_delete(&key, &role.name, name);
            if gang {
                delete_child(&podsets_api, name, ctx, "roleset", "podsets").await?;
            } else {
                delete_pod(&pods_api, name, ctx).await?;
            }
        }
        if gang {
            for &slot in &action.create_slots {
                let (from, hash, stable) = template_for(Some(slot), false);
                let podset = podset_for_slot(roleset, from, hash, slot);
                match podsets_api.create(&PostParams::default(), &podset).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(e) => match refusal(&e) {
                        Some(message) => {
                            refused.push(format!("role {}: {message}", role.name));
                            break;
                        }
                        None => return Err(e.into()),
                    },
                }
                ctx.metrics.api_write("roleset", "create", "podsets");
                ctx.expect_create(
                    &key,
                    &role.name,
                    &podset.name_any(),
                    PendingCreate {
                        slot: Some(slot),
                        stable,
                    },
                );
            }
            if !action.is_empty() {
                tracing::info!(roleset = %roleset.name_any(), role = %role.name, created = action.creates(),
                    deleted = action.delete.len(), "PodSets");
            }
            continue;
        }
        let stateless = |from_stable: bool| {
            let (from, hash, stable) = template_for(None, from_stable);
            (None, stable, stateless_pod(roleset, from, hash))
        };
        let creates = (0..action.create)
            .map(|_| stateless(false))
            .chain((0..action.create_stable).map(|_| stateless(true)))
            .chain(action.create_slots.iter().map(|&slot| {
                let (from, hash, stable) = template_for(Some(slot), false);
                (Some(slot), stable, stateful_pod(roleset, from, hash, slot))
            }));
        for (slot, stable, pod) in creates {
            let name = match pods_api.create(&PostParams::default(), &pod).await {
                Ok(created) => created.name_any(),
                // A stateful pod's name is deterministic: already there means already created.
                Err(kube::Error::Api(status)) if status.code == 409 && slot.is_some() => {
                    pod.name_any()
                }
                Err(e) => match refusal(&e) {
                    Some(message) => {
                        refused.push(format!("role {}: {message}", role.name));
                        break;
                    }
                    None => return Err(e.into()),
                },
            };
            ctx.metrics.api_write("roleset", "create", "pods");
            ctx.expect_create(&key, &role.name, &name, PendingCreate { slot, stable });
        }
        if !action.is_empty() {
            tracing::info!(roleset = %roleset.name_any(), role = %role.name, created = action.creates(),
                deleted = action.delete.len(), "pods");
        }
    }

    let role_names: Vec<&str> = handled.iter().map(|(r, _)| r.name.as_str()).collect();
    warn_of_topology_pending(roleset, &role_names, &pods, &podsets, ctx).await;

    let failure = if !refused.is_empty() {
        Some(("FailedCreate", refused.join("; ")))
    } else if !problems.is_empty() {
        Some(("ReconcileError", problems.join("; ")))
    } else {
        None
    };
    let wait = write_status(roleset, ctx, &inputs, failure).await?;
    if !refused.is_empty() {
        return Err(Error::Refused(refused.join("; ")));
    }
    Ok(Action::requeue(wait.unwrap_or(Duration::from_secs(300))))
}

/// Derives the RoleSet's status from this pass and writes it when it changed (or says when
/// to come back to write a held-back count).
async fn write_status(
    roleset: &RoleSet,
    ctx: &Context,
    inputs: &[RoleInput],
    failure: Option<Failure>,
) -> Result<Option<Duration>, Error> {
    let stored = roleset.status.as_ref();
    let status = roleset_status(
        roleset.metadata.generation,
        inputs,
        failure,
        stored,
        k8s_openapi::jiff::Timestamp::now(),
    );
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

/// Children to delete because their role left the spec.
struct Retired {
    pods: Vec<String>,
    podsets: Vec<String>,
}

/// The RoleSet's pods and PodSets whose role is not in `roles` (SPEC §5: a role removed from
/// the spec takes its children with it).
fn retired_children(roles: &[RoleSpec], pods: &[Arc<Pod>], podsets: &[Arc<PodSet>]) -> Retired {
    let in_spec = |labels: &BTreeMap<String, String>| {
        labels
            .get(LABEL_ROLE_NAME)
            .is_some_and(|name| roles.iter().any(|r| &r.name == name))
    };
    let pods: Vec<PodView> = pods
        .iter()
        .filter(|p| !in_spec(p.labels()))
        .map(|p| pod_view(p))
        .collect();
    let podsets: Vec<PodView> = podsets
        .iter()
        .filter(|p| !in_spec(p.labels()))
        .map(|p| podset_view(p))
        .collect();
    Retired {
        pods: retire(&pods),
        podsets: retire(&podsets),
    }
}

/// Pods and PodSets created before the `topologyPolicy` changed keep their old affinity
/// until they are replaced: say so once per generation (AIBRIX-REFERENCE §2.3, step 6).
async fn warn_of_topology_pending(
    roleset: &RoleSet,
    roles: &[&str],
    pods: &[Arc<Pod>],
    podsets: &[Arc<PodSet>],
    ctx: &Context,
) {
    if roleset.spec.topology_policy.is_none() {
        return;
    }
    let lacks = |role: &str, spec: Option<&k8s_openapi::api::core::v1::PodSpec>| {
        let Some((term, mode)) = topology_affinity(roleset, role) else {
            return false;
        };
        !spec.is_some_and(|spec| has_affinity(spec, &term, mode))
    };
    let of_role = |labels: &BTreeMap<String, String>, role: &str| {
        labels.get(LABEL_ROLE_NAME).map(String::as_str) == Some(role)
    };
    let (mut stale_pods, mut stale_podsets) = (0, 0);
    for &role in roles {
        stale_pods += pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && of_role(p.labels(), role))
            .filter(|p| lacks(role, p.spec.as_ref()))
            .count();
        stale_podsets += podsets
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && of_role(p.labels(), role))
            .filter(|p| lacks(role, p.spec.template.spec.as_ref()))
            .count();
    }
    if stale_pods + stale_podsets > 0 && ctx.once_per_generation(roleset, "topology pending") {
        ctx.warn(
            "roleset",
            roleset,
            "TopologyPolicyPendingPodReplacement",
            "TopologyPolicy",
            format!(
                "TopologyPolicy changes do not update {stale_pods} active Pod(s) and \
                 {stale_podsets} PodSet template(s); they will use the new affinity after \
                 replacement or recreation."
            ),
        )
        .await;
    }
}

/// The pod a role would create now in the place of `pod` (same slot).
fn desired_pod(roleset: &RoleSet, role: &RoleSpec, hash: &str, pod: &Pod) -> Pod {
    match slot_of(pod.labels()) {
        Some(slot) if role.stateful == Some(true) => stateful_pod(roleset, role, hash, slot),
        _ => stateless_pod(roleset, role, hash),
    }
}

/// Outdated pods of an in-place role that are not being updated toward `target_hash` and
/// cannot be, with the reason.
fn ineligible_pods(
    roleset: &RoleSet,
    role: &RoleSpec,
    target_hash: &str,
    pods: &[&Pod],
) -> BTreeMap<String, String> {
    pods.iter()
        .filter(|p| {
            p.labels().get(LABEL_ROLE_TEMPLATE_HASH).map(String::as_str) != Some(target_hash)
        })
        .filter(|p| in_place_target(p).map(String::as_str) != Some(target_hash))
        .filter_map(|pod| {
            let desired = desired_pod(roleset, role, target_hash, pod);
            eligibility(pod, &desired)
                .err()
                .map(|why| (pod.name_any(), why.to_string()))
        })
        .collect()
}

/// Carries out the in-place part of a role's action (AIBRIX-REFERENCE §2.3.7): completes
/// finished updates, records pending reasons, starts new updates, and reports a fallback.
async fn update_in_place(
    roleset: &RoleSet,
    role: &RoleSpec,
    input: &RoleInput,
    action: &RoleAction,
    pods: &[Arc<Pod>],
    api: &Api<Pod>,
    ctx: &Context,
) -> Result<(), Error> {
    let find = |name: &str| pods.iter().find(|p| p.name_any() == name);
    if let Some(reason) = &action.fallback {
        ctx.publish(
            "roleset",
            roleset,
            None,
            "InPlaceFallback",
            "InPlaceFallback",
            format!("role {}: {reason}; falling back to recreate", role.name),
        )
        .await;
    }
    for name in &action.in_place_complete {
        let Some(pod) = find(name) else { continue };
        patch_pod(
            api,
            name,
            &Patch::Merge(complete_patch(&input.target_hash)),
            ctx,
        )
        .await?;
        if has_readiness_gate(pod) {
            set_in_place_condition(api, name, true, ctx).await?;
        }
        ctx.publish(
            "roleset",
            roleset,
            Some(pod.object_ref(&())),
            "InPlaceUpdateCompleted",
            "InPlaceUpdateCompleted",
            format!(
                "pod {name} of role {} runs template {}",
                role.name, input.target_hash
            ),
        )
        .await;
    }
    for (name, reason) in &action.in_place_pending {
        let recorded = find(name)
            .and_then(|p| p.annotations().get(ANNOTATION_IN_PLACE_PENDING_REASON))
            .map(String::as_str);
        if recorded != Some(reason.as_str()) {
            let patch = json!({"metadata": {"annotations": {
                ANNOTATION_IN_PLACE_PENDING_REASON: reason.as_str()}}});
            patch_pod(api, name, &Patch::Merge(patch), ctx).await?;
        }
    }
    for name in &action.in_place_start {
        let Some(pod) = find(name) else { continue };
        let desired = desired_pod(roleset, role, &input.target_hash, pod);
        if has_readiness_gate(pod) {
            set_in_place_condition(api, name, false, ctx).await?;
        }
        let patch = start_patch(pod, &desired, &input.target_hash);
        patch_pod(api, name, &Patch::Strategic(patch), ctx).await?;
        ctx.publish(
            "roleset",
            roleset,
            Some(pod.object_ref(&())),
            "InPlaceUpdateStarted",
            "InPlaceUpdateStarted",
            format!(
                "pod {name} of role {} moves to template {}",
                role.name, input.target_hash
            ),
        )
        .await;
    }
    if !action.in_place_start.is_empty() || !action.in_place_complete.is_empty() {
        tracing::info!(roleset = %roleset.name_any(), role = %role.name,
            started = action.in_place_start.len(), completed = action.in_place_complete.len(),
            pending = action.in_place_pending.len(), "in-place updates");
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
) -> Result<(), Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
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

/// The role as its stable ControllerRevision holds it (SPEC §5.2), with the stable hash.
async fn stable_role(
    roleset: &RoleSet,
    role: &RoleSpec,
    revision: &str,
    ctx: &Context,
) -> Result<(RoleSpec, String), Error> {
    let namespace = roleset.namespace().unwrap_or_default();
    // StormServices' revisions are cached; one written by someone else is read.
    let revision = match ctx.caches.revisions.get(&namespace, revision) {
        Some(cached) => cached,
        None => Arc::new(
            Api::<k8s_openapi::api::apps::v1::ControllerRevision>::namespaced(
                ctx.client.clone(),
                &namespace,
            )
            .get(revision)
            .await?,
        ),
    };
    let template = role_template(&revision, &role.name)?;
    let hash = template_hash(&template);
    let stable = RoleSpec {
        template: Some(template),
        ..role.clone()
    };
    Ok((stable, hash))
}
