//! Self-managed TLS certificates for squall's admission webhooks (SPEC §4.3).
//!
//! This crate grows into the full certificate manager (Secret storage, renewal, CA rotation,
//! `caBundle` injection). Today it holds the validity policy every part of it shares.
#![forbid(unsafe_code)]

use std::time::Duration;

use time::OffsetDateTime;

/// How long a certificate is valid, and when it is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// When the certificate becomes valid: issue time backdated for clock skew.
    pub not_before: OffsetDateTime,
    /// When the certificate expires.
    pub not_after: OffsetDateTime,
}

/// Certificates are backdated by this much so peers with slow clocks accept them at once.
pub const CLOCK_SKEW_BACKDATE: Duration = Duration::from_secs(3600);

impl Validity {
    /// Validity of a certificate issued at `now` for `lifetime` (counted from `now`, not from
    /// the backdated `notBefore`).
    pub fn issued_at(now: OffsetDateTime, lifetime: Duration) -> Self {
        Self {
            not_before: now - CLOCK_SKEW_BACKDATE,
            not_after: now + lifetime,
        }
    }

    /// When to renew: at 2/3 of the lifetime between issue time and expiry.
    pub fn renew_at(&self) -> OffsetDateTime {
        let issued = self.not_before + CLOCK_SKEW_BACKDATE;
        issued + (self.not_after - issued) * 2 / 3
    }

    /// Whether a certificate with this validity should be renewed at `now`.
    pub fn needs_renewal(&self, now: OffsetDateTime) -> bool {
        now >= self.renew_at()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renews_at_two_thirds_of_the_lifetime_not_counting_the_backdate() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let v = Validity::issued_at(now, Duration::from_secs(300));
        assert_eq!(v.not_before, now - time::Duration::hours(1));
        assert_eq!(v.not_after, now + time::Duration::seconds(300));
        assert_eq!(v.renew_at(), now + time::Duration::seconds(200));
        assert!(!v.needs_renewal(now + time::Duration::seconds(199)));
        assert!(v.needs_renewal(now + time::Duration::seconds(200)));
    }
}
