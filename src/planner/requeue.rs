//! When a reconcile looks again. Every reason to come back (a progress deadline, a canary
//! pause or measurement falling due, a held-back status write, a recheck of something that
//! sends no events) is a wait, and the reconcile comes back at the soonest of them: taking
//! any one of them alone would sleep through the others.

use std::time::Duration;

/// The backstop when nothing is due: events bring every change sooner.
pub const RESYNC: Duration = Duration::from_secs(300);

/// How often a StormService whose headless Service is taken by another owner looks again:
/// a Service squall does not own sends squall no events.
pub const SERVICE_CONFLICT_RECHECK: Duration = Duration::from_secs(15);

/// The soonest of the waits that are set; `None` when none is.
pub fn soonest(waits: impl IntoIterator<Item = Option<Duration>>) -> Option<Duration> {
    waits.into_iter().flatten().min()
}

/// How long from `now` until the Unix second `at` has begun (at once when it has): the
/// wait for a moment a status time names, such as a child becoming available.
pub fn until_second(at: i64, now: k8s_openapi::jiff::Timestamp) -> Duration {
    let now_ms = now.as_millisecond();
    let at_ms = at.saturating_mul(1000);
    Duration::from_millis(u64::try_from(at_ms.saturating_sub(now_ms)).unwrap_or(0))
}

/// The reasons a StormService's reconcile comes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StormServiceWaits {
    /// Until the progress deadline would pass (`stormservice_status`).
    pub progress_deadline: Option<Duration>,
    /// Until the canary's pause ends or its next measurement is due, in the whole seconds
    /// status times are kept in.
    pub canary_seconds: Option<u64>,
    /// Until a status write held back by the status writer may go.
    pub status_write: Option<Duration>,
    /// Whether another owner's Service holds the headless Service's name.
    pub service_conflict: bool,
}

/// When a StormService's reconcile comes back: the soonest of its waits, or [`RESYNC`].
/// A canary wait is at least a second, so a due step is never polled in a tight loop.
pub fn stormservice(waits: StormServiceWaits) -> Duration {
    soonest([
        waits.progress_deadline,
        waits
            .canary_seconds
            .map(|seconds| Duration::from_secs(seconds.max(1))),
        waits.status_write,
        waits.service_conflict.then_some(SERVICE_CONFLICT_RECHECK),
    ])
    .unwrap_or(RESYNC)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const fn secs(seconds: u64) -> Duration {
        Duration::from_secs(seconds)
    }

    #[test]
    fn a_stalled_canary_keeps_its_progress_deadline() {
        // A canary step 120 s away must not push back a deadline 30 s away: the stall is
        // reported when the deadline passes, not when the canary next looks.
        let waits = StormServiceWaits {
            progress_deadline: Some(secs(30)),
            canary_seconds: Some(120),
            ..StormServiceWaits::default()
        };
        assert_eq!(stormservice(waits), secs(30));
        // And the other way round: a canary due sooner than the deadline is not delayed.
        let waits = StormServiceWaits {
            progress_deadline: Some(secs(600)),
            canary_seconds: Some(20),
            ..StormServiceWaits::default()
        };
        assert_eq!(stormservice(waits), secs(20));
    }

    #[test]
    fn a_second_is_waited_for_to_its_start_and_a_past_one_not_at_all() {
        let now = k8s_openapi::jiff::Timestamp::from_millisecond(10_250).unwrap();
        assert_eq!(until_second(12, now), Duration::from_millis(1_750));
        assert_eq!(until_second(10, now), Duration::ZERO);
        assert!(until_second(i64::MAX, now).as_secs() > 0);
    }

    #[test]
    fn nothing_due_comes_back_at_the_resync() {
        assert_eq!(stormservice(StormServiceWaits::default()), RESYNC);
        assert_eq!(soonest([None, None]), None);
    }

    #[test]
    fn a_due_canary_step_waits_at_least_a_second() {
        let waits = StormServiceWaits {
            canary_seconds: Some(0),
            ..StormServiceWaits::default()
        };
        assert_eq!(stormservice(waits), secs(1));
    }

    #[test]
    fn a_service_conflict_is_rechecked_unless_something_is_sooner() {
        let conflict = StormServiceWaits {
            service_conflict: true,
            ..StormServiceWaits::default()
        };
        assert_eq!(stormservice(conflict), SERVICE_CONFLICT_RECHECK);
        let held_write = StormServiceWaits {
            status_write: Some(Duration::from_millis(250)),
            ..conflict
        };
        assert_eq!(stormservice(held_write), Duration::from_millis(250));
    }

    proptest! {
        /// The requeue is never later than any wait that is set, and it is one of them (or
        /// the resync when none is).
        #[test]
        fn the_requeue_is_the_soonest_wait(
            deadline in proptest::option::of(0u64..10_000),
            canary in proptest::option::of(0u64..10_000),
            write_ms in proptest::option::of(0u64..10_000_000),
            conflict in any::<bool>(),
        ) {
            let waits = StormServiceWaits {
                progress_deadline: deadline.map(secs),
                canary_seconds: canary,
                status_write: write_ms.map(Duration::from_millis),
                service_conflict: conflict,
            };
            let candidates: Vec<Duration> = [
                waits.progress_deadline,
                canary.map(|c| secs(c.max(1))),
                waits.status_write,
                conflict.then_some(SERVICE_CONFLICT_RECHECK),
            ]
            .into_iter()
            .flatten()
            .collect();
            let requeue = stormservice(waits);
            prop_assert!(candidates.iter().all(|wait| requeue <= *wait));
            prop_assert!(
                candidates.contains(&requeue) || (candidates.is_empty() && requeue == RESYNC)
            );
        }
    }
}
