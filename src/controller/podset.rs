//! The PodSet controller: one pod per index of a gang, recovered per `recoveryPolicy`
//! (docs/aibrix-compatibility.md#the-same); decisions in `crate::planner::podset`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::controller::Action;

use super::kit::children::{ChildKind, Created, OnConflict, Writes, owned_children, uids};
use super::kit::context::Context;
use super::kit::error::Error;
use super::kit::owner::Owner;
use super::{podgroups, wall_clock};
use crate::api::PodSet;
use crate::api::cached::pod::CachedPod;
use crate::api::keys::{FINALIZER_PODSET, LABEL_POD_GROUP_INDEX, LABEL_PODSET_NAME};
use crate::planner::podset::PODSET_COUNTERS;
use crate::planner::podset::{GangPod, passed_on_labels, plan_gang, podset_status};
use crate::planner::render::gang_pod;
use crate::planner::requeue;

impl Owner for PodSet {
    const CONTROLLER: &'static str = "podset";
    const FINALIZER: &'static str = FINALIZER_PODSET;
    const CHILD_LABEL: &'static str = LABEL_PODSET_NAME;
    const CHILDREN: &'static [ChildKind] = &[ChildKind::Pods];

    fn apply(
        &self,
        ctx: &Context,
    ) -> impl std::future::Future<Output = Result<Action, Error>> + Send {
        apply(self, ctx)
    }
}

fn owned_pods(podset: &PodSet, ctx: &Context) -> Vec<Arc<CachedPod>> {
    owned_children(&ctx.caches.pods, podset)
}

fn gang_view(pod: &CachedPod) -> GangPod {
    GangPod {
        name: pod.name().to_string(),
        index: pod
            .labels()
            .get(LABEL_POD_GROUP_INDEX)
            .and_then(|i| i.parse().ok()),
        running: !matches!(pod.phase(), Some("Succeeded" | "Failed")),
        terminating: pod.is_deleting(),
        ready: pod.ready(),
        restarts: pod.restarts(),
    }
}

async fn apply(podset: &PodSet, ctx: &Context) -> Result<Action, Error> {
    let now = wall_clock();
    let pods = owned_pods(podset, ctx);
    let views: Vec<GangPod> = pods.iter().map(|p| gang_view(p)).collect();
    let size = u32::try_from(podset.spec.pod_group_size).unwrap_or(0);
    let action = plan_gang(
        size,
        podset.spec.recovery_policy.unwrap_or_default(),
        &views,
    );
    let writes = Writes::<Pod>::beside(ctx, podset);
    let uids = uids(pods.iter().map(|p| &**p));
    for name in &action.delete {
        writes.delete(name, uids.get(name)).await?;
    }
    // A role-level strategy's PodGroup, one per PodSet, comes before the gang's pods (the
    // RoleSet reports a missing CRD; the pods are created without it then).
    let gang = podgroups::sync(
        ctx,
        podset,
        LABEL_PODSET_NAME,
        podset.spec.scheduling_strategy.as_ref(),
        podset.spec.pod_group_size,
    )
    .await?;
    let action = action.held_by(gang);
    // A create the API server refuses (quota, admission) stops the pass's creates: the
    // status says why (ReplicaFailure, FailedCreate) and the PodSet is retried with backoff.
    let mut refused = None;
    for &index in &action.create {
        // An index's pod has a deterministic name: taken means already created.
        let pod = gang_pod(podset, index);
        if let Created::Refused(message) = writes.create(&pod, OnConflict::Exists).await? {
            refused = Some(format!("pod {index}: {message}"));
            break;
        }
    }
    if !action.delete.is_empty() || !action.create.is_empty() {
        tracing::info!(podset = %podset.name_any(), created = ?action.create, deleted = ?action.delete, "gang pods");
    }
    // The gang's pods carry the labels their PodSet passes on (`passed_on_labels`). Not
    // those this pass deleted: they are going (or gone already, when terminal).
    for pod in pods
        .iter()
        .filter(|p| !p.is_deleting() && !action.delete.iter().any(|d| d == p.name()))
    {
        if let Some(patch) = passed_on_labels(podset.labels(), pod.labels()) {
            writes.patch(pod.name(), &Patch::Merge(&patch)).await?;
        }
    }

    let status = podset_status(
        podset.metadata.generation,
        size,
        &views,
        refused.as_deref(),
        podset.status.as_ref(),
        now,
    );
    let wait = ctx
        .status
        .write(
            podset,
            podset.status.as_ref(),
            None,
            &status,
            Some(PODSET_COUNTERS),
        )
        .await?;
    if let Some(message) = refused {
        return Err(Error::Refused(message));
    }
    // Back at the sooner of a held-back status write and a gang's PodGroup recheck (its
    // cache shows the PodGroup shortly, or the foreign one may go; the pods follow).
    Ok(Action::requeue(
        requeue::soonest([wait, gang.recheck()]).unwrap_or(requeue::RESYNC),
    ))
}
