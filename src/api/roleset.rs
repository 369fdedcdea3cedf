//! RoleSet: one replica of a StormService — the pods (or PodSets) of every role
//! (docs/aibrix-compatibility.md#the-same,
//! docs/rollouts.md#the-pooled-canary-the-role-rollout-block).

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::budget::{Fenceposts, fenceposts};
use super::cached::shared::Shared;
use super::common::{
    Condition, DisruptionTolerance, RoleStatus, SchedulingStrategy, TopologyPolicy,
};
use super::defaults::{DEFAULT_POD_GROUP_SIZE, DEFAULT_REPLICAS, DEFAULT_UPGRADE_ORDER};

/// The roles of one inference-service replica and how they are updated.
// kube's `printcolumn(...)` arguments repeat keys such as `type_` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "orchestration.aibrix.ai",
    version = "v1alpha1",
    kind = "RoleSet",
    namespaced,
    status = "RoleSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "RoleSet is one replica of a StormService: the pods (or PodSets) of every role.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status",
        description = "Whether the RoleSet is ready"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time this RoleSet was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RoleSetSpec {
    /// The roles (e.g. router, prefill, decode). A list map keyed by `name`, so server-side
    /// apply and GitOps tools merge roles by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = super::limits::MAX_ROLES))]
    pub roles: Option<Shared<Vec<RoleSpec>>>,
    /// How roles are rolled relative to each other: `Sequential` (one role at a time, in
    /// `upgradeOrder`), `Parallel` or `Interleave`. Absent means `Sequential`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Sequential"))]
    pub update_strategy: Option<RoleSetUpdateStrategy>,
    /// Gang scheduling for all pods of the RoleSet. Must not be combined with a role-level
    /// `schedulingStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_strategy: Option<SchedulingStrategy>,
    /// Topology packing of the RoleSet's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_policy: Option<TopologyPolicy>,
    /// Groups of roles whose pods serve one request together (prefill and decode, which
    /// hand each other the KV cache): every pod of a paired role carries its group's pairing
    /// key in the `pairing.squall.dev/key` label, so a router pairs pods of one key only
    /// (docs/rollouts.md#pairing). A role is in at most one group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_PAIRING_GROUPS))]
    pub pairing: Option<Vec<PairingGroup>>,
    /// Seconds a pod (or PodSet) must have been Ready to count as available; the RoleSet's
    /// budgets, role order and `Ready` condition count available children. A StormService
    /// writes its own `spec.minReadySeconds` here (rejected inside its template). Absent
    /// means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = super::limits::MAX_MIN_READY_SECONDS))]
    pub min_ready_seconds: Option<i32>,
    /// Creates every pod with the serving readiness gate, so squall can take a pod out of
    /// traffic while it keeps running: `Open` holds it True while the pod is up, `Closed`
    /// False on every pod (an aborted canary's RoleSet kept warm). Written by a StormService
    /// that needs it (rejected inside its template). Absent: only paired roles' pods carry
    /// the gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving_gate: Option<ServingGate>,
}

/// Whether a RoleSet's pods may serve (docs/rollouts.md#warm-abort).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ServingGate {
    /// A pod serves while it is up (and, in a pairing group, while its key can).
    Open,
    /// No pod serves; every pod keeps running.
    Closed,
}

/// Roles whose pods serve together, and what makes two of their pods compatible.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PairingGroup {
    /// The roles: at least two, each a role of the RoleSet.
    #[schemars(length(min = 2, max = super::limits::MAX_ROLES))]
    pub roles: Vec<String>,
    /// The group's pairing key, a label value: the user's promise that pods with the same
    /// token pair across template changes (a KV-transfer protocol version, say). Absent, the
    /// key is derived from the templates of the group's roles, so a change to any of them
    /// is a new key and a change to a role outside the group is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_LABEL_VALUE_LEN))]
    pub protocol: Option<String>,
}

/// How the roles of a RoleSet are rolled relative to each other.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RoleSetUpdateStrategy {
    /// All roles move toward their targets at once.
    Parallel,
    /// One role at a time, in `upgradeOrder` (absent counts as 0; ties keep spec order).
    #[default]
    Sequential,
    /// Roles advance in lock-step, one batch of each role at a time.
    Interleave,
}

/// One role of a RoleSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleSpec {
    /// Role name: a DNS-1123 label of at most 44 characters, unique within the RoleSet.
    pub name: String,
    /// Number of pods (or PodSets when `podGroupSize > 1`). Absent means 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = super::limits::MAX_REPLICAS))]
    pub replicas: Option<i32>,
    /// Position in a `Sequential` rollout: lower upgrades first; absent means 0; equal values
    /// keep spec order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub upgrade_order: Option<i32>,
    /// Pods per replica. Greater than 1 makes each replica a PodSet (a multi-node gang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub pod_group_size: Option<i32>,
    /// How the role's pods are replaced when its template changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<RoleUpdateStrategy>,
    /// Stateful roles give every pod a stable slot index and hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful: Option<bool>,
    /// Pod template of the role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = super::limits::pod_template_schema)]
    pub template: Option<Shared<PodTemplateSpec>>,
    /// Declared by AIBrix but unused; accepted and ignored (with an admission warning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_tolerance: Option<DisruptionTolerance>,
    /// Gang scheduling per PodSet (only for `podGroupSize > 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_strategy: Option<SchedulingStrategy>,
    /// Pooled-canary partition, written only by the StormService controller on RoleSets it
    /// owns (rejected inside a StormService template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RoleRollout>,
    /// Drain before delete (docs/rollouts.md#drain-before-delete): a serving pod of the role
    /// leaves traffic and finishes its requests before it is deleted or updated in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<super::drain::Drain>,
}

/// How a role's pods are replaced when its template changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleUpdateStrategy {
    /// `Recreate` (delete and create pods) or `InPlaceIfPossible` (patch image-only changes
    /// in place). Absent means `Recreate`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Recreate"))]
    pub type_: Option<RoleUpdateStrategyType>,
    /// Pods that may be unavailable during the update: an integer or a percentage of the
    /// role's replicas (rounded down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Pods that may be created above the role's replicas: an integer or a percentage of the
    /// role's replicas (rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
}

/// Role update strategy type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RoleUpdateStrategyType {
    /// Delete outdated pods and create new ones.
    #[default]
    Recreate,
    /// Patch image-only changes into running pods; recreate otherwise.
    InPlaceIfPossible,
}

/// The pooled-canary partition of one role
/// (docs/rollouts.md#the-pooled-canary-the-role-rollout-block).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleRollout {
    /// Number of the role's pods (PodSets for `podGroupSize > 1`) that stay on the stable
    /// template; clamped to `0..replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub partition: Option<i32>,
    /// Name of the StormService ControllerRevision holding the stable template; stable pods
    /// that die inside the partition are recreated from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// Until then, pods on the role's template beyond what the partition leaves it stay,
    /// out of traffic: an aborted pooled canary's, kept warm for a retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_until: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// Observed state of a RoleSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::bounded_status::bounded)]
pub struct RoleSetStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Per-role replica counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_ROLES))]
    pub roles: Option<Vec<RoleStatus>>,
    /// Conditions: `Ready`, `Progressing`, `ReplicaFailure`, and `Paired` when roles are
    /// paired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// What each pairing key serves, by role of its group (absent without `pairing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_PAIRING_KEYS_REPORTED))]
    pub pairing: Option<Vec<PairingKeyStatus>>,
}

/// What one pairing key serves: per RoleSet, or summed over a StormService's RoleSets
/// (docs/rollouts.md#the-status-of-a-group).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct PairingKeyStatus {
    /// The key: the `pairing.squall.dev/key` label of its pods.
    pub key: String,
    /// The group's roles, in the group's order.
    #[schemars(length(max = super::limits::MAX_ROLES))]
    pub roles: Vec<PairedRoleStatus>,
    /// How far the key's serving pods are from the spec's ratio: the pods the group's
    /// slowest role is short of the most advanced role's share of its replicas (the most
    /// over a StormService's RoleSets). A rollout's lock-step batches keep it within one
    /// batch.
    #[serde(default)]
    pub skew: i32,
}

/// One role's pods of a pairing key.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct PairedRoleStatus {
    /// Role name.
    pub name: String,
    /// Live pods of the role with the key.
    #[serde(default)]
    pub pods: i32,
    /// Those that serve (Ready: their containers ready and their key complete).
    #[serde(default)]
    pub serving: i32,
}

impl RoleSpec {
    /// Desired replicas, absent meaning the default.
    pub fn replicas_or_default(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_REPLICAS)
    }

    /// Position in a Sequential rollout, absent meaning the default.
    pub fn upgrade_order_or_default(&self) -> i32 {
        self.upgrade_order.unwrap_or(DEFAULT_UPGRADE_ORDER)
    }

    /// Pods per replica, absent meaning the default.
    pub fn pod_group_size_or_default(&self) -> i32 {
        self.pod_group_size.unwrap_or(DEFAULT_POD_GROUP_SIZE)
    }

    /// The role's surge / unavailable budgets at `desired` replicas (or PodSets).
    pub fn fenceposts(&self, desired: u32) -> Fenceposts {
        let strategy = self.update_strategy.as_ref();
        fenceposts(
            strategy.and_then(|s| s.max_surge.as_ref()),
            strategy.and_then(|s| s.max_unavailable.as_ref()),
            desired,
        )
    }

    /// Update strategy type; absent means Recreate.
    pub fn update_strategy_type(&self) -> RoleUpdateStrategyType {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.type_)
            .unwrap_or_default()
    }
}
