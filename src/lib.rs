//! squall: a Kubernetes operator for AIBrix's orchestration API
//! (`orchestration.aibrix.ai/v1alpha1`: StormService, RoleSet, PodSet).
//!
//! Layout: `api` (types, defaulting, validation — no I/O), `planner` (pure rollout
//! decisions), `webhook` (admission), `controller` (reconcile loops), `cli` (the `squall`
//! commands).
#![forbid(unsafe_code)]

pub mod api;
pub mod cli;
pub mod controller;
pub mod planner;
pub mod webhook;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Annotation that keeps CRDs (and so every user's objects) when the Helm release is
/// uninstalled.
const HELM_RESOURCE_POLICY: (&str, &str) = ("helm.sh/resource-policy", "keep");

/// The three CRDs squall serves, as installed (`squall crds`, `manifests/crds`, the chart).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    [
        api::StormService::crd(),
        api::RoleSet::crd(),
        api::PodSet::crd(),
    ]
    .into_iter()
    .map(|mut crd| {
        crd.metadata
            .annotations
            .get_or_insert_default()
            .insert(HELM_RESOURCE_POLICY.0.into(), HELM_RESOURCE_POLICY.1.into());
        crd
    })
    .collect()
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
