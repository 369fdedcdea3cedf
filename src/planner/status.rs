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

/// What a condition says: its status, its reason and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    /// Its status.
    pub status: ConditionStatus,
    /// Its reason (CamelCase, as the conventions ask).
    pub reason: &'static str,
    /// What people read.
    pub message: String,
}

impl Said {
    /// `status` for `reason`, saying `message`.
    pub fn new(status: ConditionStatus, reason: &'static str, message: String) -> Self {
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
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.as_str().into(),
        last_transition_time: Some(Time(now)),
        reason: Some(reason.into()),
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
