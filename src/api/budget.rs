//! Surge / unavailable budgets: parsing of `maxSurge` / `maxUnavailable` and AIBrix's
//! fence-post rule (docs/rollouts.md#budgets), shared by the StormService and role levels.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::borrowed::IntOrStr;

/// A parsed `maxSurge` / `maxUnavailable` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// An absolute number of replicas.
    Count(u32),
    /// A percentage (0–100) of the desired replicas.
    Percent(u32),
}

impl Budget {
    /// Parses a non-negative integer or `N%` with 0 ≤ N ≤ 100; the error says what is wrong.
    pub fn parse(value: &IntOrString) -> Result<Self, String> {
        Self::parse_view(&IntOrStr::from(value))
    }

    /// [`Budget::parse`] of a value read from a view of the object.
    pub fn parse_view(value: &IntOrStr<'_>) -> Result<Self, String> {
        match value {
            IntOrStr::Int(n) => u32::try_from(*n)
                .map(Budget::Count)
                .map_err(|_| "must be a non-negative integer or a percentage".to_string()),
            IntOrStr::Str(s) => {
                let digits = s.strip_suffix('%').ok_or_else(|| {
                    "a string must be a percentage such as '25%'; use an integer for a count"
                        .to_string()
                })?;
                let percent = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| digits.parse::<u32>().ok())
                    .flatten()
                    .ok_or_else(|| "must be a percentage such as '25%'".to_string())?;
                if percent > 100 {
                    return Err("must be a percentage between 0% and 100%".to_string());
                }
                Ok(Budget::Percent(percent))
            }
        }
    }

    /// True when the value is 0 at every replica count (`0` or `0%`).
    pub fn is_literally_zero(self) -> bool {
        matches!(self, Budget::Count(0) | Budget::Percent(0))
    }

    fn scaled(self, desired: u32, round_up: bool) -> u32 {
        match self {
            Budget::Count(n) => n,
            Budget::Percent(p) => {
                let scaled = u64::from(p) * u64::from(desired);
                let value = if round_up {
                    scaled.div_ceil(100)
                } else {
                    scaled / 100
                };
                u32::try_from(value).unwrap_or(u32::MAX)
            }
        }
    }
}

/// Resolved budgets for one level (StormService or role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Fenceposts {
    /// Replicas that may exist above `desired`.
    pub max_surge: u32,
    /// Replicas that may be unavailable; never above `desired`.
    pub max_unavailable: u32,
    /// True when both resolved to 0 and the fence-post rule raised unavailable to 1.
    pub raised_to_one: bool,
}

/// The budgets of a `maxSurge` / `maxUnavailable` pair resolved at `desired` replicas. A
/// value that does not parse counts as absent: validation denies it, and one stored before
/// squall (admitted by AIBrix) must not stop a rollout.
pub fn fenceposts(
    max_surge: Option<&IntOrString>,
    max_unavailable: Option<&IntOrString>,
    desired: u32,
) -> Fenceposts {
    let parse = |v: Option<&IntOrString>| v.and_then(|v| Budget::parse(v).ok());
    resolve_fenceposts(parse(max_surge), parse(max_unavailable), desired)
}

/// AIBrix's `ResolveFenceposts`: surge rounds up, unavailable rounds down; absent values are
/// 0; when both resolve to 0, unavailable becomes 1; unavailable is capped at `desired`.
pub fn resolve_fenceposts(
    max_surge: Option<Budget>,
    max_unavailable: Option<Budget>,
    desired: u32,
) -> Fenceposts {
    if desired == 0 {
        return Fenceposts {
            max_surge: 0,
            max_unavailable: 0,
            raised_to_one: false,
        };
    }
    let surge = max_surge.map_or(0, |b| b.scaled(desired, true));
    let mut unavailable = max_unavailable.map_or(0, |b| b.scaled(desired, false));
    let raised_to_one = surge == 0 && unavailable == 0;
    if raised_to_one {
        unavailable = 1;
    }
    Fenceposts {
        max_surge: surge,
        max_unavailable: unavailable.min(desired),
        raised_to_one,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pct(p: u32) -> Option<Budget> {
        Some(Budget::Percent(p))
    }

    #[test]
    fn reference_worked_examples() {
        let f = |s, u, d| {
            let r = resolve_fenceposts(s, u, d);
            (r.max_surge, r.max_unavailable)
        };
        assert_eq!(f(None, None, 5), (0, 1));
        assert_eq!(f(pct(25), pct(25), 10), (3, 2));
        assert_eq!(f(Some(Budget::Count(1)), pct(10), 5), (1, 0));
        assert_eq!(f(Some(Budget::Count(0)), Some(Budget::Count(0)), 7), (0, 1));
    }

    #[test]
    fn parse_accepts_counts_and_percentages() {
        assert_eq!(Budget::parse(&IntOrString::Int(3)), Ok(Budget::Count(3)));
        assert_eq!(
            Budget::parse(&IntOrString::String("25%".into())),
            Ok(Budget::Percent(25))
        );
        assert_eq!(
            Budget::parse(&IntOrString::String("100%".into())),
            Ok(Budget::Percent(100))
        );
    }

    #[test]
    fn parse_rejects_malformed_values() {
        for bad in ["5", "%", "-1%", "101%", "2.5%", "abc", ""] {
            assert!(
                Budget::parse(&IntOrString::String(bad.into())).is_err(),
                "{bad:?} should be rejected"
            );
        }
        assert!(Budget::parse(&IntOrString::Int(-1)).is_err());
    }

    proptest! {
        #[test]
        fn unavailable_never_exceeds_desired_and_progress_is_possible(
            surge in proptest::option::of(0u32..200),
            unavailable in proptest::option::of(0u32..200),
            surge_is_pct in any::<bool>(),
            unavailable_is_pct in any::<bool>(),
            desired in 0u32..1000,
        ) {
            let to_budget = |v: u32, is_pct: bool| if is_pct { Budget::Percent(v.min(100)) } else { Budget::Count(v) };
            let r = resolve_fenceposts(
                surge.map(|v| to_budget(v, surge_is_pct)),
                unavailable.map(|v| to_budget(v, unavailable_is_pct)),
                desired,
            );
            prop_assert!(r.max_unavailable <= desired);
            if desired > 0 {
                prop_assert!(r.max_surge + r.max_unavailable >= 1, "a rollout must be able to move");
            }
        }
    }
}
