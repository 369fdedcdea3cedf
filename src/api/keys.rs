//! Label, annotation, finalizer and field-manager names — AIBrix's, so existing clusters,
//! gateways and autoscalers keep working (AIBRIX-REFERENCE §4). One place for all of them;
//! each is added here by the code that first uses it.

/// Prefix of the per-role revision annotations on RoleSets
/// (`stormservice.orchestration.aibrix.ai/role-revision-name.<role>`). Annotation names are
/// at most 63 characters, which limits role names to 44.
pub const ANNOTATION_ROLE_REVISION_NAME_PREFIX: &str =
    "stormservice.orchestration.aibrix.ai/role-revision-name.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_role_name_fits_an_annotation_name() {
        let (_, name) = ANNOTATION_ROLE_REVISION_NAME_PREFIX
            .split_once('/')
            .expect("prefixed key");
        assert_eq!(name.len() + crate::api::validation::MAX_ROLE_NAME_LEN, 63);
    }
}
