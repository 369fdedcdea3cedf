//! The StormService controller (AIBRIX-REFERENCE §2.2 with SPEC §5 fixes): keeps the
//! headless Service, writes ControllerRevisions of the template (without role replicas),
//! asks the planner (`crate::planner::stormservice`) which RoleSets to create, delete or
//! update in place, carries it out, scales roles in place when only their replicas change,
//! truncates history and writes status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Service, ServiceSpec};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::render::template_hash;
use super::revision::{collision_count_of, holds, template_of, write_revision};
use super::{Context, Error, PendingCreate, condition, delete_child, owned_children};
use crate::api::keys::{
    ANNOTATION_REVISION, ANNOTATION_ROLE_REVISION_NAME_PREFIX, ANNOTATION_ROLE_REVISION_PREFIX,
    ANNOTATION_ROLESET_INDEX, CONDITION_INVALID_SPEC, CONDITION_PAUSED, CONDITION_PROGRESSING,
    CONDITION_READY, FINALIZER_ROLESET, FINALIZER_STORMSERVICE, LABEL_STORM_SERVICE_NAME,
    LABEL_STORM_SERVICE_REVISION,
};
use crate::api::validation::validate_stormservice;
use crate::api::{
    CanaryMode, CanaryPhase, CanaryRoleStatus, CanaryStatus, Condition, RoleRollout, RoleSet,
    RoleSetTemplateSpec, StormService, StormServiceStatus, StormServiceUpdateStrategyType,
};
use crate::controller::render::shorten_keep_prefix;
use crate::planner::budget::{Budget, Fenceposts, resolve_fenceposts};
use crate::planner::canary::{
    CanaryDecision, CanaryInput, Step, Transition, Trigger, needs_stable_revision, step, target,
    weight_at,
};
use crate::planner::status::{
    STORMSERVICE_COUNTERS, ServiceStatusInput, fresh_ready, keep_transition_times,
    stormservice_status,
};
use crate::planner::stormservice::{PendingRoleSet, RoleSetView, ServiceInput, plan};

/// Expectations of a StormService are kept under one pseudo-role.
const ROLESETS: &str = "";
/// Longest RoleSet `generateName` (the API server appends 5 characters).
const GENERATE_NAME_LIMIT: usize = 58;
/// History kept when `revisionHistoryLimit` is absent.
const DEFAULT_HISTORY_LIMIT: usize = 10;

/// Reconciles one StormService.
pub async fn reconcile(service: Arc<StormService>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = service.namespace().unwrap_or_default();
    let api: Api<StormService> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER_STORMSERVICE, service, |event| async {
        match event {
            Finalizer::Apply(ss) => apply(&ss, &ctx).await,
            Finalizer::Cleanup(ss) => cleanup(&ss, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn rolesets_api(service: &StormService, ctx: &Context) -> Api<RoleSet> {
    Api::namespaced(ctx.client.clone(), &service.namespace().unwrap_or_default())
}

/// Ordered deletion: every RoleSet (and through it every pod) first.
async fn cleanup(service: &StormService, ctx: &Context) -> Result<Action, Error> {
    let rolesets = owned_children(&ctx.caches.rolesets, service);
    if rolesets.is_empty() {
        ctx.forget(service);
        ctx.metrics.forget_service(
            &service.namespace().unwrap_or_default(),
            &service.name_any(),
        );
        return Ok(Action::await_change());
    }
    let api = rolesets_api(service, ctx);
    for roleset in rolesets
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        delete_child(&api, &roleset.name_any(), ctx, "stormservice", "rolesets").await?;
    }
    Err(Error::Waiting(format!(
        "{} RoleSets still terminating",
        rolesets.len()
    )))
}

/// The revisions a pass works with.
struct Revisions {
    current: ControllerRevision,
    update: ControllerRevision,
    collision_count: u32,
    /// Every revision of the StormService, oldest first (before this pass's writes).
    history: Vec<ControllerRevision>,
    /// `status.currentRevision` when no such revision exists any more (someone deleted it);
    /// `current` then falls back to `update`.
    stable_missing: Option<String>,
}

async fn apply(service: &StormService, ctx: &Context) -> Result<Action, Error> {
    let report = validate_stormservice(service, None);
    let namespace = service.namespace().unwrap_or_default();
    ctx.metrics
        .invalid_spec(&namespace, &service.name_any(), !report.is_valid());
    if !report.is_valid() {
        // Objects that bypassed the webhook are reported and left alone (SPEC §5).
        write_invalid(service, ctx, &report.error_message()).await?;
        return Ok(Action::await_change());
    }
    let service_conflict = sync_headless_service(service, ctx).await?;
    let revisions = sync_revisions(service, ctx).await?;
    if let Some(missing) = &revisions.stable_missing
        && service
            .status
            .as_ref()
            .and_then(|s| s.canary_status.as_ref())
            .is_some_and(needs_stable_revision)
    {
        // Going on without the stable template would jump the canary to 100 %.
        let message = format!(
            "the stable ControllerRevision {missing} is gone; the canary waits. Restore it to \
             go on or abort, or run `squall promote --full {}` to finish on the canary revision",
            service.name_any()
        );
        if ctx.once_per_generation(service, "stable revision missing") {
            ctx.warn(
                "stormservice",
                service,
                "StableRevisionMissing",
                "Canary",
                message.clone(),
            )
            .await;
        }
        let held = condition(
            CONDITION_PROGRESSING,
            "False",
            "StableRevisionMissing",
            message,
            service.metadata.generation,
        );
        write_conditions(service, ctx, vec![held]).await?;
        return Ok(Action::await_change());
    }
    let update_name = revisions.update.name_any();
    let current_name = revisions.current.name_any();

    // Copied out of the cache: a StormService has a handful of RoleSets.
    let rolesets: Vec<RoleSet> = owned_children(&ctx.caches.rolesets, service)
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect();
    // The canary decides from the stored status as cached; the status write at the end is
    // conditional on nobody having written since (SPEC §5.1).
    let desired = u32::try_from(service.spec.replicas_or_default()).unwrap_or(0);
    let update_template = service.spec.template.clone();
    let current_template = if current_name == update_name {
        update_template.clone()
    } else {
        with_live_replicas(template_of(&revisions.current)?, &update_template)
    };
    let mut canary = evaluate_canary(
        service,
        service,
        &revisions,
        &rolesets,
        desired,
        &update_template,
        &current_template,
    );
    if let Some(pass) = canary.as_mut() {
        let progress = canary_progress(
            pass,
            &rolesets,
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
    let aborting = canary.as_ref().is_some_and(|c| c.decision.aborting);
    let pooled = canary
        .as_ref()
        .is_some_and(|c| c.mode == CanaryMode::Pooled);
    // What RoleSets move to: the update revision, or the stable one while a replica-mode
    // canary is aborted.
    let (target_name, target_revision, mut target_template, target_roles) = if aborting && !pooled {
        let roles = role_revisions(
            &current_template,
            &current_template,
            &revisions.current,
            &revisions.current,
            false,
        );
        (
            current_name.clone(),
            &revisions.current,
            current_template.clone(),
            roles,
        )
    } else {
        let roles = role_revisions(
            &update_template,
            &current_template,
            &revisions.update,
            &revisions.current,
            true,
        );
        (
            update_name.clone(),
            &revisions.update,
            update_template.clone(),
            roles,
        )
    };
    if let Some(c) = canary.as_ref().filter(|_| pooled) {
        target_template.spec = Some(pooled_spec(
            &update_template,
            &current_template,
            c.decision.weight,
            aborting,
            &current_name,
        ));
    }

    let key = Context::key(service);
    let expectation = ctx.observe(
        &key,
        ROLESETS,
        rolesets
            .iter()
            .map(|r| (r.name_any(), r.metadata.deletion_timestamp.is_some())),
    );
    let strategy = if pooled {
        StormServiceUpdateStrategyType::InPlaceUpdate
    } else {
        service.spec.update_strategy_type()
    };
    let input = ServiceInput {
        desired,
        budgets: budgets(service, desired),
        strategy,
        paused: service.spec.paused == Some(true),
        two_revisions: current_name != update_name,
        rolesets: rolesets.iter().map(|r| view(r, &target_name)).collect(),
        pending_creates: expectation
            .creates
            .values()
            .map(|c| PendingRoleSet {
                index: c.slot.unwrap_or_default(),
                updated: !c.stable,
            })
            .collect(),
        pending_deletes: expectation.deletes.clone(),
        max_updated: canary
            .as_ref()
            .filter(|c| !pooled && !c.decision.aborting)
            .map(|c| target(desired, c.decision.weight)),
        in_place_unavailable: in_place_unavailable(service, desired),
    };
    let action = plan(&input);

    let api = rolesets_api(service, ctx);
    for name in &action.delete {
        ctx.expect_delete(&key, ROLESETS, name);
        delete_child(&api, name, ctx, "stormservice", "rolesets").await?;
    }
    // A RoleSet create the API server refused: reported as ReplicaFailure (FailedCreate)
    // and retried with backoff.
    let mut refused = None;
    for create in &action.create {
        let (template, revision, roles) = if create.updated {
            (&target_template, target_revision, target_roles.clone())
        } else {
            let roles = role_revisions(
                &current_template,
                &current_template,
                &revisions.current,
                &revisions.current,
                false,
            );
            (&current_template, &revisions.current, roles)
        };
        let roleset = render_roleset(service, template, revision, &roles, create.index);
        let created = match api.create(&PostParams::default(), &roleset).await {
            Ok(created) => created,
            Err(e) => match super::refusal(&e) {
                Some(message) => {
                    refused = Some(message);
                    break;
                }
                None => return Err(e.into()),
            },
        };
        ctx.metrics.api_write("stormservice", "create", "rolesets");
        ctx.expect_create(
            &key,
            ROLESETS,
            &created.name_any(),
            PendingCreate {
                slot: Some(create.index),
                stable: !create.updated,
            },
        );
    }
    for name in &action.update_in_place {
        let Some(roleset) = rolesets.iter().find(|r| &r.name_any() == name) else {
            continue;
        };
        move_in_place(
            service,
            roleset,
            &target_template,
            target_revision,
            &target_roles,
            ctx,
        )
        .await?;
    }
    // Role replicas are not part of a revision: RoleSets on the target revision follow the
    // live spec's role replicas (what an autoscaler's edit needs) and a pooled canary's
    // partitions in place.
    for roleset in rolesets.iter().filter(|r| {
        r.metadata.deletion_timestamp.is_none()
            && r.labels().get(LABEL_STORM_SERVICE_REVISION) == Some(&target_name)
            && !action.update_in_place.contains(&r.name_any())
    }) {
        if let Some(spec) = &target_template.spec
            && &roleset.spec != spec
        {
            let patch = json!([{"op": "replace", "path": "/spec", "value": spec}]);
            api.patch(
                &roleset.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(patch).expect("a JSON patch")),
            )
            .await?;
            ctx.metrics.api_write("stormservice", "patch", "rolesets");
        }
    }
    if !action.is_empty() {
        tracing::info!(namespace = %service.namespace().unwrap_or_default(), stormservice = %service.name_any(),
            created = action.create.len(), deleted = action.delete.len(),
            updated_in_place = action.update_in_place.len(), scaling = action.scaling, "RoleSets");
    }

    let decision = canary.as_ref().map(|c| &c.decision);
    let requeue = write_status(
        service,
        ctx,
        &revisions,
        &rolesets,
        desired,
        decision,
        refused.as_deref(),
        service_conflict.as_deref(),
    )
    .await?;
    if let Some(step) = decision
        .and_then(|d| d.status.as_ref())
        .map(|s| s.current_step)
    {
        ctx.metrics
            .rollout_step(&namespace, &service.name_any(), i64::from(step));
    }
    // Transitions are reported once their status is stored.
    for transition in decision.iter().flat_map(|d| &d.transitions) {
        ctx.metrics.step_transition(transition.trigger.as_str());
        record_durations(transition, service, &revisions, ctx);
        ctx.publish(
            "stormservice",
            service,
            None,
            transition.reason,
            &format!("{}Step{}", transition.reason, transition.step),
            transition.message.clone(),
        )
        .await;
        tracing::info!(namespace = %service.namespace().unwrap_or_default(), stormservice = %service.name_any(),
            reason = transition.reason, trigger = transition.trigger.as_str(), "{}", transition.message);
    }
    truncate_history(service, ctx, &revisions, &rolesets).await?;
    match refused {
        Some(message) => Err(Error::Refused(message)),
        None => Ok(requeue),
    }
}

/// Rollout and manual-pause durations, observed when the transitions that end them happen.
fn record_durations(
    transition: &Transition,
    fresh: &StormService,
    revisions: &Revisions,
    ctx: &Context,
) {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let since = |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.map(|t| (now - t.0.as_second()).max(0) as f64)
    };
    match (transition.reason, transition.trigger) {
        ("CanaryCompleted" | "CanaryAborted", _) => {
            // A rollout starts when its revision is written.
            if let Some(seconds) = since(revisions.update.metadata.creation_timestamp.as_ref()) {
                let outcome = if transition.reason == "CanaryCompleted" {
                    "completed"
                } else {
                    "aborted"
                };
                ctx.metrics.rollout_finished(outcome, seconds);
            }
        }
        ("CanaryResumed", Trigger::User) => {
            let entered = fresh
                .status
                .as_ref()
                .and_then(|s| s.canary_status.as_ref())
                .and_then(|c| c.step_start_time.as_ref());
            if let Some(seconds) = since(entered) {
                ctx.metrics.manual_pause(seconds);
            }
        }
        _ => {}
    }
}

/// The canary part of a pass: its decision and mode.
struct CanaryPass {
    decision: CanaryDecision,
    mode: CanaryMode,
}

/// The steps as the controller runs them: a final `setWeight: 100` is implied (SPEC §3).
fn canary_steps(service: &StormService) -> Option<Vec<Step>> {
    let mut steps: Vec<Step> = service
        .spec
        .canary_steps()?
        .iter()
        .map(|s| match (&s.set_weight, &s.pause) {
            (Some(w), _) => Step::Weight(u32::try_from(*w).unwrap_or(0).min(100)),
            (None, Some(pause)) => Step::Pause(pause.duration_seconds().unwrap_or(Some(0))),
            (None, None) => Step::Pause(Some(0)),
        })
        .collect();
    if steps.last() != Some(&Step::Weight(100)) {
        steps.push(Step::Weight(100));
    }
    Some(steps)
}

/// Runs the canary step machine for this pass, when a canary is configured or stored.
fn evaluate_canary(
    service: &StormService,
    fresh: &StormService,
    revisions: &Revisions,
    rolesets: &[RoleSet],
    desired: u32,
    update_template: &RoleSetTemplateSpec,
    current_template: &RoleSetTemplateSpec,
) -> Option<CanaryPass> {
    let steps = canary_steps(service)?;
    let stored = fresh.status.as_ref();
    let previous = stored.and_then(|s| s.canary_status.as_ref());
    // A stable revision someone deleted is still the canary's stable side (a full promote
    // then completes the canary instead of finding nothing to roll).
    let stable = revisions
        .stable_missing
        .clone()
        .unwrap_or_else(|| revisions.current.name_any());
    let canary = revisions.update.name_any();
    if stable == canary && previous.is_none() {
        return None;
    }
    let hash = super::revision::revision_hash(&json!(service.spec.canary_steps()), 0);
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
            let spec = pooled_spec(update_template, current_template, weight, false, &stable);
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
    let decision = step(&CanaryInput {
        steps: &steps,
        steps_hash: &hash,
        stable_revision: &stable,
        canary_revision: &canary,
        replicas: desired,
        paused: service.spec.paused == Some(true),
        paused_since,
        now: k8s_openapi::jiff::Timestamp::now().as_second(),
        previous,
        target_ready,
    });
    Some(CanaryPass { decision, mode })
}

/// The pooled RoleSet's spec at `weight`: the canary template, with each role whose pod
/// template changed keeping `replicas - ceil(replicas × weight / 100)` pods stable (all of
/// them while aborted) through its `rollout` block (SPEC §5.2).
fn pooled_spec(
    update: &RoleSetTemplateSpec,
    current: &RoleSetTemplateSpec,
    weight: u32,
    aborting: bool,
    stable_revision: &str,
) -> crate::api::RoleSetSpec {
    let mut spec = update.spec.clone().unwrap_or_default();
    for role in spec.roles.iter_mut().flatten() {
        let Some(stable) = role_hash(current, &role.name) else {
            continue; // a new role has nothing stable to keep
        };
        if stable == template_hash(&role.template.clone().unwrap_or_default()) {
            continue;
        }
        let replicas = u32::try_from(role.replicas_or_default()).unwrap_or(0);
        let partition = if aborting {
            replicas
        } else {
            replicas - target(replicas, weight).min(replicas)
        };
        role.rollout = Some(RoleRollout {
            partition: Some(i32::try_from(partition).unwrap_or(i32::MAX)),
            stable_revision: Some(stable_revision.to_string()),
        });
    }
    spec
}

/// `canaryStatus.roles` (SPEC §3.1): per role, what the step moves and how far it got —
/// RoleSets on the canary revision in replica mode (every role moves with its RoleSet),
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
                            (u + s.updated_replicas, r + s.updated_ready_replicas)
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

/// StormService-level budgets (AIBRIX-REFERENCE §2.2.5): zero for `InPlaceUpdate`.
fn budgets(service: &StormService, desired: u32) -> Fenceposts {
    if service.spec.update_strategy_type() == StormServiceUpdateStrategyType::InPlaceUpdate {
        return Fenceposts::default();
    }
    resolved_budgets(service, desired)
}

/// `maxSurge` / `maxUnavailable` resolved against `desired` (AIBrix's fence-post rule).
fn resolved_budgets(service: &StormService, desired: u32) -> Fenceposts {
    let strategy = service.spec.update_strategy.as_ref();
    let parse = |v: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>| {
        v.and_then(|v| Budget::parse(v).ok())
    };
    resolve_fenceposts(
        parse(strategy.and_then(|s| s.max_surge.as_ref())),
        parse(strategy.and_then(|s| s.max_unavailable.as_ref())),
        desired,
    )
}

/// How many RoleSets `InPlaceUpdate` may have not Ready at once: the resolved
/// `maxUnavailable` (AIBrix's fence-post rule), whatever the update type.
fn in_place_unavailable(service: &StormService, desired: u32) -> u32 {
    resolved_budgets(service, desired).max_unavailable.max(1)
}

fn view(roleset: &RoleSet, update_revision: &str) -> RoleSetView {
    RoleSetView {
        name: roleset.name_any(),
        updated: roleset
            .labels()
            .get(LABEL_STORM_SERVICE_REVISION)
            .map(String::as_str)
            == Some(update_revision),
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

/// Per-role revisions (AIBRIX-REFERENCE §2.2.7): on the update revision, a role whose pod
/// template is unchanged since the current revision keeps the current revision.
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

/// A new RoleSet (AIBRIX-REFERENCE §2.2.6) for slot `index`.
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

/// Moves a RoleSet to the update revision in place (pooled mode): squall's labels and
/// annotations and the spec are replaced; everything else on it (third-party metadata, the
/// `roleset-index`) stays (a fix of AIBRIX-REFERENCE §8.1 item 10).
async fn move_in_place(
    service: &StormService,
    roleset: &RoleSet,
    template: &RoleSetTemplateSpec,
    revision: &ControllerRevision,
    roles: &BTreeMap<String, &ControllerRevision>,
    ctx: &Context,
) -> Result<(), Error> {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion",
        "value": roleset.resource_version()})];
    ops.push(json!({"op": "replace", "path": "/spec", "value": template.spec.clone().unwrap_or_default()}));
    let (labels, annotations) = revision_metadata(service, revision, roles);
    for (field, values) in [("labels", labels), ("annotations", annotations)] {
        let present = match field {
            "labels" => roleset.metadata.labels.is_some(),
            _ => roleset.metadata.annotations.is_some(),
        };
        if !present {
            ops.push(json!({"op": "add", "path": format!("/metadata/{field}"), "value": {}}));
        }
        for (key, value) in values {
            ops.push(json!({"op": "add", "path": format!("/metadata/{field}/{}", escape(&key)), "value": value}));
        }
    }
    let api: Api<RoleSet> =
        Api::namespaced(ctx.client.clone(), &roleset.namespace().unwrap_or_default());
    api.patch(
        &roleset.name_any(),
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!(ops)).expect("a JSON patch")),
    )
    .await?;
    ctx.metrics.api_write("stormservice", "patch", "rolesets");
    Ok(())
}

/// The headless Service `<name>` (AIBRIX-REFERENCE §2.2.2): created when missing; when its
/// selector or `publishNotReadyAddresses` drifted, only those fields are patched. It carries
/// the `storm-service-name` label, which is how the Services cache finds it. A Service of that
/// name that this StormService does not control belongs to somebody else: it is left alone,
/// and the returned message says so (for the `ServiceConflict` condition).
async fn sync_headless_service(
    service: &StormService,
    ctx: &Context,
) -> Result<Option<String>, Error> {
    let namespace = service.namespace().unwrap_or_default();
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = service.name_any();
    let selector = BTreeMap::from([(LABEL_STORM_SERVICE_NAME.to_string(), name.clone())]);
    let cached = ctx
        .caches
        .services
        .get(&namespace, &name)
        .filter(|s| controlled_by(&s.metadata, service));
    let existing = match cached {
        Some(ours) => ours,
        None => {
            let mut labels = service.metadata.labels.clone().unwrap_or_default();
            labels.extend(selector.clone());
            let desired = Service {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: service.namespace(),
                    labels: Some(labels),
                    owner_references: service.controller_owner_ref(&()).map(|r| vec![r]),
                    ..ObjectMeta::default()
                },
                spec: Some(ServiceSpec {
                    cluster_ip: Some("None".into()),
                    selector: Some(selector.clone()),
                    publish_not_ready_addresses: Some(true),
                    ..ServiceSpec::default()
                }),
                status: None,
            };
            match api.create(&PostParams::default(), &desired).await {
                Ok(_) => {
                    ctx.metrics.api_write("stormservice", "create", "services");
                    ctx.publish(
                        "stormservice",
                        service,
                        None,
                        "HeadlessServiceSynced",
                        "HeadlessServiceSynced",
                        format!("Headless Service {name} created"),
                    )
                    .await;
                    return Ok(None);
                }
                // Somebody else's, or ours from before it was labelled: read it once.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    match api.get_opt(&name).await? {
                        Some(existing) => Arc::new(existing),
                        None => return Ok(None),
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    if !controlled_by(&existing.metadata, service) {
        let message = format!(
            "Service {name} exists and is not controlled by this StormService; squall \
             leaves it alone, so it may not select this service's pods. Delete or rename it \
             to let squall create the headless Service."
        );
        if ctx.once_per_generation(service, "service conflict") {
            ctx.warn(
                "stormservice",
                service,
                "ServiceConflict",
                "SyncHeadlessService",
                message.clone(),
            )
            .await;
        }
        return Ok(Some(message));
    }
    let spec = existing.spec.clone().unwrap_or_default();
    let labelled = existing.labels().get(LABEL_STORM_SERVICE_NAME) == Some(&name);
    if !labelled
        || spec.selector.as_ref() != Some(&selector)
        || spec.publish_not_ready_addresses != Some(true)
    {
        let patch = json!({
            "metadata": {"labels": {LABEL_STORM_SERVICE_NAME: name}},
            "spec": {"selector": selector, "publishNotReadyAddresses": true},
        });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        ctx.metrics.api_write("stormservice", "patch", "services");
    }
    Ok(None)
}

/// Whether `meta`'s controller ownerRef is `service` (by UID: a StormService recreated under
/// the same name does not inherit its predecessor's children).
fn controlled_by(meta: &ObjectMeta, service: &StormService) -> bool {
    let uid = service.uid();
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
}

/// Finds or writes the update revision of the template (AIBRIX-REFERENCE §2.2.1): the newest
/// equal revision is reused; an older equal one is a rollback and becomes the newest; else a
/// new revision is written.
async fn sync_revisions(service: &StormService, ctx: &Context) -> Result<Revisions, Error> {
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &service.namespace().unwrap_or_default());
    // Copied out of the cache: the history is bounded by `revisionHistoryLimit`.
    let mut history: Vec<ControllerRevision> = owned_children(&ctx.caches.revisions, service)
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect();
    history.sort_by(|a, b| {
        (a.revision, &a.metadata.creation_timestamp, a.name_any()).cmp(&(
            b.revision,
            &b.metadata.creation_timestamp,
            b.name_any(),
        ))
    });
    let status = service.status.clone().unwrap_or_default();
    let mut collision_count = u32::try_from(status.collision_count.unwrap_or(0)).unwrap_or(0);
    let next = history.last().map_or(1, |r| r.revision + 1);
    let template = &service.spec.template;
    let equal = history.iter().rposition(|r| holds(r, template));
    let update = match equal {
        Some(i) if i + 1 == history.len() => history[i].clone(),
        Some(i) => {
            // A rollback: the old revision becomes the newest.
            let patch = json!({"revision": next});
            let bumped = api
                .patch(
                    &history[i].name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            ctx.metrics
                .api_write("stormservice", "patch", "controllerrevisions");
            bumped
        }
        None => {
            let (created, count) =
                write_revision(&api, service, template, next, collision_count).await?;
            ctx.metrics
                .api_write("stormservice", "create", "controllerrevisions");
            collision_count = count;
            created
        }
    };
    if let Some(used) = collision_count_of(&update) {
        collision_count = collision_count.max(used);
    }
    let stored = status
        .current_revision
        .as_ref()
        .map(|name| (name, history.iter().find(|r| &r.name_any() == name)));
    let stable_missing = match stored {
        Some((name, None)) if *name != update.name_any() => Some(name.clone()),
        _ => None,
    };
    let current = stored
        .and_then(|(_, found)| found)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok(Revisions {
        current,
        update,
        collision_count,
        history,
        stable_missing,
    })
}

/// Deletes the oldest revisions beyond `revisionHistoryLimit` that no RoleSet uses.
async fn truncate_history(
    service: &StormService,
    ctx: &Context,
    revisions: &Revisions,
    rolesets: &[RoleSet],
) -> Result<(), Error> {
    let limit = service
        .spec
        .revision_history_limit
        .map_or(DEFAULT_HISTORY_LIMIT, |l| usize::try_from(l).unwrap_or(0));
    let mut live: Vec<String> = vec![revisions.current.name_any(), revisions.update.name_any()];
    live.extend(
        rolesets
            .iter()
            .filter_map(|r| r.labels().get(LABEL_STORM_SERVICE_REVISION).cloned()),
    );
    let candidates: Vec<&ControllerRevision> = revisions
        .history
        .iter()
        .filter(|r| !live.contains(&r.name_any()))
        .collect();
    if candidates.len() <= limit {
        return Ok(());
    }
    let api: Api<ControllerRevision> =
        Api::namespaced(ctx.client.clone(), &service.namespace().unwrap_or_default());
    for revision in &candidates[..candidates.len() - limit] {
        delete_child(
            &api,
            &revision.name_any(),
            ctx,
            "stormservice",
            "controllerrevisions",
        )
        .await?;
    }
    Ok(())
}

/// Reports a spec the validator rejects (`InvalidSpec`), keeping other status fields.
async fn write_invalid(service: &StormService, ctx: &Context, message: &str) -> Result<(), Error> {
    let generation = service.metadata.generation;
    let conditions = vec![
        condition(
            CONDITION_INVALID_SPEC,
            "True",
            "ValidationFailed",
            message.to_string(),
            generation,
        ),
        condition(
            CONDITION_READY,
            "False",
            "InvalidSpec",
            "the spec is invalid; RoleSets are left as they are".into(),
            generation,
        ),
    ];
    write_conditions(service, ctx, conditions).await
}

/// Writes `conditions` over those of the same types, keeping every other status field: the
/// report of a pass that stops before planning.
async fn write_conditions(
    service: &StormService,
    ctx: &Context,
    new: Vec<Condition>,
) -> Result<(), Error> {
    let old = service.status.clone().unwrap_or_default();
    let mut conditions: Vec<_> = old
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| new.iter().all(|n| n.type_ != c.type_))
        .collect();
    conditions.extend(new);
    keep_transition_times(
        &mut conditions,
        old.conditions.as_deref().unwrap_or_default(),
    );
    let status = StormServiceStatus {
        observed_generation: service.metadata.generation,
        conditions: Some(conditions),
        ..old
    };
    // Conditions are never held back: no counters.
    ctx.write_status(
        "stormservice",
        service,
        service.status.as_ref(),
        &status,
        &[],
    )
    .await?;
    Ok(())
}

/// Derives the status (`planner::status::stormservice_status`, AIBRIX-REFERENCE §2.2.8 with
/// SPEC §5.1 conditions), records the per-role metrics and writes it when it changed;
/// returns when to look again (the progress deadline, if one is running).
#[allow(clippy::too_many_arguments)]
async fn write_status(
    service: &StormService,
    ctx: &Context,
    revisions: &Revisions,
    rolesets: &[RoleSet],
    desired: u32,
    canary: Option<&CanaryDecision>,
    refused: Option<&str>,
    service_conflict: Option<&str>,
) -> Result<Action, Error> {
    let (status, mut requeue_seconds) = stormservice_status(&ServiceStatusInput {
        service,
        update_revision: revisions.update.name_any(),
        current_revision: revisions.current.name_any(),
        collision_count: revisions.collision_count,
        rolesets,
        desired,
        canary,
        refused,
        service_conflict,
        now: k8s_openapi::jiff::Timestamp::now(),
    });
    for role in status.role_statuses.iter().flatten() {
        ctx.metrics.role_replicas(
            &service.namespace().unwrap_or_default(),
            &service.name_any(),
            &role.name,
            [
                i64::from(role.replicas - role.updated_replicas),
                i64::from(role.ready_replicas - role.updated_ready_replicas),
                i64::from(role.updated_replicas),
                i64::from(role.updated_ready_replicas),
            ],
        );
    }
    let wait = ctx
        .write_status(
            "stormservice",
            service,
            service.status.as_ref(),
            &status,
            STORMSERVICE_COUNTERS,
        )
        .await?;
    if let Some(seconds) = canary.and_then(|c| c.requeue_after) {
        requeue_seconds = seconds;
    }
    if let Some(wait) = wait {
        return Ok(Action::requeue(
            wait.min(Duration::from_secs(requeue_seconds.max(1))),
        ));
    }
    if service_conflict.is_some() {
        // Another owner's Service sends squall no events: look again for it to be gone.
        requeue_seconds = requeue_seconds.min(SERVICE_CONFLICT_RECHECK_SECONDS);
    }
    Ok(Action::requeue(Duration::from_secs(requeue_seconds)))
}

/// How often a StormService whose name is taken by another owner's Service looks again.
const SERVICE_CONFLICT_RECHECK_SECONDS: u64 = 15;

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
            mode,
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
