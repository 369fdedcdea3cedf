//! Status derivation: what an object's status should say, from what was decided and observed
//! and the status stored, at `now`. Pure, so "nothing changed" is provably "nothing to write":
//! deriving again from a written status gives it back.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::roleset::{PodView, RoleInput};
use crate::api::{Condition, RoleSetStatus, RoleStatus};

/// How long a status change confined to pod counters may wait to be written with the next
/// ones: pods of one object turning Ready within it cost one write, not one each.
pub const COALESCE: Duration = Duration::from_secs(1);

/// The pod counters of a RoleSet's status (`roles`): they move with every pod.
pub const ROLESET_COUNTERS: &[&str] = &["roles"];
/// The pod counters of a StormService's status (`roleStatuses`, summed from its RoleSets').
pub const STORMSERVICE_COUNTERS: &[&str] = &["roleStatuses"];
/// The pod counters of a PodSet's status.
pub const PODSET_COUNTERS: &[&str] = &["readyPods", "totalPods"];

/// Whether `desired` differs from `stored` only in the top-level `counters` fields. Such a
/// change informs people and dashboards; no decision waits on it — every decision reads
/// conditions, generations, revisions and canary state, which are written at once.
pub fn only_counters_differ<S: serde::Serialize>(
    stored: &S,
    desired: &S,
    counters: &[&str],
) -> bool {
    let without_counters = |status: &S| {
        let mut value = serde_json::to_value(status).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            for counter in counters {
                fields.remove(*counter);
            }
        }
        value
    };
    without_counters(stored) == without_counters(desired)
}

/// A condition for `generation`, changed at `now`.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.into()),
        message: Some(message),
        observed_generation: generation,
        ..Condition::default()
    }
}

/// Keeps `lastTransitionTime` of conditions whose status did not change since `old`
/// (Kubernetes conventions).
pub fn keep_transition_times(conditions: &mut [Condition], old: &[Condition]) {
    for c in conditions {
        if let Some(previous) = old
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
        {
            c.last_transition_time = previous.last_transition_time.clone();
        }
    }
}

/// The replica counts of one role, from its observed children.
pub fn role_status(input: &RoleInput) -> RoleStatus {
    let active: Vec<&PodView> = input
        .pods
        .iter()
        .filter(|p| p.running && !p.terminating)
        .collect();
    let count = |f: &dyn Fn(&PodView) -> bool| active.iter().filter(|p| f(p)).count() as i32;
    let replicas = active.len() as i32;
    let ready = count(&|p| p.ready);
    RoleStatus {
        name: input.name.clone(),
        replicas,
        ready_replicas: ready,
        not_ready_replicas: replicas - ready,
        updated_replicas: count(&|p| p.hash == input.target_hash),
        updated_ready_replicas: count(&|p| p.hash == input.target_hash && p.ready),
    }
}

/// Why a RoleSet's pass could not do all it should (reason, message).
pub type Failure = (&'static str, String);

/// The status of a RoleSet at `generation`: per-role counts, `Ready` (and `ReplicaFailure`
/// when `failure`), with transition times carried over from `stored` when unchanged.
pub fn roleset_status(
    generation: Option<i64>,
    inputs: &[RoleInput],
    failure: Option<Failure>,
    stored: Option<&RoleSetStatus>,
    now: Timestamp,
) -> RoleSetStatus {
    let not_ready: Vec<&str> = inputs
        .iter()
        .filter(|input| !input.all_ready())
        .map(|input| input.name.as_str())
        .collect();
    let ready = match &failure {
        None if not_ready.is_empty() => condition(
            "Ready",
            "True",
            "RoleSetReady",
            "every role is updated (up to its partition) and ready".into(),
            generation,
            now,
        ),
        None => condition(
            "Ready",
            "False",
            "RolesNotReady",
            format!("roles not ready: {}", not_ready.join(", ")),
            generation,
            now,
        ),
        Some((_, message)) => condition(
            "Ready",
            "False",
            "ReplicaFailure",
            message.clone(),
            generation,
            now,
        ),
    };
    let mut conditions = vec![ready];
    if let Some((reason, message)) = failure {
        conditions.push(condition(
            "ReplicaFailure",
            "True",
            reason,
            message,
            generation,
            now,
        ));
    }
    keep_transition_times(
        &mut conditions,
        stored
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default(),
    );
    RoleSetStatus {
        observed_generation: generation,
        roles: Some(inputs.iter().map(role_status).collect()),
        conditions: Some(conditions),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(hash: &str, ready: bool, terminating: bool) -> PodView {
        PodView {
            name: format!("p-{hash}-{ready}-{terminating}"),
            hash: hash.into(),
            running: true,
            terminating,
            ready,
            created: 0,
            slot: None,
            in_place_target: None,
            in_place_pending: None,
        }
    }

    fn role(name: &str, desired: u32, pods: Vec<PodView>) -> RoleInput {
        RoleInput {
            name: name.into(),
            desired,
            target_hash: "new".into(),
            pods,
            ..RoleInput::default()
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn counts_leave_out_terminating_pods_and_ready_names_the_roles_not_ready() {
        let inputs = [
            role(
                "decode",
                2,
                vec![
                    pod("new", true, false),
                    pod("old", true, false),
                    pod("new", false, true),
                ],
            ),
            role("prefill", 1, vec![pod("new", true, false)]),
        ];
        let status = roleset_status(Some(3), &inputs, None, None, at(0));
        let roles = status.roles.unwrap();
        assert_eq!(
            (
                roles[0].replicas,
                roles[0].ready_replicas,
                roles[0].updated_replicas
            ),
            (2, 2, 1)
        );
        assert_eq!(roles[1].updated_ready_replicas, 1);
        let ready = &status.conditions.unwrap()[0];
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("False", Some("RolesNotReady"))
        );
        assert_eq!(ready.message.as_deref(), Some("roles not ready: decode"));
        assert_eq!(ready.observed_generation, Some(3));
    }

    #[test]
    fn a_failure_is_its_own_condition_and_makes_ready_false() {
        let inputs = [role("decode", 1, vec![pod("new", true, false)])];
        let failure = Some(("FailedCreate", "quota".to_string()));
        let conditions = roleset_status(Some(1), &inputs, failure, None, at(0))
            .conditions
            .unwrap();
        assert_eq!(conditions[0].reason.as_deref(), Some("ReplicaFailure"));
        assert_eq!(conditions[1].type_, "ReplicaFailure");
        assert_eq!(conditions[1].reason.as_deref(), Some("FailedCreate"));
    }

    #[test]
    fn a_change_of_pod_counts_alone_may_wait_but_a_condition_change_may_not() {
        let pods = |ready| vec![pod("new", ready, false), pod("new", true, false)];
        let before = roleset_status(
            Some(1),
            &[role("decode", 3, pods(false))],
            None,
            None,
            at(0),
        );
        let counted = roleset_status(
            Some(1),
            &[role("decode", 3, pods(true))],
            None,
            Some(&before),
            at(1),
        );
        assert_ne!(before, counted);
        assert!(only_counters_differ(&before, &counted, ROLESET_COUNTERS));
        let all_ready = vec![pod("new", true, false); 3];
        let ready = roleset_status(
            Some(1),
            &[role("decode", 3, all_ready)],
            None,
            Some(&before),
            at(1),
        );
        assert!(
            !only_counters_differ(&before, &ready, ROLESET_COUNTERS),
            "Ready turned True"
        );
        let next = roleset_status(
            Some(2),
            &[role("decode", 3, pods(false))],
            None,
            Some(&before),
            at(1),
        );
        assert!(
            !only_counters_differ(&before, &next, ROLESET_COUNTERS),
            "a new generation"
        );
    }

    proptest! {
        /// Deriving again, later, from the status just written gives it back: a reconcile
        /// with nothing new writes nothing, and transition times stay where they were.
        #[test]
        fn deriving_from_the_written_status_changes_nothing(
            pods in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<bool>()), 0..8),
            desired in 0u32..6,
            failed in any::<bool>(),
            later in 1i64..100_000,
        ) {
            let views = pods
                .iter()
                .map(|&(new, ready, terminating)| pod(if new { "new" } else { "old" }, ready, terminating))
                .collect();
            let inputs = [role("decode", desired, views)];
            let failure = || failed.then(|| ("FailedCreate", "quota".to_string()));
            let first = roleset_status(Some(2), &inputs, failure(), None, at(0));
            let again = roleset_status(Some(2), &inputs, failure(), Some(&first), at(later));
            prop_assert_eq!(&again, &first);
            // A condition that flips takes the new time; one that holds keeps its own.
            let flipped = roleset_status(Some(2), &inputs, (!failed).then(|| ("FailedCreate", "quota".to_string())), Some(&first), at(later));
            let ready_before = &first.conditions.as_ref().unwrap()[0];
            let ready_after = &flipped.conditions.as_ref().unwrap()[0];
            if ready_before.status == ready_after.status {
                prop_assert_eq!(&ready_before.last_transition_time, &ready_after.last_transition_time);
            } else {
                prop_assert_eq!(&ready_after.last_transition_time, &Some(Time(at(later))));
            }
        }
    }
}
