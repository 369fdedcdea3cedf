//! What the validation rules and the defaults read of a StormService or a RoleSet, parsed
//! straight from its JSON: strings borrowed from the document, lists the rules only count
//! counted, and pod templates, status and the metadata the rules do not read skipped. One
//! parse of a review's object costs little more than reading its bytes.
//!
//! Every field a rule reads has the type the full API type gives it (a `replicas` that is
//! not an integer fails here as it fails there), so where a view parses, the rules see what
//! the typed object would have shown them. What is skipped is checked by the API server's
//! schema validation before the validating webhook is called (README, "Admission").

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::analysis::Analysis;
use crate::api::borrowed::{IntOrStr, Str};
use crate::api::drain::Drain;
use crate::api::duration::pause_seconds;

use crate::api::{
    CanaryPhase, RoleSetUpdateStrategy, RoleUpdateStrategyType, StormServiceUpdateStrategyType,
};

/// An object as the rules read it: its metadata, and its spec (and status) still as JSON,
/// so that an update can compare specs byte for byte before parsing them.
#[derive(Debug, Deserialize)]
pub struct ObjectView<'a> {
    /// The metadata the rules read.
    #[serde(borrow, default)]
    pub metadata: MetaView<'a>,
    /// The spec, unparsed.
    #[serde(borrow, default)]
    pub spec: Option<&'a RawValue>,
    /// The status, unparsed (a stored object's canary phase is read from it on update).
    #[serde(borrow, default)]
    pub status: Option<&'a RawValue>,
}

/// A StormService read in one pass: its metadata and spec (when nothing needs the spec's
/// JSON itself, as on a create).
#[derive(Debug, Deserialize)]
pub struct StormServiceView<'a> {
    /// The metadata the rules read.
    #[serde(borrow, default)]
    pub metadata: MetaView<'a>,
    /// The spec.
    #[serde(borrow, default)]
    pub spec: Option<StormServiceSpecView<'a>>,
}

/// A RoleSet read in one pass ([`StormServiceView`]).
#[derive(Debug, Deserialize)]
pub struct RoleSetView<'a> {
    /// The metadata the rules read.
    #[serde(borrow, default)]
    pub metadata: MetaView<'a>,
    /// The spec.
    #[serde(borrow, default)]
    pub spec: Option<RoleSetSpecView<'a>>,
}

/// The metadata the rules read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaView<'a> {
    /// `metadata.name`.
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    /// `metadata.generateName`.
    #[serde(borrow, default)]
    pub generate_name: Option<Str<'a>>,
    /// `metadata.namespace` (analysis queries are scoped to it).
    #[serde(borrow, default)]
    pub namespace: Option<Str<'a>>,
    /// Present when the object is being deleted.
    #[serde(default)]
    pub deletion_timestamp: Option<IgnoredAny>,
}

/// The length of a list whose items the rules do not read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count(pub usize);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl<'de> Visitor<'de> for CountVisitor {
            type Value = Count;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut count = 0;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    count += 1;
                }
                Ok(Count(count))
            }
        }
        deserializer.deserialize_seq(CountVisitor)
    }
}

/// A label selector (serialized as `LabelSelector` is, for messages).
#[derive(Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectorView<'a> {
    /// `matchExpressions`.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<RequirementView<'a>>>,
    /// `matchLabels`.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<Str<'a>, Str<'a>>>,
}

/// One `matchExpressions` requirement.
#[derive(Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct RequirementView<'a> {
    /// The label key.
    #[serde(borrow)]
    pub key: Str<'a>,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[serde(borrow)]
    pub operator: Str<'a>,
    /// The values (`In`, `NotIn`).
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<Str<'a>>>,
}

/// A StormService's spec.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StormServiceSpecView<'a> {
    /// `spec.replicas`.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// `spec.selector`.
    #[serde(borrow)]
    pub selector: SelectorView<'a>,
    /// `spec.stateful` (ignored; warned about).
    #[serde(default)]
    pub stateful: Option<bool>,
    /// `spec.template`.
    #[serde(borrow)]
    pub template: TemplateView<'a>,
    /// `spec.updateStrategy`.
    #[serde(borrow, default)]
    pub update_strategy: Option<StormServiceStrategyView<'a>>,
    /// `spec.revisionHistoryLimit`.
    #[serde(default)]
    pub revision_history_limit: Option<i32>,
    /// `spec.paused`.
    #[serde(default)]
    pub paused: Option<bool>,
    /// `spec.disruptionTolerance` (ignored; warned about).
    #[serde(default)]
    pub disruption_tolerance: Option<IgnoredAny>,
    /// `spec.progressDeadlineSeconds`.
    #[serde(default)]
    pub progress_deadline_seconds: Option<i32>,
    /// `spec.minReadySeconds`.
    #[serde(default)]
    pub min_ready_seconds: Option<i32>,
}

/// `spec.template` of a StormService.
#[derive(Debug, Deserialize)]
pub struct TemplateView<'a> {
    /// Its metadata's labels.
    #[serde(borrow, default)]
    pub metadata: Option<TemplateMetaView<'a>>,
    /// The RoleSet spec.
    #[serde(borrow, default)]
    pub spec: Option<RoleSetSpecView<'a>>,
}

/// The labels of an embedded object's metadata.
#[derive(Debug, Deserialize)]
pub struct TemplateMetaView<'a> {
    /// The labels.
    #[serde(borrow, default)]
    pub labels: Option<BTreeMap<Str<'a>, Str<'a>>>,
}

/// `spec.updateStrategy` of a StormService.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StormServiceStrategyView<'a> {
    /// `type`.
    #[serde(rename = "type", default)]
    pub type_: Option<StormServiceUpdateStrategyType>,
    /// `maxUnavailable`.
    #[serde(borrow, default)]
    pub max_unavailable: Option<IntOrStr<'a>>,
    /// `maxSurge`.
    #[serde(borrow, default)]
    pub max_surge: Option<IntOrStr<'a>>,
    /// `canary`.
    #[serde(borrow, default)]
    pub canary: Option<CanaryView<'a>>,
}

/// `spec.updateStrategy.canary`.
#[derive(Debug, Deserialize)]
pub struct CanaryView<'a> {
    /// The steps.
    #[serde(borrow, default)]
    pub steps: Option<Vec<StepView<'a>>>,
    /// The background analysis, read whole (rare, and small by its bounds).
    #[serde(default)]
    pub analysis: Option<Box<Analysis>>,
    /// `abortScaleDownDelaySeconds`.
    #[serde(default, rename = "abortScaleDownDelaySeconds")]
    pub abort_scale_down_delay_seconds: Option<i32>,
}

/// One canary step.
#[derive(Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct StepView<'a> {
    /// `setWeight`.
    #[serde(default)]
    pub set_weight: Option<i32>,
    /// `pause`.
    #[serde(borrow, default)]
    pub pause: Option<PauseView<'a>>,
    /// `analysis`, read whole (rare, and small by its bounds).
    #[serde(default)]
    pub analysis: Option<Box<Analysis>>,
}

/// A pause step.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct PauseView<'a> {
    /// `duration`: seconds, or a duration such as `1h30m`; absent for a manual gate.
    #[serde(borrow, default)]
    pub duration: Option<IntOrStr<'a>>,
}

/// A RoleSet's spec (also a StormService's `spec.template.spec`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleSetSpecView<'a> {
    /// The roles.
    #[serde(borrow, default)]
    pub roles: Option<Vec<RoleView<'a>>>,
    /// `updateStrategy`.
    #[serde(default)]
    pub update_strategy: Option<RoleSetUpdateStrategy>,
    /// `schedulingStrategy`.
    #[serde(default)]
    pub scheduling_strategy: Option<SchedulingView>,
    /// `topologyPolicy`.
    #[serde(default)]
    pub topology_policy: Option<IgnoredAny>,
    /// `pairing`.
    #[serde(borrow, default)]
    pub pairing: Option<Vec<PairingView<'a>>>,
    /// `minReadySeconds`.
    #[serde(default)]
    pub min_ready_seconds: Option<i32>,
    /// `servingGate` (only its presence is checked: the schema checks its value).
    #[serde(default)]
    pub serving_gate: Option<IgnoredAny>,
}

/// One pairing group.
#[derive(Debug, Deserialize)]
pub struct PairingView<'a> {
    /// `roles`.
    #[serde(borrow)]
    pub roles: Vec<Str<'a>>,
    /// `protocol`.
    #[serde(borrow, default)]
    pub protocol: Option<Str<'a>>,
}

/// One role.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleView<'a> {
    /// `name`.
    #[serde(borrow)]
    pub name: Str<'a>,
    /// `replicas`.
    #[serde(default)]
    pub replicas: Option<i32>,
    /// `upgradeOrder`.
    #[serde(default)]
    pub upgrade_order: Option<i32>,
    /// `podGroupSize`.
    #[serde(default)]
    pub pod_group_size: Option<i32>,
    /// `updateStrategy`.
    #[serde(borrow, default)]
    pub update_strategy: Option<RoleStrategyView<'a>>,
    /// `stateful`.
    #[serde(default)]
    pub stateful: Option<bool>,
    /// `template`: how many containers it has.
    #[serde(default)]
    pub template: Option<PodTemplateView>,
    /// `disruptionTolerance` (ignored; warned about).
    #[serde(default)]
    pub disruption_tolerance: Option<IgnoredAny>,
    /// `schedulingStrategy`.
    #[serde(default)]
    pub scheduling_strategy: Option<SchedulingView>,
    /// `rollout` (written by the StormService controller).
    #[serde(default)]
    pub rollout: Option<IgnoredAny>,
    /// `drain`, read whole (rare, and small by its bounds).
    #[serde(default)]
    pub drain: Option<Box<Drain>>,
}

/// A role's `updateStrategy`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoleStrategyView<'a> {
    /// `type`.
    #[serde(rename = "type", default)]
    pub type_: Option<RoleUpdateStrategyType>,
    /// `maxUnavailable`.
    #[serde(borrow, default)]
    pub max_unavailable: Option<IntOrStr<'a>>,
    /// `maxSurge`.
    #[serde(borrow, default)]
    pub max_surge: Option<IntOrStr<'a>>,
}

/// A pod template, as far as the rules read it: its container counts.
#[derive(Debug, Deserialize)]
pub struct PodTemplateView {
    /// The pod spec.
    #[serde(default)]
    pub spec: Option<PodSpecView>,
}

/// A pod spec's container counts.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView {
    /// `containers`.
    #[serde(default)]
    pub containers: Count,
    /// `initContainers`.
    #[serde(default)]
    pub init_containers: Option<Count>,
}

/// A `schedulingStrategy`: which schedulers it names.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingView {
    /// `godelSchedulingStrategy`.
    #[serde(default)]
    pub godel_scheduling_strategy: Option<IgnoredAny>,
    /// `coschedulingSchedulingStrategy`.
    #[serde(default)]
    pub coscheduling_scheduling_strategy: Option<IgnoredAny>,
    /// `volcanoSchedulingStrategy`.
    #[serde(default)]
    pub volcano_scheduling_strategy: Option<IgnoredAny>,
}

impl SchedulingView {
    /// The schedulers named.
    pub fn schedulers(&self) -> Vec<&'static str> {
        crate::api::common::schedulers_named(
            self.godel_scheduling_strategy.is_some(),
            self.coscheduling_scheduling_strategy.is_some(),
            self.volcano_scheduling_strategy.is_some(),
        )
    }

    /// The scheduler it names, when it names exactly one (two are denied).
    pub fn scheduler(&self) -> Option<crate::api::podgroup::Scheduler> {
        use crate::api::podgroup::Scheduler;
        match (
            self.coscheduling_scheduling_strategy.is_some(),
            self.volcano_scheduling_strategy.is_some(),
            self.godel_scheduling_strategy.is_some(),
        ) {
            (true, false, false) => Some(Scheduler::Coscheduling),
            (false, true, false) => Some(Scheduler::Volcano),
            (false, false, true) => Some(Scheduler::Godel),
            _ => None,
        }
    }
}

/// What the rules read of a stored StormService's status.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// `canaryStatus`.
    #[serde(default)]
    pub canary_status: Option<CanaryStatusView>,
}

/// `status.canaryStatus`.
#[derive(Debug, Default, Deserialize)]
pub struct CanaryStatusView {
    /// `phase`.
    #[serde(default)]
    pub phase: Option<CanaryPhase>,
}

impl StormServiceSpecView<'_> {
    /// `spec.replicas`, absent meaning the default.
    pub fn replicas_or_default(&self) -> i32 {
        self.replicas
            .unwrap_or(crate::api::defaults::DEFAULT_REPLICAS)
    }

    /// The update strategy type; absent means RollingUpdate.
    pub fn update_strategy_type(&self) -> StormServiceUpdateStrategyType {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.type_)
            .unwrap_or_default()
    }

    /// The canary steps, when a canary is configured (non-empty `steps`).
    pub fn canary_steps(&self) -> Option<&[StepView<'_>]> {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.canary.as_ref())
            .and_then(|c| c.steps.as_deref())
            .filter(|steps| !steps.is_empty())
    }
}

impl RoleView<'_> {
    /// `replicas`, absent meaning the default.
    pub fn replicas_or_default(&self) -> i32 {
        self.replicas
            .unwrap_or(crate::api::defaults::DEFAULT_REPLICAS)
    }

    /// `upgradeOrder`, absent meaning the default.
    pub fn upgrade_order_or_default(&self) -> i32 {
        self.upgrade_order
            .unwrap_or(crate::api::defaults::DEFAULT_UPGRADE_ORDER)
    }

    /// `podGroupSize`, absent meaning the default.
    pub fn pod_group_size_or_default(&self) -> i32 {
        self.pod_group_size
            .unwrap_or(crate::api::defaults::DEFAULT_POD_GROUP_SIZE)
    }

    /// The update strategy type; absent means Recreate.
    pub fn update_strategy_type(&self) -> RoleUpdateStrategyType {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.type_)
            .unwrap_or_default()
    }
}

impl PauseView<'_> {
    /// The pause length in seconds ([`crate::api::duration::pause_seconds`]).
    pub fn duration_seconds(&self) -> Result<Option<u64>, String> {
        pause_seconds(self.duration.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    #[test]
    fn strings_are_borrowed_from_the_document_unless_escaped() {
        let json = r#"{"metadata": {"name": "plain", "generateName": "esc\"aped"},
                       "spec": {"x": 1}}"#;
        let view: ObjectView<'_> = serde_json::from_str(json).unwrap();
        let name = view.metadata.name.unwrap();
        assert!(matches!(name.0, Cow::Borrowed(_)), "inside an Option");
        let escaped = view.metadata.generate_name.unwrap();
        assert!(matches!(escaped.0, Cow::Owned(_)));
        assert_eq!(escaped, "esc\"aped");
        assert_eq!(view.spec.unwrap().get(), r#"{"x": 1}"#);

        let selector: SelectorView<'_> =
            serde_json::from_str(r#"{"matchLabels": {"app": "a"}}"#).unwrap();
        let (key, value) = selector
            .match_labels
            .as_ref()
            .unwrap()
            .iter()
            .next()
            .unwrap();
        assert!(
            matches!((&key.0, &value.0), (Cow::Borrowed(_), Cow::Borrowed(_))),
            "inside a map"
        );
        assert_eq!(
            serde_json::to_string(&selector).unwrap(),
            r#"{"matchLabels":{"app":"a"}}"#,
            "serialized as LabelSelector is"
        );
    }

    #[test]
    fn lists_the_rules_only_count_are_counted_and_types_are_checked() {
        let pod: PodSpecView =
            serde_json::from_str(r#"{"containers": [{"name": "a"}, 3, null]}"#).unwrap();
        assert_eq!(pod.containers, Count(3));
        assert!(serde_json::from_str::<PodSpecView>(r#"{"containers": {}}"#).is_err());
        let role: Result<RoleView<'_>, _> =
            serde_json::from_str(r#"{"name": "a", "replicas": "2"}"#);
        assert!(
            role.is_err(),
            "a replicas that is not an integer fails as in RoleSpec"
        );
        let budget: IntOrStr<'_> =
            serde_json::from_str("3000000000").map_or(IntOrStr::Int(-1), |b| b);
        assert_eq!(budget, IntOrStr::Int(-1), "out of i32 range is an error");
    }
}
