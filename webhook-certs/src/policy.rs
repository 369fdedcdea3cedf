//! What to do with the stored certificates next — a pure function of the stored bundle, the
//! time and what the webhook configurations carry (docs/certificates.md).
//!
//! CA rotation, at 2/3 of the CA's lifetime, never breaks a client that trusts the injected
//! `caBundle`:
//! 1. a new CA is added to the bundle (`ca.crt` = old + new); the serving certificate stays
//!    signed by the old CA;
//! 2. once both webhook configurations have carried the two-CA bundle for at least two
//!    injection periods, the serving certificate is re-issued by the new CA;
//! 3. the old CA is dropped once the last serving certificate it signed has expired.

use std::time::Duration;

use time::OffsetDateTime;

use crate::pki::Parsed;

/// Certificate lifetimes and the injection period (all configurable down to seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetimes {
    /// CA validity (default 10 years).
    pub ca: Duration,
    /// Serving certificate validity (default 1 year).
    pub serving: Duration,
    /// How often `caBundle` is re-injected (default 60 s).
    pub injection_period: Duration,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            ca: Duration::from_secs(10 * 365 * 24 * 3600),
            serving: Duration::from_secs(365 * 24 * 3600),
            injection_period: Duration::from_secs(60),
        }
    }
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing stored (or every CA expired): create a CA and a serving certificate.
    Create,
    /// Re-issue the serving certificate with the newest CA.
    RenewServing,
    /// Add a new CA next to the current one (rotation step 1).
    StartCaRotation,
    /// Re-issue the serving certificate with the new CA (rotation step 2).
    SwitchToNewCa,
    /// Drop the old CA from the bundle (rotation step 3).
    DropOldCa,
    /// Nothing to do until `recheck_at`.
    Wait,
}

/// An action and when to look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// What to do now.
    pub action: Action,
    /// When the next decision is due (if nothing else happens first).
    pub recheck_at: OffsetDateTime,
}

/// Decides the next step.
///
/// `stored` is the current bundle (None when there is none); `sans` the names the serving
/// certificate must carry; `two_ca_bundle_injected_since` when both webhook configurations
/// were first seen carrying exactly the stored two-CA bundle (None otherwise).
pub fn plan(
    now: OffsetDateTime,
    stored: Option<&Parsed>,
    sans: &[String],
    lifetimes: Lifetimes,
    two_ca_bundle_injected_since: Option<OffsetDateTime>,
) -> Decision {
    let act = |action| Decision {
        action,
        recheck_at: now,
    };
    let Some(stored) = stored else {
        return act(Action::Create);
    };
    if stored.cas.iter().all(|ca| ca.validity.expired(now)) {
        return act(Action::Create);
    }
    let newest = stored.newest_ca();
    let serving_by_newest = stored.serving.issuer == newest.subject;

    if stored.cas.len() == 2 {
        if !serving_by_newest {
            // Rotation step 2 waits until clients trust the new CA.
            let trusted_at =
                two_ca_bundle_injected_since.map(|since| since + lifetimes.injection_period * 2);
            return match trusted_at {
                Some(at) if now >= at => act(Action::SwitchToNewCa),
                Some(at) => Decision {
                    action: Action::Wait,
                    recheck_at: at,
                },
                None => Decision {
                    action: Action::Wait,
                    recheck_at: now + lifetimes.injection_period,
                },
            };
        }
        let retire_at = stored
            .bundle
            .retire_old_ca_after
            .unwrap_or(stored.cas[0].validity.not_after);
        if now >= retire_at {
            return act(Action::DropOldCa);
        }
        if serving_due(stored, sans, now) {
            return act(Action::RenewServing);
        }
        return Decision {
            action: Action::Wait,
            recheck_at: retire_at.min(stored.serving.validity.renew_at()),
        };
    }

    if serving_due(stored, sans, now) || !serving_by_newest {
        return act(Action::RenewServing);
    }
    if now >= newest.validity.renew_at() {
        return act(Action::StartCaRotation);
    }
    Decision {
        action: Action::Wait,
        recheck_at: stored
            .serving
            .validity
            .renew_at()
            .min(newest.validity.renew_at()),
    }
}

fn serving_due(stored: &Parsed, sans: &[String], now: OffsetDateTime) -> bool {
    now >= stored.serving.validity.renew_at() || !same_names(&stored.serving.sans, sans)
}

/// The same set of names, compared in canonical form (`FE80::1` is `fe80::1`): a spelling
/// difference must never look like a change, or every pass would re-issue.
fn same_names(a: &[String], b: &[String]) -> bool {
    let canonical = |names: &[String]| -> std::collections::BTreeSet<String> {
        names.iter().map(|n| crate::pki::canonical_san(n)).collect()
    };
    canonical(a) == canonical(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pki::{Bundle, issue_serving, new_ca};

    const SECOND: time::Duration = time::Duration::SECOND;

    fn t0() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn lifetimes() -> Lifetimes {
        Lifetimes {
            ca: Duration::from_secs(90),
            serving: Duration::from_secs(30),
            injection_period: Duration::from_secs(2),
        }
    }

    fn sans() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }

    fn parsed(bundle: Bundle) -> Parsed {
        Parsed::from_bundle(bundle).unwrap()
    }

    fn fresh(at: OffsetDateTime) -> Parsed {
        let (ca_crt, ca_key) = new_ca(at, lifetimes().ca).unwrap();
        let (tls_crt, tls_key) =
            issue_serving(&ca_crt, &ca_key, &sans(), at, lifetimes().serving).unwrap();
        parsed(Bundle {
            ca_crt,
            ca_key,
            tls_crt,
            tls_key,
            retire_old_ca_after: None,
        })
    }

    #[test]
    fn creates_when_nothing_is_stored() {
        assert_eq!(
            plan(t0(), None, &sans(), lifetimes(), None).action,
            Action::Create
        );
    }

    #[test]
    fn waits_until_two_thirds_of_the_serving_lifetime() {
        let stored = fresh(t0());
        let d = plan(t0() + 5 * SECOND, Some(&stored), &sans(), lifetimes(), None);
        assert_eq!(d.action, Action::Wait);
        assert_eq!(d.recheck_at, t0() + 20 * SECOND);
        let d = plan(
            t0() + 20 * SECOND,
            Some(&stored),
            &sans(),
            lifetimes(),
            None,
        );
        assert_eq!(d.action, Action::RenewServing);
    }

    #[test]
    fn renews_when_the_names_change() {
        let stored = fresh(t0());
        let other = vec!["squall.squall-system.svc".to_string()];
        assert_eq!(
            plan(t0(), Some(&stored), &other, lifetimes(), None).action,
            Action::RenewServing
        );
    }

    #[test]
    fn rotates_the_ca_through_the_two_ca_bundle() {
        let l = lifetimes();
        let old = fresh(t0());
        // At 2/3 of the CA lifetime (60 s) with a fresh serving certificate: rotation starts.
        let at = t0() + 60 * SECOND;
        let (tls_crt, tls_key) =
            issue_serving(&old.cas[0].pem, &old.bundle.ca_key, &sans(), at, l.serving).unwrap();
        let old = parsed(Bundle {
            tls_crt,
            tls_key,
            ..old.bundle.clone()
        });
        assert_eq!(
            plan(at, Some(&old), &sans(), l, None).action,
            Action::StartCaRotation
        );

        // Step 1: bundle = old + new, serving still by the old CA.
        let (new_crt, new_key) = new_ca(at, l.ca).unwrap();
        let rotating = parsed(Bundle {
            ca_crt: format!("{}{}", old.cas[0].pem, new_crt),
            ca_key: new_key.clone(),
            ..old.bundle.clone()
        });
        let d = plan(at, Some(&rotating), &sans(), l, None);
        assert_eq!(d.action, Action::Wait, "not injected yet");
        let injected = at + SECOND;
        let d = plan(at + 3 * SECOND, Some(&rotating), &sans(), l, Some(injected));
        assert_eq!(d.action, Action::Wait, "injected for less than two periods");
        assert_eq!(d.recheck_at, injected + 4 * SECOND);
        let d = plan(
            injected + 4 * SECOND,
            Some(&rotating),
            &sans(),
            l,
            Some(injected),
        );
        assert_eq!(d.action, Action::SwitchToNewCa);

        // Step 2 done: serving by the new CA; the old CA retires when the old serving
        // certificate expires.
        let switch = injected + 4 * SECOND;
        let (tls_crt, tls_key) =
            issue_serving(&new_crt, &new_key, &sans(), switch, l.serving).unwrap();
        let switched = parsed(Bundle {
            tls_crt,
            tls_key,
            retire_old_ca_after: Some(old.serving.validity.not_after),
            ..rotating.bundle.clone()
        });
        let d = plan(switch, Some(&switched), &sans(), l, Some(injected));
        assert_eq!(d.action, Action::Wait);
        assert_eq!(
            d.recheck_at,
            std::cmp::min(switch + 20 * SECOND, old.serving.validity.not_after),
            "the next serving renewal or the retirement, whichever comes first"
        );
        assert_eq!(
            plan(
                old.serving.validity.not_after,
                Some(&switched),
                &sans(),
                l,
                Some(injected)
            )
            .action,
            Action::DropOldCa
        );
    }

    #[test]
    fn recreates_when_every_ca_expired() {
        let stored = fresh(t0());
        assert_eq!(
            plan(
                t0() + 91 * SECOND,
                Some(&stored),
                &sans(),
                lifetimes(),
                None
            )
            .action,
            Action::Create
        );
    }

    /// Issue 14 (5): a SAN spelled differently from how it reads back (`--extra-san FE80::1`,
    /// an upper-case or dotted DNS name) settles after one issue; before, it was re-issued
    /// about 160 times a second.
    #[test]
    fn names_in_another_spelling_are_the_same_names() {
        let asked = vec!["FE80::1".to_string(), "Squall.Example.".to_string()];
        let (ca_crt, ca_key) = new_ca(t0(), lifetimes().ca).unwrap();
        let (tls_crt, tls_key) =
            issue_serving(&ca_crt, &ca_key, &asked, t0(), lifetimes().serving).unwrap();
        let stored = parsed(Bundle {
            ca_crt,
            ca_key,
            tls_crt,
            tls_key,
            retire_old_ca_after: None,
        });
        assert_eq!(stored.serving.sans, ["fe80::1", "squall.example"]);
        assert_eq!(
            plan(t0(), Some(&stored), &asked, lifetimes(), None).action,
            Action::Wait
        );
    }
}
