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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patch_adds_defaults_and_a_second_pass_is_empty() {
        let object = json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1",
            "kind": "RoleSet",
            "metadata": {"name": "rs"},
            "spec": {"roles": [{"name": "model.aibrix.ai/engine-like~name"}]}
        });
        let patch = defaults_patch(&object).unwrap();
        assert!(!patch.0.is_empty());
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patched["spec"]["roles"][0]["upgradeOrder"], 0);
        assert!(defaults_patch(&patched).unwrap().0.is_empty());
    }

    #[test]
    fn unparsable_objects_get_no_patch() {
        let object = json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1",
            "kind": "RoleSet",
            "metadata": {"name": "rs"},
            "spec": {"roles": "not-a-list"}
        });
        assert_eq!(defaults_patch(&object).unwrap_err().path, "spec.roles");
    }
}
