//! Admission: the mutating webhook's patch and the validating webhook's verdict, built on the
//! shared defaulting and validation of `crate::api`.

use json_patch::Patch;
use serde_json::Value;

use crate::api::defaults::apply_defaults;
use crate::api::validation::FieldError;

/// The RFC 6902 patch that applies the defaults to `object` (empty when nothing is absent).
/// An object that does not parse gets no patch, so the API server's schema reports it.
pub fn defaults_patch(object: &Value) -> Result<Patch, FieldError> {
    let mut defaulted = object.clone();
    apply_defaults(&mut defaulted)?;
    Ok(json_patch::diff(object, &defaulted))
}
