//! `squall cleanup --remove-finalizers`: for uninstalls where the operator is gone. Objects
//! being deleted wait on squall's finalizers forever without it; this removes squall's own
//! finalizers (and only those) so deletion completes. Garbage collection by ownerReferences
//! then removes the children.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{ResourceExt, core::GroupVersionKind};
use serde_json::json;

use crate::api::keys::{FINALIZER_PODSET, FINALIZER_ROLESET, FINALIZER_STORMSERVICE};
use crate::api::{GROUP, VERSION};

/// Flags of `squall cleanup`.
#[derive(Debug, Args)]
pub struct CleanupArgs {
    /// Remove squall's finalizers from StormServices, RoleSets and PodSets.
    #[arg(long, required = true)]
    remove_finalizers: bool,
    /// Only objects that are already being deleted (default: every object, so a later
    /// delete completes without the operator).
    #[arg(long)]
    deleting_only: bool,
    /// Only this namespace (default: every namespace).
    #[arg(short, long)]
    namespace: Option<String>,
}

/// The kinds squall puts finalizers on, with their finalizer.
const FINALIZED: [(&str, &str); 3] = [
    ("StormService", FINALIZER_STORMSERVICE),
    ("RoleSet", FINALIZER_ROLESET),
    ("PodSet", FINALIZER_PODSET),
];

/// Runs `squall cleanup`.
pub fn run(args: &CleanupArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("squall cleanup: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(remove_finalizers(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("squall cleanup: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn remove_finalizers(args: &CleanupArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting with the kubeconfig")?;
    for (kind, finalizer) in FINALIZED {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, VERSION, kind));
        let api: Api<DynamicObject> = match &args.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let mut removed = 0;
        for object in api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {}", resource.plural))?
        {
            if !object.finalizers().iter().any(|f| f == finalizer)
                || (args.deleting_only && object.metadata.deletion_timestamp.is_none())
            {
                continue;
            }
            let kept: Vec<&String> = object
                .finalizers()
                .iter()
                .filter(|f| *f != finalizer)
                .collect();
            // Guarded by resourceVersion: another client's finalizer added meanwhile is kept
            // (the patch fails and the object is reported, never overwritten).
            let patch = json!({"metadata": {
                "finalizers": kept,
                "resourceVersion": object.resource_version(),
            }});
            let namespace = object.namespace().unwrap_or_default();
            let namespaced: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &resource);
            namespaced
                .patch(
                    &object.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .with_context(|| {
                    format!(
                        "removing {finalizer} from {kind} {namespace}/{}",
                        object.name_any()
                    )
                })?;
            removed += 1;
        }
        println!("{kind}: removed {finalizer} from {removed} object(s)");
    }
    Ok(())
}
