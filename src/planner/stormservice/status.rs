//! A StormService's status: RoleSet counts by revision, the promoted `currentRevision`,
//! its conditions and the progress deadline, derived from one pass at `now`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use std::collections::BTreeMap;

use kube::ResourceExt;

use super::canary::{CanaryDecision, needs_stable_revision};

use crate::api::keys::{
    CONDITION_AVAILABLE, CONDITION_CANARY_ANALYSIS, CONDITION_INVALID_SPEC, CONDITION_PAIRED,
    CONDITION_PAUSED, CONDITION_PROGRESSING, CONDITION_READY, CONDITION_REPLICA_FAILURE,
    CONDITION_SERVICE_CONFLICT, LABEL_STORM_SERVICE_NAME, LABEL_STORM_SERVICE_REVISION,
};
use crate::api::limits::MAX_PAIRING_KEYS_REPORTED;
use crate::api::{
    CanaryPhase, Condition, PairingKeyStatus, RoleSet, RoleStatus, StormService, StormServiceStatus,
};

use crate::planner::status::{ConditionStatus, Reason, Said, condition, keep_transition_times};

/// The pod counters of a StormService's status: summed from its RoleSets' on every pass.
pub const STORMSERVICE_COUNTERS: &[&str] = &[
    "roleStatuses",
    "replicas",
    "readyReplicas",
    "notReadyReplicas",
    "currentReplicas",
    "updatedReplicas",
    "updatedReadyReplicas",
    "availableReplicas",
    "updatedAvailableReplicas",
    "pairing",
];

/// The `CanaryAnalysis` condition's status, reason and message, while the canary has an
/// analysis: the worst of the step's and the background analysis decides.
fn analysis_condition(canary: Option<&crate::api::CanaryStatus>) -> Option<Said> {
    use crate::api::analysis::AnalysisPhase;
    let canary = canary?;
    let analyses = [
        canary.analysis.as_ref(),
        canary.background_analysis.as_ref(),
    ];
    let worst = analyses.iter().flatten().max_by_key(|a| match a.phase {
        AnalysisPhase::Failed => 3,
        AnalysisPhase::Inconclusive => 2,
        AnalysisPhase::Running => 1,
        AnalysisPhase::Successful => 0,
    })?;
    let which = match worst.step {
        Some(step) => format!("the analysis of step {step}"),
        None => "the background analysis".to_string(),
    };
    let message = worst.message.clone();
    Some(match worst.phase {
        AnalysisPhase::Failed => Said::new(
            ConditionStatus::False,
            Reason::MetricFailed,
            message.unwrap_or_else(|| format!("{which} failed")),
        ),
        AnalysisPhase::Inconclusive => Said::new(
            ConditionStatus::Unknown,
            Reason::Inconclusive,
            message.unwrap_or_else(|| format!("{which} is inconclusive")),
        ),
        AnalysisPhase::Running => Said::new(
            ConditionStatus::True,
            Reason::Measuring,
            format!("{which} is measuring"),
        ),
        AnalysisPhase::Successful => Said::new(
            ConditionStatus::True,
            Reason::Successful,
            format!("{which} succeeded"),
        ),
    })
}

/// `stored` with `new` conditions over those of the same types (transition times kept where
/// a status did not change) and every other field as it was: the report of a pass that stops
/// before planning.
pub fn with_conditions(
    stored: Option<&StormServiceStatus>,
    new: Vec<Condition>,
    generation: Option<i64>,
) -> StormServiceStatus {
    let old = stored.cloned().unwrap_or_default();
    let previous = old.conditions.clone().unwrap_or_default();
    let mut conditions: Vec<Condition> = previous
        .iter()
        .filter(|c| new.iter().all(|n| n.type_ != c.type_))
        .cloned()
        .collect();
    conditions.extend(new);
    keep_transition_times(&mut conditions, &previous);
    StormServiceStatus {
        observed_generation: generation,
        conditions: Some(conditions),
        ..old
    }
}

/// The conditions of a StormService whose spec the validator rejects: `InvalidSpec` True
/// with the validator's message, not Ready (its RoleSets are left as they are,
/// docs/architecture.md#one-reconcile).
pub fn invalid_spec_conditions(
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    vec![
        condition(
            CONDITION_INVALID_SPEC,
            ConditionStatus::True,
            Reason::ValidationFailed,
            message.to_string(),
            generation,
            now,
        ),
        condition(
            CONDITION_READY,
            ConditionStatus::False,
            Reason::InvalidSpec,
            "the spec is invalid; RoleSets are left as they are".into(),
            generation,
            now,
        ),
    ]
}

/// When the stable revision `missing` is gone while the canary of `service` needs it, the
/// canary waits — going on without the stable template would jump it to 100 % — and
/// `Progressing` says why and what to do. None when nothing waits on it.
pub fn stable_revision_missing(
    service: &StormService,
    missing: Option<&str>,
    now: Timestamp,
) -> Option<Condition> {
    let missing = missing?;
    let canary = service.status.as_ref()?.canary_status.as_ref()?;
    if !needs_stable_revision(canary) {
        return None;
    }
    let message = format!(
        "the stable ControllerRevision {missing} is gone; the canary waits. Restore it to \
         go on or abort, or run `squall promote --full {}` to finish on the canary revision",
        service.name_any()
    );
    Some(condition(
        CONDITION_PROGRESSING,
        ConditionStatus::False,
        Reason::StableRevisionMissing,
        message,
        service.metadata.generation,
        now,
    ))
}

/// What one StormService pass observed and decided, for its status.
pub struct ServiceStatusInput<'a> {
    /// The StormService as cached (its stored status is the previous one).
    pub service: &'a StormService,
    /// The revision RoleSets move to.
    pub update_revision: String,
    /// The revision RoleSets come from.
    pub current_revision: String,
    /// `status.collisionCount` after this pass.
    pub collision_count: u32,
    /// Its RoleSets.
    pub rolesets: &'a [RoleSet],
    /// `spec.replicas`.
    pub desired: u32,
    /// The canary's decision, when a canary runs.
    pub canary: Option<&'a CanaryDecision>,
    /// Why a RoleSet create was refused.
    pub refused: Option<&'a str>,
    /// Why the headless Service is not ours.
    pub service_conflict: Option<&'a str>,
    /// The time of the pass.
    pub now: Timestamp,
}

/// The status of a StormService after a pass: RoleSet counts by revision, per-role pod
/// counts, `currentRevision` promoted once the rollout is whole, the conditions (with their
/// transition times carried over when unchanged) and the progress deadline, whose clock
/// stops while paused. Also returns how long until the deadline would pass, while one runs
/// (one of the waits of `requeue::stormservice`).
pub fn stormservice_status(input: &ServiceStatusInput) -> (StormServiceStatus, Option<Duration>) {
    let service = input.service;
    let old = service.status.clone().unwrap_or_default();
    let generation = service.metadata.generation;
    let counts = service_counts(input);
    let new = |type_: &str, said: Said| {
        condition(
            type_,
            said.status,
            said.reason,
            said.message,
            generation,
            input.now,
        )
    };
    let (progressing, deadline_in) = progressing_condition(input, &counts, &old);
    let mut conditions = vec![
        new(CONDITION_READY, ready_condition(&counts)),
        new(CONDITION_AVAILABLE, available_condition(service, &counts)),
        progressing,
        new(CONDITION_PAUSED, paused_condition(service)),
        new(
            CONDITION_INVALID_SPEC,
            Said::new(
                ConditionStatus::False,
                Reason::Valid,
                "the spec passes validation".into(),
            ),
        ),
    ];
    if let Some((reason, message)) = replica_failure(input.refused, &counts.active) {
        conditions.push(new(
            CONDITION_REPLICA_FAILURE,
            Said::new(ConditionStatus::True, reason, message),
        ));
    }
    if let Some(message) = input.service_conflict {
        conditions.push(new(
            CONDITION_SERVICE_CONFLICT,
            Said::new(ConditionStatus::True, Reason::NotOwned, message.to_string()),
        ));
    }
    let paired = service
        .spec
        .template
        .spec
        .as_ref()
        .is_some_and(|spec| spec.pairing.as_ref().is_some_and(|g| !g.is_empty()));
    if paired {
        conditions.push(new(CONDITION_PAIRED, paired_condition(&counts.active)));
    }
    let canary_status = input.canary.and_then(|c| c.status.as_ref());
    if let Some(analysis) = analysis_condition(canary_status) {
        conditions.push(new(CONDITION_CANARY_ANALYSIS, analysis));
    }
    // Conditions of other writers (the canary) are kept.
    let ours = [
        CONDITION_CANARY_ANALYSIS,
        CONDITION_READY,
        CONDITION_AVAILABLE,
        CONDITION_PROGRESSING,
        CONDITION_PAUSED,
        CONDITION_INVALID_SPEC,
        CONDITION_REPLICA_FAILURE,
        CONDITION_SERVICE_CONFLICT,
        CONDITION_PAIRED,
    ];
    conditions.extend(
        old.conditions
            .iter()
            .flatten()
            .filter(|c| !ours.contains(&c.type_.as_str()))
            .cloned(),
    );
    keep_transition_times(
        &mut conditions,
        old.conditions.as_deref().unwrap_or_default(),
    );
    let status = StormServiceStatus {
        observed_generation: generation,
        replicas: counts.replicas,
        ready_replicas: counts.ready,
        not_ready_replicas: counts.replicas - counts.ready,
        current_replicas: counts.current,
        updated_replicas: counts.updated,
        updated_ready_replicas: counts.updated_ready,
        available_replicas: Some(counts.ready),
        updated_available_replicas: Some(counts.updated_ready),
        current_revision: Some(counts.current_revision),
        update_revision: Some(input.update_revision.clone()),
        conditions: Some(conditions),
        collision_count: Some(i32::try_from(input.collision_count).unwrap_or(i32::MAX)),
        scaling_target_selector: Some(format!("{LABEL_STORM_SERVICE_NAME}={}", service.name_any())),
        role_statuses: Some(role_statuses(input.rolesets, &input.update_revision)),
        canary_status: canary_status.cloned().or(old.canary_status.clone()),
        pairing: paired.then(|| pairing_statuses(&counts.active)),
    };
    (status, deadline_in)
}

/// What a StormService's status counts of its RoleSets, and what follows from the counts.
struct ServiceCounts<'a> {
    /// The RoleSets not being deleted.
    active: Vec<&'a RoleSet>,
    /// `spec.replicas`.
    desired: i32,
    replicas: i32,
    ready: i32,
    updated: i32,
    updated_ready: i32,
    /// RoleSets serving traffic (`serving`), for Available.
    serving: i32,
    /// `currentRevision` after this pass: promoted to the update revision once the rollout
    /// is whole (during a canary, only when it completes).
    current_revision: String,
    /// RoleSets on `current_revision`.
    current: i32,
    /// Every RoleSet updated and Ready, as many as desired, and current promoted.
    complete: bool,
    /// The canary's phase, when a canary runs.
    canary_phase: Option<CanaryPhase>,
}

/// Whether `roleset` is labelled with `revision`.
fn on_revision(roleset: &RoleSet, revision: &str) -> bool {
    roleset
        .labels()
        .get(LABEL_STORM_SERVICE_REVISION)
        .map(String::as_str)
        == Some(revision)
}

fn service_counts<'a>(input: &ServiceStatusInput<'a>) -> ServiceCounts<'a> {
    let update_name = input.update_revision.as_str();
    let active: Vec<&RoleSet> = input
        .rolesets
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .collect();
    let count = |f: &dyn Fn(&RoleSet) -> bool| active.iter().filter(|r| f(r)).count() as i32;
    let canary_phase = input
        .canary
        .and_then(|c| c.status.as_ref())
        .and_then(|c| c.phase);
    let canary_running = input.canary.is_some() && canary_phase != Some(CanaryPhase::Completed);
    // A rollout is over when no RoleSet is left elsewhere and the count is whole again (a
    // replacement created after that still belongs to the rollout).
    let rolled =
        count(&|r| !on_revision(r, update_name)) == 0 && active.len() as u32 >= input.desired;
    let current_revision =
        if canary_phase == Some(CanaryPhase::Completed) || (!canary_running && rolled) {
            update_name.to_owned()
        } else {
            input.current_revision.clone()
        };
    let role_replicas: BTreeMap<String, i32> = input
        .service
        .spec
        .template
        .spec
        .iter()
        .flat_map(|s| s.roles.iter().flatten())
        .map(|r| (r.name.clone(), r.replicas_or_default()))
        .collect();
    let replicas = active.len() as i32;
    let ready = count(&|r| fresh_ready(r));
    let updated =
        count(&|r| on_revision(r, update_name) && roles_updated(r, false, &role_replicas));
    let updated_ready = count(&|r| {
        on_revision(r, update_name) && fresh_ready(r) && roles_updated(r, true, &role_replicas)
    });
    let desired = input.desired as i32;
    let complete = ready >= desired
        && updated == desired
        && replicas == desired
        && current_revision == update_name;
    let serving = count(&|r| serving(r));
    let current = count(&|r| on_revision(r, &current_revision));
    ServiceCounts {
        active,
        desired,
        replicas,
        ready,
        updated,
        updated_ready,
        serving,
        current_revision,
        current,
        complete,
        canary_phase,
    }
}

/// `Ready`: the rollout is done.
fn ready_condition(counts: &ServiceCounts<'_>) -> Said {
    let desired = counts.desired;
    if counts.complete {
        Said::new(
            ConditionStatus::True,
            Reason::RoleSetsReady,
            format!("{} of {desired} RoleSets updated and Ready", counts.ready),
        )
    } else {
        Said::new(
            ConditionStatus::False,
            Reason::RoleSetsNotReady,
            format!(
                "{} of {desired} RoleSets updated and Ready",
                counts.updated_ready
            ),
        )
    }
}

/// `Available`: the service serves meanwhile — during a canary pause, a roll within its
/// budgets — as a Deployment stays Available.
fn available_condition(service: &StormService, counts: &ServiceCounts<'_>) -> Said {
    let desired = counts.desired;
    let needed = desired
        .saturating_sub(service.spec.fenceposts(desired as u32).max_unavailable as i32)
        .max(desired.min(1));
    let message = format!(
        "{} of {desired} RoleSets serving; {needed} needed",
        counts.serving
    );
    if counts.serving >= needed {
        Said::new(
            ConditionStatus::True,
            Reason::MinimumRoleSetsServing,
            message,
        )
    } else {
        Said::new(
            ConditionStatus::False,
            Reason::MinimumRoleSetsNotServing,
            message,
        )
    }
}

/// `Paused`: `spec.paused`.
fn paused_condition(service: &StormService) -> Said {
    if service.spec.paused == Some(true) {
        Said::new(
            ConditionStatus::True,
            Reason::Paused,
            "spec.paused is set: scaling continues, rollouts wait".into(),
        )
    } else {
        Said::new(
            ConditionStatus::False,
            Reason::Running,
            "rollouts proceed".into(),
        )
    }
}

/// `Progressing`, with the time of the last progress, and how long until the progress
/// deadline passes while it runs. The deadline clock does not run while paused (globally or
/// in a canary pause step): it restarts when waiting begins or ends, and is kept otherwise
/// (so status stays put).
fn progressing_condition(
    input: &ServiceStatusInput<'_>,
    counts: &ServiceCounts<'_>,
    old: &StormServiceStatus,
) -> (Condition, Option<Duration>) {
    let (service, now) = (input.service, input.now);
    let generation = service.metadata.generation;
    let paused = service.spec.paused == Some(true);
    let canary_paused = counts.canary_phase == Some(CanaryPhase::Paused);
    // Progress: any count moved since the stored status (or the spec changed).
    let moved = old.observed_generation != generation
        || (
            old.replicas,
            old.ready_replicas,
            old.updated_replicas,
            old.updated_ready_replicas,
        ) != (
            counts.replicas,
            counts.ready,
            counts.updated,
            counts.updated_ready,
        );
    let previous = old
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == CONDITION_PROGRESSING);
    let waiting = !counts.complete && (paused || canary_paused);
    let last_progress = match previous {
        Some(c)
            if !moved
                && waiting
                    == [Reason::Paused, Reason::CanaryPaused]
                        .iter()
                        .any(|r| c.reason.as_deref() == Some(r.as_str())) =>
        {
            c.last_update_time.as_ref().map_or(now, |t| t.0)
        }
        _ => now,
    };
    let deadline = i64::from(service.spec.progress_deadline_seconds_or_default());
    let stalled_for = now.as_second() - last_progress.as_second();
    let mut deadline_in = None;
    let Said {
        status,
        reason,
        message,
    } = if counts.complete {
        Said::new(
            ConditionStatus::True,
            Reason::RolloutComplete,
            "every RoleSet is updated and Ready".into(),
        )
    } else if paused {
        Said::new(
            ConditionStatus::Unknown,
            Reason::Paused,
            "the rollout is paused".into(),
        )
    } else if canary_paused {
        // Waiting in a pause step (or behind an inconclusive analysis) is not a stall: no
        // progress deadline runs.
        let inconclusive = input
            .canary
            .and_then(|c| c.status.as_ref())
            .and_then(|c| c.pause_conditions.as_ref())
            .is_some_and(|gates| {
                gates
                    .iter()
                    .any(|g| g.reason == crate::api::PauseReason::CanaryAnalysisInconclusive)
            });
        let message = if inconclusive {
            "the canary waits: its analysis is inconclusive (squall promote or squall abort)"
        } else {
            "the canary waits in a pause step"
        };
        Said::new(
            ConditionStatus::Unknown,
            Reason::CanaryPaused,
            message.into(),
        )
    } else if stalled_for >= deadline {
        Said::new(
            ConditionStatus::False,
            Reason::ProgressDeadlineExceeded,
            format!("no progress for {stalled_for}s (progressDeadlineSeconds {deadline})"),
        )
    } else {
        let left = u64::try_from(deadline - stalled_for).unwrap_or(1).max(1);
        deadline_in = Some(Duration::from_secs(left));
        Said::new(
            ConditionStatus::True,
            Reason::RollingOut,
            format!(
                "{} of {} RoleSets updated and Ready",
                counts.updated_ready, counts.desired
            ),
        )
    };
    let mut progressing = condition(
        CONDITION_PROGRESSING,
        status,
        reason,
        message,
        generation,
        now,
    );
    progressing.last_update_time = Some(Time(last_progress));
    (progressing, deadline_in)
}

/// The per-role counts summed over the RoleSets; the updated counts only from those on the
/// update revision.
fn role_statuses(rolesets: &[RoleSet], update_revision: &str) -> Vec<RoleStatus> {
    let mut roles: BTreeMap<String, RoleStatus> = BTreeMap::new();
    for roleset in rolesets {
        let updated_revision = on_revision(roleset, update_revision);
        for role in roleset
            .status
            .as_ref()
            .and_then(|s| s.roles.as_deref())
            .unwrap_or_default()
        {
            let entry = roles
                .entry(role.name.clone())
                .or_insert_with(|| RoleStatus {
                    name: role.name.clone(),
                    ..RoleStatus::default()
                });
            entry.replicas += role.replicas;
            entry.ready_replicas += role.ready_replicas;
            entry.not_ready_replicas += role.not_ready_replicas;
            *entry.available_replicas.get_or_insert(0) += available(role);
            let updated_sum = entry.updated_available_replicas.get_or_insert(0);
            if updated_revision {
                entry.updated_replicas += role.updated_replicas;
                entry.updated_ready_replicas += role.updated_ready_replicas;
                *updated_sum += updated_available(role);
            }
        }
    }
    roles.into_values().collect()
}

/// A role's available replicas; a status written before squall counted availability
/// counts Ready ones (what available meant then).
fn available(role: &RoleStatus) -> i32 {
    role.available_replicas.unwrap_or(role.ready_replicas)
}

/// A role's updated available replicas, read like [`available`].
pub(super) fn updated_available(role: &RoleStatus) -> i32 {
    role.updated_available_replicas
        .unwrap_or(role.updated_ready_replicas)
}

/// Whether a RoleSet's status describes its current generation and says Ready.
pub fn fresh_ready(roleset: &RoleSet) -> bool {
    let Some(status) = roleset.status.as_ref() else {
        return false;
    };
    status.observed_generation == roleset.metadata.generation
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == CONDITION_READY && c.status == "True")
}

/// Whether a RoleSet serves: Ready, or — while its roles roll in place — every role with as
/// many available replicas as its budgets keep (`replicas - maxUnavailable`, and at least one),
/// per a status that describes its current generation.
pub fn serving(roleset: &RoleSet) -> bool {
    if fresh_ready(roleset) {
        return true;
    }
    let Some(status) = roleset
        .status
        .as_ref()
        .filter(|s| s.observed_generation == roleset.metadata.generation)
    else {
        return false;
    };
    let counted = status.roles.as_deref().unwrap_or_default();
    roleset.spec.roles.iter().flatten().all(|role| {
        let replicas = role.replicas_or_default();
        let budget = role.fenceposts(u32::try_from(replicas).unwrap_or(0));
        let needed = replicas
            .saturating_sub(budget.max_unavailable as i32)
            .max(replicas.min(1));
        counted
            .iter()
            .find(|c| c.name == role.name)
            .is_some_and(|c| available(c) >= needed)
    })
}

/// Whether every role of a RoleSet has all its replicas updated (and Ready, with `ready`),
/// per a status that describes the RoleSet's current generation. `desired` holds the live
/// template's role replicas, which RoleSets on the update revision follow (a RoleSet not
/// yet patched to them is not updated).
fn roles_updated(roleset: &RoleSet, ready: bool, desired: &BTreeMap<String, i32>) -> bool {
    let Some(status) = roleset.status.as_ref() else {
        return false;
    };
    if status.observed_generation != roleset.metadata.generation {
        return false;
    }
    roleset.spec.roles.iter().flatten().all(|role| {
        status
            .roles
            .iter()
            .flatten()
            .find(|r| r.name == role.name)
            .is_some_and(|r| {
                let count = if ready {
                    updated_available(r)
                } else {
                    r.updated_replicas
                };
                let want = desired
                    .get(&role.name)
                    .copied()
                    .unwrap_or_else(|| role.replicas_or_default());
                role.replicas_or_default() == want && count >= want
            })
    })
}

/// Most RoleSets a `Paired` message names: where one waits for a partner, most do alike.
const PAIRED_MESSAGE_ROLESETS: usize = 4;

/// `Paired`: False while a RoleSet's key waits for a role (naming the first few RoleSets and
/// what they wait for: a partner that cannot start holds the rollout), True otherwise.
fn paired_condition(active: &[&RoleSet]) -> Said {
    let waiting: Vec<String> = active
        .iter()
        .filter_map(|r| {
            let paired = r
                .status
                .as_ref()?
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == CONDITION_PAIRED && c.status == "False")?;
            Some(format!(
                "RoleSet {}: {}",
                r.name_any(),
                paired.message.clone().unwrap_or_default()
            ))
        })
        .collect();
    if waiting.is_empty() {
        return Said::new(
            ConditionStatus::True,
            Reason::PartnersReady,
            "no RoleSet has a pairing key waiting for a role".into(),
        );
    }
    let more = waiting.len().saturating_sub(PAIRED_MESSAGE_ROLESETS);
    let mut message = waiting[..waiting.len().min(PAIRED_MESSAGE_ROLESETS)].join("; ");
    if more > 0 {
        message.push_str(&format!("; and {more} more"));
    }
    Said::new(ConditionStatus::False, Reason::NoPartner, message)
}

/// What each pairing key serves, summed over the RoleSets by key and role (sorted by key,
/// roles in their groups' order); the skew is the most of any RoleSet's, as each RoleSet is
/// its own routing domain.
fn pairing_statuses(active: &[&RoleSet]) -> Vec<PairingKeyStatus> {
    let mut keys: BTreeMap<String, PairingKeyStatus> = BTreeMap::new();
    for status in active
        .iter()
        .filter_map(|r| r.status.as_ref()?.pairing.as_ref())
    {
        for key in status {
            let sum = keys
                .entry(key.key.clone())
                .or_insert_with(|| PairingKeyStatus {
                    key: key.key.clone(),
                    ..PairingKeyStatus::default()
                });
            sum.skew = sum.skew.max(key.skew);
            for role in &key.roles {
                match sum.roles.iter_mut().find(|r| r.name == role.name) {
                    Some(r) => {
                        r.pods = r.pods.saturating_add(role.pods);
                        r.serving = r.serving.saturating_add(role.serving);
                    }
                    None => sum.roles.push(role.clone()),
                }
            }
        }
    }
    keys.into_values().take(MAX_PAIRING_KEYS_REPORTED).collect()
}

/// Why replicas are missing, if they are: a RoleSet create the API server refused
/// (`FailedCreate`), or RoleSets that report their own `ReplicaFailure` (`RoleSetFailure`,
/// naming them) — the StormService is where users look.
fn replica_failure(refused: Option<&str>, active: &[&RoleSet]) -> Option<(Reason, String)> {
    if let Some(message) = refused {
        return Some((Reason::FailedCreate, message.to_string()));
    }
    let failing: Vec<String> = active
        .iter()
        .filter_map(|r| {
            let failure = r
                .status
                .as_ref()?
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == CONDITION_REPLICA_FAILURE && c.status == "True")?;
            Some(format!(
                "RoleSet {}: {}",
                r.name_any(),
                failure.message.clone().unwrap_or_default()
            ))
        })
        .collect();
    (!failing.is_empty()).then(|| (Reason::RoleSetFailure, failing.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PairedRoleStatus, PairingGroup};
    use crate::planner::status::only_informational_differ;
    use proptest::prelude::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + second).unwrap()
    }

    #[test]
    fn every_replica_count_of_the_status_is_a_counter() {
        // A count left out would be written at once on every change of it: a write per
        // pod turning Ready, where the counters wait to coalesce.
        let status = StormServiceStatus {
            available_replicas: Some(0),
            updated_available_replicas: Some(0),
            ..StormServiceStatus::default()
        };
        let json = serde_json::to_value(&status).unwrap();
        let counts: Vec<&String> = json
            .as_object()
            .unwrap()
            .iter()
            .filter(|(key, value)| {
                value.is_i64() && (*key == "replicas" || key.ends_with("Replicas"))
            })
            .map(|(key, _)| key)
            .collect();
        assert!(counts.len() >= 8, "{counts:?}");
        for key in counts {
            assert!(STORMSERVICE_COUNTERS.contains(&key.as_str()), "{key}");
        }
    }

    fn service(replicas: i32, paused: bool, status: Option<StormServiceStatus>) -> StormService {
        let mut service: StormService = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "llm", "namespace": "ns", "generation": 2},
            "spec": {
                "replicas": replicas,
                "paused": paused,
                "selector": {},
                "template": {"spec": {"roles": [{"name": "decode", "replicas": 1}]}},
            },
        }))
        .unwrap();
        service.status = status;
        service
    }

    /// A RoleSet on `revision`, Ready (with its one pod updated and ready) or not.
    fn roleset(name: &str, revision: &str, ready: bool) -> RoleSet {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "generation": 1,
                "labels": {LABEL_STORM_SERVICE_REVISION: revision}},
            "spec": {"roles": [{"name": "decode", "replicas": 1}]},
            "status": {
                "observedGeneration": 1,
                "roles": [{"name": "decode", "replicas": 1, "readyReplicas": i32::from(ready),
                    "notReadyReplicas": i32::from(!ready), "updatedReplicas": 1,
                    "updatedReadyReplicas": i32::from(ready)}],
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" },
                    "lastTransitionTime": "2027-01-15T08:00:00Z", "reason": "r", "message": "m"}],
            },
        }))
        .unwrap()
    }

    fn derive(
        service: &StormService,
        rolesets: &[RoleSet],
        current: &str,
        now: Timestamp,
    ) -> (StormServiceStatus, Option<Duration>) {
        stormservice_status(&ServiceStatusInput {
            service,
            update_revision: "new".into(),
            current_revision: current.into(),
            collision_count: 0,
            rolesets,
            desired: u32::try_from(service.spec.replicas_or_default()).unwrap(),
            canary: None,
            refused: None,
            service_conflict: None,
            now,
        })
    }

    fn find<'a>(status: &'a StormServiceStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    #[test]
    fn a_paired_service_sums_its_keys_over_rolesets_and_names_those_that_wait() {
        let mut service = service(2, false, None);
        service.spec.template.spec.as_mut().unwrap().pairing = Some(vec![PairingGroup {
            roles: vec!["prefill".into(), "decode".into()],
            protocol: None,
        }]);
        let paired = |name: &str, serving: [i32; 2], skew: i32, waits: Option<&str>| {
            let mut r = roleset(name, "new", true);
            let status = r.status.as_mut().unwrap();
            status.pairing = Some(vec![PairingKeyStatus {
                key: "k".into(),
                roles: ["prefill", "decode"]
                    .iter()
                    .zip(serving)
                    .map(|(role, serving)| PairedRoleStatus {
                        name: role.to_string(),
                        pods: 2,
                        serving,
                    })
                    .collect(),
                skew,
            }]);
            if let Some(waits) = waits {
                status.conditions.as_mut().unwrap().push(Condition {
                    type_: CONDITION_PAIRED.into(),
                    status: "False".into(),
                    reason: Some("NoPartner".into()),
                    message: Some(waits.into()),
                    ..Condition::default()
                });
            }
            r
        };
        let rolesets = [
            paired("a", [2, 2], 0, None),
            paired(
                "b",
                [1, 0],
                1,
                Some("key k waits for role decode (none of its 2 pods up)"),
            ),
        ];
        let (status, _) = derive(&service, &rolesets, "new", at(0));
        let keys = status.pairing.as_ref().expect("the keys");
        assert_eq!(keys.len(), 1);
        let summed: Vec<(&str, i32, i32)> = keys[0]
            .roles
            .iter()
            .map(|r| (r.name.as_str(), r.pods, r.serving))
            .collect();
        assert_eq!(summed, [("prefill", 4, 3), ("decode", 4, 2)]);
        assert_eq!(keys[0].skew, 1, "the most of any RoleSet's");
        let waiting = find(&status, CONDITION_PAIRED);
        assert_eq!(waiting.status, "False");
        assert_eq!(
            waiting.message.as_deref(),
            Some("RoleSet b: key k waits for role decode (none of its 2 pods up)")
        );
        let (settled, _) = derive(&service, &[paired("a", [2, 2], 0, None)], "new", at(0));
        assert_eq!(find(&settled, CONDITION_PAIRED).status, "True");
        // Without pairing, neither appears.
        let (plain, _) = derive(&self::service(2, false, None), &rolesets, "new", at(0));
        assert!(plain.pairing.is_none());
        assert!(
            plain
                .conditions
                .iter()
                .flatten()
                .all(|c| c.type_ != CONDITION_PAIRED)
        );
    }

    #[test]
    fn a_service_mid_rollout_is_available_though_not_ready() {
        // Four RoleSets, two moved to the new revision, every one serving: a canary pause.
        let mid = [
            roleset("a", "old", true),
            roleset("b", "old", true),
            roleset("c", "new", true),
            roleset("d", "new", true),
        ];
        let (status, _) = derive(&service(4, false, None), &mid, "old", at(0));
        assert_eq!(
            find(&status, "Ready").status,
            "False",
            "the rollout is not done"
        );
        let available = find(&status, "Available");
        assert_eq!(available.status, "True");
        assert_eq!(available.reason.as_deref(), Some("MinimumRoleSetsServing"));
        // The default budget lets one RoleSet be away; two is one too many.
        let (one_down, _) = derive(
            &service(4, false, None),
            &[
                mid[0].clone(),
                mid[1].clone(),
                mid[2].clone(),
                roleset("d", "new", false),
            ],
            "old",
            at(0),
        );
        assert_eq!(find(&one_down, "Available").status, "True");
        let (two_down, _) = derive(
            &service(4, false, None),
            &[
                mid[0].clone(),
                mid[1].clone(),
                roleset("c", "new", false),
                roleset("d", "new", false),
            ],
            "old",
            at(0),
        );
        assert_eq!(find(&two_down, "Available").status, "False");
        // One RoleSet whose roles roll in place within their budget still serves; none
        // Ready at all does not, whatever the budget.
        let mut rolling = roleset("a", "new", false);
        let spec = serde_json::json!([{"name": "decode", "replicas": 2,
            "updateStrategy": {"maxUnavailable": 1}}]);
        rolling.spec.roles = serde_json::from_value(spec).unwrap();
        let counts = &mut rolling.status.as_mut().unwrap().roles.as_mut().unwrap()[0];
        counts.ready_replicas = 1;
        let (pooled, _) = derive(&service(1, false, None), &[rolling.clone()], "new", at(0));
        assert_eq!(find(&pooled, "Available").status, "True");
        rolling.status.as_mut().unwrap().roles.as_mut().unwrap()[0].ready_replicas = 0;
        let (down, _) = derive(&service(1, false, None), &[rolling], "new", at(0));
        assert_eq!(find(&down, "Available").status, "False");
    }

    #[test]
    fn current_revision_is_promoted_only_once_the_rollout_is_whole() {
        let on_new = [roleset("a", "new", true)];
        let (partial, _) = derive(&service(2, false, None), &on_new, "old", at(0));
        assert_eq!(
            partial.current_revision.as_deref(),
            Some("old"),
            "one of two RoleSets"
        );
        let whole = [roleset("a", "new", true), roleset("b", "new", true)];
        let (done, _) = derive(&service(2, false, None), &whole, "old", at(0));
        assert_eq!(done.current_revision.as_deref(), Some("new"));
        assert_eq!(find(&done, "Ready").status, "True");
        assert_eq!(
            (
                done.replicas,
                done.ready_replicas,
                done.updated_ready_replicas
            ),
            (2, 2, 2)
        );
    }

    #[test]
    fn the_progress_deadline_does_not_count_paused_time() {
        let rolling = [roleset("a", "new", false), roleset("b", "old", true)];
        let (paused, _) = derive(&service(2, true, None), &rolling, "old", at(0));
        assert_eq!(
            find(&paused, "Progressing").reason.as_deref(),
            Some("Paused")
        );
        // Paused for longer than the 600 s deadline, then resumed: the clock starts again.
        let (still, _) = derive(
            &service(2, true, Some(paused.clone())),
            &rolling,
            "old",
            at(1000),
        );
        assert_eq!(still, paused, "nothing changes while paused");
        let (resumed, requeue) = derive(&service(2, false, Some(still)), &rolling, "old", at(1000));
        let progressing = find(&resumed, "Progressing");
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_deref()),
            ("True", Some("RollingOut"))
        );
        assert_eq!(
            requeue,
            Some(Duration::from_secs(600)),
            "the whole deadline is left"
        );
        // Without progress, the deadline passes 600 s after resuming.
        let (stalled, _) = derive(&service(2, false, Some(resumed)), &rolling, "old", at(1600));
        assert_eq!(
            find(&stalled, "Progressing").reason.as_deref(),
            Some("ProgressDeadlineExceeded")
        );
    }

    proptest! {
        /// A pass that observes nothing new derives the status it wrote: no write, and the
        /// conditions keep their transition times.
        #[test]
        fn a_stormservice_status_derived_again_is_unchanged(
            rolesets in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..4),
            replicas in 1i32..4,
            paused in any::<bool>(),
            later in 1i64..599,
        ) {
            let rolesets: Vec<RoleSet> = rolesets
                .iter()
                .enumerate()
                .map(|(i, &(new, ready))| roleset(&format!("rs{i}"), if new { "new" } else { "old" }, ready))
                .collect();
            let (first, _) = derive(&service(replicas, paused, None), &rolesets, "old", at(0));
            let current = first.current_revision.clone().unwrap();
            let (again, _) = derive(&service(replicas, paused, Some(first.clone())), &rolesets, &current, at(later));
            prop_assert_eq!(again, first);
        }
    }

    proptest! {
        /// What may wait is never what a decision (or a waiting client) reads: a pass that
        /// turns `Ready` or `Progressing`, or promotes `currentRevision`, writes at once.
        #[test]
        fn a_stormservice_change_that_decides_is_never_held_back(
            before in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..4),
            after in proptest::collection::vec((any::<bool>(), any::<bool>()), 0..4),
            replicas in 1i32..4,
            later in 1i64..599,
        ) {
            let rolesets = |states: &[(bool, bool)]| -> Vec<RoleSet> {
                states
                    .iter()
                    .enumerate()
                    .map(|(i, &(new, ready))| roleset(&format!("rs{i}"), if new { "new" } else { "old" }, ready))
                    .collect()
            };
            let (first, _) = derive(&service(replicas, false, None), &rolesets(&before), "old", at(0));
            let current = first.current_revision.clone().unwrap();
            let (next, _) = derive(&service(replicas, false, Some(first.clone())), &rolesets(&after), &current, at(later));
            let state = |s: &StormServiceStatus, type_: &str| {
                let c = find(s, type_);
                (c.status.clone(), c.reason.clone())
            };
            if state(&first, "Ready") != state(&next, "Ready")
                || state(&first, "Progressing") != state(&next, "Progressing")
                || first.current_revision != next.current_revision
            {
                prop_assert!(!only_informational_differ(&first, &next, STORMSERVICE_COUNTERS));
            }
        }
    }

    #[test]
    fn conditions_written_before_planning_replace_their_types_and_keep_the_rest() {
        let then = Timestamp::from_second(1_000).unwrap();
        let now = Timestamp::from_second(2_000).unwrap();
        let stored = StormServiceStatus {
            replicas: 3,
            conditions: Some(vec![
                condition(
                    CONDITION_READY,
                    ConditionStatus::False,
                    Reason::InvalidSpec,
                    "old".into(),
                    Some(1),
                    then,
                ),
                condition(
                    CONDITION_PROGRESSING,
                    ConditionStatus::True,
                    Reason::RollingOut,
                    "x".into(),
                    Some(1),
                    then,
                ),
            ]),
            ..StormServiceStatus::default()
        };
        let status = with_conditions(
            Some(&stored),
            invalid_spec_conditions("spec.replicas: must be >= 0", Some(2), now),
            Some(2),
        );
        assert_eq!(status.replicas, 3, "other fields are kept");
        assert_eq!(status.observed_generation, Some(2));
        let conditions = status.conditions.unwrap();
        let find = |t: &str| conditions.iter().find(|c| c.type_ == t).unwrap();
        assert_eq!(conditions.len(), 3);
        assert_eq!(find(CONDITION_PROGRESSING).message.as_deref(), Some("x"));
        assert_eq!(
            find(CONDITION_INVALID_SPEC).message.as_deref(),
            Some("spec.replicas: must be >= 0")
        );
        assert_eq!(
            find(CONDITION_READY).last_transition_time,
            Some(Time(then)),
            "Ready stayed False: its transition time stays"
        );
        assert_eq!(
            find(CONDITION_INVALID_SPEC).last_transition_time,
            Some(Time(now))
        );
    }

    #[test]
    fn a_missing_stable_revision_holds_only_a_canary_that_needs_it() {
        let now = Timestamp::from_second(2_000).unwrap();
        let canary = |phase: CanaryPhase| StormServiceStatus {
            canary_status: Some(crate::api::CanaryStatus {
                phase: Some(phase),
                ..Default::default()
            }),
            ..StormServiceStatus::default()
        };
        let running = service(2, false, Some(canary(CanaryPhase::Paused)));
        let held = stable_revision_missing(&running, Some("llm-abc"), now).unwrap();
        assert_eq!(
            (held.type_.as_str(), held.status.as_str()),
            (CONDITION_PROGRESSING, "False")
        );
        let message = held.message.unwrap();
        assert!(message.contains("llm-abc") && message.contains("squall promote --full llm"));
        assert_eq!(stable_revision_missing(&running, None, now), None);
        let done = service(2, false, Some(canary(CanaryPhase::Completed)));
        assert_eq!(stable_revision_missing(&done, Some("llm-abc"), now), None);
        assert_eq!(
            stable_revision_missing(&service(2, false, None), Some("llm-abc"), now),
            None,
            "no canary, nothing waits"
        );
    }
}
