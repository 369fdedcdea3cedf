//! Fuzzes the admission review handler: any request body, for every webhook, must give an
//! AdmissionReview or a 400 — never a panic (docs/admission.md#malformed-requests).
#![no_main]

use libfuzzer_sys::fuzz_target;
use squall::webhook::{Hook, review};

fuzz_target!(|body: &[u8]| {
    for hook in Hook::ALL {
        let _ = review(hook, body);
    }
});
