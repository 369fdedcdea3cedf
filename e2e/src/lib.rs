//! Test harness for squall's e2e suite, run against a real kube-apiserver: the local control
//! plane of `e2e/cluster.sh` (or a kind cluster in users' CI), found through `KUBECONFIG`.
//!
//! - [`TestNamespace`]: a fresh namespace per test, deleted afterwards;
//! - [`kubectl`]: the kubectl built by `hack/build-tools.sh`, for applying manifests;
//! - [`wait_for`]: wait on a watched condition with a timeout and a readable failure;
//! - [`Recorder`]: every observed state of a kind, in order, for asserting order and budgets;
//! - [`kubelet`]: what kwok does not emulate (in-place image updates, failures);
//! - [`operator`]: `squall run --local` instances for tests;
//! - [`network`]: TLS probes and the loopback-only connection check;
//! - [`process`]: CPU and peak memory of a process, for the benchmarks;
//! - [`prometheus`]: a real Prometheus and the exporter it scrapes, for canary analysis.
//! - [`tenant`]: clients acting as a tenant with `edit` in one namespace.
//!
//! Cluster tests are `#[ignore]`d so a plain `cargo test` skips them; `make test` runs them
//! with `--include-ignored` against the local control plane.
#![forbid(unsafe_code)]

pub mod aibrix_live;
pub mod fixtures;
pub mod helm;
pub mod kubelet;
pub mod network;
pub mod operator;
pub mod process;
pub mod prometheus;
mod recorder;
pub mod roles;
pub mod serving;
mod shared;
pub mod tenant;

use std::fmt::Debug;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

pub use recorder::{Observed, Recorder, TimedObservation};
pub use shared::{documents, shared_dir, workspace_root};

/// A client for the cluster in `KUBECONFIG`.
pub async fn client() -> Client {
    Client::try_default().await.expect(
        "KUBECONFIG must point at a running cluster (run `make test`, or `e2e/cluster.sh up`)",
    )
}

/// The kubectl binary: `SQUALL_KUBECTL`, else the one `hack/build-tools.sh` built, else
/// `kubectl` on `PATH`.
pub fn kubectl_path() -> PathBuf {
    if let Some(path) = std::env::var_os("SQUALL_KUBECTL") {
        return path.into();
    }
    let built = Command::new(workspace_root().join("hack/build-tools.sh"))
        .arg("--print-bin")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("kubectl"));
    built
        .filter(|p| p.exists())
        .unwrap_or_else(|| "kubectl".into())
}

/// Output of a kubectl run.
#[derive(Debug)]
pub struct KubectlOutput {
    /// Whether kubectl exited 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs kubectl with `args`, feeding `stdin` when given.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> KubectlOutput {
    let mut child = Command::new(kubectl_path())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.as_bytes())
            .expect("write kubectl stdin");
    }
    let out = child.wait_with_output().expect("kubectl finishes");
    KubectlOutput {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Server-side applies a YAML or JSON manifest into `namespace` (field manager `e2e`).
pub fn apply(namespace: &str, manifest: &str) -> KubectlOutput {
    kubectl(
        &[
            "apply",
            "--server-side",
            "--field-manager=e2e",
            "-n",
            namespace,
            "-f",
            "-",
        ],
        Some(manifest),
    )
}

/// Installs squall's CRDs (`manifests/crds/`) and waits until they are Established.
pub fn install_crds() {
    let crds = workspace_root().join("manifests/crds/crds.yaml");
    let crds = crds.to_str().expect("utf-8 path");
    let out = kubectl(
        &["apply", "--server-side", "--force-conflicts", "-f", crds],
        None,
    );
    assert!(out.success, "installing CRDs failed: {}", out.stderr);
    let out = kubectl(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "-f",
            crds,
        ],
        None,
    );
    assert!(out.success, "CRDs not Established: {}", out.stderr);
}

/// squall's CRDs with the bounds of every status field taken out, as a CRD installed before
/// squall bounded status had them: objects written meanwhile may hold any status. squall's
/// own CRDs are installed again when this is dropped.
pub struct StatusBoundsLifted(());

impl StatusBoundsLifted {
    /// Installs the CRDs without their status bounds.
    pub fn install() -> Self {
        fn lift(node: &mut serde_json::Value) {
            if let Some(object) = node.as_object_mut() {
                for bound in ["maxLength", "minimum", "maximum", "maxItems"] {
                    object.remove(bound);
                }
                object.values_mut().for_each(lift);
            }
        }
        let mut crds = documents(&workspace_root().join("manifests/crds/crds.yaml"));
        for crd in &mut crds {
            for version in crd["spec"]["versions"].as_array_mut().into_iter().flatten() {
                lift(&mut version["schema"]["openAPIV3Schema"]["properties"]["status"]);
            }
        }
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": crds});
        let out = kubectl(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&list.to_string()),
        );
        assert!(out.success, "installing the lifted CRDs: {}", out.stderr);
        Self(())
    }
}

impl Drop for StatusBoundsLifted {
    fn drop(&mut self) {
        install_crds();
    }
}

/// Merges `status` into the StormService `name`'s, as soon as the API server validates with
/// the CRD of a [`StatusBoundsLifted`] (a CRD update reaches its validation shortly after it
/// is applied).
pub async fn write_status(api: &Api<DynamicObject>, name: &str, status: serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let patch = Patch::Merge(serde_json::json!({ "status": status }));
    loop {
        match api
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 422 && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("the API server stores the status of {name}: {e}"),
        }
    }
}

/// A namespace that exists for one test; deleted (without waiting) when dropped.
pub struct TestNamespace {
    name: String,
}

impl TestNamespace {
    /// Creates `e2e-<prefix>-xxxxx`.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let api: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some(format!("e2e-{prefix}-"));
        ns.metadata.labels = Some([("e2e.squall.dev/test".to_string(), prefix.to_string())].into());
        let created = api
            .create(&PostParams::default(), &ns)
            .await
            .expect("create test namespace");
        Self {
            name: created.name_any(),
        }
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await; kubectl deletes it without waiting for finalization.
        kubectl(
            &[
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// Waits until `condition` holds for the object `name` (or, with `None`, its absence),
/// watching it; fails after `timeout` with `what` and the last observed state.
pub async fn wait_for<K>(
    api: &Api<K>,
    name: &str,
    what: &str,
    timeout: Duration,
    condition: impl Fn(Option<&K>) -> bool,
) -> Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut last: Option<K> = None;
    let mut seen_any = false;
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    );
    let watched = async {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.try_next().await? {
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    last = Some(o);
                    seen_any = true;
                }
                watcher::Event::Delete(_) => last = None,
                watcher::Event::Init => {
                    last = None;
                    seen_any = false;
                }
                watcher::Event::InitDone => seen_any = true,
            }
            if seen_any && condition(last.as_ref()) {
                return Ok::<_, anyhow::Error>(last.clone());
            }
        }
        bail!("watch ended")
    };
    match tokio::time::timeout(timeout, watched).await {
        Ok(result) => result.with_context(|| format!("waiting for {what}")),
        Err(_) => bail!(
            "timed out after {timeout:?} waiting for {what}; last observed state of {name}:\n{}",
            last.map_or("<absent>".into(), |o| format!("{o:#?}"))
        ),
    }
}

/// Waits until `condition` holds for every object of `api` (a namespaced list), watching
/// them; fails after `timeout` with `what` and the names last observed.
pub async fn wait_for_all<K>(
    api: &Api<K>,
    what: &str,
    timeout: Duration,
    condition: impl Fn(&[K]) -> bool,
) -> Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut objects: std::collections::BTreeMap<String, K> = Default::default();
    let mut listed = false;
    let stream = watcher(api.clone(), watcher::Config::default());
    let watched = async {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.try_next().await? {
            match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    objects.insert(o.meta().name.clone().unwrap_or_default(), o);
                }
                watcher::Event::Delete(o) => {
                    objects.remove(o.meta().name.as_deref().unwrap_or_default());
                }
                watcher::Event::Init => {
                    objects.clear();
                    listed = false;
                }
                watcher::Event::InitDone => listed = true,
            }
            let all: Vec<K> = objects.values().cloned().collect();
            if listed && condition(&all) {
                return Ok::<_, anyhow::Error>(all);
            }
        }
        bail!("watch ended")
    };
    match tokio::time::timeout(timeout, watched).await {
        Ok(result) => result.with_context(|| format!("waiting for {what}")),
        Err(_) => bail!(
            "timed out after {timeout:?} waiting for {what}; last observed: {:?}",
            objects.keys().collect::<Vec<_>>()
        ),
    }
}
