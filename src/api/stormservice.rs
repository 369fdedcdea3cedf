//! StormService: a multi-role inference service made of RoleSets
//! (docs/aibrix-compatibility.md#the-same, docs/rollouts.md#canary).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::analysis::{Analysis, AnalysisStatus};
use super::borrowed::IntOrStr;
use super::budget::{Fenceposts, fenceposts};
use super::common::{Condition, DisruptionTolerance, EmbeddedObjectMetadata, RoleStatus};
use super::defaults::{
    DEFAULT_PROGRESS_DEADLINE_SECONDS, DEFAULT_REPLICAS, DEFAULT_REVISION_HISTORY_LIMIT,
};
use super::duration::pause_seconds;
use super::roleset::RoleSetSpec;

/// A multi-role inference service: `replicas` RoleSets rendered from one template, rolled
/// out together.
// kube's `printcolumn(...)` arguments repeat keys such as `type_` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "orchestration.aibrix.ai",
    version = "v1alpha1",
    kind = "StormService",
    namespaced,
    status = "StormServiceStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "StormService is a multi-role inference service (router, prefill, decode, ...) whose replicas are RoleSets.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.scalingTargetSelector"
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Desired number of replicas"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status",
        description = "Whether the StormService is ready"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "Replicas on the newest template"
    ),
    printcolumn(
        name = "Step",
        type_ = "integer",
        json_path = ".status.canaryStatus.currentStep",
        description = "Current canary step"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.canaryStatus.phase",
        description = "Canary phase"
    ),
    printcolumn(
        name = "Paused",
        type_ = "boolean",
        json_path = ".spec.paused",
        description = "Whether the StormService is paused"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "Time this StormService was created"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct StormServiceSpec {
    /// Number of RoleSets. Absent means 1. In pooled mode (1) the roles scale independently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = super::limits::MAX_REPLICAS))]
    pub replicas: Option<i32>,
    /// Selects the RoleSets of this StormService; must match `template.metadata.labels` and is
    /// immutable.
    pub selector: LabelSelector,
    /// Declared by AIBrix but unused (roles carry `stateful`); accepted and ignored with an
    /// admission warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful: Option<bool>,
    /// Template of every RoleSet.
    pub template: RoleSetTemplateSpec,
    /// How RoleSets are replaced when the template changes, including canary steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<StormServiceUpdateStrategy>,
    /// Number of old ControllerRevisions kept for rollback. Absent means 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Stops rollouts (and freezes canary timers); scaling continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Declared by AIBrix but unused; accepted and ignored with an admission warning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption_tolerance: Option<DisruptionTolerance>,
    /// Seconds without rollout progress (paused time excluded) before `Progressing` turns
    /// False with reason `ProgressDeadlineExceeded`. Absent means 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub progress_deadline_seconds: Option<i32>,
    /// Seconds a pod must have been Ready to count as available: budgets, canary steps,
    /// `Sequential` role order, `currentRevision` promotion and `Available` count available
    /// pods (an engine may still warm its caches after its readiness probe passes). Copied
    /// to every RoleSet; not part of a revision, so a change rolls nothing. Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = super::limits::MAX_MIN_READY_SECONDS))]
    pub min_ready_seconds: Option<i32>,
}

/// Template of the RoleSets of a StormService.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleSetTemplateSpec {
    /// Labels and annotations copied to every RoleSet; the labels must match `spec.selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<EmbeddedObjectMetadata>,
    /// Spec of every RoleSet; must have at least one role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<RoleSetSpec>,
}

/// How RoleSets are replaced when the StormService template changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StormServiceUpdateStrategy {
    /// `RollingUpdate` (replace RoleSets) or `InPlaceUpdate` (update RoleSets in place).
    /// Absent means `RollingUpdate`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "RollingUpdate"))]
    pub type_: Option<StormServiceUpdateStrategyType>,
    /// RoleSets that may be unavailable during an update: an integer or a percentage of
    /// `replicas` (rounded down).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// RoleSets that may be created above `replicas`: an integer or a percentage of
    /// `replicas` (rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Canary steps; absent or empty `steps` means no canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryUpdateStrategy>,
}

/// StormService update strategy type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum StormServiceUpdateStrategyType {
    /// Replace outdated RoleSets by new ones within the surge / unavailable budgets.
    #[default]
    RollingUpdate,
    /// Update RoleSets in place; roles roll their own pods.
    InPlaceUpdate,
}

/// A canary rollout: the new template reaches a growing share of replicas step by step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryUpdateStrategy {
    /// Steps, at most 50 as written; a final `setWeight: 100` is appended when missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_CANARY_STEPS + 1))]
    pub steps: Option<Vec<CanaryStep>>,
    /// An analysis that runs for the whole canary, from its first step until it completes:
    /// a failure aborts the canary at whatever step it is, an inconclusive result pauses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
    /// Seconds an aborted canary's pods (or RoleSets) are kept, out of traffic but warm, so
    /// a retry within them takes them back instead of loading every model again; deleted
    /// after. Argo Rollouts' name and meaning. Absent means 0: deleted at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = super::limits::MAX_ABORT_SCALE_DOWN_DELAY_SECONDS))]
    pub abort_scale_down_delay_seconds: Option<i32>,
}

/// One canary step: exactly one of `setWeight`, `pause` and `analysis`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStep {
    /// Share of replicas (percent, 0–100) to move to the new template. Weights never
    /// decrease. A share of replicas, not of traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub set_weight: Option<i32>,
    /// Wait for a duration, or (without `duration`) until promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseStep>,
    /// Measure the canary: success moves to the next step, a failure aborts the canary,
    /// an inconclusive result pauses it until promoted or aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
}

/// One canary step as the rollout runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Move this share (percent, at most 100) of replicas to the canary revision.
    Weight(u32),
    /// Wait this many seconds; `None` waits until promoted.
    Pause(Option<u64>),
    /// Run the step's analysis (in the spec's step of the same index).
    Analysis,
}

/// Argo's implied final 100 %: whether a canary whose last step has `last_set_weight` already
/// ends at full weight (else a `setWeight: 100` step follows). Weights over 100 count as 100
/// (validation denies them; one stored before squall must still finish).
pub fn ends_at_full_weight(last_set_weight: Option<i32>) -> bool {
    last_set_weight.is_some_and(|w| w >= 100)
}

impl CanaryStep {
    /// The step as the rollout runs it: a weight (clamped to 0–100), else a pause, else an
    /// analysis (a duration that does not parse, or a step with none of the three, waits
    /// 0 s: validation denies both).
    pub fn effective(&self) -> Step {
        match (self.set_weight, &self.pause) {
            (Some(w), _) => Step::Weight(u32::try_from(w).unwrap_or(0).min(100)),
            (None, Some(pause)) => Step::Pause(pause.duration_seconds().unwrap_or(Some(0))),
            (None, None) if self.analysis.is_some() => Step::Analysis,
            (None, None) => Step::Pause(Some(0)),
        }
    }
}

/// A pause step.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseStep {
    /// How long to wait: integer seconds, or `30s`, `5m`, `1h`, `1h30m`. Absent means wait
    /// until promoted; `0` means no wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<IntOrString>,
}

/// Observed state of a StormService.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
#[schemars(transform = super::bounded_status::bounded)]
pub struct StormServiceStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// RoleSets selected by the StormService.
    #[serde(default)]
    pub replicas: i32,
    /// RoleSets whose `Ready` condition is True.
    #[serde(default)]
    pub ready_replicas: i32,
    /// RoleSets that are not Ready.
    #[serde(default)]
    pub not_ready_replicas: i32,
    /// RoleSets at `currentRevision`.
    #[serde(default)]
    pub current_replicas: i32,
    /// RoleSets at `updateRevision` with every role updated.
    #[serde(default)]
    pub updated_replicas: i32,
    /// RoleSets at `updateRevision`, Ready, with every role updated and Ready.
    #[serde(default)]
    pub updated_ready_replicas: i32,
    /// RoleSets whose every pod is available (Ready for `minReadySeconds`): a RoleSet's
    /// `Ready` condition waits for its pods' availability, so with `minReadySeconds` 0 this
    /// is `readyReplicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_replicas: Option<i32>,
    /// Of `updatedReadyReplicas`, the RoleSets whose every pod is available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_available_replicas: Option<i32>,
    /// ControllerRevision of the stable template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_NAME_CHARS))]
    pub current_revision: Option<String>,
    /// ControllerRevision of the newest template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_NAME_CHARS))]
    pub update_revision: Option<String>,
    /// Conditions: `Ready`, `Progressing`, `ReplicaFailure`, `InvalidSpec`, `Paused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    /// Hash-collision counter for ControllerRevision names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// Label selector of the scale subresource: `storm-service-name=<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling_target_selector: Option<String>,
    /// Per-role counts summed over all RoleSets, sorted by role name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_ROLES))]
    pub role_statuses: Option<Vec<RoleStatus>>,
    /// State of the canary rollout, when one is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_status: Option<CanaryStatus>,
    /// What each pairing key serves, by role, summed over the RoleSets (absent without
    /// `pairing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_PAIRING_KEYS_REPORTED))]
    pub pairing: Option<Vec<super::PairingKeyStatus>>,
}

/// State of a canary rollout (docs/rollouts.md#status).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct CanaryStatus {
    /// Index of the step being executed.
    #[serde(default)]
    pub current_step: i32,
    /// Open pause gates; removing `CanaryPauseStep` promotes past a pause step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_conditions: Option<Vec<PauseCondition>>,
    /// Phase of the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<CanaryPhase>,
    /// When the canary was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted_at: Option<Time>,
    /// An aborted canary's pods (or RoleSets) are kept until then, out of traffic but warm
    /// for a retry (`abortScaleDownDelaySeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_until: Option<Time>,
    /// Human-readable state, e.g. why the canary was aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_MESSAGE_CHARS))]
    pub message: Option<String>,
    /// `Replica` or `Pooled`; fixed when the canary starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<CanaryMode>,
    /// ControllerRevision the canary started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_NAME_CHARS))]
    pub stable_revision: Option<String>,
    /// ControllerRevision being rolled out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_NAME_CHARS))]
    pub canary_revision: Option<String>,
    /// Hash of the steps the canary runs; an edit restarts it at step 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_hash: Option<String>,
    /// Progress within the current step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_state: Option<StepState>,
    /// When the current step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_start_time: Option<Time>,
    /// Seconds of `spec.paused` accumulated inside the current timed pause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_seconds: Option<i64>,
    /// Set by a user (`squall abort`) to return to the stable revision; cleared to retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<bool>,
    /// Set by a user (`squall promote --full`) to skip the remaining steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote_full: Option<bool>,
    /// Per-role progress (pooled mode: pods; replica mode: RoleSets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::limits::MAX_ROLES))]
    pub roles: Option<Vec<CanaryRoleStatus>>,
    /// The analysis of the current (or last) analysis step, with its measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisStatus>,
    /// The background analysis (`canary.analysis`), with its measurements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_analysis: Option<AnalysisStatus>,
}

/// Phase of a canary.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CanaryPhase {
    /// The canary is being set up.
    Initializing,
    /// Moving toward a step's weight.
    Progressing,
    /// Waiting in a pause step.
    Paused,
    /// Every replica runs the new revision.
    Completed,
    /// Returned (or returning) to the stable revision.
    Aborted,
}

/// Which replicas a canary moves.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum CanaryMode {
    /// Whole RoleSets move (`replicas > 1`).
    Replica,
    /// Pods of each changed role move inside the single RoleSet (`replicas == 1`).
    Pooled,
}

/// Progress within the current canary step.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StepState {
    /// Moving toward the step's weight.
    Upgrading,
    /// A pause step was entered and its condition recorded.
    StepPaused,
    /// An analysis step is measuring the canary.
    Analyzing,
    /// The step is done.
    StepReady,
}

/// An open pause gate.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PauseCondition {
    /// Why the canary is paused.
    pub reason: PauseReason,
    /// When the pause started.
    pub start_time: Time,
}

/// Reason of a pause gate.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PauseReason {
    /// A pause step of the canary.
    CanaryPauseStep,
    /// An analysis was inconclusive: `squall promote` goes on, `squall abort` rolls back.
    CanaryAnalysisInconclusive,
}

/// Canary progress of one role.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct CanaryRoleStatus {
    /// Role name.
    pub name: String,
    /// Replicas the current step moves to the canary revision.
    #[serde(default)]
    pub target: i32,
    /// Replicas on the canary revision.
    #[serde(default)]
    pub updated: i32,
    /// Replicas on the canary revision that are Ready.
    #[serde(default)]
    pub updated_ready: i32,
}

impl StormServiceSpec {
    /// Desired RoleSets, absent meaning the default.
    pub fn replicas_or_default(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_REPLICAS)
    }

    /// Revisions kept beyond those in use, absent meaning the default.
    pub fn revision_history_limit_or_default(&self) -> i32 {
        self.revision_history_limit
            .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
    }

    /// Seconds without progress before `Progressing` turns False, absent meaning the
    /// default.
    pub fn progress_deadline_seconds_or_default(&self) -> i32 {
        self.progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS)
    }

    /// The StormService's surge / unavailable budgets (in RoleSets) at `desired` RoleSets.
    pub fn fenceposts(&self, desired: u32) -> Fenceposts {
        let strategy = self.update_strategy.as_ref();
        fenceposts(
            strategy.and_then(|s| s.max_surge.as_ref()),
            strategy.and_then(|s| s.max_unavailable.as_ref()),
            desired,
        )
    }

    /// Update strategy type; absent means RollingUpdate.
    pub fn update_strategy_type(&self) -> StormServiceUpdateStrategyType {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.type_)
            .unwrap_or_default()
    }

    /// The canary steps as the rollout runs them, when a canary is configured: each step
    /// read ([`CanaryStep::effective`]), and the implied final full weight appended when the
    /// steps do not end at one ([`ends_at_full_weight`]). The controller runs these, `squall
    /// status` shows them, and the mutating webhook writes the same final step.
    pub fn effective_steps(&self) -> Option<Vec<Step>> {
        let steps = self.canary_steps()?;
        let mut effective: Vec<Step> = steps.iter().map(CanaryStep::effective).collect();
        if !ends_at_full_weight(steps.last().and_then(|s| s.set_weight)) {
            effective.push(Step::Weight(100));
        }
        Some(effective)
    }

    /// The canary steps, when a canary is configured (non-empty `steps`).
    pub fn canary_steps(&self) -> Option<&[CanaryStep]> {
        self.update_strategy
            .as_ref()
            .and_then(|s| s.canary.as_ref())
            .and_then(|c| c.steps.as_deref())
            .filter(|steps| !steps.is_empty())
    }
}

impl PauseStep {
    /// The pause length in seconds: `None` for a manual gate (no duration), `Some(0)` for no
    /// wait. Grammar (docs/rollouts.md#canary): an integer number of seconds, or
    /// `^(\d+h)?(\d+m)?(\d+s)?$` (non-empty). The error says what is wrong.
    pub fn duration_seconds(&self) -> Result<Option<u64>, String> {
        pause_seconds(self.duration.as_ref().map(IntOrStr::from).as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(duration: Option<IntOrString>) -> PauseStep {
        PauseStep { duration }
    }

    #[test]
    fn duration_grammar() {
        let ok = |s: &str| pause(Some(IntOrString::String(s.into()))).duration_seconds();
        assert_eq!(ok("30"), Ok(Some(30)));
        assert_eq!(ok("0"), Ok(Some(0)));
        assert_eq!(ok("30s"), Ok(Some(30)));
        assert_eq!(ok("5m"), Ok(Some(300)));
        assert_eq!(ok("1h"), Ok(Some(3600)));
        assert_eq!(ok("1h30m"), Ok(Some(5400)));
        assert_eq!(ok("1h2m3s"), Ok(Some(3723)));
        for bad in ["", "s", "1m1h", "1.5h", "30 s", "-5", "1d", "1h1h", "m5"] {
            assert!(ok(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(
            pause(Some(IntOrString::Int(45))).duration_seconds(),
            Ok(Some(45))
        );
        assert!(
            pause(Some(IntOrString::Int(-1)))
                .duration_seconds()
                .is_err()
        );
        assert_eq!(pause(None).duration_seconds(), Ok(None));
    }
}
