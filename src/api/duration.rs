//! The duration grammar of pause steps and analysis intervals: an integer number of seconds,
//! or `^(\d+h)?(\d+m)?(\d+s)?$` (docs/rollouts.md#canary). The typed spec, the admission
//! views and `squall run`'s flags all read durations here.

use super::borrowed::IntOrStr;

/// A pause `duration` in seconds: `None` for a manual gate (no duration); the error says
/// what is wrong (`PauseStep::duration_seconds` reads the typed spec through it).
pub fn pause_seconds(duration: Option<&IntOrStr<'_>>) -> Result<Option<u64>, String> {
    match duration {
        None => Ok(None),
        Some(IntOrStr::Int(n)) => u64::try_from(*n)
            .map(Some)
            .map_err(|_| "must not be negative".to_string()),
        Some(IntOrStr::Str(s)) => parse_duration(s).map(Some).ok_or_else(|| {
            "must be an integer number of seconds or a duration such as '30s', '5m', '1h', '1h30m'"
                .to_string()
        }),
    }
}

/// Parses `^\d+$` (seconds) or `^(\d+h)?(\d+m)?(\d+s)?$` (non-empty, units in that order)
/// into seconds — the duration grammar of pause steps, also used by `squall run` flags.
pub fn parse_duration(s: &str) -> Option<u64> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse().ok();
    }
    let mut total: u64 = 0;
    let mut rest = s;
    let mut next_units: &[(u8, u64)] = &[(b'h', 3600), (b'm', 60), (b's', 1)];
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let unit = *rest.as_bytes().get(digits)?;
        if digits == 0 {
            return None;
        }
        let position = next_units.iter().position(|(u, _)| *u == unit)?;
        let value: u64 = rest[..digits].parse().ok()?;
        total = total.checked_add(value.checked_mul(next_units[position].1)?)?;
        next_units = &next_units[position + 1..];
        rest = &rest[digits + 1..];
    }
    (!s.is_empty()).then_some(total)
}
