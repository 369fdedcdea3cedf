//! Admission: the four webhooks of SPEC §4, as pure functions from an AdmissionReview body
//! to an AdmissionReview response, built on the shared defaulting and validation of
//! `crate::api`. The HTTPS server in `crate::server` only moves bytes.

pub mod config;
pub mod sidecar;

use json_patch::Patch;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;

use crate::api::defaults::apply_defaults;
use crate::api::validation::{FieldError, validate_object};
use crate::api::{GROUP, VERSION};

/// One admission webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Defaults (and sidecar injection) for StormServices.
    MutateStormService,
    /// Validation of StormServices.
    ValidateStormService,
    /// Defaults for RoleSets.
    MutateRoleSet,
    /// Validation of RoleSets.
    ValidateRoleSet,
}

impl Hook {
    /// Every webhook.
    pub const ALL: [Hook; 4] = [
        Hook::MutateStormService,
        Hook::ValidateStormService,
        Hook::MutateRoleSet,
        Hook::ValidateRoleSet,
    ];

    /// The URL path (AIBrix's where AIBrix has one).
    pub fn path(self) -> &'static str {
        match self {
            Hook::MutateStormService => "/mutate-orchestration-aibrix-ai-v1alpha1-stormservice",
            Hook::ValidateStormService => "/validate-orchestration-aibrix-ai-v1alpha1-stormservice",
            Hook::MutateRoleSet => "/mutate-orchestration-aibrix-ai-v1alpha1-roleset",
            Hook::ValidateRoleSet => "/validate-orchestration-aibrix-ai-v1alpha1-roleset",
        }
    }

    /// The webhook's name in its configuration; denials start with it.
    pub fn name(self) -> &'static str {
        match self {
            Hook::MutateStormService => "mstormservice.squall.dev",
            Hook::ValidateStormService => "vstormservice.squall.dev",
            Hook::MutateRoleSet => "mroleset.squall.dev",
            Hook::ValidateRoleSet => "vroleset.squall.dev",
        }
    }

    /// The kind it admits.
    pub fn kind(self) -> &'static str {
        match self {
            Hook::MutateStormService | Hook::ValidateStormService => "StormService",
            Hook::MutateRoleSet | Hook::ValidateRoleSet => "RoleSet",
        }
    }

    /// The resource (plural) it admits.
    pub fn resource(self) -> &'static str {
        match self {
            Hook::MutateStormService | Hook::ValidateStormService => "stormservices",
            Hook::MutateRoleSet | Hook::ValidateRoleSet => "rolesets",
        }
    }

    /// Whether it is a mutating webhook.
    pub fn is_mutating(self) -> bool {
        matches!(self, Hook::MutateStormService | Hook::MutateRoleSet)
    }

    /// Label value for metrics: `mutate` or `validate`.
    pub fn operation(self) -> &'static str {
        if self.is_mutating() {
            "mutate"
        } else {
            "validate"
        }
    }
}

/// A body that cannot be answered with an AdmissionReview (HTTP 400).
#[derive(Debug, thiserror::Error)]
pub enum BadRequest {
    /// Not JSON, or not shaped like an AdmissionReview.
    #[error("the request body is not an admission.k8s.io/v1 AdmissionReview: {0}")]
    NotAdmissionReview(String),
    /// An AdmissionReview without `request`.
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

/// How a review was decided (for logs and metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed unchanged.
    Allowed,
    /// Allowed with a JSON patch.
    Patched,
    /// Denied.
    Denied,
}

/// Answers one AdmissionReview body for `hook`.
pub fn review(
    hook: Hook,
    body: &[u8],
) -> Result<(AdmissionReview<DynamicObject>, Verdict), BadRequest> {
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(body).map_err(|e| BadRequest::NotAdmissionReview(e.to_string()))?;
    if review.types.kind != "AdmissionReview" || review.types.api_version != "admission.k8s.io/v1" {
        return Err(BadRequest::NotAdmissionReview(format!(
            "apiVersion {:?} kind {:?}; expected admission.k8s.io/v1 AdmissionReview",
            review.types.api_version, review.types.kind
        )));
    }
    let request: AdmissionRequest<DynamicObject> =
        review.try_into().map_err(|_| BadRequest::NoRequest)?;
    let (response, verdict) = decide(hook, &request);
    let patch_bytes = response.patch.as_ref().map_or(0, Vec::len);
    if patch_bytes > body.len() + PATCH_HEADROOM {
        // Defaulting adds a few fields per role and the bounded lists keep it small; this
        // is the backstop that keeps a response from outgrowing its request.
        tracing::warn!(
            webhook = hook.name(),
            patch_bytes,
            request_bytes = body.len(),
            "patch too large; denied"
        );
        let denied = AdmissionResponse::from(&request).deny(format!(
            "the defaults for this object make a patch of {patch_bytes} bytes, more than the \
             request's {} bytes plus {} KiB",
            body.len(),
            PATCH_HEADROOM >> 10
        ));
        return Ok((denied.into_review(), Verdict::Denied));
    }
    Ok((response.into_review(), verdict))
}

/// How much larger than its request a mutating webhook's patch may be: the runtime sidecar
/// and the defaults of a full role list fit with room to spare.
pub const PATCH_HEADROOM: usize = 64 << 10;

fn decide(hook: Hook, req: &AdmissionRequest<DynamicObject>) -> (AdmissionResponse, Verdict) {
    let allowed = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return (allowed, Verdict::Allowed);
    }
    if req.kind.group != GROUP || req.kind.kind != hook.kind() {
        let warning = format!(
            "squall's {} webhook does not handle {}/{} {}; allowed unchecked",
            hook.name(),
            req.kind.group,
            req.kind.version,
            req.kind.kind
        );
        tracing::warn!(webhook = hook.name(), kind = %req.kind.kind, "unexpected kind");
        return (with_warnings(allowed, vec![warning]), Verdict::Allowed);
    }
    let Some(object) = req.object.as_ref().map(|o| typed_json(o, hook)) else {
        let warning = format!(
            "{}: the request has no object; allowed unchecked",
            hook.name()
        );
        return (with_warnings(allowed, vec![warning]), Verdict::Allowed);
    };
    if hook.is_mutating() {
        match mutation(&object) {
            Ok((patch, warnings)) if patch.0.is_empty() => {
                (with_warnings(allowed, warnings), Verdict::Allowed)
            }
            Ok((patch, warnings)) => match allowed.clone().with_patch(patch) {
                Ok(patched) => (with_warnings(patched, warnings), Verdict::Patched),
                Err(e) => {
                    tracing::error!(error = %e, "serializing a patch failed");
                    (allowed, Verdict::Allowed)
                }
            },
            Err(error) => {
                // The API server's schema validation reports the real problem.
                tracing::info!(webhook = hook.name(), %error, "object does not parse; allowed without defaults");
                (allowed, Verdict::Allowed)
            }
        }
    } else {
        let old = req.old_object.as_ref().map(|o| typed_json(o, hook));
        let Some(report) = validate_object(&object, old.as_ref()) else {
            // Unreachable: typed_json stamps the request's (checked) kind on the object.
            return (allowed, Verdict::Allowed);
        };
        let warnings = report.warnings.clone();
        if report.is_valid() {
            (with_warnings(allowed, warnings), Verdict::Allowed)
        } else {
            let mut denied = allowed.deny(report.error_message());
            denied.result.code = 422;
            denied.result.reason = "Invalid".into();
            (with_warnings(denied, warnings), Verdict::Denied)
        }
    }
}

/// The mutating webhook's JSON patch and warnings for `object`: the defaults of SPEC §2,
/// then (StormService) the runtime sidecar. An object that does not parse gets an error
/// (and so no patch).
pub fn mutation(object: &Value) -> Result<(Patch, Vec<String>), FieldError> {
    let mut mutated = object.clone();
    let mut warnings = apply_defaults(&mut mutated)?;
    if mutated["kind"] == "StormService" {
        warnings.extend(sidecar::inject(&mut mutated));
    }
    Ok((json_patch::diff(object, &mutated), warnings))
}

/// The object as JSON, stamped with the request's (already checked) `apiVersion` and `kind`:
/// the API server always sends them matching, but a hand-made review may omit or contradict
/// them (a fuzzer finding).
fn typed_json(object: &DynamicObject, hook: Hook) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), format!("{GROUP}/{VERSION}").into());
        map.insert("kind".into(), hook.kind().into());
    }
    value
}

fn with_warnings(mut response: AdmissionResponse, warnings: Vec<String>) -> AdmissionResponse {
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review_body(hook: Hook, operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
        let kind = hook.kind();
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": GROUP, "version": VERSION, "kind": kind},
                "resource": {"group": GROUP, "version": VERSION, "resource": hook.resource()},
                "name": "x", "namespace": "default",
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": object,
                "oldObject": old,
                "dryRun": false
            }
        }))
        .unwrap()
    }

    fn roleset(roles: Value) -> Value {
        json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
               "metadata": {"name": "x", "namespace": "default"}, "spec": {"roles": roles}})
    }

    fn response(hook: Hook, body: &[u8]) -> (AdmissionResponse, Verdict) {
        let (review, verdict) = review(hook, body).unwrap();
        (review.response.unwrap(), verdict)
    }

    #[test]
    fn mutate_answers_with_a_json_patch_and_echoes_the_uid() {
        let body = review_body(
            Hook::MutateRoleSet,
            "CREATE",
            roleset(json!([{"name": "a"}])),
            None,
        );
        let (resp, verdict) = response(Hook::MutateRoleSet, &body);
        assert_eq!(verdict, Verdict::Patched);
        assert!(resp.allowed);
        assert_eq!(resp.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        let patch: Patch = serde_json::from_slice(&resp.patch.unwrap()).unwrap();
        let mut object = roleset(json!([{"name": "a"}]));
        json_patch::patch(&mut object, &patch).unwrap();
        assert_eq!(object["spec"]["roles"][0]["upgradeOrder"], 0);
        // Replaying the stored object gives an empty patch.
        let (patch, _) = mutation(&object).unwrap();
        assert!(patch.0.is_empty());
    }

    #[test]
    fn unparsable_objects_are_allowed_without_a_patch() {
        let body = review_body(
            Hook::MutateRoleSet,
            "CREATE",
            roleset(json!("not a list")),
            None,
        );
        let (resp, verdict) = response(Hook::MutateRoleSet, &body);
        assert_eq!(verdict, Verdict::Allowed);
        assert!(resp.allowed && resp.patch.is_none());
        assert!(
            serde_json::to_value(&resp)
                .unwrap()
                .get("patchType")
                .is_none_or(Value::is_null)
        );
    }

    #[test]
    fn validate_denies_with_field_paths_and_returns_warnings() {
        let body = review_body(
            Hook::ValidateRoleSet,
            "CREATE",
            roleset(json!([{"name": "Bad_Name", "disruptionTolerance": {}}])),
            None,
        );
        let (resp, verdict) = response(Hook::ValidateRoleSet, &body);
        assert_eq!(verdict, Verdict::Denied);
        assert!(!resp.allowed);
        assert!(
            resp.result
                .message
                .starts_with("spec.roles[0].name: Invalid value"),
            "{}",
            resp.result.message
        );
        assert_eq!(resp.result.code, 422);
        assert!(resp.warnings.unwrap()[0].contains("disruptionTolerance"));
    }

    #[test]
    fn validate_ratchets_on_update() {
        let old = roleset(json!([{"name": "Bad_Name", "replicas": 1}]));
        let new = roleset(json!([{"name": "Bad_Name", "replicas": 2}]));
        let body = review_body(Hook::ValidateRoleSet, "UPDATE", new, Some(old));
        assert_eq!(response(Hook::ValidateRoleSet, &body).1, Verdict::Allowed);
    }

    #[test]
    fn other_kinds_are_allowed_with_a_warning() {
        let mut body: Value = serde_json::from_slice(&review_body(
            Hook::ValidateStormService,
            "CREATE",
            roleset(json!([])),
            None,
        ))
        .unwrap();
        body["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        let (resp, verdict) = response(
            Hook::ValidateStormService,
            &serde_json::to_vec(&body).unwrap(),
        );
        assert_eq!(verdict, Verdict::Allowed);
        assert!(resp.warnings.unwrap()[0].contains("does not handle apps/v1 Deployment"));
    }

    #[test]
    fn an_object_contradicting_the_request_kind_does_not_panic() {
        // Fuzzer finding: object.apiVersion "orchestration.aibrix.ai/v0alpha1" in a RoleSet review.
        let mut object = roleset(json!([{"name": "a"}]));
        object["apiVersion"] = json!("orchestration.aibrix.ai/v0alpha1");
        for hook in [Hook::ValidateRoleSet, Hook::MutateRoleSet] {
            let body = review_body(hook, "CREATE", object.clone(), None);
            assert!(response(hook, &body).0.allowed);
        }
    }

    #[test]
    fn deletes_are_allowed() {
        let body = review_body(
            Hook::ValidateRoleSet,
            "DELETE",
            Value::Null,
            Some(roleset(json!([{"name": "Bad_Name"}]))),
        );
        assert_eq!(response(Hook::ValidateRoleSet, &body).1, Verdict::Allowed);
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        for body in [
            &b"not json"[..],
            b"{}",
            b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}",
            b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}",
            b"\xff\xfe\x00",
            &[b'['; 10_000],
        ] {
            assert!(
                review(Hook::MutateStormService, body).is_err(),
                "{:?}",
                String::from_utf8_lossy(&body[..body.len().min(40)])
            );
        }
    }
}
