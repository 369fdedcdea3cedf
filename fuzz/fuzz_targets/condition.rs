//! Fuzzes the analysis condition parser (docs/rollouts.md#canary-analysis): tenants write
//! conditions the operator parses and evaluates, so any text must parse or be refused with an
//! error — never a panic or unbounded work — and a parsed condition must evaluate, and print
//! as text that parses to the same condition (unless printing nests it past the bounds).
#![no_main]

use libfuzzer_sys::fuzz_target;
use squall::api::condition::Condition;

fuzz_target!(|text: &[u8]| {
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let Ok(condition) = Condition::parse(text) else {
        return;
    };
    for result in [0.0, -1.5, 0.05, 1e9, f64::NAN, f64::INFINITY] {
        let _ = condition.holds(result);
    }
    let printed = condition.to_string();
    match Condition::parse(&printed) {
        Ok(again) => assert_eq!(again, condition, "{text:?} printed as {printed:?}"),
        Err(e) => assert!(
            e.message.contains("nested") || e.message.contains("at most"),
            "{text:?} printed as {printed:?}, which does not parse: {e}"
        ),
    }
});
