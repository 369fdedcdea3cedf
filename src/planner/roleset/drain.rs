//! Drain before delete (docs/rollouts.md#drain-before-delete), decided. The role planner
//! says which pods (or PodSets) go; for a role with `drain`, a serving one does not go at
//! once: its drain starts (the start recorded on it, its serving gate closed, so it leaves
//! the EndpointSlices while it keeps running), and it goes once it has been out of traffic
//! with no request in flight, or at its timeout. A draining child counts as unavailable in
//! every budget, so the planner names it first whenever its role removes one.
//!
//! Pure: readings of requests in flight come in with the pass, taken off the reconcile path.

use std::collections::{BTreeMap, BTreeSet};

use super::roles::{PodView, RoleAction, RoleInput};
use crate::api::RoleSpec;
use crate::api::drain::Drain;

/// A reading of a child's requests in flight (a PodSet's: the sum over its pods).
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    /// The number, or why there is none.
    pub value: Result<f64, String>,
    /// When its query was sent (Unix seconds).
    pub at: i64,
}

/// What one child's drain does in this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// It goes now without a drain: it does not serve (not Ready, finished) or cannot leave
    /// traffic without going (it carries no serving gate), or its role does not drain.
    Undrained,
    /// Its drain starts now.
    Start,
    /// It waits; the pass is due again at `until` at the latest.
    Wait {
        /// The next reading, or the timeout.
        until: i64,
    },
    /// Its drain is over: it goes.
    Drained {
        /// At its timeout, with requests in flight (or none read).
        timed_out: bool,
    },
}

/// The drain step of a child its role removes now.
pub fn step(drain: Option<&Drain>, child: &PodView, reading: Option<&Reading>, now: i64) -> Step {
    let Some(drain) = drain else {
        return Step::Undrained;
    };
    let Some(draining) = child.draining else {
        return if child.running && child.ready && child.gated {
            Step::Start
        } else {
            Step::Undrained
        };
    };
    if !child.running {
        return Step::Drained { timed_out: false };
    }
    // A start written ahead of the clock (by hand) starts now.
    let started = draining.started.min(now);
    let deadline = started.saturating_add(drain.timeout_seconds() as i64);
    let Some(query) = &drain.query else {
        return if now >= deadline {
            Step::Drained { timed_out: false }
        } else {
            Step::Wait { until: deadline }
        };
    };
    // Out of traffic from the later of its drain's start and its Ready turning False; a
    // reading counts when its query was sent a second or more after that.
    let out = (!child.ready)
        .then_some(draining.out_since.unwrap_or(started).max(started))
        .filter(|out| *out < now);
    let idle = reading.is_some_and(|r| matches!(r.value, Ok(v) if v <= 0.0));
    let fresh = reading.is_some_and(|r| out.is_some_and(|out| r.at > out));
    if idle && fresh {
        Step::Drained { timed_out: false }
    } else if now >= deadline {
        Step::Drained { timed_out: true }
    } else {
        let next = now.saturating_add(query.interval_seconds() as i64);
        Step::Wait {
            until: next.min(deadline),
        }
    }
}

/// A child whose drain this pass decided on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainUnit {
    /// Its role.
    pub role: String,
    /// The pod, or PodSet.
    pub name: String,
    /// A PodSet (a multi-node role's replica): drained whole.
    pub gang: bool,
}

/// What the drains of a pass write.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrainWrites {
    /// Drains that start now: the start is recorded on the child, its gate closed.
    pub start: Vec<DrainUnit>,
    /// Draining children their role keeps after all (scaled back up, rolled back): their
    /// drain ends and they serve again.
    pub cancel: Vec<DrainUnit>,
    /// Children let go at their timeout with requests in flight, or none read (a Warning
    /// event each), with the last reading.
    pub timed_out: Vec<(DrainUnit, Option<f64>)>,
    /// Readings to note on draining children, where they changed.
    pub note: Vec<(DrainUnit, u64)>,
    /// Every child out of traffic for its drain after this pass (its gate stays closed).
    pub out: Vec<String>,
    /// When the pass is due again for a drain: the soonest reading or timeout.
    pub wake_at: Option<i64>,
}

impl DrainWrites {
    /// Records `unit`'s `step` (`reading`: its last); whether it goes now.
    fn goes(&mut self, unit: DrainUnit, step: Step, reading: Option<&Reading>) -> bool {
        match step {
            Step::Undrained => true,
            Step::Start => {
                self.out.push(unit.name.clone());
                self.start.push(unit);
                false
            }
            Step::Wait { until } => {
                self.wake_at = Some(self.wake_at.map_or(until, |at| at.min(until)));
                self.out.push(unit.name);
                false
            }
            Step::Drained { timed_out } => {
                if timed_out {
                    let last = reading.and_then(|r| r.value.clone().ok());
                    self.timed_out.push((unit, last));
                }
                true
            }
        }
    }
}

/// A child of a role removed from the spec, with what drains it: the drain it was created
/// with (the role's is gone).
pub struct Retired<'a> {
    /// As the planner sees it.
    pub child: &'a PodView,
    /// Its role, as labelled.
    pub role: &'a str,
    /// Its drain, from its annotation.
    pub drain: Option<Drain>,
}

/// Drains the children of removed roles that `retired` names to delete: withholds the ones
/// still draining and starts the drains of serving ones.
pub fn drain_retired(
    retired: &mut Vec<String>,
    children: &[Retired<'_>],
    gang: bool,
    readings: &BTreeMap<String, Reading>,
    now: i64,
    writes: &mut DrainWrites,
) {
    retired.retain(|name| {
        let Some(retired) = children.iter().find(|r| &r.child.name == name) else {
            return true;
        };
        let reading = readings.get(name);
        let step = step(retired.drain.as_ref(), retired.child, reading, now);
        let unit = DrainUnit {
            role: retired.role.to_string(),
            name: name.clone(),
            gang,
        };
        writes.goes(unit, step, reading)
    });
}

/// Drains the removals of every role's action: withholds the ones still draining, starts
/// the drains of serving children, and ends those their role keeps.
pub fn drain_roles(
    specs: &[&RoleSpec],
    roles: &[RoleInput],
    gangs: &[bool],
    actions: &mut [RoleAction],
    readings: &BTreeMap<String, Reading>,
    now: i64,
) -> DrainWrites {
    let mut writes = DrainWrites::default();
    for (((spec, role), &gang), action) in specs.iter().zip(roles).zip(gangs).zip(actions) {
        let views: BTreeMap<&str, &PodView> =
            role.pods.iter().map(|p| (p.name.as_str(), p)).collect();
        let unit = |name: &str| DrainUnit {
            role: role.name.clone(),
            name: name.to_string(),
            gang,
        };
        let mut decide = |name: &String| {
            let Some(child) = views.get(name.as_str()) else {
                return true;
            };
            let reading = readings.get(name);
            let step = step(spec.drain.as_ref(), child, reading, now);
            writes.goes(unit(name), step, reading)
        };
        action.delete.retain(&mut decide);
        action.in_place_start.retain(&mut decide);
        let planned: BTreeSet<&String> = writes
            .out
            .iter()
            .chain(&action.delete)
            .chain(&action.in_place_start)
            .collect();
        let mut kept_out = Vec::new();
        for child in role.pods.iter().filter(|p| p.draining.is_some()) {
            if planned.contains(&child.name) || child.terminating {
                continue;
            }
            if role.keeps(&child.name) {
                writes.cancel.push(unit(&child.name));
            } else {
                // Named again by a pass that removes one of its role's children.
                kept_out.push(child.name.clone());
            }
        }
        writes.out.extend(kept_out);
        for child in role.pods.iter().filter(|p| !p.terminating) {
            let (Some(draining), Some(reading)) = (child.draining, readings.get(&child.name))
            else {
                continue;
            };
            let Ok(value) = reading.value else { continue };
            let value = value.max(0.0).round() as u64;
            if draining.noted != Some(value) {
                writes.note.push((unit(&child.name), value));
            }
        }
    }
    writes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::drain::DrainQuery;
    use crate::planner::roleset::roles::Draining;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use proptest::prelude::*;

    fn drain(timeout: i32, query: bool) -> Drain {
        Drain {
            timeout: Some(IntOrString::Int(timeout)),
            query: query.then(|| DrainQuery {
                query: "q".into(),
                interval: Some(IntOrString::Int(5)),
                ..DrainQuery::default()
            }),
        }
    }

    fn child(ready: bool, draining: Option<(i64, Option<i64>)>) -> PodView {
        PodView {
            name: "p".into(),
            hash: "h".into(),
            running: true,
            terminating: false,
            ready,
            available: ready && draining.is_none(),
            available_at: None,
            gated: true,
            created: 0,
            slot: None,
            in_place_target: None,
            in_place_pending: None,
            draining: draining.map(|(started, out_since)| Draining {
                started,
                out_since,
                noted: None,
            }),
        }
    }

    fn reading(value: f64, at: i64) -> Reading {
        Reading {
            value: Ok(value),
            at,
        }
    }

    #[test]
    fn a_serving_gated_child_starts_a_drain_and_others_go_at_once() {
        let d = drain(60, true);
        assert_eq!(step(Some(&d), &child(true, None), None, 100), Step::Start);
        assert_eq!(
            step(Some(&d), &child(false, None), None, 100),
            Step::Undrained,
            "not Ready: nothing to drain"
        );
        let ungated = PodView {
            gated: false,
            ..child(true, None)
        };
        assert_eq!(step(Some(&d), &ungated, None, 100), Step::Undrained);
        assert_eq!(step(None, &child(true, None), None, 100), Step::Undrained);
    }

    #[test]
    fn a_drain_ends_on_a_zero_read_after_the_child_left_traffic() {
        let d = drain(60, true);
        let out = child(false, Some((100, Some(101))));
        // Still in traffic: no reading counts.
        let serving = child(true, Some((100, None)));
        assert_eq!(
            step(Some(&d), &serving, Some(&reading(0.0, 104)), 104),
            Step::Wait { until: 109 }
        );
        // A zero read in the second it left, or before, does not count.
        assert_eq!(
            step(Some(&d), &out, Some(&reading(0.0, 101)), 104),
            Step::Wait { until: 109 }
        );
        assert_eq!(
            step(Some(&d), &out, Some(&reading(2.0, 103)), 104),
            Step::Wait { until: 109 }
        );
        assert_eq!(
            step(Some(&d), &out, Some(&reading(0.0, 102)), 104),
            Step::Drained { timed_out: false }
        );
        // Requests in flight at the timeout: it goes, said.
        assert_eq!(
            step(Some(&d), &out, Some(&reading(3.0, 159)), 160),
            Step::Drained { timed_out: true }
        );
        assert_eq!(
            step(Some(&d), &out, Some(&reading(3.0, 150)), 157),
            Step::Wait { until: 160 },
            "the wake-up never passes the timeout"
        );
    }

    #[test]
    fn without_a_query_a_drain_is_a_fixed_delay() {
        let d = drain(30, false);
        let out = child(false, Some((100, Some(100))));
        assert_eq!(step(Some(&d), &out, None, 110), Step::Wait { until: 130 });
        assert_eq!(
            step(Some(&d), &out, None, 130),
            Step::Drained { timed_out: false }
        );
        // A start written ahead of the clock counts from now.
        let ahead = child(false, Some((10_000, None)));
        assert_eq!(step(Some(&d), &ahead, None, 110), Step::Wait { until: 140 });
    }

    proptest! {
        /// A draining child never goes before its timeout unless a zero was read after it
        /// left traffic, and always goes at its timeout; a wait is never longer than the
        /// timeout or (with a query) an interval.
        #[test]
        fn drains_go_only_when_idle_or_timed_out(
            timeout in 1i32..120,
            query in any::<bool>(),
            started in 0i64..100,
            out_after in proptest::option::of(0i64..50),
            ready in any::<bool>(),
            read in proptest::option::of((0.0f64..3.0, 0i64..250)),
            now in 0i64..250,
        ) {
            let d = drain(timeout, query);
            let c = child(ready, Some((started, out_after.map(|o| started + o))));
            let r = read.map(|(v, at)| reading(v.floor(), at));
            let deadline = started.min(now) + i64::from(timeout);
            match step(Some(&d), &c, r.as_ref(), now) {
                Step::Drained { timed_out } => {
                    if now < deadline {
                        prop_assert!(query && !timed_out);
                        let r = r.unwrap();
                        prop_assert!(!ready && r.value == Ok(0.0));
                        let out = c.draining.unwrap().out_since.unwrap_or(started).max(started);
                        prop_assert!(r.at > out);
                    } else {
                        prop_assert!(query || !timed_out);
                    }
                }
                Step::Wait { until } => {
                    prop_assert!(now < deadline && until <= deadline && until > now);
                    if query { prop_assert!(until <= now + 5); }
                }
                other => prop_assert!(false, "a draining child cannot {:?}", other),
            }
        }
    }
}
