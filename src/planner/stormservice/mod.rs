//! One StormService pass, decided (docs/rollouts.md#replica-and-pooled-mode with
//! docs/rollouts.md#canary, docs/architecture.md#one-reconcile): from the StormService, its
//! revisions and its RoleSets as cached, the canary step, the revision RoleSets move to and the
//! RoleSets to create (rendered), delete, move in place or re-spec. The controller carries the pass
//! out and writes the status; nothing here does I/O or reads the clock.

pub mod canary;
pub mod replicas;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::render::{shorten_keep_prefix, template_hash};
use super::revision::{RevisionError, holds_as_read, revision_hash, template_of};
use crate::api::budget::Fenceposts;
use crate::api::keys::{
    ANNOTATION_REVISION, ANNOTATION_ROLE_REVISION_NAME_PREFIX, ANNOTATION_ROLE_REVISION_PREFIX,
    ANNOTATION_ROLESET_INDEX, CONDITION_PAUSED, FINALIZER_ROLESET, LABEL_STORM_SERVICE_NAME,
    LABEL_STORM_SERVICE_REVISION,
};
use crate::api::{
    CanaryMode, CanaryPhase, CanaryRoleStatus, CanaryStatus, RoleRollout, RoleSet, RoleSetSpec,
    RoleSetTemplateSpec, ServingGate, StormService, StormServiceUpdateStrategyType,
};
use canary::{CanaryDecision, CanaryInput, step, target, weight_at};
use replicas::{PendingRoleSet, RoleSetView, ServiceAction, ServiceInput, plan};
use status::fresh_ready;

/// Longest RoleSet `generateName` (the API server appends 5 characters).
const GENERATE_NAME_LIMIT: usize = 58;

/// What one StormService pass observed.
pub struct PassInput<'a> {
    /// The StormService as cached (its stored status is the previous pass's).
    pub service: &'a StormService,
    /// The revision RoleSets come from.
    pub current: &'a ControllerRevision,
    /// The revision of the live template.
    pub update: &'a ControllerRevision,
    /// `status.currentRevision` when no such revision exists any more.
    pub stable_missing: Option<&'a str>,
    /// Every revision of the StormService.
    pub history: &'a [ControllerRevision],
    /// Its RoleSets, as cached.
    pub rolesets: &'a [RoleSet],
    /// RoleSet creates issued and not yet observed.
    pub pending_creates: Vec<PendingRoleSet>,
    /// RoleSet deletes issued and not yet observed.
    pub pending_deletes: BTreeSet<String>,
    /// Unix seconds.
    pub now: i64,
    /// Canary analysis measurements taken this pass ([`canary::due`]).
    pub measured: &'a [canary::analysis::Measured],
}

/// A RoleSet to create, rendered.
pub struct RoleSetCreate {
    /// Its `roleset-index` slot.
    pub index: u32,
    /// From the current (stable) revision rather than the target.
    pub stable: bool,
    /// The object to send.
    pub roleset: RoleSet,
}

/// A RoleSet moved to the target revision in place (pooled mode): its spec and squall's
/// labels and annotations are replaced; everything else on it (third-party metadata, the
/// `roleset-index`) stays (an upstream bug squall does not copy,
/// docs/aibrix-compatibility.md#upstream-bugs-squall-does-not-copy).
pub struct InPlaceMove {
    /// The RoleSet.
    pub name: String,
    /// The version the move was decided from (the patch is conditional on it).
    pub resource_version: Option<String>,
    /// Whether it has labels / annotations maps at all (a JSON patch adds into a map).
    pub has_labels: bool,
    /// See `has_labels`.
    pub has_annotations: bool,
    /// Its new spec.
    pub spec: RoleSetSpec,
    /// squall's labels for the target revision.
    pub labels: BTreeMap<String, String>,
    /// squall's annotations for the target revision.
    pub annotations: BTreeMap<String, String>,
}

/// The pass, decided.
pub struct Pass {
    /// `spec.replicas`.
    pub desired: u32,
    /// The canary's decision, when a canary runs.
    pub canary: Option<CanaryPass>,
    /// Which RoleSets to create, delete or move (and whether the pass scaled).
    pub action: ServiceAction,
    /// The creates of `action`, rendered.
    pub creates: Vec<RoleSetCreate>,
    /// The in-place moves of `action`.
    pub moves: Vec<InPlaceMove>,
    /// RoleSets on the target revision whose spec differs from the target's (role replicas
    /// are not part of a revision — an autoscaler's edit — and a pooled canary's partitions):
    /// their new spec.
    pub respec: Vec<(String, RoleSetSpec)>,
}

/// Decides one StormService pass. Fails only on a revision whose data is not a template.
pub fn decide(input: &PassInput) -> Result<Pass, RevisionError> {
    let service = input.service;
    let (current_name, update_name) = (input.current.name_any(), input.update.name_any());
    let desired = u32::try_from(service.spec.replicas_or_default()).unwrap_or(0);
    let update_template = service.spec.template.clone();
    let current_template = if current_name == update_name {
        update_template.clone()
    } else {
        with_live_replicas(template_of(input.current)?, &update_template)
    };
    // The canary decides from the stored status as cached; the controller's status write is
    // conditional on nobody having written since (docs/architecture.md#one-reconcile).
    let mut canary = evaluate_canary(input, desired, &update_template, &current_template);
    if let Some(pass) = canary.as_mut() {
        let progress = canary_progress(
            pass,
            input.rolesets,
            desired,
            &update_name,
            &update_template,
            &current_template,
            service
                .status
                .as_ref()
                .and_then(|s| s.canary_status.as_ref()),
        );
        if let Some(status) = pass.decision.status.as_mut() {
            status.roles = Some(progress);
        }
    }
    let pooled = canary
        .as_ref()
        .is_some_and(|c| c.mode == CanaryMode::Pooled);
    let moves_to = target_rendering(input, canary.as_ref(), &update_template, &current_template);
    let strategy = if pooled {
        StormServiceUpdateStrategyType::InPlaceUpdate
    } else {
        service.spec.update_strategy_type()
    };
    let equivalent = equivalent_revisions(input, &moves_to.name, &update_template);
    // A replica-mode canary aborted and kept warm: its RoleSets are held out of traffic
    // and out of the plan, which counts them as present (like terminating ones) and
    // deletes them once the time is up (docs/rollouts.md#warm-abort).
    let warm: Vec<&RoleSet> = canary
        .as_ref()
        .filter(|c| !pooled && c.warm_until.is_some())
        .map(|_| {
            input
                .rolesets
                .iter()
                .filter(|r| {
                    r.metadata.deletion_timestamp.is_none()
                        && r.labels().get(LABEL_STORM_SERVICE_REVISION) == Some(&update_name)
                })
                .collect()
        })
        .unwrap_or_default();
    let action = plan(&ServiceInput {
        desired,
        budgets: budgets(service, desired),
        strategy,
        paused: service.spec.paused == Some(true),
        two_revisions: current_name != update_name,
        rolesets: input
            .rolesets
            .iter()
            .map(|r| {
                let mut view = view(r, &moves_to.name, &equivalent);
                view.terminating |= warm.iter().any(|w| w.metadata.uid == r.metadata.uid);
                view
            })
            .collect(),
        pending_creates: input.pending_creates.clone(),
        pending_deletes: input.pending_deletes.clone(),
        max_updated: canary
            .as_ref()
            .filter(|c| !pooled && !c.decision.aborting)
            .map(|c| target(desired, c.decision.weight)),
        in_place_unavailable: in_place_unavailable(service, desired),
    });
    Ok(Pass {
        desired,
        creates: render_creates(input, &action, &moves_to, &current_template),
        moves: in_place_moves(input, &action, &moves_to, &equivalent),
        respec: respecs(input.rolesets, &action, &moves_to)
            .into_iter()
            .chain(held_out(&warm))
            .collect(),
        canary,
        action,
    })
}

/// A revision RoleSets are rendered from: its name, its ControllerRevision, its template
/// and the revision each role's template comes from.
struct Rendering<'a> {
    name: String,
    revision: &'a ControllerRevision,
    template: RoleSetTemplateSpec,
    roles: BTreeMap<String, &'a ControllerRevision>,
}

/// The stable revision's rendering.
fn stable_rendering<'a>(
    input: &PassInput<'a>,
    current_template: &RoleSetTemplateSpec,
) -> Rendering<'a> {
    Rendering {
        name: input.current.name_any(),
        revision: input.current,
        template: with_service_settings(current_template.clone(), input.service),
        roles: role_revisions(
            current_template,
            current_template,
            input.current,
            input.current,
            false,
        ),
    }
}

/// What RoleSets move to: the update revision — in pooled mode with the canary's weight
/// rendered into its spec — or the stable one while a replica-mode canary is aborted.
fn target_rendering<'a>(
    input: &PassInput<'a>,
    canary: Option<&CanaryPass>,
    update_template: &RoleSetTemplateSpec,
    current_template: &RoleSetTemplateSpec,
) -> Rendering<'a> {
    let aborting = canary.is_some_and(|c| c.decision.aborting);
    let pooled = canary.filter(|c| c.mode == CanaryMode::Pooled);
    if aborting && pooled.is_none() {
        return stable_rendering(input, current_template);
    }
    let mut target = Rendering {
        name: input.update.name_any(),
        revision: input.update,
        template: with_service_settings(update_template.clone(), input.service),
        roles: role_revisions(
            update_template,
            current_template,
            input.update,
            input.current,
            true,
        ),
    };
    if let Some(c) = pooled {
        let at = if aborting {
            PooledAt::Aborted {
                warm_until: c.warm_until,
            }
        } else {
            PooledAt::Weight(c.decision.weight)
        };
        target.template.spec = Some(pooled_spec(
            update_template,
            current_template,
            at,
            &input.current.name_any(),
            input.service,
        ));
    }
    target
}

/// `template` with what RoleSets carry in their spec from the StormService's beside its
/// template: `minReadySeconds` (docs/rollouts.md#minreadyseconds), and an open serving gate
/// when an aborted canary is to be kept warm (docs/rollouts.md#warm-abort). Neither is part
/// of a revision: a change re-specs the RoleSets and rolls nothing.
fn with_service_settings(
    mut template: RoleSetTemplateSpec,
    service: &StormService,
) -> RoleSetTemplateSpec {
    if let Some(spec) = template.spec.as_mut() {
        service_settings(spec, service);
    }
    template
}

/// See [`with_service_settings`].
fn service_settings(spec: &mut RoleSetSpec, service: &StormService) {
    spec.min_ready_seconds = service.spec.min_ready_seconds;
    spec.serving_gate = (abort_delay(service) > 0).then_some(ServingGate::Open);
}

/// `canary.abortScaleDownDelaySeconds`, 0 when absent.
fn abort_delay(service: &StormService) -> i64 {
    service
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.canary.as_ref())
        .and_then(|c| c.abort_scale_down_delay_seconds)
        .map_or(0, |d| i64::from(d.max(0)))
}

/// RoleSets made from another revision that holds the target's template as squall reads
/// it — AIBrix's, at a cut-over — are the target's: moved in place (relabelled, the spec
/// rewritten), never replaced. Only revisions some RoleSet is made from are read.
fn equivalent_revisions(
    input: &PassInput,
    target_name: &str,
    update_template: &RoleSetTemplateSpec,
) -> BTreeSet<String> {
    if target_name != input.update.name_any() {
        return BTreeSet::new();
    }
    let labelled: BTreeSet<&String> = input
        .rolesets
        .iter()
        .filter_map(|r| r.labels().get(LABEL_STORM_SERVICE_REVISION))
        .collect();
    input
        .history
        .iter()
        .filter(|r| {
            r.metadata
                .name
                .as_ref()
                .is_some_and(|n| n != target_name && labelled.contains(n))
        })
        .filter(|r| holds_as_read(r, update_template))
        .map(ResourceExt::name_any)
        .collect()
}

/// The creates of `action`, rendered from the target or (a stable share) the stable
/// revision.
fn render_creates(
    input: &PassInput,
    action: &ServiceAction,
    target: &Rendering,
    current_template: &RoleSetTemplateSpec,
) -> Vec<RoleSetCreate> {
    let stable = action
        .create
        .iter()
        .any(|c| !c.updated)
        .then(|| stable_rendering(input, current_template));
    action
        .create
        .iter()
        .map(|create| {
            let from = match &stable {
                Some(stable) if !create.updated => stable,
                _ => target,
            };
            RoleSetCreate {
                index: create.index,
                stable: !create.updated,
                roleset: render_roleset(
                    input.service,
                    &from.template,
                    from.revision,
                    &from.roles,
                    create.index,
                ),
            }
        })
        .collect()
}

/// The in-place moves of `action`, and every live RoleSet of an equivalent revision: moved
/// to the target's spec, labels and annotations.
fn in_place_moves(
    input: &PassInput,
    action: &ServiceAction,
    target: &Rendering,
    equivalent: &BTreeSet<String>,
) -> Vec<InPlaceMove> {
    let rolesets = input.rolesets;
    let spec = target.template.spec.clone().unwrap_or_default();
    let adopted = rolesets.iter().filter(|r| {
        r.metadata.deletion_timestamp.is_none()
            && r.labels()
                .get(LABEL_STORM_SERVICE_REVISION)
                .is_some_and(|rev| equivalent.contains(rev))
            && !action.update_in_place.contains(&r.name_any())
    });
    action
        .update_in_place
        .iter()
        .filter_map(|name| rolesets.iter().find(|r| &r.name_any() == name))
        .chain(adopted)
        .map(|roleset| {
            let (labels, annotations) =
                revision_metadata(input.service, target.revision, &target.roles);
            InPlaceMove {
                name: roleset.name_any(),
                resource_version: roleset.resource_version(),
                has_labels: roleset.metadata.labels.is_some(),
                has_annotations: roleset.metadata.annotations.is_some(),
                spec: spec.clone(),
                labels,
                annotations,
            }
        })
        .collect()
}

/// Live RoleSets on the target revision whose spec differs from the target's (and that do
/// not move in place): their new spec.
fn respecs(
    rolesets: &[RoleSet],
    action: &ServiceAction,
    target: &Rendering,
) -> Vec<(String, RoleSetSpec)> {
    let Some(spec) = &target.template.spec else {
        return Vec::new();
    };
    rolesets
        .iter()
        .filter(|r| {
            r.metadata.deletion_timestamp.is_none()
                && r.labels().get(LABEL_STORM_SERVICE_REVISION) == Some(&target.name)
                && !action.update_in_place.contains(&r.name_any())
                && &r.spec != spec
        })
        .map(|r| (r.name_any(), spec.clone()))
        .collect()
}

/// The RoleSets of `warm` whose serving gate is not closed yet, with it closed: their pods
/// leave traffic and keep running.
fn held_out(warm: &[&RoleSet]) -> Vec<(String, RoleSetSpec)> {
    warm.iter()
        .filter(|r| r.spec.serving_gate != Some(ServingGate::Closed))
        .map(|r| {
            let spec = RoleSetSpec {
                serving_gate: Some(ServingGate::Closed),
                ..r.spec.clone()
            };
            (r.name_any(), spec)
        })
        .collect()
}

/// The canary part of a pass: its decision and mode.
pub struct CanaryPass {
    /// The step machine's decision.
    pub decision: CanaryDecision,
    /// Replica or pooled.
    pub mode: CanaryMode,
    /// Aborted, with its pods (pooled) or RoleSets (replica) kept warm until this Unix
    /// second (docs/rollouts.md#warm-abort).
    pub warm_until: Option<i64>,
}

/// Runs the canary step machine for this pass, when a canary is configured or stored.
fn evaluate_canary(
    input: &PassInput,
    desired: u32,
    update_template: &RoleSetTemplateSpec,
    current_template: &RoleSetTemplateSpec,
) -> Option<CanaryPass> {
    let (service, rolesets) = (input.service, input.rolesets);
    let steps = service.spec.effective_steps()?;
    let stored = service.status.as_ref();
    let previous = stored.and_then(|s| s.canary_status.as_ref());
    // A stable revision someone deleted is still the canary's stable side (a full promote
    // then completes the canary instead of finding nothing to roll).
    let stable = input
        .stable_missing
        .map_or_else(|| input.current.name_any(), str::to_string);
    let canary = input.update.name_any();
    if stable == canary && previous.is_none() {
        return None;
    }
    let hash = revision_hash(&json!(service.spec.canary_steps()), 0);
    let same = previous.filter(|p| {
        p.canary_revision.as_deref() == Some(canary.as_str())
            && p.steps_hash.as_deref() == Some(hash.as_str())
            && !matches!(p.phase, Some(CanaryPhase::Aborted | CanaryPhase::Completed))
    });
    let evaluated = same.map_or(0, |p| usize::try_from(p.current_step).unwrap_or(0));
    let weight = weight_at(&steps, evaluated);
    let mode = previous
        .filter(|p| p.canary_revision.as_deref() == Some(canary.as_str()))
        .and_then(|p| p.mode)
        .unwrap_or(if desired > 1 {
            CanaryMode::Replica
        } else {
            CanaryMode::Pooled
        });
    let on_canary = |r: &&RoleSet| {
        r.metadata.deletion_timestamp.is_none()
            && r.labels().get(LABEL_STORM_SERVICE_REVISION) == Some(&canary)
    };
    let target_ready = match mode {
        CanaryMode::Replica => {
            let want = target(desired, weight) as usize;
            let active = rolesets
                .iter()
                .filter(|r| r.metadata.deletion_timestamp.is_none())
                .count();
            let ready_canary = rolesets
                .iter()
                .filter(on_canary)
                .filter(|r| fresh_ready(r))
                .count();
            let on = rolesets.iter().filter(on_canary).count();
            active == desired as usize && on == want && ready_canary >= want
        }
        CanaryMode::Pooled => {
            let spec = pooled_spec(
                update_template,
                current_template,
                PooledAt::Weight(weight),
                &stable,
                service,
            );
            let mine: Vec<&RoleSet> = rolesets.iter().filter(on_canary).collect();
            !mine.is_empty() && mine.iter().all(|r| r.spec == spec && fresh_ready(r))
        }
    };
    let paused_since = stored
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| {
            c.iter()
                .find(|c| c.type_ == CONDITION_PAUSED && c.status == "True")
        })
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.as_second());
    let strategy = service.spec.update_strategy.as_ref();
    let decision = step(&CanaryInput {
        steps: &steps,
        spec_steps: service.spec.canary_steps().unwrap_or_default(),
        background: strategy
            .and_then(|s| s.canary.as_ref())
            .and_then(|c| c.analysis.as_ref()),
        measured: input.measured,
        steps_hash: &hash,
        stable_revision: &stable,
        canary_revision: &canary,
        replicas: desired,
        paused: service.spec.paused == Some(true),
        paused_since,
        now: input.now,
        previous,
        target_ready,
    });
    let mut decision = decision;
    let warm_until = warm_until(service, &mut decision, input.now);
    Some(CanaryPass {
        decision,
        mode,
        warm_until,
    })
}

/// While an aborted canary's pods are kept warm (`abortScaleDownDelaySeconds` after the
/// abort, docs/rollouts.md#warm-abort): until when, also said in the canary status, with the
/// pass due again then.
fn warm_until(service: &StormService, decision: &mut CanaryDecision, now: i64) -> Option<i64> {
    let status = decision.status.as_mut()?;
    let until = status
        .aborted_at
        .as_ref()
        .filter(|_| decision.aborting)
        .map(|at| at.0.as_second().saturating_add(abort_delay(service)))
        .filter(|&until| until > now);
    status.warm_until = until.and_then(|u| Timestamp::from_second(u).ok()).map(Time);
    if let Some(until) = until {
        let left = u64::try_from(until - now).unwrap_or(0);
        decision.requeue_after = Some(decision.requeue_after.map_or(left, |r| r.min(left)));
    }
    until
}

/// Where the pooled RoleSet's canary stands.
#[derive(Clone, Copy)]
enum PooledAt {
    /// At a weight.
    Weight(u32),
    /// Aborted: everything stable, the canary's pods kept warm until then, when they are.
    Aborted { warm_until: Option<i64> },
}

/// The pooled RoleSet's spec at `at` (with the StormService's settings,
/// [`with_service_settings`]): the canary template, with each role whose pod template changed
/// keeping `replicas - ceil(replicas × weight / 100)` pods stable (all of them while
/// aborted, its canary pods kept warm meanwhile) through its `rollout` block
/// (docs/rollouts.md#the-pooled-canary-the-role-rollout-block).
fn pooled_spec(
    update: &RoleSetTemplateSpec,
    current: &RoleSetTemplateSpec,
    at: PooledAt,
    stable_revision: &str,
    service: &StormService,
) -> crate::api::RoleSetSpec {
    let mut spec = update.spec.clone().unwrap_or_default();
    service_settings(&mut spec, service);
    let (weight, warm_until) = match at {
        PooledAt::Weight(weight) => (Some(weight), None),
        PooledAt::Aborted { warm_until } => (None, warm_until),
    };
    for role in spec.roles.iter_mut().flatten() {
        let Some(stable) = role_hash(current, &role.name) else {
            continue; // a new role has nothing stable to keep
        };
        if stable == template_hash(&role.template.clone().unwrap_or_default()) {
            continue;
        }
        let replicas = u32::try_from(role.replicas_or_default()).unwrap_or(0);
        let partition = weight.map_or(replicas, |w| replicas - target(replicas, w).min(replicas));
        role.rollout = Some(RoleRollout {
            partition: Some(i32::try_from(partition).unwrap_or(i32::MAX)),
            stable_revision: Some(stable_revision.to_string()),
            warm_until: warm_until
                .and_then(|u| Timestamp::from_second(u).ok())
                .map(Time),
        });
    }
    whole_groups(&mut spec);
    spec
}

/// A pairing group whose weight moves some role whole (a one-pod role at any weight) while
/// a partner keeps stable pods moves whole: the stable key would have no pod of that role,
/// so the partner's stable pods could not serve (docs/rollouts.md#rollouts-of-a-group).
fn whole_groups(spec: &mut crate::api::RoleSetSpec) {
    let partition =
        |role: &crate::api::RoleSpec| role.rollout.as_ref().and_then(|r| r.partition).unwrap_or(0);
    let groups = spec.pairing.clone().unwrap_or_default();
    for group in groups {
        let roles = || {
            spec.roles
                .iter()
                .flatten()
                .filter(|r| group.roles.contains(&r.name))
        };
        let kept: Vec<i32> = roles().map(partition).collect();
        if !(kept.contains(&0) && kept.iter().any(|&k| k > 0)) {
            continue;
        }
        for role in spec.roles.iter_mut().flatten() {
            if let (true, Some(rollout)) = (group.roles.contains(&role.name), role.rollout.as_mut())
            {
                rollout.partition = Some(0);
            }
        }
    }
}

/// `canaryStatus.roles` (docs/rollouts.md#status): per role, what the step moves and how far it got
/// — RoleSets on the canary revision in replica mode (every role moves with its RoleSet),
/// canary pods of each changed role in pooled mode. Read from the RoleSets observed at the
/// start of the pass, like the rest of the status; a pooled RoleSet whose status predates
/// its spec (its counts are of the previous template or partition) keeps the counts
/// `previous` reported.
fn canary_progress(
    pass: &CanaryPass,
    rolesets: &[RoleSet],
    desired: u32,
    canary_revision: &str,
    update: &RoleSetTemplateSpec,
    current: &RoleSetTemplateSpec,
    previous: Option<&CanaryStatus>,
) -> Vec<CanaryRoleStatus> {
    let weight = if pass.decision.aborting {
        0
    } else {
        pass.decision.weight
    };
    let on_canary: Vec<&RoleSet> = rolesets
        .iter()
        .filter(|r| {
            r.metadata.deletion_timestamp.is_none()
                && r.labels()
                    .get(LABEL_STORM_SERVICE_REVISION)
                    .map(String::as_str)
                    == Some(canary_revision)
        })
        .collect();
    let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let roles = update.spec.iter().flat_map(|s| s.roles.iter().flatten());
    let promoted = update == current;
    match pass.mode {
        CanaryMode::Replica => roles
            .map(|role| CanaryRoleStatus {
                name: role.name.clone(),
                target: count(target(desired, weight) as usize),
                updated: count(on_canary.len()),
                updated_ready: count(on_canary.iter().filter(|r| fresh_ready(r)).count()),
            })
            .collect(),
        CanaryMode::Pooled => roles
            .filter(|role| {
                // Once the canary revision is promoted nothing differs from the current
                // template: the roles this canary moved stay reported.
                let moved_before = || {
                    previous
                        .filter(|p| p.canary_revision.as_deref() == Some(canary_revision))
                        .is_some_and(|p| p.roles.iter().flatten().any(|r| r.name == role.name))
                };
                role_hash(current, &role.name)
                    != Some(template_hash(&role.template.clone().unwrap_or_default()))
                    || (promoted && moved_before())
            })
            .map(|role| {
                let replicas = u32::try_from(role.replicas_or_default()).unwrap_or(0);
                let stale = on_canary.iter().any(|r| {
                    r.status.as_ref().and_then(|s| s.observed_generation) != r.metadata.generation
                });
                let reported = previous
                    .filter(|p| p.canary_revision.as_deref() == Some(canary_revision))
                    .and_then(|p| p.roles.iter().flatten().find(|r| r.name == role.name));
                let (updated, updated_ready) = match reported {
                    Some(r) if stale => (r.updated, r.updated_ready),
                    _ if stale => (0, 0),
                    _ => on_canary
                        .iter()
                        .flat_map(|r| r.status.iter().flat_map(|s| s.roles.iter().flatten()))
                        .filter(|s| s.name == role.name)
                        .fold((0, 0), |(u, r), s| {
                            (u + s.updated_replicas, r + status::updated_available(s))
                        }),
                };
                CanaryRoleStatus {
                    name: role.name.clone(),
                    target: count(target(replicas, weight).min(replicas) as usize),
                    updated,
                    updated_ready,
                }
            })
            .collect(),
    }
}

/// StormService-level budgets (docs/rollouts.md#budgets): zero for `InPlaceUpdate`.
fn budgets(service: &StormService, desired: u32) -> Fenceposts {
    if service.spec.update_strategy_type() == StormServiceUpdateStrategyType::InPlaceUpdate {
        return Fenceposts::default();
    }
    service.spec.fenceposts(desired)
}

/// `maxSurge` / `maxUnavailable` resolved against `desired` (AIBrix's fence-post rule).
/// How many RoleSets `InPlaceUpdate` may have not Ready at once: the resolved
/// `maxUnavailable` (AIBrix's fence-post rule), whatever the update type.
fn in_place_unavailable(service: &StormService, desired: u32) -> u32 {
    service.spec.fenceposts(desired).max_unavailable.max(1)
}

fn view(roleset: &RoleSet, update_revision: &str, equivalent: &BTreeSet<String>) -> RoleSetView {
    let revision = roleset.labels().get(LABEL_STORM_SERVICE_REVISION);
    RoleSetView {
        name: roleset.name_any(),
        updated: revision.map(String::as_str) == Some(update_revision)
            || revision.is_some_and(|r| equivalent.contains(r)),
        index: roleset
            .annotations()
            .get(ANNOTATION_ROLESET_INDEX)
            .and_then(|i| i.parse().ok()),
        ready: fresh_ready(roleset),
        terminating: roleset.metadata.deletion_timestamp.is_some(),
    }
}

/// A revision's template with the role replicas of the live template (revisions do not hold
/// them).
fn with_live_replicas(
    mut template: RoleSetTemplateSpec,
    live: &RoleSetTemplateSpec,
) -> RoleSetTemplateSpec {
    let live_roles = live.spec.as_ref().and_then(|s| s.roles.as_ref());
    for role in template
        .spec
        .iter_mut()
        .flat_map(|s| s.roles.iter_mut())
        .flatten()
    {
        role.replicas = live_roles
            .and_then(|roles| roles.iter().find(|r| r.name == role.name))
            .and_then(|r| r.replicas);
    }
    template
}

/// The pod-template hash of `role` in a StormService template.
fn role_hash(template: &RoleSetTemplateSpec, role: &str) -> Option<String> {
    template
        .spec
        .iter()
        .flat_map(|s| s.roles.iter().flatten())
        .find(|r| r.name == role)
        .map(|r| template_hash(&r.template.clone().unwrap_or_default()))
}

/// Per-role revisions (docs/rollouts.md#replica-and-pooled-mode): on the update revision, a role
/// whose pod template is unchanged since the current revision keeps the current revision.
fn role_revisions<'a>(
    template: &RoleSetTemplateSpec,
    current: &RoleSetTemplateSpec,
    revision: &'a ControllerRevision,
    current_revision: &'a ControllerRevision,
    updated: bool,
) -> BTreeMap<String, &'a ControllerRevision> {
    template
        .spec
        .iter()
        .flat_map(|s| s.roles.iter().flatten())
        .map(|role| {
            let hash = template_hash(&role.template.clone().unwrap_or_default());
            let unchanged = role_hash(current, &role.name) == Some(hash);
            let revision = if updated && !unchanged {
                revision
            } else {
                current_revision
            };
            (role.name.clone(), revision)
        })
        .collect()
}

/// Labels and annotations squall sets on a RoleSet for `revision`.
fn revision_metadata(
    service: &StormService,
    revision: &ControllerRevision,
    roles: &BTreeMap<String, &ControllerRevision>,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let labels = BTreeMap::from([
        (LABEL_STORM_SERVICE_NAME.to_string(), service.name_any()),
        (
            LABEL_STORM_SERVICE_REVISION.to_string(),
            revision.name_any(),
        ),
    ]);
    let mut annotations = BTreeMap::from([(ANNOTATION_REVISION.to_string(), revision.name_any())]);
    for (role, role_revision) in roles {
        annotations.insert(
            format!("{ANNOTATION_ROLE_REVISION_PREFIX}{role}"),
            role_revision.revision.to_string(),
        );
        annotations.insert(
            format!("{ANNOTATION_ROLE_REVISION_NAME_PREFIX}{role}"),
            role_revision.name_any(),
        );
    }
    (labels, annotations)
}

/// A new RoleSet (docs/aibrix-compatibility.md#the-same) for slot `index`.
fn render_roleset(
    service: &StormService,
    template: &RoleSetTemplateSpec,
    revision: &ControllerRevision,
    roles: &BTreeMap<String, &ControllerRevision>,
    index: u32,
) -> RoleSet {
    let metadata = template.metadata.clone().unwrap_or_default();
    let (own_labels, own_annotations) = revision_metadata(service, revision, roles);
    let mut labels = metadata.labels.unwrap_or_default();
    labels.extend(own_labels);
    let mut annotations = metadata.annotations.unwrap_or_default();
    annotations.extend(own_annotations);
    annotations.insert(ANNOTATION_ROLESET_INDEX.into(), index.to_string());
    RoleSet {
        metadata: ObjectMeta {
            generate_name: Some(shorten_keep_prefix(
                &format!("{}-roleset-", service.name_any()),
                GENERATE_NAME_LIMIT,
            )),
            namespace: service.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: service.controller_owner_ref(&()).map(|r| vec![r]),
            // Born with its finalizer: one write less than the RoleSet controller adding it.
            finalizers: Some(vec![FINALIZER_ROLESET.into()]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone().unwrap_or_default(),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(image: &str, replicas: i32) -> RoleSetTemplateSpec {
        serde_json::from_value(json!({"spec": {"roles": [
            {"name": "decode", "replicas": replicas,
             "template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
            {"name": "router", "replicas": 1,
             "template": {"spec": {"containers": [{"name": "c", "image": "router:1"}]}}},
        ]}}))
        .unwrap()
    }

    /// The pooled RoleSet on `revision` at `generation`, its status computed at `observed`
    /// with `updated` / `ready` decode pods on its template.
    fn pooled(revision: &str, generation: i64, observed: i64, updated: i32, ready: i32) -> RoleSet {
        serde_json::from_value(json!({
            "metadata": {"name": "pool-0", "generation": generation,
                "labels": {LABEL_STORM_SERVICE_REVISION: revision}},
            "spec": {"roles": []},
            "status": {"observedGeneration": observed, "roles": [{"name": "decode",
                "replicas": 4, "updatedReplicas": updated, "updatedReadyReplicas": ready}]},
        }))
        .unwrap()
    }

    fn pass(mode: CanaryMode, weight: u32) -> CanaryPass {
        CanaryPass {
            decision: CanaryDecision {
                weight,
                ..CanaryDecision::default()
            },
            warm_until: None,
            mode,
        }
    }

    fn stormservice(replicas: i32, image: &str, canary: bool) -> StormService {
        let mut strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0});
        if canary {
            strategy["canary"] = json!({"steps": [{"setWeight": 50}, {"pause": {}}]});
        }
        serde_json::from_value(json!({
            "metadata": {"name": "llm", "namespace": "ns", "uid": "u-1", "generation": 1},
            "spec": {"replicas": replicas, "selector": {}, "updateStrategy": strategy,
                "template": template(image, 4)},
        }))
        .unwrap()
    }

    fn revision(name: &str, template: &RoleSetTemplateSpec) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                crate::planner::revision::revision_data(template),
            )),
            revision: 1,
        }
    }

    /// A live RoleSet in slot `index` on `revision`, Ready or not.
    fn live(index: u32, revision: &str, ready: bool) -> RoleSet {
        serde_json::from_value(json!({
            "metadata": {"name": format!("llm-roleset-{index}"), "generation": 1,
                "resourceVersion": "7",
                "labels": {LABEL_STORM_SERVICE_REVISION: revision},
                "annotations": {ANNOTATION_ROLESET_INDEX: index.to_string()}},
            "spec": template("engine:1", 4).spec.unwrap(),
            "status": {"observedGeneration": 1, "conditions": [{"type": "Ready",
                "status": if ready { "True" } else { "False" }}]},
        }))
        .unwrap()
    }

    fn pass_for(service: &StormService, current: &str, rolesets: &[RoleSet]) -> Pass {
        let old = revision("llm-old", &template("engine:1", 4));
        let new = revision("llm-new", &service.spec.template);
        decide(&PassInput {
            service,
            current: if current == "llm-old" { &old } else { &new },
            update: &new,
            stable_missing: None,
            history: &[],
            rolesets,
            pending_creates: Vec::new(),
            pending_deletes: BTreeSet::new(),
            now: 1_000,
            measured: &[],
        })
        .unwrap()
    }

    #[test]
    fn a_new_stormservice_gets_its_rolesets_rendered_born_with_their_finalizer() {
        let service = stormservice(2, "engine:1", false);
        let pass = pass_for(&service, "llm-new", &[]);
        assert!(pass.canary.is_none());
        let mut indexes: Vec<u32> = pass.creates.iter().map(|c| c.index).collect();
        indexes.sort_unstable();
        assert_eq!(indexes, [0, 1]);
        for create in &pass.creates {
            let meta = &create.roleset.metadata;
            assert!(!create.stable);
            assert_eq!(
                meta.finalizers.as_deref(),
                Some(&[FINALIZER_ROLESET.to_string()][..])
            );
            assert_eq!(meta.generate_name.as_deref(), Some("llm-roleset-"));
            assert_eq!(meta.owner_references.as_ref().unwrap()[0].uid, "u-1");
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(labels[LABEL_STORM_SERVICE_REVISION], "llm-new");
            assert_eq!(labels[LABEL_STORM_SERVICE_NAME], "llm");
            assert_eq!(
                meta.annotations.as_ref().unwrap()[ANNOTATION_ROLESET_INDEX],
                create.index.to_string()
            );
        }
        assert!(pass.moves.is_empty() && pass.respec.is_empty());
    }

    #[test]
    fn min_ready_seconds_reaches_every_roleset_and_a_change_rolls_nothing() {
        let mut service = stormservice(2, "engine:1", false);
        service.spec.min_ready_seconds = Some(20);
        let created = pass_for(&service, "llm-new", &[]);
        assert!(
            created
                .creates
                .iter()
                .all(|c| c.roleset.spec.min_ready_seconds == Some(20))
        );
        // Live RoleSets on the revision, rendered before the setting: re-specced in place,
        // none created or deleted (the revision is the same).
        let live: Vec<RoleSet> = (0..2).map(|i| live(i, "llm-new", true)).collect();
        let changed = pass_for(&service, "llm-new", &live);
        assert!(changed.creates.is_empty() && changed.action.delete.is_empty());
        assert_eq!(changed.respec.len(), 2);
        assert!(
            changed
                .respec
                .iter()
                .all(|(_, spec)| spec.min_ready_seconds == Some(20))
        );
    }

    /// `service` with its canary aborted by the user at step `step`, in `mode`, keeping
    /// its pods warm for `delay` seconds.
    fn aborted(mut service: StormService, mode: CanaryMode, delay: i32) -> StormService {
        let canary = service
            .spec
            .update_strategy
            .as_mut()
            .unwrap()
            .canary
            .as_mut()
            .unwrap();
        canary.abort_scale_down_delay_seconds = Some(delay);
        let hash = revision_hash(&json!(service.spec.canary_steps()), 0);
        service.status = Some(
            serde_json::from_value(json!({"canaryStatus": {
                "currentStep": 1, "phase": "Paused", "mode": mode,
                "canaryRevision": "llm-new", "stableRevision": "llm-old",
                "stepsHash": hash, "abort": true}}))
            .unwrap(),
        );
        service
    }

    #[test]
    fn a_terminating_roleset_is_not_deleted_again() {
        let service = stormservice(2, "engine:2", false);
        let mut going = live(0, "llm-old", false);
        going.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let rolesets = [going, live(1, "llm-old", true), live(2, "llm-new", false)];
        let pass = pass_for(&service, "llm-old", &rolesets);
        assert!(
            !pass.action.delete.contains(&"llm-roleset-0".to_string()),
            "{:?}",
            pass.action
        );
    }

    #[test]
    fn an_aborted_replica_canary_keeps_its_rolesets_out_of_traffic_until_the_delay_ends() {
        let service = aborted(stormservice(4, "engine:2", true), CanaryMode::Replica, 60);
        let rolesets: Vec<RoleSet> = (0..4)
            .map(|i| live(i, if i < 2 { "llm-new" } else { "llm-old" }, true))
            .collect();
        let pass = pass_for(&service, "llm-old", &rolesets);
        let canary = pass.canary.as_ref().unwrap();
        assert!(canary.decision.aborting);
        assert_eq!(canary.warm_until, Some(1_060));
        let status = canary.decision.status.as_ref().unwrap();
        assert_eq!(
            status.warm_until.as_ref().map(|t| t.0.as_second()),
            Some(1_060)
        );
        assert_eq!(
            canary.decision.requeue_after,
            Some(60),
            "due when the delay ends"
        );
        assert!(pass.action.delete.is_empty(), "{:?}", pass.action);
        let closed: Vec<&str> = pass
            .respec
            .iter()
            .filter(|(_, spec)| spec.serving_gate == Some(ServingGate::Closed))
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(closed, ["llm-roleset-0", "llm-roleset-1"]);
        // They hold room (maxSurge 1): one stable RoleSet is created beside them.
        assert_eq!(pass.creates.len(), 1);
        assert_eq!(
            pass.creates[0].roleset.labels()[LABEL_STORM_SERVICE_REVISION],
            "llm-old",
            "the aborted canary's target is the stable revision"
        );
        assert!(
            pass.creates
                .iter()
                .all(|c| c.roleset.spec.serving_gate == Some(ServingGate::Open)),
            "every RoleSet's pods carry the gate while a warm abort may come"
        );

        // Without the delay, the canary's RoleSets are outdated RoleSets like any other,
        // serving until the budgets let them go.
        let service = aborted(stormservice(4, "engine:2", true), CanaryMode::Replica, 0);
        let pass = pass_for(&service, "llm-old", &rolesets);
        assert_eq!(pass.canary.as_ref().unwrap().warm_until, None);
        assert!(pass.respec.iter().all(|(_, s)| s.serving_gate.is_none()));
        assert!(
            pass.creates
                .iter()
                .all(|c| c.roleset.spec.serving_gate.is_none())
        );
    }

    #[test]
    fn an_aborted_pooled_canary_keeps_its_pods_warm_through_the_rollout_block() {
        let service = aborted(stormservice(1, "engine:2", true), CanaryMode::Pooled, 60);
        let pooled = live(0, "llm-new", true);
        let pass = pass_for(&service, "llm-old", std::slice::from_ref(&pooled));
        assert_eq!(pass.canary.as_ref().unwrap().warm_until, Some(1_060));
        let (_, spec) = &pass.respec[0];
        let decode = spec
            .roles
            .as_ref()
            .unwrap()
            .iter()
            .find(|r| r.name == "decode");
        let rollout = decode.unwrap().rollout.as_ref().unwrap();
        assert_eq!(rollout.partition, Some(4), "every pod stable");
        assert_eq!(
            rollout.warm_until.as_ref().map(|t| t.0.as_second()),
            Some(1_060)
        );
    }

    #[test]
    fn a_canary_at_50_percent_moves_half_the_rolesets_within_the_surge() {
        let service = stormservice(4, "engine:2", true);
        let stable: Vec<RoleSet> = (0..4).map(|i| live(i, "llm-old", true)).collect();
        let pass = pass_for(&service, "llm-old", &stable);
        let canary = pass.canary.as_ref().expect("a canary runs");
        assert_eq!(
            (canary.mode, canary.decision.weight),
            (CanaryMode::Replica, 50)
        );
        // maxSurge 1, maxUnavailable 0: one new RoleSet on the canary revision first.
        assert_eq!(pass.creates.len(), 1);
        assert!(!pass.creates[0].stable);
        assert_eq!(
            pass.creates[0].roleset.labels()[LABEL_STORM_SERVICE_REVISION],
            "llm-new"
        );
        assert!(
            pass.action.delete.is_empty(),
            "nothing is Ready on the canary yet"
        );
    }

    #[test]
    fn a_pooled_canary_re_specs_its_rolesets_partition_in_place() {
        let service = stormservice(1, "engine:2", true);
        let pooled = live(0, "llm-new", true);
        let pass = pass_for(&service, "llm-old", std::slice::from_ref(&pooled));
        let canary = pass.canary.as_ref().expect("a canary runs");
        assert_eq!(canary.mode, CanaryMode::Pooled);
        assert_eq!(pass.respec.len(), 1);
        let (name, spec) = &pass.respec[0];
        assert_eq!(name, "llm-roleset-0");
        let decode = spec
            .roles
            .as_ref()
            .unwrap()
            .iter()
            .find(|r| r.name == "decode")
            .unwrap();
        let rollout = decode.rollout.as_ref().unwrap();
        assert_eq!(rollout.partition, Some(2), "4 - ceil(4 × 50 %) stay stable");
        assert_eq!(rollout.stable_revision.as_deref(), Some("llm-old"));
        let router = spec
            .roles
            .as_ref()
            .unwrap()
            .iter()
            .find(|r| r.name == "router")
            .unwrap();
        assert!(
            router.rollout.is_none(),
            "an unchanged role keeps nothing back"
        );
    }

    #[test]
    fn a_pairing_group_a_weight_would_split_moves_whole_and_others_keep_their_partition() {
        let spec = |partitions: [i32; 3]| -> crate::api::RoleSetSpec {
            let roles: Vec<serde_json::Value> = ["prefill", "decode", "router"]
                .iter()
                .zip(partitions)
                .map(|(name, partition)| json!({"name": name, "rollout": {"partition": partition}}))
                .collect();
            serde_json::from_value(json!({
                "roles": roles,
                "pairing": [{"roles": ["prefill", "decode"]}],
            }))
            .unwrap()
        };
        let partitions = |spec: &crate::api::RoleSetSpec| -> Vec<Option<i32>> {
            spec.roles
                .iter()
                .flatten()
                .map(|r| r.rollout.as_ref().and_then(|r| r.partition))
                .collect()
        };
        // A one-pod prefill moves at any weight; decode would keep 3 stable pods no prefill
        // of their key could serve with.
        let mut split = spec([0, 3, 1]);
        whole_groups(&mut split);
        assert_eq!(partitions(&split), [Some(0), Some(0), Some(1)]);
        let mut kept = spec([1, 3, 1]);
        whole_groups(&mut kept);
        assert_eq!(partitions(&kept), [Some(1), Some(3), Some(1)]);
    }

    proptest::proptest! {
        /// Whatever RoleSets are observed, a pass renders only what its plan asked for, a
        /// new RoleSet never in a slot another of its revision holds (it may join an outdated
        /// one's, docs/architecture.md#one-reconcile), every one owned and born with its finalizer;
        /// moves and re-specs name only live RoleSets.
        #[test]
        fn every_create_is_rendered_into_a_slot_its_revision_leaves_free(
            observed in proptest::collection::vec((0u32..8, proptest::bool::ANY, proptest::bool::ANY), 0..6),
            replicas in 0i32..6,
            image_changed in proptest::bool::ANY,
            canary in proptest::bool::ANY,
        ) {
            let image = if image_changed { "engine:2" } else { "engine:1" };
            let service = stormservice(replicas, image, canary);
            let mut rolesets: Vec<RoleSet> = Vec::new();
            for (index, on_new, ready) in observed {
                if rolesets.iter().all(|r| r.annotations()[ANNOTATION_ROLESET_INDEX] != index.to_string()) {
                    rolesets.push(live(index, if on_new { "llm-new" } else { "llm-old" }, ready));
                }
            }
            let pass = pass_for(&service, "llm-old", &rolesets);
            proptest::prop_assert_eq!(pass.creates.len(), pass.action.create.len());
            let held_on = |revision: &str| -> BTreeSet<String> {
                rolesets
                    .iter()
                    .filter(|r| r.labels()[LABEL_STORM_SERVICE_REVISION] == revision)
                    .map(|r| r.annotations()[ANNOTATION_ROLESET_INDEX].clone())
                    .collect()
            };
            let mut fresh = BTreeSet::new();
            for create in &pass.creates {
                let revision = &create.roleset.labels()[LABEL_STORM_SERVICE_REVISION];
                proptest::prop_assert!(!held_on(revision).contains(&create.index.to_string()));
                proptest::prop_assert!(fresh.insert(create.index), "one create per slot");
                proptest::prop_assert_eq!(
                    create.roleset.metadata.finalizers.as_deref(),
                    Some(&[FINALIZER_ROLESET.to_string()][..])
                );
                proptest::prop_assert!(create.roleset.metadata.owner_references.is_some());
            }
            let names: BTreeSet<String> = rolesets.iter().map(ResourceExt::name_any).collect();
            for name in pass.moves.iter().map(|m| &m.name).chain(pass.respec.iter().map(|r| &r.0)) {
                proptest::prop_assert!(names.contains(name));
            }
        }
    }

    #[test]
    fn pooled_progress_counts_the_changed_roles_pods_and_keeps_counts_over_a_stale_status() {
        let (update, current) = (template("engine:2", 4), template("engine:1", 4));
        let progress = |roleset: RoleSet, previous: Option<&CanaryStatus>| {
            canary_progress(
                &pass(CanaryMode::Pooled, 50),
                &[roleset],
                1,
                "canary",
                &update,
                &current,
                previous,
            )
        };
        let fresh = progress(pooled("canary", 3, 3, 2, 1), None);
        assert_eq!(
            fresh,
            [CanaryRoleStatus {
                name: "decode".into(),
                target: 2,
                updated: 2,
                updated_ready: 1
            }],
            "only the changed role, its target ceil(4 × 50 %)"
        );
        // The RoleSet's status still describes its previous spec (all 4 pods "updated" to
        // the old template): the counts reported before stand.
        let before = CanaryStatus {
            canary_revision: Some("canary".into()),
            roles: Some(fresh.clone()),
            ..CanaryStatus::default()
        };
        let stale = progress(pooled("canary", 4, 3, 4, 4), Some(&before));
        assert_eq!((stale[0].updated, stale[0].updated_ready), (2, 1));
        let unknown = progress(pooled("canary", 4, 3, 4, 4), None);
        assert_eq!((unknown[0].updated, unknown[0].updated_ready), (0, 0));

        // Completed and promoted (the current template is the canary's): the role it moved
        // is still reported, now at 100 %.
        let done = canary_progress(
            &pass(CanaryMode::Pooled, 100),
            &[pooled("canary", 5, 5, 4, 4)],
            1,
            "canary",
            &update,
            &update,
            Some(&before),
        );
        assert_eq!(
            done,
            [CanaryRoleStatus {
                name: "decode".into(),
                target: 4,
                updated: 4,
                updated_ready: 4
            }]
        );
    }

    #[test]
    fn replica_progress_counts_live_rolesets_on_the_canary_revision() {
        let ready = |name: &str, revision: &str| -> RoleSet {
            serde_json::from_value(json!({
                "metadata": {"name": name, "generation": 1,
                    "labels": {LABEL_STORM_SERVICE_REVISION: revision}},
                "spec": {"roles": []},
                "status": {"observedGeneration": 1,
                    "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .unwrap()
        };
        let mut terminating = ready("c", "canary");
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let mut not_ready = ready("d", "canary");
        not_ready.status.as_mut().unwrap().conditions = None;
        let rolesets = [
            ready("a", "canary"),
            ready("b", "stable"),
            terminating,
            not_ready,
        ];
        let template = template("engine:2", 1);
        let progress = canary_progress(
            &pass(CanaryMode::Replica, 25),
            &rolesets,
            4,
            "canary",
            &template,
            &template,
            None,
        );
        assert_eq!(progress.len(), 2, "every role moves with its RoleSet");
        for role in progress {
            assert_eq!((role.target, role.updated, role.updated_ready), (1, 2, 1));
        }
    }
}
