//! squall: a Kubernetes operator for AIBrix's orchestration API
//! (`orchestration.aibrix.ai/v1alpha1`: StormService, RoleSet, PodSet).
//!
//! Layout: `api` (types, defaulting, validation — no I/O), `planner` (pure rollout
//! decisions), `webhook` (admission), `controller` (reconcile loops), `cli` (the `squall`
//! commands).
#![forbid(unsafe_code)]

pub mod admin;
pub mod admission;
pub mod api;
pub mod cli;
pub mod client;
pub mod controller;
pub mod metrics;
pub mod planner;
pub mod server;
pub mod webhook;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Annotation that keeps CRDs (and so every user's objects) when the Helm release is
/// uninstalled.
const HELM_RESOURCE_POLICY: (&str, &str) = ("helm.sh/resource-policy", "keep");

/// The three CRDs squall serves, as installed (`squall crds`, `manifests/crds`, the chart).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        finished::<api::StormService>(),
        finished::<api::RoleSet>(),
        finished::<api::PodSet>(),
    ]
}

/// `K`'s CRD as installed: the schema with Kubernetes' own markers and empty reference
/// names allowed, and kept on `helm uninstall`.
fn finished<K: CustomResourceExt + schemars::JsonSchema>() -> CustomResourceDefinition {
    let mut crd = K::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let mut value = serde_json::to_value(&*schema).expect("schema serializes");
            allow_empty_reference_names(&mut value);
            api::schema::restore_kubernetes_markers::<K>(&mut value);
            *schema = serde_json::from_value(value).expect("schema deserializes");
        }
    }
    crd.metadata
        .annotations
        .get_or_insert_default()
        .insert(HELM_RESOURCE_POLICY.0.into(), HELM_RESOURCE_POLICY.1.into());
    crd
}

/// Core/v1 object references (`LocalObjectReference`, `ConfigMapKeySelector`, ...) declare
/// `name` as "effectively required, but allowed to be empty": Kubernetes gives it the
/// default `""`. k8s-openapi marks it required instead, which would reject pod templates the
/// Pod API (and AIBrix's CRDs) accept; restore the upstream schema.
fn allow_empty_reference_names(schema: &mut serde_json::Value) {
    use serde_json::Value;
    if let Some(object) = schema.as_object_mut() {
        let empty_allowed = object
            .get("properties")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.get("description"))
            .and_then(Value::as_str)
            .is_some_and(|d| d.contains("allowed to be empty"));
        if empty_allowed {
            if let Some(required) = object.get_mut("required").and_then(Value::as_array_mut) {
                required.retain(|r| r != "name");
                if required.is_empty() {
                    object.remove("required");
                }
            }
            if let Some(name) = object.get_mut("properties").and_then(|p| p.get_mut("name")) {
                name["default"] = Value::String(String::new());
            }
        }
        object.values_mut().for_each(allow_empty_reference_names);
    } else if let Some(items) = schema.as_array_mut() {
        items.iter_mut().for_each(allow_empty_reference_names);
    }
}

/// One CRD as YAML.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> String {
    serde_saphyr::to_string(crd).expect("a CRD always serializes")
}

/// All CRDs as one multi-document YAML stream.
pub fn crds_yaml() -> String {
    all_crds()
        .iter()
        .map(|crd| format!("---\n{}", crd_yaml(crd)))
        .collect()
}
