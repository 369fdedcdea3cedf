//! Whether another controller's Lease is held: the rule of client-go's leader election, which
//! AIBrix's controller-manager campaigns with. A holder renews its Lease well within
//! `leaseDurationSeconds`; a Lease not renewed for that long is free for anyone to take.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Who holds `lease` and until when (its last renewal plus its duration), or `None` when it
/// is free: no holder, or never renewed, or expired by `now`.
pub fn held_until(lease: &Lease, now: Timestamp) -> Option<(String, Timestamp)> {
    let spec = lease.spec.as_ref()?;
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref().or(spec.acquire_time.as_ref())?.0;
    let duration = SignedDuration::from_secs(i64::from(spec.lease_duration_seconds?.max(0)));
    let until = renewed.checked_add(duration).ok()?;
    (until > now).then(|| (holder.to_string(), until))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lease(spec: serde_json::Value) -> Lease {
        serde_json::from_value(json!({"metadata": {"name": "l"}, "spec": spec})).unwrap()
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    fn renewed(second: i64) -> String {
        at(second).to_string()
    }

    #[test]
    fn a_lease_is_held_from_its_renewal_for_its_duration() {
        let held = lease(
            json!({"holderIdentity": "aibrix-0", "leaseDurationSeconds": 15,
            "renewTime": renewed(0)}),
        );
        assert_eq!(held_until(&held, at(14)), Some(("aibrix-0".into(), at(15))));
        assert_eq!(
            held_until(&held, at(15)),
            None,
            "expired at renewal + duration"
        );
    }

    #[test]
    fn a_lease_without_a_holder_or_a_time_is_free() {
        for spec in [
            json!({"leaseDurationSeconds": 15, "renewTime": renewed(0)}),
            json!({"holderIdentity": "", "leaseDurationSeconds": 15, "renewTime": renewed(0)}),
            json!({"holderIdentity": "a", "leaseDurationSeconds": 15}),
            json!({"holderIdentity": "a", "renewTime": renewed(0)}),
        ] {
            assert_eq!(held_until(&lease(spec.clone()), at(1)), None, "{spec}");
        }
        assert_eq!(
            held_until(
                &serde_json::from_value(json!({"metadata": {}})).unwrap(),
                at(0)
            ),
            None
        );
    }

    #[test]
    fn an_acquired_lease_never_renewed_counts_from_its_acquisition() {
        let acquired = lease(json!({"holderIdentity": "a", "leaseDurationSeconds": 10,
            "acquireTime": renewed(0)}));
        assert_eq!(held_until(&acquired, at(9)), Some(("a".into(), at(10))));
    }
}
