//! A RoleSet's status: per-role pod counts and `Ready` / `ReplicaFailure`, derived from
//! the pass's role inputs at `now`.

use k8s_openapi::jiff::Timestamp;

use super::roles::{PodView, RoleInput};
use crate::api::keys::{CONDITION_PAIRED, CONDITION_READY, CONDITION_REPLICA_FAILURE};
use crate::api::{Condition, RoleSetStatus, RoleStatus};
use crate::planner::pairing::PairingReport;

use crate::planner::status::{ConditionStatus, Reason, condition, keep_transition_times};

/// The pod counters of a RoleSet's status (`roles`): they move with every pod.
pub const ROLESET_COUNTERS: &[&str] = &["roles", "pairing"];

/// The replica counts of one role, from its observed children: its active pods as the
/// role's decisions count them (a pod this controller is deleting is no longer one).
pub fn role_status(input: &RoleInput) -> RoleStatus {
    let active = input.counts().active;
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
        available_replicas: Some(count(&|p| p.available)),
        updated_available_replicas: Some(count(&|p| p.hash == input.target_hash && p.available)),
    }
}

/// Why a RoleSet's pass could not do all it should: its `ReplicaFailure` condition, by
/// reason, with the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The API server refused creates (quota, admission, validation), by role.
    FailedCreate(String),
    /// The spec or the observed children could not be planned (an invalid spec, a
    /// revision that cannot be read).
    ReconcileError(String),
    /// The gang's PodGroup is another's.
    PodGroupConflict(String),
    /// A PodGroup is asked for whose CRD is not installed: pods are created without the
    /// gang guarantee.
    PodGroupCrdMissing(String),
}

impl Failure {
    /// The condition's reason.
    pub fn reason(&self) -> Reason {
        match self {
            Self::FailedCreate(_) => Reason::FailedCreate,
            Self::ReconcileError(_) => Reason::ReconcileError,
            Self::PodGroupConflict(_) => Reason::PodGroupConflict,
            Self::PodGroupCrdMissing(_) => Reason::PodGroupCrdMissing,
        }
    }

    /// The condition's message.
    pub fn message(&self) -> &str {
        match self {
            Self::FailedCreate(m)
            | Self::ReconcileError(m)
            | Self::PodGroupConflict(m)
            | Self::PodGroupCrdMissing(m) => m,
        }
    }
}

/// What a RoleSet pass met that kept it from doing all it should.
#[derive(Clone, Debug, Default)]
pub struct Obstacles {
    /// Creates the API server refused, by role.
    pub refused: Vec<String>,
    /// What the planner's pass could not plan.
    pub problems: Vec<String>,
    /// The gang's PodGroup is another's: why.
    pub podgroup_conflict: Option<String>,
    /// A PodGroup is asked for whose CRD is not installed: what that means.
    pub podgroup_crd_missing: Option<String>,
}

/// The one failure the status reports when several hold: a refused create first (no pod
/// exists until the user acts), then what could not be planned, then a PodGroup another
/// controls, then a missing PodGroup CRD (pods run, without the gang guarantee).
pub fn failure(obstacles: Obstacles) -> Option<Failure> {
    let Obstacles {
        refused,
        problems,
        podgroup_conflict,
        podgroup_crd_missing,
    } = obstacles;
    if !refused.is_empty() {
        Some(Failure::FailedCreate(refused.join("; ")))
    } else if !problems.is_empty() {
        Some(Failure::ReconcileError(problems.join("; ")))
    } else if let Some(message) = podgroup_conflict {
        Some(Failure::PodGroupConflict(message))
    } else {
        podgroup_crd_missing.map(Failure::PodGroupCrdMissing)
    }
}

/// What a RoleSet without a status means to every reader (the StormService controller, a
/// `kubectl wait`): nothing Ready yet (and, when `paired`, no key waiting). A first status that says no more than that may wait
/// like a count — a RoleSet whose pods turn Ready within [`COALESCE_MAX`](crate::planner::status::COALESCE_MAX) gets one status
/// write, not two.
pub fn roleset_status_unwritten(
    generation: Option<i64>,
    inputs: &[RoleInput],
    paired: bool,
) -> RoleSetStatus {
    let nothing_up = PairingReport::default();
    let names: Vec<&str> = inputs.iter().map(|input| input.name.as_str()).collect();
    RoleSetStatus {
        observed_generation: generation,
        roles: Some(
            inputs
                .iter()
                .map(|input| RoleStatus {
                    name: input.name.clone(),
                    available_replicas: Some(0),
                    updated_available_replicas: Some(0),
                    ..RoleStatus::default()
                })
                .collect(),
        ),
        conditions: Some(
            std::iter::once(condition(
                CONDITION_READY,
                ConditionStatus::False,
                Reason::RolesNotReady,
                format!("roles not ready: {}", names.join(", ")),
                generation,
                Timestamp::UNIX_EPOCH,
            ))
            .chain(paired.then(|| paired_condition(&nothing_up, generation, Timestamp::UNIX_EPOCH)))
            .collect(),
        ),
        pairing: paired.then(Vec::new),
    }
}

/// `Paired`: False while a key with a pod up waits for a role with none (the message says
/// which), so a partner that cannot start shows where the group's rollout holds.
fn paired_condition(report: &PairingReport, generation: Option<i64>, now: Timestamp) -> Condition {
    if report.waiting.is_empty() {
        condition(
            CONDITION_PAIRED,
            ConditionStatus::True,
            Reason::PartnersReady,
            "every pairing key with a pod up has one up in each role of its group".into(),
            generation,
            now,
        )
    } else {
        condition(
            CONDITION_PAIRED,
            ConditionStatus::False,
            Reason::NoPartner,
            report.waiting.join("; "),
            generation,
            now,
        )
    }
}

/// The status of a RoleSet at `generation`: per-role counts, `Ready` (and `ReplicaFailure`
/// when `failure`; `Paired` and what each key serves when roles are `paired`), with
/// transition times carried over from `stored` when unchanged.
pub fn roleset_status(
    generation: Option<i64>,
    inputs: &[RoleInput],
    failure: Option<Failure>,
    paired: Option<&PairingReport>,
    stored: Option<&RoleSetStatus>,
    now: Timestamp,
) -> RoleSetStatus {
    let not_ready: Vec<&str> = inputs
        .iter()
        .filter(|input| !input.all_available())
        .map(|input| input.name.as_str())
        .collect();
    let ready = match &failure {
        None if not_ready.is_empty() => condition(
            CONDITION_READY,
            ConditionStatus::True,
            Reason::RoleSetReady,
            "every role is updated (up to its partition) and ready".into(),
            generation,
            now,
        ),
        None => condition(
            CONDITION_READY,
            ConditionStatus::False,
            Reason::RolesNotReady,
            format!("roles not ready: {}", not_ready.join(", ")),
            generation,
            now,
        ),
        Some(failure) => condition(
            CONDITION_READY,
            ConditionStatus::False,
            Reason::ReplicaFailure,
            failure.message().to_string(),
            generation,
            now,
        ),
    };
    let mut conditions = vec![ready];
    if let Some(failure) = failure {
        conditions.push(condition(
            CONDITION_REPLICA_FAILURE,
            ConditionStatus::True,
            failure.reason(),
            failure.message().to_string(),
            generation,
            now,
        ));
    }
    conditions.extend(paired.map(|report| paired_condition(report, generation, now)));
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
        pairing: paired.map(|report| report.keys.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PairedRoleStatus, PairingKeyStatus};
    use crate::planner::status::only_informational_differ;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use proptest::prelude::*;

    fn pod(hash: &str, ready: bool, terminating: bool) -> PodView {
        PodView {
            name: format!("p-{hash}-{ready}-{terminating}"),
            hash: hash.into(),
            running: true,
            terminating,
            ready,
            available: ready,
            available_at: None,
            gated: false,
            created: 0,
            slot: None,
            in_place_target: None,
            in_place_pending: None,
            draining: None,
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
    fn a_paired_roleset_says_which_role_a_key_waits_for_and_its_keys_counts_may_wait() {
        let inputs = [role("prefill", 1, vec![pod("new", false, false)])];
        let key = |serving| PairingKeyStatus {
            key: "k".into(),
            roles: vec![PairedRoleStatus {
                name: "prefill".into(),
                pods: 1,
                serving,
            }],
            skew: 0,
        };
        let nothing_waits = PairingReport {
            keys: vec![key(0)],
            waiting: Vec::new(),
        };
        let unwritten = roleset_status_unwritten(Some(1), &inputs, true);
        let first = roleset_status(Some(1), &inputs, None, Some(&nothing_waits), None, at(0));
        assert!(
            only_informational_differ(&unwritten, &first, ROLESET_COUNTERS),
            "a first paired status with no key waiting may wait like a count"
        );
        let serving = PairingReport {
            keys: vec![key(1)],
            waiting: Vec::new(),
        };
        let counted = roleset_status(Some(1), &inputs, None, Some(&serving), Some(&first), at(1));
        assert_ne!(first.pairing, counted.pairing);
        assert!(only_informational_differ(
            &first,
            &counted,
            ROLESET_COUNTERS
        ));
        let waits = PairingReport {
            keys: vec![key(0)],
            waiting: vec!["key k waits for role decode (none of its 2 pods up)".into()],
        };
        let held = roleset_status(Some(1), &inputs, None, Some(&waits), Some(&first), at(2));
        let paired = held
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == CONDITION_PAIRED)
            .expect("a Paired condition");
        assert_eq!(
            (paired.status.as_str(), paired.reason.as_deref()),
            ("False", Some("NoPartner"))
        );
        assert!(paired.message.as_deref().unwrap().contains("role decode"));
        assert!(
            !only_informational_differ(&first, &held, ROLESET_COUNTERS),
            "a key that starts waiting is written at once"
        );
        // Without pairing, neither the condition nor the keys appear.
        let plain = roleset_status(Some(1), &inputs, None, None, None, at(0));
        assert!(plain.pairing.is_none());
        assert!(
            plain
                .conditions
                .iter()
                .flatten()
                .all(|c| c.type_ != CONDITION_PAIRED)
        );
    }

    #[test]
    fn a_role_counts_its_pods_as_its_decisions_do() {
        let mut input = role(
            "r",
            3,
            vec![
                pod("new", true, false),
                pod("old", true, false),
                pod("old", false, true),
            ],
        );
        // A pod this controller is deleting is gone for the decisions, and for the status.
        input.pending_deletes.insert(input.pods[1].name.clone());
        let status = role_status(&input);
        assert_eq!(
            (
                status.replicas,
                status.ready_replicas,
                status.updated_replicas
            ),
            (1, 1, 1)
        );
        assert_eq!(status.replicas as usize, input.counts().active.len());
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
        let status = roleset_status(Some(3), &inputs, None, None, None, at(0));
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
        let failure = Some(Failure::FailedCreate("quota".to_string()));
        let conditions = roleset_status(Some(1), &inputs, failure, None, None, at(0))
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
            None,
            at(0),
        );
        let counted = roleset_status(
            Some(1),
            &[role("decode", 3, pods(true))],
            None,
            None,
            Some(&before),
            at(1),
        );
        assert_ne!(before, counted);
        assert!(only_informational_differ(
            &before,
            &counted,
            ROLESET_COUNTERS
        ));
        let all_ready = vec![pod("new", true, false); 3];
        let ready = roleset_status(
            Some(1),
            &[role("decode", 3, all_ready)],
            None,
            None,
            Some(&before),
            at(1),
        );
        assert!(
            !only_informational_differ(&before, &ready, ROLESET_COUNTERS),
            "Ready turned True"
        );
        let next = roleset_status(
            Some(2),
            &[role("decode", 3, pods(false))],
            None,
            None,
            Some(&before),
            at(1),
        );
        assert!(
            !only_informational_differ(&before, &next, ROLESET_COUNTERS),
            "a new generation"
        );
    }

    #[test]
    fn a_first_roleset_status_waits_only_while_it_says_nothing_is_ready() {
        let inputs = |ready| {
            vec![
                role("prefill", 1, vec![pod("new", ready, false)]),
                role("decode", 1, vec![pod("new", ready, false)]),
            ]
        };
        let unwritten = roleset_status_unwritten(Some(1), &inputs(false), false);
        let starting = roleset_status(Some(1), &inputs(false), None, None, None, at(5));
        assert!(only_informational_differ(
            &unwritten,
            &starting,
            ROLESET_COUNTERS
        ));
        let ready = roleset_status(Some(1), &inputs(true), None, None, None, at(5));
        assert!(
            !only_informational_differ(&unwritten, &ready, ROLESET_COUNTERS),
            "Ready is written at once"
        );
        let failed = roleset_status(
            Some(1),
            &inputs(false),
            Some(Failure::FailedCreate("quota".into())),
            None,
            None,
            at(5),
        );
        assert!(
            !only_informational_differ(&unwritten, &failed, ROLESET_COUNTERS),
            "a failure is written at once"
        );
        let empty = [role("decode", 0, Vec::new())];
        let nothing_to_wait_for = roleset_status(Some(1), &empty, None, None, None, at(5));
        assert!(
            !only_informational_differ(
                &roleset_status_unwritten(Some(1), &empty, false),
                &nothing_to_wait_for,
                ROLESET_COUNTERS
            ),
            "a RoleSet with no pods to wait for is Ready at once"
        );
    }

    #[test]
    fn a_role_turning_ready_before_the_others_changes_only_prose() {
        let roles = |prefill_ready| {
            vec![
                role("prefill", 1, vec![pod("new", prefill_ready, false)]),
                role("decode", 1, vec![pod("new", false, false)]),
            ]
        };
        let before = roleset_status(Some(1), &roles(false), None, None, None, at(0));
        let after = roleset_status(Some(1), &roles(true), None, None, Some(&before), at(1));
        let message = |s: &RoleSetStatus| s.conditions.as_ref().unwrap()[0].message.clone();
        assert_ne!(
            message(&before),
            message(&after),
            "the message names the roles"
        );
        assert!(only_informational_differ(&before, &after, ROLESET_COUNTERS));
        let failed = roleset_status(
            Some(1),
            &roles(true),
            Some(Failure::FailedCreate("quota".into())),
            None,
            Some(&before),
            at(1),
        );
        assert!(
            !only_informational_differ(&before, &failed, ROLESET_COUNTERS),
            "a new reason and a new condition"
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
            let failure = || failed.then(|| Failure::FailedCreate("quota".to_string()));
            let first = roleset_status(Some(2), &inputs, failure(), None, None, at(0));
            let again = roleset_status(Some(2), &inputs, failure(), None, Some(&first), at(later));
            prop_assert_eq!(&again, &first);
            // A condition that flips takes the new time; one that holds keeps its own.
            let flipped = roleset_status(Some(2), &inputs, (!failed).then(|| Failure::FailedCreate("quota".to_string())), None, Some(&first), at(later));
            let ready_before = &first.conditions.as_ref().unwrap()[0];
            let ready_after = &flipped.conditions.as_ref().unwrap()[0];
            if ready_before.status == ready_after.status {
                prop_assert_eq!(&ready_before.last_transition_time, &ready_after.last_transition_time);
            } else {
                prop_assert_eq!(&ready_after.last_transition_time, &Some(Time(at(later))));
            }
        }
    }

    #[test]
    fn a_refused_create_wins_then_what_could_not_be_planned_then_the_podgroup() {
        let all = || Obstacles {
            refused: vec!["role decode: quota".into()],
            problems: vec!["revision unreadable".into()],
            podgroup_conflict: Some("another's PodGroup".into()),
            podgroup_crd_missing: Some("no CRD".into()),
        };
        assert_eq!(
            failure(all()),
            Some(Failure::FailedCreate("role decode: quota".into()))
        );
        let planned = Obstacles {
            refused: Vec::new(),
            ..all()
        };
        assert_eq!(
            failure(planned.clone()),
            Some(Failure::ReconcileError("revision unreadable".into()))
        );
        let conflict = Obstacles {
            problems: Vec::new(),
            ..planned
        };
        assert_eq!(
            failure(conflict.clone()),
            Some(Failure::PodGroupConflict("another's PodGroup".into()))
        );
        let missing = Obstacles {
            podgroup_conflict: None,
            ..conflict
        };
        let reported = failure(missing).expect("the missing CRD");
        assert_eq!(
            (reported.reason().as_str(), reported.message()),
            ("PodGroupCRDMissing", "no CRD")
        );
        assert_eq!(failure(Obstacles::default()), None);
        let two = Obstacles {
            refused: vec!["role a: quota".into(), "role b: quota".into()],
            ..Obstacles::default()
        };
        assert_eq!(
            failure(two).map(|f| f.message().to_string()),
            Some("role a: quota; role b: quota".into())
        );
    }
}
