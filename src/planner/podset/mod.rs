//! Decisions of the PodSet controller (docs/aibrix-compatibility.md#the-same): keep one pod per
//! index `0..podGroupSize`, recovering failures per `recoveryPolicy`.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::status::{ConditionStatus, Reason, condition, keep_transition_times};
use crate::api::cached::meta::Pairs;
use crate::api::keys::{CONDITION_REPLICA_FAILURE, LABEL_PAIRING_KEY, LABEL_ROLE_TEMPLATE_HASH};
use crate::api::{PodSetPhase, PodSetStatus, RecoveryPolicy};
use crate::planner::podgroup::Gang;

/// The pod counters of a PodSet's status (its `phase` is what the RoleSet decides on).
pub const PODSET_COUNTERS: &[&str] = &["readyPods", "totalPods"];

/// The labels a gang's pods take from their PodSet after it was made — its template hash (a
/// PodSet adopted under a new hash after a cut-over passes it on without restarting them)
/// and its pairing key (a paired role's new key) — as the merge patch that makes a pod
/// labelled `pod` carry them; None when it does. A key the PodSet lacks is removed, a hash it
/// lacks is left as it is.
pub fn passed_on_labels(podset: &BTreeMap<String, String>, pod: &Pairs) -> Option<Value> {
    let mut changes = serde_json::Map::new();
    if let Some(hash) = podset.get(LABEL_ROLE_TEMPLATE_HASH)
        && pod.get(LABEL_ROLE_TEMPLATE_HASH) != Some(hash.as_str())
    {
        changes.insert(LABEL_ROLE_TEMPLATE_HASH.into(), json!(hash));
    }
    let key = podset.get(LABEL_PAIRING_KEY);
    if pod.get(LABEL_PAIRING_KEY) != key.map(String::as_str) {
        changes.insert(LABEL_PAIRING_KEY.into(), json!(key));
    }
    (!changes.is_empty()).then(|| json!({"metadata": {"labels": changes}}))
}

/// One observed pod of a gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GangPod {
    /// Pod name.
    pub name: String,
    /// Its `pod-group-index` label (None when absent or unparsable).
    pub index: Option<u32>,
    /// Not Succeeded or Failed.
    pub running: bool,
    /// `deletionTimestamp` set.
    pub terminating: bool,
    /// Condition Ready is True.
    pub ready: bool,
    /// Container restarts (a restarted container marks the pod unhealthy).
    pub restarts: i32,
}

/// What to do for one gang.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GangAction {
    /// Indexes to create a pod for.
    pub create: Vec<u32>,
    /// Pods to delete.
    pub delete: Vec<String>,
}

impl GangAction {
    /// The action with its creates held back while the gang's PodGroup holds its pods (not
    /// in the cache yet, or somebody else's): the deletes of a recovery still go.
    pub fn held_by(mut self, gang: Gang) -> Self {
        if gang.holds_pods() {
            self.create.clear();
        }
        self
    }
}

/// One pass: finished pods are removed first (their names block the index — an upstream
/// hazard fixed here); a gang short of pods is recovered per `recovery`; extra pods above the
/// size go, highest index first.
pub fn plan_gang(size: u32, recovery: RecoveryPolicy, pods: &[GangPod]) -> GangAction {
    let mut action = GangAction {
        delete: pods
            .iter()
            .filter(|p| !p.running && !p.terminating)
            .map(|p| p.name.clone())
            .collect(),
        ..GangAction::default()
    };
    let active: Vec<&GangPod> = pods.iter().filter(|p| p.running).collect();
    let present: Vec<u32> = pods.iter().filter_map(|p| p.index).collect();
    let count = active.len() as u32;
    if count < size {
        let live = || active.iter().filter(|p| !p.terminating);
        match recovery {
            RecoveryPolicy::ReplaceUnhealthy => {
                let unhealthy: Vec<String> = live()
                    .filter(|p| p.restarts > 0)
                    .map(|p| p.name.clone())
                    .collect();
                if unhealthy.is_empty() {
                    action.create = (0..size).filter(|i| !present.contains(i)).collect();
                } else {
                    action.delete.extend(unhealthy);
                }
            }
            RecoveryPolicy::Recreate => {
                if active.is_empty() && pods.iter().all(|p| !p.terminating) {
                    action.create = (0..size).collect();
                } else {
                    action.delete.extend(live().map(|p| p.name.clone()));
                }
            }
        }
    } else if count > size {
        let mut extra: Vec<&&GangPod> = active.iter().filter(|p| !p.terminating).collect();
        extra.sort_by_key(|p| std::cmp::Reverse(p.index.unwrap_or(u32::MAX)));
        action.delete.extend(
            extra
                .into_iter()
                .take((count - size) as usize)
                .map(|p| p.name.clone()),
        );
    }
    action
}

/// `(totalPods, readyPods, phase)` of a gang.
pub fn gang_status(size: u32, pods: &[GangPod]) -> (i32, i32, PodSetPhase) {
    let active = pods.iter().filter(|p| p.running).count() as i32;
    let ready = pods.iter().filter(|p| p.running && p.ready).count() as i32;
    let phase = if ready == 0 {
        PodSetPhase::Pending
    } else if ready as u32 == size {
        PodSetPhase::Ready
    } else {
        PodSetPhase::Running
    };
    (active, ready, phase)
}

/// The status of a PodSet at `generation`: the gang's counts and phase, and — while the API
/// server refuses one of its pods (quota, admission) — `ReplicaFailure` with reason
/// `FailedCreate` and the refusal, as a ReplicaSet reports it. Its transition time is kept
/// from `stored` while it holds; the condition goes once a pass creates without refusal.
pub fn podset_status(
    generation: Option<i64>,
    size: u32,
    pods: &[GangPod],
    refused: Option<&str>,
    stored: Option<&PodSetStatus>,
    now: Timestamp,
) -> PodSetStatus {
    let (total_pods, ready_pods, phase) = gang_status(size, pods);
    let conditions = refused.map(|message| {
        let mut conditions = vec![condition(
            CONDITION_REPLICA_FAILURE,
            ConditionStatus::True,
            Reason::FailedCreate,
            message.to_owned(),
            generation,
            now,
        )];
        keep_transition_times(
            &mut conditions,
            stored
                .and_then(|s| s.conditions.as_deref())
                .unwrap_or_default(),
        );
        conditions
    });
    PodSetStatus {
        observed_generation: generation,
        ready_pods,
        total_pods,
        phase: Some(phase),
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(i: u32, running: bool, ready: bool, restarts: i32) -> GangPod {
        GangPod {
            name: format!("ps-{i}"),
            index: Some(i),
            running,
            terminating: false,
            ready,
            restarts,
        }
    }

    #[test]
    fn a_gangs_pods_take_its_hash_and_its_pairing_key() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let podset = labels(&[(LABEL_ROLE_TEMPLATE_HASH, "h2"), (LABEL_PAIRING_KEY, "k2")]);
        let pod = |map: &BTreeMap<String, String>| Pairs::from(map);
        assert_eq!(
            passed_on_labels(&podset, &pod(&podset)),
            None,
            "carried already"
        );
        assert_eq!(
            passed_on_labels(&podset, &pod(&labels(&[(LABEL_ROLE_TEMPLATE_HASH, "h1")]))),
            Some(
                json!({"metadata": {"labels": {LABEL_ROLE_TEMPLATE_HASH: "h2", LABEL_PAIRING_KEY: "k2"}}})
            )
        );
        let unpaired = labels(&[(LABEL_ROLE_TEMPLATE_HASH, "h2")]);
        assert_eq!(
            passed_on_labels(&unpaired, &pod(&podset)),
            Some(json!({"metadata": {"labels": {LABEL_PAIRING_KEY: null}}})),
            "a key the PodSet no longer has goes"
        );
        assert_eq!(
            passed_on_labels(
                &BTreeMap::new(),
                &pod(&labels(&[(LABEL_ROLE_TEMPLATE_HASH, "h1")]))
            ),
            None,
            "a hash the PodSet lacks is left"
        );
    }

    #[test]
    fn creates_every_missing_index() {
        assert_eq!(
            plan_gang(3, RecoveryPolicy::ReplaceUnhealthy, &[]).create,
            [0, 1, 2]
        );
        let a = plan_gang(
            3,
            RecoveryPolicy::ReplaceUnhealthy,
            &[pod(1, true, true, 0)],
        );
        assert_eq!(a.create, [0, 2]);
    }

    #[test]
    fn replace_unhealthy_replaces_only_the_failed_pod() {
        let pods = [pod(0, true, true, 0), pod(1, false, false, 0)];
        let first = plan_gang(2, RecoveryPolicy::ReplaceUnhealthy, &pods);
        assert_eq!(first.delete, ["ps-1"], "the failed pod is removed");
        assert!(
            first.create.is_empty(),
            "its index is taken until it is gone"
        );
        let next = plan_gang(2, RecoveryPolicy::ReplaceUnhealthy, &pods[..1]);
        assert_eq!(next.create, [1]);
        let restarted = [pod(0, true, true, 2)];
        assert_eq!(
            plan_gang(2, RecoveryPolicy::ReplaceUnhealthy, &restarted).delete,
            ["ps-0"]
        );
    }

    #[test]
    fn recreate_replaces_the_whole_gang() {
        let pods = [pod(0, true, true, 0), pod(1, false, false, 0)];
        let a = plan_gang(2, RecoveryPolicy::Recreate, &pods);
        assert_eq!(a.delete, ["ps-1", "ps-0"]);
        assert!(a.create.is_empty());
        assert_eq!(plan_gang(2, RecoveryPolicy::Recreate, &[]).create, [0, 1]);
    }

    #[test]
    fn extra_pods_go_highest_index_first() {
        let pods = [
            pod(0, true, true, 0),
            pod(1, true, true, 0),
            pod(2, true, true, 0),
        ];
        assert_eq!(
            plan_gang(2, RecoveryPolicy::ReplaceUnhealthy, &pods).delete,
            ["ps-2"]
        );
    }

    #[test]
    fn status_phase() {
        assert_eq!(gang_status(2, &[]).2, PodSetPhase::Pending);
        assert_eq!(
            gang_status(2, &[pod(0, true, true, 0)]).2,
            PodSetPhase::Running
        );
        assert_eq!(
            gang_status(2, &[pod(0, true, true, 0), pod(1, true, true, 0)]),
            (2, 2, PodSetPhase::Ready)
        );
    }

    #[test]
    fn a_refused_create_is_reported_until_a_pass_creates_without_one() {
        let at = |second| Timestamp::from_second(second).unwrap();
        let gang = [pod(0, true, true, 0)];
        let refused = podset_status(Some(3), 2, &gang, Some("exceeded quota: gpu"), None, at(10));
        let failure = refused.conditions.as_deref().unwrap();
        assert_eq!(failure.len(), 1);
        assert_eq!(failure[0].type_, CONDITION_REPLICA_FAILURE);
        assert_eq!(
            (failure[0].status.as_str(), failure[0].reason.as_deref()),
            ("True", Some("FailedCreate"))
        );
        assert_eq!(failure[0].message.as_deref(), Some("exceeded quota: gpu"));
        assert_eq!(failure[0].observed_generation, Some(3));
        assert_eq!((refused.total_pods, refused.ready_pods), (1, 1));
        assert_eq!(refused.phase, Some(PodSetPhase::Running));
        // Refused again later: the same condition, its transition time kept, so an unchanged
        // refusal writes no new status.
        let again = podset_status(
            Some(3),
            2,
            &gang,
            Some("exceeded quota: gpu"),
            Some(&refused),
            at(70),
        );
        assert_eq!(again, refused);
        // Created: the condition goes.
        let whole = [pod(0, true, true, 0), pod(1, true, false, 0)];
        let created = podset_status(Some(3), 2, &whole, None, Some(&again), at(80));
        assert_eq!(created.conditions, None);
        assert_eq!((created.total_pods, created.ready_pods), (2, 1));
    }

    #[test]
    fn a_gang_waiting_for_its_podgroup_holds_its_creates_not_its_deletes() {
        use crate::api::podgroup::Scheduler;
        let failed = GangPod {
            name: "g-0".into(),
            index: Some(0),
            running: false,
            terminating: false,
            ready: false,
            restarts: 0,
        };
        let action = || {
            plan_gang(
                2,
                RecoveryPolicy::ReplaceUnhealthy,
                std::slice::from_ref(&failed),
            )
        };
        // Index 0 is taken until its failed pod is gone: only index 1 is created.
        assert_eq!(action().create, [1]);
        for holding in [Gang::Waiting, Gang::Foreign(Scheduler::Volcano)] {
            let held = action().held_by(holding);
            assert!(held.create.is_empty(), "{holding:?}");
            assert_eq!(held.delete, ["g-0"], "the failed pod still goes");
        }
        for free in [
            Gang::NotRequested,
            Gang::Ready,
            Gang::Unserved(Scheduler::Volcano),
        ] {
            assert_eq!(action().held_by(free).create, [1], "{free:?}");
        }
    }
}
