//! The StormService controller (docs/rollouts.md#replica-and-pooled-mode,
//! docs/architecture.md#one-reconcile): observes a StormService, its revisions, RoleSets and
//! headless Service from the shared caches, and carries out what the planner decides — the headless
//! Service (`planner::render`), which revision to reuse, roll back to or write and which to delete
//! (`planner::revision`), the pass — the canary step and the RoleSets to create, delete, move in
//! place or re-spec (`planner::stormservice::decide`) — and the status (`planner::stormservice::status`).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Patch;
use kube::runtime::controller::Action;
use serde_json::json;

use super::analysis::RevisionNames;
use super::kit::children::{ChildKind, Created, OnConflict, Writes, owned_children, uids};
use super::kit::context::Context;
use super::kit::error::Error;
use super::kit::expectations::PendingCreate;
use super::kit::owner::Owner;
use super::revision::write_revision;
use super::wall_clock;
use crate::admission::validation::validate_stormservice;
use crate::api::analysis::AnalysisPhase;
use crate::api::cached::service::CachedService;
use crate::api::keys::{
    FINALIZER_STORMSERVICE, LABEL_STORM_SERVICE_NAME, LABEL_STORM_SERVICE_REVISION,
};
use crate::api::{Condition, RoleSet, StormService};
use crate::planner::render::{headless_service, headless_service_repair};
use crate::planner::requeue::{self, StormServiceWaits};
use crate::planner::revision::{
    UpdateRevision, collision_count_of, current_revision, cut_over_from, expired_revisions,
    sort_history, update_revision,
};
use crate::planner::roleset::adoption::predict;
use crate::planner::status::Reason;
use crate::planner::stormservice::canary::analysis::Measured;
use crate::planner::stormservice::canary::{CanaryDecision, Ended, Transition, TransitionReason};
use crate::planner::stormservice::replicas::PendingRoleSet;
use crate::planner::stormservice::status::{
    STORMSERVICE_COUNTERS, ServiceStatusInput, invalid_spec_conditions, stable_revision_missing,
    stormservice_status, with_conditions,
};
use crate::planner::stormservice::{InPlaceMove, PassInput, decide};

/// A StormService's expectations are of its RoleSets, kept under this key (a RoleSet keeps
/// its own by role name).
const ROLESETS: &str = "rolesets";

impl Owner for StormService {
    const CONTROLLER: &'static str = "stormservice";
    const FINALIZER: &'static str = FINALIZER_STORMSERVICE;
    const CHILD_LABEL: &'static str = LABEL_STORM_SERVICE_NAME;
    const CHILDREN: &'static [ChildKind] = &[ChildKind::RoleSets];

    fn apply(
        &self,
        ctx: &Context,
    ) -> impl std::future::Future<Output = Result<Action, Error>> + Send {
        apply(self, ctx)
    }

    fn forgotten(&self, ctx: &Context) {
        ctx.metrics
            .forget_service(&self.namespace().unwrap_or_default(), &self.name_any());
    }
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
    /// The other controller's revision whose place `update` took this pass (a cut-over).
    took_over_from: Option<String>,
}

async fn apply(service: &StormService, ctx: &Context) -> Result<Action, Error> {
    let now = wall_clock();
    let invalid = ctx.invalid_spec(service, |service| validate_stormservice(service, None));
    let namespace = service.namespace().unwrap_or_default();
    ctx.metrics
        .invalid_spec(&namespace, &service.name_any(), invalid.is_some());
    if let Some(message) = invalid {
        // Objects that bypassed the webhook are reported and left alone
        // (docs/architecture.md#one-reconcile).
        let conditions = invalid_spec_conditions(&message, service.metadata.generation, now);
        write_conditions(service, ctx, conditions).await?;
        return Ok(Action::await_change());
    }
    let service_conflict = sync_headless_service(service, ctx).await?;
    let revisions = sync_revisions(service, ctx).await?;
    if let Some(held) = stable_revision_missing(service, revisions.stable_missing.as_deref(), now) {
        if ctx.once_per_generation(service, "stable revision missing") {
            let message = held.message.clone().unwrap_or_default();
            ctx.warn(
                service,
                Reason::StableRevisionMissing.as_str(),
                "Canary",
                message,
            )
            .await;
        }
        write_conditions(service, ctx, vec![held]).await?;
        return Ok(Action::await_change());
    }
    // Copied out of the cache: a StormService has a handful of RoleSets.
    let rolesets: Vec<RoleSet> = owned_children(&ctx.caches.rolesets, service)
        .into_iter()
        .map(Arc::unwrap_or_clone)
        .collect();
    if let Some(from) = &revisions.took_over_from {
        announce_cut_over(service, ctx, &revisions, &rolesets, from).await;
    }
    let key = Context::key(service);
    let expectation = ctx.expectations.observe(
        &key,
        ROLESETS,
        rolesets
            .iter()
            .map(|r| (r.name_any(), r.metadata.deletion_timestamp.is_some())),
    );
    let names = (revisions.update.name_any(), revisions.current.name_any());
    let revision_names = RevisionNames {
        canary: &names.0,
        stable: &names.1,
    };
    let measured = measure_due(service, ctx, revision_names, now.as_second());
    let pass = decide(&PassInput {
        service,
        current: &revisions.current,
        update: &revisions.update,
        stable_missing: revisions.stable_missing.as_deref(),
        history: &revisions.history,
        rolesets: &rolesets,
        pending_creates: expectation
            .creates
            .values()
            .map(|c| PendingRoleSet {
                index: c.slot.unwrap_or_default(),
                updated: !c.stable,
            })
            .collect(),
        pending_deletes: expectation.deletes.clone(),
        now: now.as_second(),
        measured: &measured,
    })?;
    let action = &pass.action;

    let writes = Writes::<RoleSet>::beside(ctx, service);
    let roleset_uids = uids(&rolesets);
    for name in &action.delete {
        writes.delete(name, roleset_uids.get(name)).await?;
        ctx.expectations.expect_delete(&key, ROLESETS, name);
    }
    // A RoleSet create the API server refused: reported as ReplicaFailure (FailedCreate)
    // and retried with backoff.
    let mut refused = None;
    for create in &pass.creates {
        // A generated name: a conflict is the API server's to retry.
        let name = match writes.create(&create.roleset, OnConflict::Fail).await? {
            Created::New(created) => created.name_any(),
            // Not asked for: a conflict fails the create.
            Created::Exists => continue,
            Created::Refused(message) => {
                refused = Some(message);
                break;
            }
        };
        ctx.expectations.expect_create(
            &key,
            ROLESETS,
            &name,
            PendingCreate {
                slot: Some(create.index),
                stable: create.stable,
            },
        );
    }
    for change in &pass.moves {
        move_in_place(&writes, change).await?;
    }
    for (name, spec) in &pass.respec {
        let patch = json!([{"op": "replace", "path": "/spec", "value": spec}]);
        writes
            .patch(
                name,
                &Patch::Json::<()>(serde_json::from_value(patch).expect("a JSON patch")),
            )
            .await?;
    }
    if !action.is_empty() {
        // The reconcile's span names the StormService.
        tracing::info!(
            created = action.create.len(),
            deleted = action.delete.len(),
            updated_in_place = action.update_in_place.len(),
            scaling = action.scaling,
            "RoleSets"
        );
    }

    let decision = pass.canary.as_ref().map(|c| &c.decision);
    let requeue = write_status(
        service,
        ctx,
        &revisions,
        &rolesets,
        pass.desired,
        decision,
        refused.as_deref(),
        service_conflict.as_deref(),
        now,
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
        if transition.reason == TransitionReason::CanaryAnalysisFailed {
            report_failed_metric(service, decision.and_then(|d| d.status.as_ref()), ctx);
        }
        record_durations(transition, service, &revisions, ctx, now);
        ctx.publish(
            service,
            None,
            transition.reason.as_str(),
            &format!("{}Step{}", transition.reason.as_str(), transition.step),
            transition.message.clone(),
        )
        .await;
        tracing::info!(
            reason = transition.reason.as_str(),
            trigger = transition.trigger.as_str(),
            "{}",
            transition.message
        );
    }
    truncate_history(service, ctx, &revisions, &rolesets).await?;
    match refused {
        Some(message) => Err(Error::Refused(message)),
        None => Ok(requeue),
    }
}

/// Hands the canary analysis measurements due at `now` to the worker and takes those it has
/// answered (none while nothing is due: the planner's requeue brings the reconcile back when
/// one is, and the worker when an answer comes).
fn measure_due(
    service: &StormService,
    ctx: &Context,
    revisions: RevisionNames<'_>,
    now: i64,
) -> Vec<Measured> {
    let canary = service
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.canary.as_ref());
    let due = crate::planner::stormservice::canary::due(
        service.spec.canary_steps().unwrap_or_default(),
        canary.and_then(|c| c.analysis.as_ref()),
        service
            .status
            .as_ref()
            .and_then(|s| s.canary_status.as_ref()),
        service.spec.paused == Some(true),
        now,
    );
    if due.is_empty() {
        return Vec::new();
    }
    let measured = ctx.providers.measure(service, revisions, due);
    for m in &measured {
        ctx.metrics.analysis_measurement(m.value.is_ok());
        if let Err(why) = &m.value {
            tracing::info!(metric = m.due.metric, subject = ?m.due.subject, %why, "analysis measurement without a number");
        }
    }
    measured
}

/// Sets the failed-metric gauge for the metric that failed the analysis in `canary`.
fn report_failed_metric(
    service: &StormService,
    canary: Option<&crate::api::CanaryStatus>,
    ctx: &Context,
) {
    let analyses = canary
        .into_iter()
        .flat_map(|c| [c.analysis.as_ref(), c.background_analysis.as_ref()])
        .flatten();
    for metric in analyses
        .flat_map(|a| &a.metrics)
        .filter(|m| m.phase == AnalysisPhase::Failed)
    {
        let value = metric
            .measurements
            .last()
            .and_then(|m| m.value.as_deref())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        ctx.metrics.analysis_failed(
            &service.namespace().unwrap_or_default(),
            &service.name_any(),
            &metric.name,
            value,
        );
    }
}

/// Rollout and manual-pause durations, observed when the transitions that end them happen
/// (`Transition::ends` decides which).
fn record_durations(
    transition: &Transition,
    fresh: &StormService,
    revisions: &Revisions,
    ctx: &Context,
    now: Timestamp,
) {
    let rollout_started = revisions
        .update
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second());
    let step_started = fresh
        .status
        .as_ref()
        .and_then(|s| s.canary_status.as_ref())
        .and_then(|c| c.step_start_time.as_ref())
        .map(|t| t.0.as_second());
    match transition.ends(rollout_started, step_started, now.as_second()) {
        Some(Ended::Rollout { completed, seconds }) => {
            let outcome = if completed { "completed" } else { "aborted" };
            ctx.metrics.rollout_finished(outcome, seconds);
        }
        Some(Ended::ManualPause { seconds }) => ctx.metrics.manual_pause(seconds),
        None => {}
    }
}

/// Carries out an in-place move (pooled mode), conditional on the version it was decided
/// from.
async fn move_in_place(writes: &Writes<'_, RoleSet>, change: &InPlaceMove) -> Result<(), Error> {
    let escape = |key: &str| key.replace('~', "~0").replace('/', "~1");
    let mut ops = vec![
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": change.resource_version}),
        json!({"op": "replace", "path": "/spec", "value": change.spec}),
    ];
    for (field, present, values) in [
        ("labels", change.has_labels, &change.labels),
        ("annotations", change.has_annotations, &change.annotations),
    ] {
        if !present {
            ops.push(json!({"op": "add", "path": format!("/metadata/{field}"), "value": {}}));
        }
        for (key, value) in values {
            ops.push(json!({"op": "add", "path": format!("/metadata/{field}/{}", escape(key)), "value": value}));
        }
    }
    writes
        .patch(
            &change.name,
            &Patch::Json::<()>(serde_json::from_value(json!(ops)).expect("a JSON patch")),
        )
        .await?;
    Ok(())
}

/// The headless Service `<name>` (docs/aibrix-compatibility.md#the-same): created when missing;
/// when its selector or `publishNotReadyAddresses` drifted, only those fields are patched. It
/// carries the `storm-service-name` label, which is how the Services cache finds it. A Service of
/// that name that this StormService does not control belongs to somebody else: it is left alone,
/// and the returned message says so (for the `ServiceConflict` condition).
async fn sync_headless_service(
    service: &StormService,
    ctx: &Context,
) -> Result<Option<String>, Error> {
    let namespace = service.namespace().unwrap_or_default();
    let writes = Writes::<Service>::beside(ctx, service);
    let name = service.name_any();
    let cached = ctx
        .caches
        .services
        .get(&namespace, &name)
        .filter(|s| s.metadata.controlled_by(&service.metadata));
    let existing = match cached {
        Some(ours) => ours,
        None => {
            let desired = headless_service(service);
            match writes.create(&desired, OnConflict::Exists).await? {
                Created::New(_) => {
                    ctx.publish(
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
                Created::Exists => match writes.get(&name).await? {
                    Some(existing) => Arc::new(CachedService::from(&existing)),
                    None => return Ok(None),
                },
                Created::Refused(message) => {
                    return Err(Error::Refused(format!("the headless Service: {message}")));
                }
            }
        }
    };
    if !existing.metadata.controlled_by(&service.metadata) {
        let message = format!(
            "Service {name} exists and is not controlled by this StormService; squall \
             leaves it alone, so it may not select this service's pods. Delete or rename it \
             to let squall create the headless Service."
        );
        if ctx.once_per_generation(service, "service conflict") {
            ctx.warn(
                service,
                "ServiceConflict",
                "SyncHeadlessService",
                message.clone(),
            )
            .await;
        }
        return Ok(Some(message));
    }
    if let Some(patch) = headless_service_repair(&existing, &name) {
        writes.patch(&name, &Patch::Merge(&patch)).await?;
    }
    Ok(None)
}

/// Says, once, what taking `service` over from another controller's revision `from` does:
/// the `CutOver` event, from the same prediction `squall adopt --dry-run` prints.
async fn announce_cut_over(
    service: &StormService,
    ctx: &Context,
    revisions: &Revisions,
    rolesets: &[RoleSet],
    from: &str,
) {
    let pods: Vec<_> = rolesets
        .iter()
        .flat_map(|r| owned_children(&ctx.caches.pods, r))
        .collect();
    let podsets: Vec<_> = rolesets
        .iter()
        .flat_map(|r| owned_children(&ctx.caches.podsets, r))
        .collect();
    let plan = predict(service, &revisions.history, rolesets, &pods, &podsets);
    let kept = plan.rolesets.iter().filter(|r| r.kept).count();
    let roles = plan.rolesets.iter().flat_map(|r| &r.roles);
    let (adopted, replaced, current) = roles.fold((0, 0, 0), |(a, r, c), role| {
        (
            a + role.adopted.len(),
            r + role.replaced.len(),
            c + role.current.len(),
        )
    });
    let note = format!(
        "took over from revision {from} as {}: {kept} RoleSet(s) kept, {} replaced; {adopted} \
         pod(s) or PodSet(s) adopted without a restart, {replaced} to roll, {current} already \
         squall's",
        revisions.update.name_any(),
        plan.rolesets.len() - kept
    );
    tracing::info!(%note, "cut-over");
    ctx.publish(service, None, "CutOver", "Adopt", note).await;
}

/// Finds or writes the update revision of the template (docs/rollouts.md#replica-and-pooled-mode):
/// the newest equal revision is reused; an older equal one is a rollback and becomes the newest;
/// else a new revision is written.
async fn sync_revisions(service: &StormService, ctx: &Context) -> Result<Revisions, Error> {
    let writes = Writes::<ControllerRevision>::beside(ctx, service);
    // Decoded out of the cache (it keeps their data as text): the history is bounded by
    // `revisionHistoryLimit`.
    let mut history: Vec<ControllerRevision> = owned_children(&ctx.caches.revisions, service)
        .iter()
        .map(|cached| cached.to_revision())
        .collect();
    sort_history(&mut history);
    let status = service.status.clone().unwrap_or_default();
    let mut collision_count = u32::try_from(status.collision_count.unwrap_or(0)).unwrap_or(0);
    let template = &service.spec.template;
    let decided = update_revision(&history, template);
    let took_over_from = cut_over_from(&history, decided);
    let update = match decided {
        UpdateRevision::Newest(i) => history[i].clone(),
        UpdateRevision::Rollback { index, revision } => {
            let patch = json!({"revision": revision});
            writes
                .patch(&history[index].name_any(), &Patch::Merge(&patch))
                .await?
        }
        UpdateRevision::Create { revision } | UpdateRevision::Adopt { revision } => {
            let (created, count) =
                write_revision(&writes, service, template, revision, collision_count).await?;
            collision_count = count;
            created
        }
    };
    if let Some(used) = collision_count_of(&update) {
        collision_count = collision_count.max(used);
    }
    let (current, stable_missing) =
        current_revision(&history, status.current_revision.as_deref(), &update);
    Ok(Revisions {
        current,
        update,
        collision_count,
        history,
        stable_missing,
        took_over_from,
    })
}

/// Deletes the oldest revisions beyond `revisionHistoryLimit` that no RoleSet uses.
async fn truncate_history(
    service: &StormService,
    ctx: &Context,
    revisions: &Revisions,
    rolesets: &[RoleSet],
) -> Result<(), Error> {
    let limit = usize::try_from(service.spec.revision_history_limit_or_default()).unwrap_or(0);
    let mut in_use: BTreeSet<String> =
        BTreeSet::from([revisions.current.name_any(), revisions.update.name_any()]);
    in_use.extend(
        rolesets
            .iter()
            .filter_map(|r| r.labels().get(LABEL_STORM_SERVICE_REVISION).cloned()),
    );
    let expired = expired_revisions(&revisions.history, &in_use, limit);
    if expired.is_empty() {
        return Ok(());
    }
    let writes = Writes::<ControllerRevision>::beside(ctx, service);
    let revision_uids = uids(&revisions.history);
    for name in &expired {
        writes.delete(name, revision_uids.get(name)).await?;
    }
    Ok(())
}

/// Writes `conditions` over those of the same types, keeping every other status field: the
/// report of a pass that stops before planning. These answer a user (an invalid spec, a
/// revision they deleted): never held back.
async fn write_conditions(
    service: &StormService,
    ctx: &Context,
    conditions: Vec<Condition>,
) -> Result<(), Error> {
    let stored = service.status.as_ref();
    let status = with_conditions(stored, conditions, service.metadata.generation);
    ctx.status
        .write(service, stored, None, &status, None)
        .await?;
    Ok(())
}

/// Derives the status (`planner::stormservice::status::stormservice_status`, docs/rollouts.md#conditions),
/// records the per-role metrics and writes it when it changed; returns when to look again
/// (`requeue::stormservice`: the soonest of the progress deadline, the canary's next step,
/// a held-back write and a Service conflict's recheck).
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
    now: Timestamp,
) -> Result<Action, Error> {
    let (status, progress_deadline) = stormservice_status(&ServiceStatusInput {
        service,
        update_revision: revisions.update.name_any(),
        current_revision: revisions.current.name_any(),
        collision_count: revisions.collision_count,
        rolesets,
        desired,
        canary,
        refused,
        service_conflict,
        now,
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
    let status_write = ctx
        .status
        .write(
            service,
            service.status.as_ref(),
            None,
            &status,
            Some(STORMSERVICE_COUNTERS),
        )
        .await?;
    Ok(Action::requeue(requeue::stormservice(StormServiceWaits {
        progress_deadline,
        canary_seconds: canary.and_then(|c| c.requeue_after),
        status_write,
        service_conflict: service_conflict.is_some(),
    })))
}
