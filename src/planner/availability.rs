//! When a Ready child counts as available (docs/rollouts.md#minreadyseconds): once it has
//! been Ready for `minReadySeconds`. Ready is the engine's readiness probe; an engine may
//! still compile graphs or fill caches after it passes, so everything that removes old
//! capacity counts available children, not Ready ones. The clock is the Ready condition's
//! transition time, which the API server keeps: an operator restart neither restarts nor
//! skips it.

use k8s_openapi::jiff::Timestamp;

/// `minReadySeconds` at the time of a pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Availability {
    /// How long a child must have been Ready, in seconds.
    pub min_ready_seconds: i64,
    /// The pass's time, in Unix seconds.
    pub now: i64,
}

/// Whether one child is available, and when it will be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Available {
    /// Ready for at least `minReadySeconds`.
    pub now: bool,
    /// Ready but not for long enough yet: the Unix second it becomes available (the
    /// controller comes back then; nothing polls).
    pub at: Option<i64>,
}

impl Availability {
    /// `min_ready_seconds` (absent or negative: 0) at `now`.
    pub fn new(min_ready_seconds: Option<i32>, now: Timestamp) -> Self {
        Self {
            min_ready_seconds: i64::from(min_ready_seconds.unwrap_or(0).max(0)),
            now: now.as_second(),
        }
    }

    /// Whether a child that is `ready` (since `ready_since`, when known) is available. A
    /// Ready child without a transition time counts as available: there is no moment to
    /// wait for.
    pub fn of(&self, ready: bool, ready_since: Option<i64>) -> Available {
        if !ready {
            return Available::default();
        }
        match ready_since {
            Some(since) if self.min_ready_seconds > 0 => {
                let at = since.saturating_add(self.min_ready_seconds);
                if at <= self.now {
                    Available {
                        now: true,
                        at: None,
                    }
                } else {
                    Available {
                        now: false,
                        at: Some(at),
                    }
                }
            }
            _ => Available {
                now: true,
                at: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(now: i64, min: i64) -> Availability {
        Availability {
            min_ready_seconds: min,
            now,
        }
    }

    #[test]
    fn without_min_ready_seconds_available_is_ready() {
        let clock = at(100, 0);
        assert!(clock.of(true, Some(100)).now);
        assert!(clock.of(true, None).now);
        assert_eq!(clock.of(false, Some(1)), Available::default());
    }

    #[test]
    fn a_pod_ready_for_less_than_min_ready_seconds_says_when_it_will_be_available() {
        let clock = at(110, 20);
        assert_eq!(
            clock.of(true, Some(100)),
            Available {
                now: false,
                at: Some(120)
            }
        );
        assert!(at(120, 20).of(true, Some(100)).now, "at the exact second");
        assert!(
            clock.of(true, None).now,
            "no transition time: nothing to wait for"
        );
    }

    #[test]
    fn a_negative_or_absent_setting_is_zero() {
        let now = Timestamp::from_second(50).unwrap();
        assert_eq!(Availability::new(Some(-5), now).min_ready_seconds, 0);
        assert_eq!(Availability::new(None, now).min_ready_seconds, 0);
        assert_eq!(Availability::new(Some(30), now).now, 50);
    }

    proptest! {
        /// A child is available exactly when it has been Ready `minReadySeconds` (without
        /// a wait, as soon as it is Ready: a transition time ahead of the clock, a skewed
        /// kubelet's, delays nothing), and one that is not says a wake-up in the future at
        /// which it is.
        #[test]
        fn available_once_ready_long_enough(
            now in 0i64..10_000, since in 0i64..10_000, min in 0i64..3_600, ready: bool,
        ) {
            let clock = at(now, min);
            let said = clock.of(ready, Some(since));
            prop_assert_eq!(said.now, ready && (min == 0 || now - since >= min));
            if let Some(wake) = said.at {
                prop_assert!(!said.now && wake > now);
                prop_assert!(at(wake, min).of(ready, Some(since)).now);
                prop_assert!(!at(wake - 1, min).of(ready, Some(since)).now);
            } else {
                prop_assert!(said.now || !ready);
            }
        }
    }
}
