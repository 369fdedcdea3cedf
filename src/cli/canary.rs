//! `squall status | promote | abort | retry | pause | resume` (docs/architecture.md#the-process):
//! the user's side of a canary. Writes are the AIBrix-compatible ones — promote removes the pause
//! condition from `status.canaryStatus`, abort / retry / promote --full set the canary's user
//! fields, pause / resume set `spec.paused` — so `kubectl patch` does the same.
//!
//! Exit codes: 0 done; 1 the object could not be read or written; 3 nothing to do (no
//! canary, or no pause gate open for `promote`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::api::analysis::AnalysisStatus;
use crate::api::keys::FIELD_MANAGER;
use crate::api::{CanaryPhase, PauseReason, StormService};
use crate::planner::stormservice::canary::{Step, weight_at};

/// Exit code when there is nothing to do.
const NOTHING_TO_DO: u8 = 3;

/// Which StormService.
#[derive(Debug, Args)]
pub struct Target {
    /// StormService name.
    name: String,
    /// Namespace; default: the kubeconfig context's.
    #[arg(short, long)]
    namespace: Option<String>,
}

/// Canary commands.
#[derive(Debug, Subcommand)]
pub enum CanaryCommand {
    /// Show the rollout: steps, current weight, per-role counts, what it waits for.
    Status {
        #[command(flatten)]
        target: Target,
        /// Redraw on every change until interrupted (or --timeout).
        #[arg(short, long)]
        watch: bool,
        /// Stop watching after this long (`30s`, `5m`).
        #[arg(long, value_parser = super::run::parse_duration)]
        timeout: Option<Duration>,
    },
    /// Open the current pause gate (or, with --full, skip every remaining step).
    Promote {
        #[command(flatten)]
        target: Target,
        /// Skip the remaining steps: go to 100 % now.
        #[arg(long)]
        full: bool,
    },
    /// Return every replica to the stable revision.
    Abort {
        #[command(flatten)]
        target: Target,
    },
    /// Restart an aborted canary at step 0.
    Retry {
        #[command(flatten)]
        target: Target,
    },
    /// Set `spec.paused`: rollouts and canary timers stop, scaling continues.
    Pause {
        #[command(flatten)]
        target: Target,
    },
    /// Clear `spec.paused`.
    Resume {
        #[command(flatten)]
        target: Target,
    },
}

/// Runs a canary command.
pub fn run(command: CanaryCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("squall: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("squall: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn api(target: &Target) -> anyhow::Result<Api<StormService>> {
    let client = kube::Client::try_default()
        .await
        .context("connecting with the kubeconfig")?;
    let namespace = target
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    Ok(Api::namespaced(client, &namespace))
}

/// What the take-over from AIBrix did to `service`, from its `CutOver` event while the API
/// server keeps it (events expire after an hour by default).
async fn cut_over(api: &Api<StormService>, service: &StormService) -> Option<String> {
    use k8s_openapi::api::events::v1::Event;
    let uid = service.metadata.uid.as_ref()?;
    let events: Api<Event> = Api::namespaced(
        api.clone().into_client(),
        service.metadata.namespace.as_deref()?,
    );
    let listed = events
        .list(&kube::api::ListParams::default().fields(&format!("regarding.uid={uid}")))
        .await
        .ok()?;
    listed
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CutOver"))
        .filter_map(|e| e.note)
        .next_back()
}

/// The state of `service`'s gangs: each PodGroup of its RoleSets (named after a RoleSet, or
/// after one of its PodSets), or that the scheduler's CRD is not installed.
async fn gangs(api: &Api<StormService>, service: &StormService) -> Vec<String> {
    use crate::api::RoleSet;
    use crate::api::keys::LABEL_STORM_SERVICE_NAME;
    use crate::planner::podgroup::{gang_state, requested};
    let Some(template) = service.spec.template.spec.as_ref() else {
        return Vec::new();
    };
    let mut schedulers: Vec<_> = template
        .scheduling_strategy
        .iter()
        .chain(
            template
                .roles
                .iter()
                .flatten()
                .filter_map(|r| r.scheduling_strategy.as_ref()),
        )
        .filter_map(|s| requested(s).map(|r| r.scheduler))
        .collect();
    schedulers.sort();
    schedulers.dedup();
    let (Some(namespace), Some(name)) = (
        service.metadata.namespace.as_deref(),
        service.metadata.name.as_deref(),
    ) else {
        return Vec::new();
    };
    let client = api.clone().into_client();
    let selector = format!("{LABEL_STORM_SERVICE_NAME}={name}");
    let rolesets: Vec<String> = Api::<RoleSet>::namespaced(client.clone(), namespace)
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    let mut lines = Vec::new();
    for scheduler in schedulers {
        let groups: Api<kube::core::DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &scheduler.api_resource());
        match groups.list(&kube::api::ListParams::default()).await {
            Err(kube::Error::Api(status)) if status.code == 404 => lines.push(format!(
                "gangs: {} is not installed: no gang guarantee",
                scheduler.crd_name()
            )),
            Err(error) => lines.push(format!("gangs: listing {}: {error}", scheduler.crd_name())),
            Ok(list) => lines.extend(list.items.iter().filter_map(|group| {
                let group_name = group.metadata.name.as_deref()?;
                rolesets
                    .iter()
                    .any(|rs| group_name == rs || group_name.starts_with(&format!("{rs}-")))
                    .then(|| {
                        gang_state(
                            scheduler,
                            group_name,
                            &group.data["spec"],
                            &group.data["status"],
                        )
                    })
            })),
        }
    }
    lines
}

/// Most pods `squall status` lists to find the draining ones: a status line, not an
/// inventory.
const DRAINING_LISTED: u32 = 500;

/// The service's pods being drained (docs/rollouts.md#drain-before-delete): since when, and
/// their requests in flight as last read.
async fn draining(api: &Api<StormService>, service: &StormService) -> Vec<String> {
    use crate::api::keys::{
        ANNOTATION_DRAIN_IN_FLIGHT, ANNOTATION_DRAIN_STARTED, LABEL_ROLE_NAME,
        LABEL_STORM_SERVICE_NAME,
    };
    use k8s_openapi::api::core::v1::Pod;
    let (Some(namespace), Some(name)) = (
        service.metadata.namespace.as_deref(),
        service.metadata.name.as_deref(),
    ) else {
        return Vec::new();
    };
    let pods: Api<Pod> = Api::namespaced(api.clone().into_client(), namespace);
    let params = kube::api::ListParams::default()
        .labels(&format!("{LABEL_STORM_SERVICE_NAME}={name}"))
        .limit(DRAINING_LISTED);
    let Ok(listed) = pods.list_metadata(&params).await else {
        return Vec::new();
    };
    listed
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| {
            let annotations = pod.metadata.annotations.as_ref()?;
            let since = annotations.get(ANNOTATION_DRAIN_STARTED)?;
            let role = pod.metadata.labels.as_ref()?.get(LABEL_ROLE_NAME)?;
            let in_flight = annotations
                .get(ANNOTATION_DRAIN_IN_FLIGHT)
                .map_or("not read yet", String::as_str);
            Some(format!(
                "draining: pod {} (role {role}) out of traffic since {since}, in flight: {in_flight}",
                pod.metadata.name.as_deref().unwrap_or_default()
            ))
        })
        .collect()
}

async fn execute(command: CanaryCommand) -> anyhow::Result<ExitCode> {
    match command {
        CanaryCommand::Status {
            target,
            watch,
            timeout,
        } => {
            let api = api(&target).await?;
            let service = api
                .get(&target.name)
                .await
                .with_context(|| format!("reading StormService {}", target.name))?;
            print!("{}", render(&service));
            if let Some(note) = cut_over(&api, &service).await {
                println!("cut-over: {note}");
            }
            for line in gangs(&api, &service).await {
                println!("{line}");
            }
            for line in draining(&api, &service).await {
                println!("{line}");
            }
            if !watch {
                return Ok(ExitCode::SUCCESS);
            }
            let stream = watcher(
                api,
                watcher::Config::default().fields(&format!("metadata.name={}", target.name)),
            );
            let redraw = async {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = event {
                        print!("\x1b[2J\x1b[H{}", render(&s));
                    }
                }
            };
            match timeout {
                Some(limit) => {
                    let _ = tokio::time::timeout(limit, redraw).await;
                }
                None => redraw.await,
            }
            Ok(ExitCode::SUCCESS)
        }
        CanaryCommand::Promote { target, full } => promote(&target, full).await,
        CanaryCommand::Abort { target } => set_abort(&target, true).await,
        CanaryCommand::Retry { target } => set_abort(&target, false).await,
        CanaryCommand::Pause { target } => set_paused(&target, true).await,
        CanaryCommand::Resume { target } => set_paused(&target, false).await,
    }
}

/// Attempts of a guarded promote that meets concurrent controller writes.
const PROMOTE_ATTEMPTS: usize = 5;

/// Opens the pause gate: removes the pause condition, guarded by the resourceVersion read
/// with it (a concurrent controller write makes the attempt fail, never lost), re-read and
/// retried a few times.
async fn promote(target: &Target, full: bool) -> anyhow::Result<ExitCode> {
    let api = api(target).await?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let service = api.get_status(&target.name).await?;
        let canary = service.status.and_then(|s| s.canary_status);
        let Some(canary) = canary
            .filter(|c| !matches!(c.phase, Some(CanaryPhase::Completed | CanaryPhase::Aborted)))
        else {
            eprintln!("{}: no canary in progress; nothing to promote", target.name);
            return Ok(ExitCode::from(NOTHING_TO_DO));
        };
        // A pause step's gate, or an inconclusive analysis's: promote opens either.
        let gate = canary
            .pause_conditions
            .as_ref()
            .is_some_and(|g| !g.is_empty());
        if !full && !gate {
            eprintln!(
                "{}: step {} has no open pause gate; nothing to promote (use --full to skip the remaining steps)",
                target.name,
                canary.current_step + 1
            );
            return Ok(ExitCode::from(NOTHING_TO_DO));
        }
        let change = if full {
            json!({"promoteFull": true})
        } else {
            json!({"pauseConditions": null})
        };
        let patch = json!({
            "metadata": {"resourceVersion": service.metadata.resource_version},
            "status": {"canaryStatus": change},
        });
        match api
            .patch_status(&target.name, &user_params(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {
                if full {
                    println!("{}: promoting to 100 %", target.name);
                } else {
                    println!(
                        "{}: promoted past step {}",
                        target.name,
                        canary.current_step + 1
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < PROMOTE_ATTEMPTS => {}
            Err(e) => return Err(e).context("promoting"),
        }
    }
}

fn user_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// `abort: true` (abort) or `abort: false` (retry an aborted canary).
async fn set_abort(target: &Target, abort: bool) -> anyhow::Result<ExitCode> {
    let api = api(target).await?;
    let service = api.get_status(&target.name).await?;
    let Some(canary) = service.status.and_then(|s| s.canary_status) else {
        eprintln!("{}: no canary; nothing to do", target.name);
        return Ok(ExitCode::from(NOTHING_TO_DO));
    };
    let aborted = canary.phase == Some(CanaryPhase::Aborted);
    if abort && (aborted || canary.phase == Some(CanaryPhase::Completed)) || !abort && !aborted {
        eprintln!(
            "{}: the canary is {:?}; nothing to do",
            target.name,
            canary.phase.unwrap_or(CanaryPhase::Initializing)
        );
        return Ok(ExitCode::from(NOTHING_TO_DO));
    }
    let patch = json!({"status": {"canaryStatus": {"abort": abort}}});
    api.patch_status(&target.name, &user_params(), &Patch::Merge(patch))
        .await?;
    println!(
        "{}: {}",
        target.name,
        if abort {
            "aborting: every replica returns to the stable revision"
        } else {
            "retrying from step 0"
        }
    );
    Ok(ExitCode::SUCCESS)
}

async fn set_paused(target: &Target, paused: bool) -> anyhow::Result<ExitCode> {
    let api = api(target).await?;
    let patch = json!({"spec": {"paused": paused}});
    api.patch(&target.name, &user_params(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("patching StormService {}", target.name))?;
    println!(
        "{}: {}",
        target.name,
        if paused { "paused" } else { "resumed" }
    );
    Ok(ExitCode::SUCCESS)
}

/// The compact status table.
pub fn render(service: &StormService) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let status = service.status.clone().unwrap_or_default();
    let name = service.metadata.name.clone().unwrap_or_default();
    let _ = writeln!(
        out,
        "StormService {}/{}  replicas {}  ready {}  updated {}  paused {}",
        service.metadata.namespace.clone().unwrap_or_default(),
        name,
        service.spec.replicas_or_default(),
        status.ready_replicas,
        status.updated_replicas,
        service.spec.paused == Some(true),
    );
    let _ = writeln!(
        out,
        "revisions: stable {}  update {}",
        status.current_revision.as_deref().unwrap_or("-"),
        status.update_revision.as_deref().unwrap_or("-"),
    );
    let steps = service.spec.effective_steps().unwrap_or_default();
    match status.canary_status.as_ref() {
        None => {
            let _ = writeln!(out, "canary: none");
        }
        Some(canary) => {
            let current = usize::try_from(canary.current_step).unwrap_or(0);
            // Counted from 1 for people, as the list below; `currentStep` counts from 0.
            let _ = writeln!(
                out,
                "canary: phase {:?}  step {}/{} (currentStep {current})  weight {}%  mode {}",
                canary.phase.unwrap_or(CanaryPhase::Initializing),
                (current + 1).min(steps.len()),
                steps.len(),
                if steps.is_empty() {
                    0
                } else {
                    weight_at(&steps, current)
                },
                canary.mode.map_or("-".to_string(), |m| format!("{m:?}")),
            );
            for (i, step) in steps.iter().enumerate() {
                let marker = match i.cmp(&current) {
                    std::cmp::Ordering::Less => "done",
                    std::cmp::Ordering::Equal => "now",
                    std::cmp::Ordering::Greater => "",
                };
                let what = match step {
                    Step::Weight(w) => format!("setWeight {w}"),
                    Step::Pause(Some(d)) => format!("pause {d}s"),
                    Step::Pause(None) => "pause (until promoted)".to_string(),
                    Step::Analysis => "analysis".to_string(),
                };
                let _ = writeln!(out, "  {:>2}  {what:<24} {marker}", i + 1);
            }
            let _ = writeln!(
                out,
                "waiting for: {}",
                waiting_for(canary, steps.get(current))
            );
            if let Some(message) = &canary.message {
                let _ = writeln!(out, "message: {message}");
            }
            if let Some(until) = &canary.warm_until {
                let _ = writeln!(
                    out,
                    "kept warm, out of traffic, until {} (`squall retry` takes them back)",
                    until.0
                );
            }
            if let Some(analysis) = &canary.analysis {
                let step = analysis.step.unwrap_or_default() + 1;
                analysis_lines(&mut out, &format!("analysis of step {step}"), analysis);
            }
            if let Some(analysis) = &canary.background_analysis {
                analysis_lines(&mut out, "background analysis", analysis);
            }
            let unit = match canary.mode {
                Some(crate::api::CanaryMode::Replica) => "RoleSets",
                _ => "pods",
            };
            for role in canary.roles.iter().flatten() {
                let _ = writeln!(
                    out,
                    "  canary {:<16} target {}  updated {}  ready {} ({unit})",
                    role.name, role.target, role.updated, role.updated_ready
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>6} {:>9} {:>8} {:>14}",
        "ROLE", "REPLICAS", "READY", "AVAILABLE", "UPDATED", "UPDATED-READY"
    );
    for role in status.role_statuses.iter().flatten() {
        // Ready for `minReadySeconds`; a status from before squall counted it says nothing.
        let available = role
            .available_replicas
            .map_or_else(|| "-".to_string(), |n| n.to_string());
        let _ = writeln!(
            out,
            "{:<16} {:>8} {:>6} {available:>9} {:>8} {:>14}",
            role.name,
            role.replicas,
            role.ready_replicas,
            role.updated_replicas,
            role.updated_ready_replicas
        );
    }
    serving_lines(&mut out, &status);
    out
}

/// What each pairing key serves, by role, and what a waiting key waits for.
fn serving_lines(out: &mut String, status: &crate::api::StormServiceStatus) {
    use std::fmt::Write as _;
    let Some(keys) = status.pairing.as_ref() else {
        return;
    };
    let _ = writeln!(
        out,
        "{:<20} {:<16} {:>7} {:>5} {:>5}",
        "PAIRING-KEY", "ROLE", "SERVING", "PODS", "SKEW"
    );
    for key in keys {
        for (i, role) in key.roles.iter().enumerate() {
            let (name, skew) = if i == 0 {
                (key.key.as_str(), key.skew.to_string())
            } else {
                ("", String::new())
            };
            let _ = writeln!(
                out,
                "{name:<20} {:<16} {:>7} {:>5} {skew:>5}",
                role.name, role.serving, role.pods
            );
        }
    }
    let waiting = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == crate::api::keys::CONDITION_PAIRED && c.status == "False");
    if let Some(waiting) = waiting {
        let _ = writeln!(
            out,
            "pairing waits: {}",
            waiting.message.as_deref().unwrap_or_default()
        );
    }
}

/// An analysis and its metrics' last measurements, for `squall status`.
fn analysis_lines(out: &mut String, label: &str, analysis: &AnalysisStatus) {
    use std::fmt::Write as _;
    let _ = writeln!(out, "{label}: {:?}", analysis.phase);
    for metric in &analysis.metrics {
        let _ = writeln!(
            out,
            "  metric {:<20} {:?}: {} measured ({} successful, {} failed, {} inconclusive)",
            metric.name,
            metric.phase,
            metric.measured,
            metric.successful,
            metric.failed,
            metric.inconclusive
        );
        for m in &metric.measurements {
            let _ = writeln!(
                out,
                "    #{:<3} {:<12} {:<12} {}{}",
                m.number,
                format!("{:?}", m.phase),
                m.value.as_deref().unwrap_or("-"),
                m.time.0,
                m.message
                    .as_deref()
                    .map(|why| format!("  {why}"))
                    .unwrap_or_default()
            );
        }
    }
}

fn waiting_for(canary: &crate::api::CanaryStatus, step: Option<&Step>) -> String {
    let inconclusive = canary
        .pause_conditions
        .iter()
        .flatten()
        .any(|c| c.reason == PauseReason::CanaryAnalysisInconclusive);
    match (canary.phase, step) {
        (Some(CanaryPhase::Completed), _) => "nothing: completed".into(),
        (Some(CanaryPhase::Aborted), _) => "`squall retry` (aborted)".into(),
        _ if inconclusive => {
            "`squall promote` to go on or `squall abort` (analysis inconclusive)".into()
        }
        (_, Some(Step::Analysis)) => "the analysis to decide".into(),
        (_, Some(Step::Pause(None))) => "`squall promote`".into(),
        (_, Some(Step::Pause(Some(d)))) => format!("the {d}s pause (or `squall promote`)"),
        (_, Some(Step::Weight(w))) => format!("the {w}% target to be updated and Ready"),
        (_, None) => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_table_shows_the_step_the_wait_and_each_roles_canary_progress() {
        let service: StormService = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": "llm", "namespace": "team"},
            "spec": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "llm"}},
                "updateStrategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}},
                "template": {"spec": {"roles": []}},
            },
            "status": {
                "readyReplicas": 4, "updatedReplicas": 2,
                "canaryStatus": {
                    "currentStep": 1, "phase": "Paused", "mode": "Replica",
                    "roles": [{"name": "decode", "target": 2, "updated": 2, "updatedReady": 1}],
                },
                "roleStatuses": [{"name": "decode", "replicas": 4, "readyReplicas": 4,
                    "availableReplicas": 3, "updatedReplicas": 2, "updatedReadyReplicas": 1}],
            },
        }))
        .unwrap();
        let mut aborted = service.clone();
        let table = render(&service);
        // Three steps (the final 100 % implied), the second current: "2/3", and the list
        // numbered as the header counts.
        assert!(
            table.contains("step 2/3 (currentStep 1)  weight 50%  mode Replica"),
            "{table}"
        );
        let listed: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("   ") && l.trim_start().starts_with(char::is_numeric))
            .collect();
        assert_eq!(listed.len(), 3, "{table}");
        assert!(
            listed[1].trim_start().starts_with("2  pause") && listed[1].ends_with("now"),
            "{table}"
        );
        assert!(table.contains("pause (until promoted)"), "{table}");
        assert!(table.contains("waiting for: `squall promote`"), "{table}");
        assert!(
            table.contains("canary decode           target 2  updated 2  ready 1 (RoleSets)"),
            "{table}"
        );
        let decode: Vec<&str> = table.lines().last().unwrap().split_whitespace().collect();
        assert_eq!(
            decode,
            ["decode", "4", "4", "3", "2", "1"],
            "replicas, ready, available, updated, updated-ready: {table}"
        );
        assert!(
            !table.contains("PAIRING-KEY"),
            "no pairing, no table: {table}"
        );
        assert!(!table.contains("kept warm"), "{table}");

        let canary = aborted
            .status
            .as_mut()
            .unwrap()
            .canary_status
            .as_mut()
            .unwrap();
        canary.phase = Some(CanaryPhase::Aborted);
        canary.warm_until = Some(serde_json::from_value(json!("2026-12-06T12:00:00Z")).unwrap());
        let table = render(&aborted);
        assert!(
            table.contains("kept warm, out of traffic, until 2026-12-06T12:00:00Z"),
            "{table}"
        );
    }

    #[test]
    fn the_status_table_shows_what_each_pairing_key_serves_and_what_it_waits_for() {
        let service: StormService = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": "llm", "namespace": "team"},
            "spec": {
                "selector": {"matchLabels": {"app": "llm"}},
                "template": {"spec": {"roles": []}},
            },
            "status": {
                "conditions": [{"type": "Paired", "status": "False", "reason": "NoPartner",
                    "message": "RoleSet llm-0: key new waits for role decode (none of its 1 pods up)"}],
                "pairing": [
                    {"key": "new", "skew": 0, "roles": [
                        {"name": "prefill", "pods": 1, "serving": 0},
                        {"name": "decode", "pods": 1, "serving": 0}]},
                    {"key": "old", "skew": 1, "roles": [
                        {"name": "prefill", "pods": 2, "serving": 2},
                        {"name": "decode", "pods": 3, "serving": 1}]},
                ],
            },
        }))
        .unwrap();
        let table = render(&service);
        let rows: Vec<Vec<&str>> = table
            .lines()
            .skip_while(|l| !l.starts_with("PAIRING-KEY"))
            .skip(1)
            .take(4)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec!["new", "prefill", "0", "1", "0"],
                vec!["decode", "0", "1"],
                vec!["old", "prefill", "2", "2", "1"],
                vec!["decode", "1", "3"],
            ],
            "{table}"
        );
        assert!(
            table.contains("pairing waits: RoleSet llm-0: key new waits for role decode"),
            "{table}"
        );
    }
}
