//! Fuzzes the admission review handler: any request body, for every webhook, must give an
//! AdmissionReview or a 400 — never a panic (docs/admission.md#malformed-requests) — and the
//! fast readings (the scanner's, serde's one pass) must answer as the general path does
//! wherever they answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use squall::admission::hook::Hook;
use squall::webhook::{fast_paths_agree, review};

fuzz_target!(|body: &[u8]| {
    for hook in Hook::ALL {
        let _ = review(hook, body);
        assert!(fast_paths_agree(hook, body), "{hook:?} answers differ on the fast paths");
    }
});
