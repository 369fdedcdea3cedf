//! Whether another controller's Lease is held: the rule of client-go's leader election, which
//! AIBrix's controller-manager campaigns with. A holder renews its Lease well within
//! `leaseDurationSeconds`; a Lease whose record has not changed for that long — by the
//! observer's own clock — is free for anyone to take.
//!
//! The times written in the Lease are the holder's, so they are never compared with the
//! local clock: a `renewTime` in 2099 (or a holder whose clock runs ahead) would otherwise
//! hold squall back for ever, and one behind would make a live holder look expired. Only a
//! change of the record counts, timed when it was seen.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

/// What of a Lease its holder changes when it renews or hands over.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    duration_seconds: i32,
    renew_time: Option<String>,
    acquire_time: Option<String>,
    transitions: Option<i32>,
}

impl Record {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        let time = |t: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime>| {
            t.map(|t| t.0.to_string())
        };
        Self {
            holder: spec.holder_identity.unwrap_or_default(),
            duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            renew_time: time(spec.renew_time),
            acquire_time: time(spec.acquire_time),
            transitions: spec.lease_transitions,
        }
    }
}

/// A Lease as last read, and when (by the local clock) its record last changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    record: Record,
    changed_at: Instant,
}

/// The observation after reading `lease` at `now`: unchanged records keep the time they were
/// first seen; no Lease, no observation.
pub fn observe(
    previous: Option<&Observation>,
    lease: Option<&Lease>,
    now: Instant,
) -> Option<Observation> {
    let record = Record::of(lease?);
    let changed_at = match previous {
        Some(previous) if previous.record == record => previous.changed_at,
        _ => now,
    };
    Some(Observation { record, changed_at })
}

/// Who holds the observed Lease and until when (local time), or `None` when it is free by
/// `now`: no holder, no duration, or unchanged for its whole duration.
pub fn held_until(observation: &Observation, now: Instant) -> Option<(String, Instant)> {
    let record = &observation.record;
    if record.holder.is_empty() || record.duration_seconds <= 0 {
        return None;
    }
    let duration = Duration::from_secs(record.duration_seconds.unsigned_abs().into());
    let until = observation.changed_at.checked_add(duration)?;
    (until > now).then(|| (record.holder.clone(), until))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn lease(spec: serde_json::Value) -> Lease {
        serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": spec})).unwrap()
    }

    fn renewed(year: i32, second: u8) -> serde_json::Value {
        json!({"holderIdentity": "aibrix-0", "leaseDurationSeconds": 15,
            "renewTime": format!("{year}-01-01T00:00:{second:02}.000000Z")})
    }

    #[test]
    fn a_lease_is_held_for_its_duration_from_when_its_record_last_changed() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let seen = observe(None, Some(&lease(renewed(2026, 0))), at(0)).unwrap();
        assert_eq!(held_until(&seen, at(14)), Some(("aibrix-0".into(), at(15))));
        // Read again unchanged: the clock keeps running from the first sighting.
        let again = observe(Some(&seen), Some(&lease(renewed(2026, 0))), at(10)).unwrap();
        assert_eq!(
            held_until(&again, at(15)),
            None,
            "expired 15 s after the change"
        );
        // Renewed: held for another duration from when the renewal was seen.
        let renewed_seen = observe(Some(&again), Some(&lease(renewed(2026, 2))), at(12)).unwrap();
        assert_eq!(
            held_until(&renewed_seen, at(26)),
            Some(("aibrix-0".into(), at(27)))
        );
    }

    #[test]
    fn the_holders_clock_is_never_compared_with_ours() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        // A renewTime far in the future that stops changing expires like any other.
        let future = observe(None, Some(&lease(renewed(2099, 0))), at(0)).unwrap();
        let future = observe(Some(&future), Some(&lease(renewed(2099, 0))), at(8)).unwrap();
        assert_eq!(held_until(&future, at(15)), None);
        // One far in the past that keeps changing is held.
        let past = observe(None, Some(&lease(renewed(1999, 0))), at(0)).unwrap();
        let past = observe(Some(&past), Some(&lease(renewed(1999, 2))), at(2)).unwrap();
        assert!(held_until(&past, at(16)).is_some());
    }

    #[test]
    fn a_lease_without_a_holder_or_a_duration_is_free_and_none_is_not_observed() {
        let now = Instant::now();
        for spec in [
            json!({"leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}),
            json!({"holderIdentity": "", "leaseDurationSeconds": 15}),
            json!({"holderIdentity": "a"}),
            json!({"holderIdentity": "a", "leaseDurationSeconds": -3}),
        ] {
            let seen = observe(None, Some(&lease(spec.clone())), now).unwrap();
            assert_eq!(held_until(&seen, now), None, "{spec}");
        }
        assert_eq!(observe(None, None, now), None);
    }

    proptest! {
        /// Whatever the record says, a Lease read unchanged is free at most its duration
        /// after it was first seen so: nothing a holder writes holds squall for longer.
        #[test]
        fn an_unchanged_lease_is_free_after_its_duration(
            year in 1970..9999_i32, duration in 1..3600_i32, reads in 1..20_u64,
        ) {
            let start = Instant::now();
            let spec = json!({"holderIdentity": "h", "leaseDurationSeconds": duration,
                "renewTime": format!("{year}-06-01T00:00:00.000000Z")});
            let mut seen = observe(None, Some(&lease(spec.clone())), start);
            for read in 1..=reads {
                seen = observe(seen.as_ref(), Some(&lease(spec.clone())), start + Duration::from_secs(read));
            }
            let expiry = start + Duration::from_secs(duration.unsigned_abs().into());
            prop_assert!(held_until(seen.as_ref().unwrap(), expiry).is_none());
        }
    }
}
