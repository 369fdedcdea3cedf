//! Types shared by StormService, RoleSet and PodSet (docs/aibrix-compatibility.md#the-same).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A status condition. squall's own type: AIBrix's fields plus `observedGeneration`, with
/// only `type` and `status` required, so status written by AIBrix's controller still validates.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, e.g. `Ready`, `Available`, `Progressing`, `ReplicaFailure`,
    /// `InvalidSpec`, `Paused`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Status of the condition: `True`, `False` or `Unknown`.
    pub status: String,
    /// Last time the condition's status changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Last time the condition was written (kept for AIBrix compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Last time the condition was written, with microsecond precision (kept for AIBrix compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_micro_time: Option<MicroTime>,
    /// Machine-readable, CamelCase reason for the condition's last transition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable details about the condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_MESSAGE_CHARS))]
    pub message: Option<String>,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Replica counts of one role, per RoleSet or summed over a StormService's RoleSets.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = without_property_defaults)]
pub struct RoleStatus {
    /// Role name.
    #[serde(default)]
    pub name: String,
    /// Pods (or PodSets) of the role.
    pub replicas: i32,
    /// Ready pods (or PodSets) of the role.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Pods (or PodSets) of the role that are not Ready.
    #[serde(default)]
    pub not_ready_replicas: i32,
    /// Pods (or PodSets) on the role's current template.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Pods (or PodSets) on the role's current template that are Ready.
    #[serde(default)]
    pub updated_ready_replicas: i32,
    /// Pods (or PodSets) Ready for the RoleSet's `minReadySeconds`: what budgets count.
    /// Absent in a status written before squall counted availability.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Pods (or PodSets) on the role's current template that are available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_available_replicas: Option<i32>,
}

/// Declared by AIBrix but not implemented by any controller; accepted and ignored
/// (an admission warning says so).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionTolerance {
    /// Maximum number (or percentage) of unavailable replicas tolerated. Ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// Gang-scheduling settings; at most one scheduler may be named.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("maxProperties" = 1))]
pub struct SchedulingStrategy {
    /// A PodGroup for the Godel scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub godel_scheduling_strategy: Option<GodelSchedulingStrategy>,
    /// A PodGroup for the scheduler-plugins coscheduling plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coscheduling_scheduling_strategy: Option<CoschedulingSchedulingStrategy>,
    /// A PodGroup for the Volcano scheduler.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volcano_scheduling_strategy: Option<VolcanoSchedulingStrategy>,
}

impl SchedulingStrategy {
    /// Names (JSON keys) of the schedulers this strategy sets.
    pub fn schedulers(&self) -> Vec<&'static str> {
        schedulers_named(
            self.godel_scheduling_strategy.is_some(),
            self.coscheduling_scheduling_strategy.is_some(),
            self.volcano_scheduling_strategy.is_some(),
        )
    }
}

/// The schedulers a `schedulingStrategy` names, from which of its three fields are set.
pub fn schedulers_named(godel: bool, coscheduling: bool, volcano: bool) -> Vec<&'static str> {
    [
        (godel, "godelSchedulingStrategy"),
        (coscheduling, "coschedulingSchedulingStrategy"),
        (volcano, "volcanoSchedulingStrategy"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect()
}

/// Godel PodGroup settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GodelSchedulingStrategy {
    /// Minimum number of pods that must be scheduled together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Priority class of the PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Seconds to wait for the gang to be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
    /// Application the PodGroup belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// PodGroup-level affinity and anti-affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<GodelAffinity>,
}

/// Godel PodGroup affinity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GodelAffinity {
    /// Topology domains the whole PodGroup should (or must) share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_affinity: Option<PodGroupAffinity>,
    /// Topology domains the PodGroup should (or must) avoid sharing with others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_anti_affinity: Option<PodGroupAntiAffinity>,
}

/// Godel PodGroup affinity terms.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupAffinity {
    /// Required topology terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<Vec<PodGroupAffinityTerm>>,
    /// Preferred topology terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<Vec<PodGroupAffinityTerm>>,
    /// Nodes the PodGroup may be placed on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<NodeSelector>,
    /// How candidate topology domains are ordered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort_rules: Option<Vec<SortRule>>,
}

/// Godel PodGroup anti-affinity terms.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupAntiAffinity {
    /// Required topology terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<Vec<PodGroupAffinityTerm>>,
    /// Preferred topology terms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred: Option<Vec<PodGroupAffinityTerm>>,
}

/// One Godel topology term.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupAffinityTerm {
    /// Node label whose values define the topology domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_key: Option<String>,
}

/// A Godel ordering rule for topology domains.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SortRule {
    /// Resource to sort by.
    pub resource: String,
    /// Dimension of the resource to sort by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// Sort order.
    pub order: String,
}

/// scheduler-plugins coscheduling PodGroup settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CoschedulingSchedulingStrategy {
    /// Minimum number of pods that must be scheduled together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub min_member: Option<i32>,
    /// Minimum resources the gang needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// Seconds to wait for the gang to be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// Volcano PodGroup settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolcanoSchedulingStrategy {
    /// Minimum number of pods that must be scheduled together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Minimum number of pods per task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_task_member: Option<BTreeMap<String, i32>>,
    /// Volcano queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Priority class of the PodGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Minimum resources the gang needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
}

/// Where the pods of a StormService, RoleSet or role are packed topologically.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyPolicy {
    /// Which group of pods shares one topology domain.
    pub scope: TopologyScope,
    /// Whether co-location is required or only preferred.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Preferred"))]
    pub mode: Option<TopologyMode>,
    /// Node label key that defines the topology domain, e.g. `topology.kubernetes.io/zone`.
    #[schemars(length(min = 1, max = 317))]
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
    ))]
    pub key: String,
}

/// Scope of a topology policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TopologyScope {
    /// All pods of the StormService share one domain.
    StormService,
    /// The pods of each RoleSet share one domain.
    RoleSet,
    /// The pods of each role share one domain.
    Role,
}

/// Strength of a topology policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum TopologyMode {
    /// Preferred pod affinity.
    Preferred,
    /// Required pod affinity.
    Required,
}

/// `metadata` of an embedded template: the subset of ObjectMeta that AIBrix keeps.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmbeddedObjectMetadata {
    /// Name (unused; generated names are used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace (unused; the owner's namespace is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels copied to every RoleSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations copied to every RoleSet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Finalizers (kept for AIBrix compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Vec<String>>,
}

/// Status structs read absent counters as 0 (`#[serde(default)]`), which schemars would
/// publish as schema defaults; AIBrix's status schemas have none, and the CRD keeps exactly
/// AIBrix's defaults (docs/admission.md#defaults).
pub(crate) fn without_property_defaults(schema: &mut schemars::Schema) {
    if let Some(properties) = schema
        .get_mut("properties")
        .and_then(serde_json::Value::as_object_mut)
    {
        for property in properties.values_mut() {
            if let Some(property) = property.as_object_mut() {
                property.remove("default");
            }
        }
    }
}

/// The UID of the controlling owner in `meta`'s ownerReferences.
pub fn controller_uid(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// Whether `child` is controlled by `owner`, by UID (an owner recreated under the same name
/// inherits nothing of its predecessor's). Namespaces are the caller's: a child counts only
/// in its owner's namespace.
pub fn controlled_by(
    child: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    owner.uid.is_some() && controller_uid(child) == owner.uid.as_deref()
}
