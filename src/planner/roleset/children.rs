//! The children a RoleSet counts per role, and how the planner sees each of them (a pod or
//! a PodSet as one replica). Both halves of a pass read them: adoption (which pods a new
//! RoleSet takes over) and the pass itself, so they live below both.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::in_place::pending_reason;
use super::roles::{Draining, PodView};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::cached::meta::Labelled;
use crate::api::cached::pod::CachedPod;
use crate::api::keys::{
    ANNOTATION_DRAIN_IN_FLIGHT, ANNOTATION_DRAIN_STARTED, ANNOTATION_IN_PLACE_TARGET_HASH,
    CONDITION_PAIRING_SERVABLE, CONDITION_READY, LABEL_ROLE_NAME, LABEL_ROLE_REPLICA_INDEX,
    LABEL_ROLE_TEMPLATE_HASH,
};
use crate::api::{PodSet, PodSetPhase, RoleSet, RoleSpec};
use crate::planner::availability::Availability;
use crate::planner::render::{stateful_pod, stateless_pod};
use crate::planner::serving::gated;

/// The children one role counts: PodSets for a multi-node role (`podGroupSize` > 1), plain
/// pods otherwise.
#[derive(Clone, Debug)]
pub struct RoleChildren {
    /// Role name.
    pub role: String,
    /// Multi-node role: its replicas are PodSets.
    pub gang: bool,
    /// Its replicas as the planner sees them.
    pub children: Vec<PodView>,
    /// The `stableRevision` the role's partition keeps pods on, when one is held back: the
    /// controller reads it for `roleset_pass::PassInput::stable`.
    pub stable_revision: Option<String>,
}

/// The first half of a pass: the children each role counts, in spec order, each available
/// or not by `clock`.
pub fn role_children(
    roleset: &RoleSet,
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
    clock: Availability,
) -> Vec<RoleChildren> {
    roleset
        .spec
        .roles
        .iter()
        .flatten()
        .map(|role| {
            let gang = role.pod_group_size_or_default() > 1;
            // Whether a child carries the serving gate matters only to a RoleSet that holds
            // children out of traffic, or a role that drains; reading it costs a parse of the
            // pod's spec.
            let gates = roleset.spec.serving_gate.is_some() || role.drain.is_some();
            let children = if gang {
                of_role(podsets, &role.name)
                    .map(|p| podset_view(p, clock))
                    .collect()
            } else {
                of_role(pods, &role.name)
                    .map(|p| PodView {
                        gated: gates && gated(p),
                        ..pod_view(p, clock)
                    })
                    .collect()
            };
            let rollout = role.rollout.as_ref();
            let stable_revision = rollout
                .and_then(|r| r.stable_revision.clone())
                .filter(|_| partition(role) > 0);
            RoleChildren {
                role: role.name.clone(),
                gang,
                children,
                stable_revision,
            }
        })
        .collect()
}

/// `partition` of a role, at most its replicas.
pub(crate) fn partition(role: &RoleSpec) -> u32 {
    let desired = u32::try_from(role.replicas_or_default()).unwrap_or(0);
    role.rollout
        .as_ref()
        .and_then(|r| r.partition)
        .map_or(0, |p| u32::try_from(p).unwrap_or(0).min(desired))
}

/// The children in `all` labelled with `role`.
pub(crate) fn of_role<'a, K: Labelled>(
    all: &'a [Arc<K>],
    role: &'a str,
) -> impl Iterator<Item = &'a K> {
    all.iter()
        .map(|child| &**child)
        .filter(move |child| child.label(LABEL_ROLE_NAME) == Some(role))
}

/// A PodSet seen as one replica of its role: Ready when its phase is Ready (available once
/// its Ready condition has been True long enough), gone from the active set when Failed.
pub(crate) fn podset_view(podset: &PodSet, clock: Availability) -> PodView {
    let phase = podset.status.as_ref().and_then(|s| s.phase);
    let ready = phase == Some(PodSetPhase::Ready);
    let ready_since = podset_condition_since(podset, CONDITION_READY, "True");
    let draining = draining(podset, || {
        podset_condition_since(podset, CONDITION_READY, "False")
    });
    let available = clock.of(ready && draining.is_none(), ready_since);
    PodView {
        name: podset.name_any(),
        hash: template_label(podset),
        running: phase != Some(PodSetPhase::Failed),
        terminating: podset.metadata.deletion_timestamp.is_some(),
        ready,
        available: available.now,
        available_at: available.at,
        gated: podset
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.as_ref())
            .is_some_and(|g| {
                g.iter()
                    .any(|g| g.condition_type == CONDITION_PAIRING_SERVABLE)
            }),
        created: created(podset.metadata.creation_timestamp.as_ref()),
        slot: slot_of(podset),
        in_place_target: None,
        in_place_pending: None,
        draining,
    }
}

/// A pod seen as one replica of its role (`gated` left false: [`role_children`] reads it
/// where it matters).
pub(crate) fn pod_view(pod: &CachedPod, clock: Availability) -> PodView {
    let draining = draining(pod, || pod.condition_since(CONDITION_READY, "False"));
    let available = clock.of(pod.ready() && draining.is_none(), pod.ready_since());
    PodView {
        name: pod.name().to_string(),
        hash: template_label(pod),
        running: !matches!(pod.phase(), Some("Succeeded" | "Failed")),
        terminating: pod.is_deleting(),
        ready: pod.ready(),
        available: available.now,
        available_at: available.at,
        gated: false,
        created: created(pod.metadata.creation_timestamp.as_ref()),
        slot: slot_of(pod),
        in_place_target: in_place_target(pod).map(str::to_string),
        in_place_pending: in_place_target(pod).and_then(|_| pending_reason(&pod.without_spec())),
        draining,
    }
}

/// A child's drain, from its annotations (docs/rollouts.md#drain-before-delete); an
/// unreadable start is no drain. `out_since`: since when it has not been Ready.
fn draining(child: &impl Labelled, out_since: impl FnOnce() -> Option<i64>) -> Option<Draining> {
    let started = child.annotation(ANNOTATION_DRAIN_STARTED)?;
    let started = started.parse::<Timestamp>().ok()?.as_second();
    Some(Draining {
        started,
        out_since: out_since(),
        noted: child
            .annotation(ANNOTATION_DRAIN_IN_FLIGHT)
            .and_then(|n| n.parse().ok()),
    })
}

/// Since when a PodSet's condition `type_` has had `status`.
fn podset_condition_since(podset: &PodSet, type_: &str, status: &str) -> Option<i64> {
    podset
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)?
        .last_transition_time
        .as_ref()
        .map(|t| t.0.as_second())
}

fn template_label(child: &impl Labelled) -> String {
    child
        .label(LABEL_ROLE_TEMPLATE_HASH)
        .unwrap_or_default()
        .to_string()
}

fn created(at: Option<&Time>) -> i64 {
    at.map_or(0, |t| t.0.as_second())
}

fn slot_of(child: &impl Labelled) -> Option<u32> {
    child
        .label(LABEL_ROLE_REPLICA_INDEX)
        .and_then(|i| i.parse().ok())
}

pub(crate) fn in_place_target(pod: &impl Labelled) -> Option<&str> {
    pod.annotation(ANNOTATION_IN_PLACE_TARGET_HASH)
}

/// The pod a role would create now in the place of `pod` (same slot).
pub(crate) fn desired_pod(roleset: &RoleSet, role: &RoleSpec, hash: &str, pod: &Pod) -> Pod {
    match slot_of(pod) {
        Some(slot) if role.stateful == Some(true) => stateful_pod(roleset, role, hash, slot),
        _ => stateless_pod(roleset, role, hash),
    }
}
