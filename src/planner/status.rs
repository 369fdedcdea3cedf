//! Status derivation: what an object's status should say, from what was decided and observed
//! and the status stored, at `now`. Pure, so "nothing changed" is provably "nothing to write":
//! deriving again from a written status gives it back.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::Condition;
use crate::api::bounded_status::{STATUS_MESSAGE_CHARS, bounded_text};

/// How long a status change people read but no decision waits on may wait to be written
/// with the next ones: pods of one object starting and turning Ready within it (kubelets
/// report them over a few seconds, more under load) cost one write, not one each.
/// Everything a decision reads is written at once.
pub const COALESCE: Duration = Duration::from_secs(5);

/// The rate the whole process spends on such count-only status writes when many objects
/// move at once (a fleet-wide rollout): writes to a custom resource's `/status` are among the
/// API server's dearest requests (whole-object JSON and managed-fields work), and counts
/// that lag a little longer cost no decision.
pub const INFORMATIONAL_WRITES_PER_SECOND: u32 = 10;

/// The longest counts may lag, however many objects wait: a minute keeps `kubectl get`
/// meaningful while a fleet of hundreds moves at once (their conditions never lag).
pub const COALESCE_MAX: Duration = Duration::from_secs(60);

/// How long a count-only change waits when `waiting` objects already hold one back: at
/// least [`COALESCE`], and long enough that those writes, spread over the window, stay
/// within [`INFORMATIONAL_WRITES_PER_SECOND`] (at most [`COALESCE_MAX`]). A `first` status
/// that says no more than an absent one (nothing Ready yet, see
/// [`roleset_status_unwritten`](crate::planner::roleset::status::roleset_status_unwritten)) waits [`COALESCE_MAX`]: most objects turn Ready within it,
/// and that write is due at once anyway.
pub fn coalesce_window(waiting: usize, first: bool) -> Duration {
    if first {
        return COALESCE_MAX;
    }
    let spread =
        Duration::from_secs_f64(waiting as f64 / f64::from(INFORMATIONAL_WRITES_PER_SECOND));
    spread.clamp(COALESCE, COALESCE_MAX)
}

/// The parts of a condition that describe rather than decide: its prose (which names the
/// roles or counts still waiting) and its times (a transition time moves only with the
/// condition's status, which is compared).
const CONDITION_PROSE: &[&str] = &["message", "lastUpdateTime", "lastTransitionTime"];

/// Whether `desired` differs from `stored` only in what people read: the top-level
/// `counters` fields and the prose of conditions whose type, status, reason and generation
/// are unchanged. Such a change informs people and dashboards; no decision waits on it —
/// every decision reads condition states, generations, revisions, phases and canary state,
/// which are written at once.
pub fn only_informational_differ<S: serde::Serialize>(
    stored: &S,
    desired: &S,
    counters: &[&str],
) -> bool {
    let decisive = |status: &S| {
        let mut value = serde_json::to_value(status).unwrap_or_default();
        if let Some(fields) = value.as_object_mut() {
            for counter in counters {
                fields.remove(*counter);
            }
            if let Some(conditions) = fields.get_mut("conditions").and_then(|c| c.as_array_mut()) {
                for condition in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
                    for prose in CONDITION_PROSE {
                        condition.remove(*prose);
                    }
                }
            }
        }
        value
    };
    decisive(stored) == decisive(desired)
}

/// A condition's status (Kubernetes conventions: `Unknown` when it cannot be told).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// It does not.
    False,
    /// It cannot be told now (a pause, an inconclusive analysis).
    Unknown,
}

impl ConditionStatus {
    /// The value stored in `status`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// Why a condition says what it says: every reason squall writes, one variant each, so a
/// reason is matched and compared as a value and spelt once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The spec passes validation (`InvalidSpec` False).
    Valid,
    /// The spec fails validation (`InvalidSpec` True).
    ValidationFailed,
    /// Not ready because the spec is invalid.
    InvalidSpec,
    /// Every role of a RoleSet is ready.
    RoleSetReady,
    /// Some role of a RoleSet is not ready.
    RolesNotReady,
    /// Every RoleSet of a StormService is updated and Ready.
    RoleSetsReady,
    /// Some RoleSet of a StormService is not updated and Ready.
    RoleSetsNotReady,
    /// Enough RoleSets serve (`Available` True).
    MinimumRoleSetsServing,
    /// Too few RoleSets serve (`Available` False).
    MinimumRoleSetsNotServing,
    /// A rollout is moving.
    RollingOut,
    /// The rollout is done.
    RolloutComplete,
    /// `spec.paused`: rollouts wait.
    Paused,
    /// A canary pause step waits.
    CanaryPaused,
    /// Rollouts proceed (`Paused` False).
    Running,
    /// A rollout made no progress within its deadline.
    ProgressDeadlineExceeded,
    /// The canary's stable revision is gone.
    StableRevisionMissing,
    /// A canary analysis is measuring.
    Measuring,
    /// A canary analysis succeeded.
    Successful,
    /// A canary analysis was inconclusive.
    Inconclusive,
    /// A canary analysis failed.
    MetricFailed,
    /// The headless Service is another's.
    NotOwned,
    /// Not ready because of a `ReplicaFailure`.
    ReplicaFailure,
    /// The API server refused a create.
    FailedCreate,
    /// RoleSets report their own `ReplicaFailure`.
    RoleSetFailure,
    /// The spec or the children could not be planned.
    ReconcileError,
    /// The gang's PodGroup is another's.
    PodGroupConflict,
    /// A PodGroup is asked for whose CRD is not installed.
    PodGroupCrdMissing,
    /// A pod's containers are being updated in place.
    InPlaceUpdating,
    /// A pod runs its new template after an in-place update.
    InPlaceUpdateCompleted,
    /// Every role of a paired pod's group has a pod of its key whose containers are ready
    /// (on a RoleSet: so has every key with a pod up).
    PartnersReady,
    /// Some role of a paired pod's group has no pod of its key ready to serve with it (on a
    /// RoleSet: of some key with a pod up; the message names the role).
    NoPartner,
    /// A gated pod outside pairing serves: its containers are ready and nothing holds it
    /// out of traffic.
    Serving,
    /// squall holds the pod out of traffic while it keeps running: an aborted canary's pod
    /// kept warm, or a RoleSet whose `servingGate` is `Closed`.
    HeldOut,
    /// A gated pod outside pairing whose containers are not ready (or that moves in place).
    NotUp,
    /// squall holds the pod out of traffic until its requests end, then deletes it (or
    /// updates it in place).
    Draining,
}

impl Reason {
    /// The value stored in `reason` (CamelCase, as the conventions ask).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Valid => "Valid",
            Self::ValidationFailed => "ValidationFailed",
            Self::InvalidSpec => "InvalidSpec",
            Self::RoleSetReady => "RoleSetReady",
            Self::RolesNotReady => "RolesNotReady",
            Self::RoleSetsReady => "RoleSetsReady",
            Self::RoleSetsNotReady => "RoleSetsNotReady",
            Self::MinimumRoleSetsServing => "MinimumRoleSetsServing",
            Self::MinimumRoleSetsNotServing => "MinimumRoleSetsNotServing",
            Self::RollingOut => "RollingOut",
            Self::RolloutComplete => "RolloutComplete",
            Self::Paused => "Paused",
            Self::CanaryPaused => "CanaryPaused",
            Self::Running => "Running",
            Self::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            Self::StableRevisionMissing => "StableRevisionMissing",
            Self::Measuring => "Measuring",
            Self::Successful => "Successful",
            Self::Inconclusive => "Inconclusive",
            Self::MetricFailed => "MetricFailed",
            Self::NotOwned => "NotOwned",
            Self::ReplicaFailure => "ReplicaFailure",
            Self::FailedCreate => "FailedCreate",
            Self::RoleSetFailure => "RoleSetFailure",
            Self::ReconcileError => "ReconcileError",
            Self::PodGroupConflict => "PodGroupConflict",
            Self::PodGroupCrdMissing => "PodGroupCRDMissing",
            Self::InPlaceUpdating => "InPlaceUpdating",
            Self::InPlaceUpdateCompleted => "InPlaceUpdateCompleted",
            Self::PartnersReady => "PartnersReady",
            Self::NoPartner => "NoPartner",
            Self::Serving => "Serving",
            Self::HeldOut => "HeldOut",
            Self::NotUp => "NotUp",
            Self::Draining => "Draining",
        }
    }
}

/// What a condition says: its status, its reason and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    /// Its status.
    pub status: ConditionStatus,
    /// Its reason.
    pub reason: Reason,
    /// What people read.
    pub message: String,
}

impl Said {
    /// `status` for `reason`, saying `message`.
    pub fn new(status: ConditionStatus, reason: Reason, message: String) -> Self {
        Self {
            status,
            reason,
            message,
        }
    }
}

/// A condition for `generation`, changed at `now`.
pub fn condition(
    type_: &str,
    status: ConditionStatus,
    reason: Reason,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.as_str().into(),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.as_str().into()),
        message: Some(bounded_text(message, STATUS_MESSAGE_CHARS)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn count_windows_stretch_with_the_objects_waiting_so_their_writes_keep_to_the_budget() {
        assert_eq!(
            coalesce_window(0, false),
            COALESCE,
            "a quiet cluster keeps the short window"
        );
        assert_eq!(coalesce_window(50, false), COALESCE);
        let rate = INFORMATIONAL_WRITES_PER_SECOND as usize;
        assert_eq!(coalesce_window(rate * 12, false), Duration::from_secs(12));
        assert_eq!(
            coalesce_window(usize::MAX, false),
            COALESCE_MAX,
            "counts never lag unboundedly"
        );
        assert_eq!(
            coalesce_window(0, true),
            COALESCE_MAX,
            "a first status says nothing new"
        );
    }

    proptest! {
        #[test]
        fn objects_waiting_for_a_window_are_written_no_faster_than_the_budget(waiting in 0usize..10_000) {
            let window = coalesce_window(waiting, false);
            prop_assert!(window >= COALESCE && window <= COALESCE_MAX);
            if window < COALESCE_MAX {
                // Those already waiting plus this one, written across the window.
                let rate = waiting as f64 / window.as_secs_f64();
                prop_assert!(rate <= f64::from(INFORMATIONAL_WRITES_PER_SECOND) + 1e-9);
            }
        }
    }
}
