//! PodSet: one multi-node gang of pods of a role with `podGroupSize > 1`
//! (docs/aibrix-compatibility.md#the-same). Created by the RoleSet controller, not by users.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Condition, SchedulingStrategy};

/// A fixed-size, indexed gang of pods.
// kube's `printcolumn(...)` arguments repeat keys such as `type_` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "orchestration.aibrix.ai",
    version = "v1alpha1",
    kind = "PodSet",
    namespaced,
    status = "PodSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "PodSet is one multi-node gang of pods of a role; created by the RoleSet controller.",
    printcolumn(name = "ReadyPods", type_ = "integer", json_path = ".status.readyPods"),
    printcolumn(name = "TotalPods", type_ = "integer", json_path = ".status.totalPods"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time this PodSet was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PodSetSpec {
    /// Number of pods in the gang (2–100).
    #[schemars(range(min = 2, max = 100))]
    pub pod_group_size: i32,
    /// Template of every pod of the gang.
    pub template: PodTemplateSpec,
    /// Copied from the role; unused by the PodSet controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful: Option<bool>,
    /// What happens when a pod fails: `ReplaceUnhealthy` (replace that pod) or `Recreate`
    /// (recreate the whole gang). Absent means `ReplaceUnhealthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "ReplaceUnhealthy"))]
    pub recovery_policy: Option<RecoveryPolicy>,
    /// Gang scheduling of the PodSet's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_strategy: Option<SchedulingStrategy>,
}

/// How a PodSet recovers from a failed pod.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RecoveryPolicy {
    /// Replace only the failed pods.
    #[default]
    ReplaceUnhealthy,
    /// Delete and recreate every pod of the gang.
    Recreate,
}

/// Observed state of a PodSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::bounded_status::bounded)]
pub struct PodSetStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready pods of the gang.
    pub ready_pods: i32,
    /// Pods of the gang.
    pub total_pods: i32,
    /// `Pending`, `Running`, `Ready` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<PodSetPhase>,
    /// Conditions: `Ready`, `Progressing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// Phase of a PodSet.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PodSetPhase {
    /// Not all pods are running.
    Pending,
    /// All pods run, not all are Ready.
    Running,
    /// All pods are Ready.
    Ready,
    /// The gang failed.
    Failed,
}
