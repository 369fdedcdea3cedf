//! The PodSet controller: one pod per index of a gang, recovered per `recoveryPolicy`
//! (docs/aibrix-compatibility.md#the-same); decisions in `crate::planner::podset`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use serde_json::json;

use super::podgroups;
use super::{
    Context, Error, delete_child, delete_remaining, finalized, going, live_children,
    owned_children, refusal, uids, wall_clock,
};
use crate::api::PodSet;
use crate::api::keys::{
    FINALIZER_PODSET, LABEL_POD_GROUP_INDEX, LABEL_PODSET_NAME, LABEL_ROLE_TEMPLATE_HASH,
};
use crate::api::pod::CachedPod;
use crate::planner::podset::PODSET_COUNTERS;
use crate::planner::podset::{GangPod, plan_gang, podset_status};
use crate::planner::render::gang_pod;
use crate::planner::requeue;

/// Reconciles one PodSet.
pub async fn reconcile(podset: Arc<PodSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    finalized(
        podset,
        ctx,
        FINALIZER_PODSET,
        |object, ctx| async move { apply(&object, &ctx).await },
        |object, ctx| async move { cleanup(&object, &ctx).await },
    )
    .await
}

fn owned_pods(podset: &PodSet, ctx: &Context) -> Vec<Arc<CachedPod>> {
    owned_children(&ctx.caches.pods, podset)
}

/// Ordered deletion: the gang's pods first; the finalizer goes once none is left — in the
/// cache, then on the API server ([`live_children`]).
async fn cleanup(podset: &PodSet, ctx: &Context) -> Result<Action, Error> {
    let mut pods = going(&owned_pods(podset, ctx));
    if pods.is_empty() {
        pods = live_children::<Pod>(ctx, podset, LABEL_PODSET_NAME).await?;
        if pods.is_empty() {
            ctx.forget(podset);
            return Ok(Action::await_change());
        }
    }
    delete_remaining::<Pod>(ctx, podset, &pods, "podset", "pods").await?;
    Err(Error::Waiting(format!(
        "{} pods still terminating",
        pods.len()
    )))
}

fn gang_view(pod: &CachedPod) -> GangPod {
    GangPod {
        name: pod.name_any(),
        index: pod
            .labels()
            .get(LABEL_POD_GROUP_INDEX)
            .and_then(|i| i.parse().ok()),
        running: !matches!(pod.phase(), Some("Succeeded" | "Failed")),
        terminating: pod.metadata.deletion_timestamp.is_some(),
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
    let api: Api<Pod> =
        Api::namespaced(ctx.client.clone(), &podset.namespace().unwrap_or_default());
    let uids = uids(pods.iter().map(|p| &**p));
    for name in &action.delete {
        delete_child(&api, name, uids.get(name), ctx, "podset", "pods").await?;
    }
    // A role-level strategy's PodGroup, one per PodSet, comes before the gang's pods (the
    // RoleSet reports a missing CRD; the pods are created without it then).
    let gang = podgroups::sync(
        ctx,
        "podset",
        podset,
        LABEL_PODSET_NAME,
        podset.spec.scheduling_strategy.as_ref(),
        podset.spec.pod_group_size,
    )
    .await?;
    let creates = if gang.holds_pods() {
        &[][..]
    } else {
        &action.create[..]
    };
    // A create the API server refuses (quota, admission) stops the pass's creates: the
    // status says why (ReplicaFailure, FailedCreate) and the PodSet is retried with backoff.
    let mut refused = None;
    for &index in creates {
        match api
            .create(&PostParams::default(), &gang_pod(podset, index))
            .await
        {
            Ok(_) => ctx.metrics.api_write("podset", "create", "pods"),
            // An index's pod has a deterministic name: already there means already created.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => match refusal(&e) {
                Some(message) => {
                    refused = Some(format!("pod {index}: {message}"));
                    break;
                }
                None => return Err(e.into()),
            },
        }
    }
    if !action.delete.is_empty() || !action.create.is_empty() {
        tracing::info!(podset = %podset.name_any(), created = ?action.create, deleted = ?action.delete, "gang pods");
    }
    // The gang's pods carry the PodSet's template hash: a PodSet adopted under a new hash
    // (after a cut-over from AIBrix) passes it on without restarting them.
    if let Some(hash) = podset.labels().get(LABEL_ROLE_TEMPLATE_HASH) {
        let relabel = json!({"metadata": {"labels": {LABEL_ROLE_TEMPLATE_HASH: hash}}});
        for pod in pods.iter().filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.labels().get(LABEL_ROLE_TEMPLATE_HASH) != Some(hash)
        }) {
            api.patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&relabel),
            )
            .await?;
            ctx.metrics.api_write("podset", "patch", "pods");
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
        .write_status(
            "podset",
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
