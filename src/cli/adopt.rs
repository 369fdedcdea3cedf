//! `squall adopt --dry-run`: what taking over StormServices from AIBrix's controller would do
//! — which RoleSets, pods and PodSets squall keeps running under its own labels and which it
//! replaces — read from the cluster, nothing written. The prediction is the controllers' own
//! decision (`planner::roleset::adoption`) on the same observations.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::api::cached::pod::CachedPod;
use crate::api::keys::{LABEL_REVISION_OWNER, LABEL_STORM_SERVICE_NAME};
use crate::api::{PodSet, RoleSet, StormService, controlled_by};
use crate::planner::roleset::adoption::{CutOverPlan, predict};

/// `squall adopt` arguments.
#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// Print what taking over would do, writing nothing (adoption itself is what the
    /// controllers of `squall run` do once AIBrix's controller is stopped).
    #[arg(long, required = true)]
    dry_run: bool,
    /// Namespace (default: the kubeconfig's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// One StormService (default: every StormService of the namespace).
    name: Option<String>,
}

/// Runs `squall adopt`.
pub fn run(args: &AdoptArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("squall adopt: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dry_run(args)) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("squall adopt: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dry_run(args: &AdoptArgs) -> anyhow::Result<String> {
    debug_assert!(args.dry_run, "clap requires --dry-run");
    let client = kube::Client::try_default()
        .await
        .context("connecting with the kubeconfig")?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let services: Api<StormService> = Api::namespaced(client.clone(), &namespace);
    let services = match &args.name {
        Some(name) => vec![
            services
                .get(name)
                .await
                .with_context(|| format!("reading StormService {namespace}/{name}"))?,
        ],
        None => {
            services
                .list(&ListParams::default())
                .await
                .context("listing StormServices")?
                .items
        }
    };
    let mut report = String::new();
    for service in &services {
        let name = service.name_any();
        let selected = |label: &str| ListParams::default().labels(&format!("{label}={name}"));
        // Selected by label, kept by controller UID, as the controller selects them: a
        // tenant's revision that carries the label is not this StormService's history.
        let owned = |meta: &kube::api::ObjectMeta| controlled_by(meta, &service.metadata);
        let history: Vec<ControllerRevision> =
            Api::<ControllerRevision>::namespaced(client.clone(), &namespace)
                .list(&selected(LABEL_REVISION_OWNER))
                .await
                .context("listing ControllerRevisions")?
                .items
                .into_iter()
                .filter(|revision| owned(&revision.metadata))
                .collect();
        let rolesets = Api::<RoleSet>::namespaced(client.clone(), &namespace)
            .list(&selected(LABEL_STORM_SERVICE_NAME))
            .await
            .context("listing RoleSets")?
            .items;
        let pods: Vec<Arc<CachedPod>> = Api::<Pod>::namespaced(client.clone(), &namespace)
            .list(&selected(LABEL_STORM_SERVICE_NAME))
            .await
            .context("listing pods")?
            .items
            .iter()
            .map(|pod| Arc::new(CachedPod::from_pod(pod)))
            .collect();
        let podsets: Vec<Arc<PodSet>> = Api::<PodSet>::namespaced(client.clone(), &namespace)
            .list(&selected(LABEL_STORM_SERVICE_NAME))
            .await
            .context("listing PodSets")?
            .items
            .into_iter()
            .map(Arc::new)
            .collect();
        let rolesets: Vec<RoleSet> = rolesets
            .into_iter()
            .filter(|roleset| owned(&roleset.metadata))
            .collect();
        let plan = predict(service, &history, &rolesets, &pods, &podsets);
        report.push_str(&render(&namespace, &name, &plan));
    }
    Ok(report)
}

/// The plan as text: one line per RoleSet and role, one per child adopted or replaced.
pub fn render(namespace: &str, name: &str, plan: &CutOverPlan) -> String {
    let mut out = format!("stormservice {namespace}/{name}: ");
    match &plan.revision {
        Some(revision) => out.push_str(&format!("keeps revision {revision}\n")),
        None => out.push_str("writes a new revision: no existing one holds the template\n"),
    }
    for roleset in &plan.rolesets {
        if !roleset.kept {
            out.push_str(&format!(
                "  roleset {}: replaced, with every pod (its revision does not hold the template)\n",
                roleset.name
            ));
            continue;
        }
        out.push_str(&format!("  roleset {}: kept\n", roleset.name));
        for role in &roleset.roles {
            out.push_str(&format!(
                "    role {}: {} adopted, {} replaced, {} already squall's\n",
                role.role,
                role.adopted.len(),
                role.replaced.len(),
                role.current.len()
            ));
            for child in &role.adopted {
                out.push_str(&format!("      adopt {child}\n"));
            }
            for child in &role.replaced {
                out.push_str(&format!("      replace {child}\n"));
            }
        }
    }
    out
}
