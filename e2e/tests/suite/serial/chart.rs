//! The chart's life cycle on the local control plane (docs/architecture.md#the-process): `helm
//! install --wait` (the Deployment's pods are kwok pods), `helm upgrade` to a chart whose CRD
//! changed (from the chart at the last git tag when there is one), `helm rollback`, and `helm
//! uninstall`, which keeps the CRDs and users' objects; then `squall cleanup --remove-finalizers`
//! finishes a deletion the uninstalled operator can no longer finish.
//!
//! Serial: the CRDs are cluster-wide, and the release owns them while this test runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use e2e::helm::{chart_dir, helm};
use e2e::operator::squall_bin;
use e2e::{TestNamespace, client, install_crds, kubectl, wait_for, workspace_root};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::StormService;
use squall::api::keys::FINALIZER_STORMSERVICE;

const RELEASE: &str = "squall-chart";
const CRDS: [&str; 3] = [
    "stormservices.orchestration.aibrix.ai",
    "rolesets.orchestration.aibrix.ai",
    "podsets.orchestration.aibrix.ai",
];
const PROBE_COLUMN: &str = "UpgradeProbe";
/// A finalizer that is not squall's: cleanup must keep it.
const FOREIGN_FINALIZER: &str = "e2e.squall.dev/keep";
const TIMEOUT: Duration = Duration::from_secs(120);

/// Values for a release no process serves: webhooks by `url:` to a closed loopback port,
/// ignored on failure, so the test's own applies pass.
const VALUES: [&str; 4] = [
    "--set",
    "webhook.url=https://127.0.0.1:1",
    "--set",
    "webhook.failurePolicy=Ignore",
];

fn run_helm(args: &[&str]) {
    let out = helm(args);
    assert!(out.success, "helm {args:?}: {}{}", out.stdout, out.stderr);
}

/// Marks the CRDs the earlier tests applied as the release's, as `helm install` requires of
/// objects it takes over (what an admin does when cutting over from kubectl-applied CRDs).
fn adopt_crds() {
    for crd in CRDS {
        let label = kubectl(
            &[
                "label",
                "crd",
                crd,
                "app.kubernetes.io/managed-by=Helm",
                "--overwrite",
            ],
            None,
        );
        assert!(label.success, "{}", label.stderr);
        let annotate = kubectl(
            &[
                "annotate",
                "crd",
                crd,
                &format!("meta.helm.sh/release-name={RELEASE}"),
                &format!("meta.helm.sh/release-namespace={RELEASE}"),
                "--overwrite",
            ],
            None,
        );
        assert!(annotate.success, "{}", annotate.stderr);
    }
}

/// Undoes `adopt_crds` and restores the repository's CRDs.
fn release_crds() {
    for crd in CRDS {
        kubectl(
            &["label", "crd", crd, "app.kubernetes.io/managed-by-"],
            None,
        );
        kubectl(
            &[
                "annotate",
                "crd",
                crd,
                "meta.helm.sh/release-name-",
                "meta.helm.sh/release-namespace-",
                "helm.sh/resource-policy-",
            ],
            None,
        );
    }
    install_crds();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The chart at the last git tag, extracted under `dir`; `None` while no tag exists.
fn chart_at_last_tag(dir: &Path) -> Option<PathBuf> {
    let root = workspace_root();
    let tag = Command::new("git")
        .args(["describe", "--tags", "--abbrev=0"])
        .current_dir(&root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())?;
    let archive = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git archive --format=tar {tag} charts/squall | tar -x -C {}",
            dir.display()
        ))
        .current_dir(&root)
        .status()
        .expect("git archive runs");
    assert!(archive.success(), "extracting charts/squall at {tag}");
    println!("upgrading from the chart at git tag {tag}");
    Some(dir.join("charts/squall"))
}

/// The repository's chart with one CRD field changed: a printer column on StormService.
fn chart_with_changed_crd(dir: &Path) -> PathBuf {
    let chart = dir.join("changed");
    copy_dir(&chart_dir(), &chart);
    let crd = chart.join("templates/crds/stormservices.orchestration.aibrix.ai.yaml");
    let text = std::fs::read_to_string(&crd).unwrap();
    let anchor = "  - additionalPrinterColumns:\n";
    assert_eq!(
        text.matches(anchor).count(),
        1,
        "one version with printer columns"
    );
    let column = format!(
        "    - jsonPath: .metadata.uid\n      name: {PROBE_COLUMN}\n      type: string\n      priority: 1\n"
    );
    std::fs::write(&crd, text.replacen(anchor, &format!("{anchor}{column}"), 1)).unwrap();
    chart
}

async fn has_probe_column(crds: &Api<CustomResourceDefinition>) -> bool {
    crds.get(CRDS[0])
        .await
        .unwrap()
        .spec
        .versions
        .iter()
        .flat_map(|v| v.additional_printer_columns.iter().flatten())
        .any(|c| c.name == PROBE_COLUMN)
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn install_upgrade_rollback_and_uninstall_keep_crds_and_user_objects() {
    install_crds();
    adopt_crds();
    let client = client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let work = std::env::temp_dir().join(format!("squall-chart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();

    let base = chart_at_last_tag(&work).unwrap_or_else(|| {
        println!("skipped: upgrading from the chart at the last git tag (no tag exists yet); upgrading from the current chart instead");
        chart_dir()
    });
    let mut install = vec![
        "install",
        RELEASE,
        base.to_str().unwrap(),
        "--namespace",
        RELEASE,
        "--create-namespace",
        "--wait",
        "--timeout",
        "120s",
    ];
    install.extend(VALUES);
    run_helm(&install);
    let ready = kubectl(
        &[
            "get",
            "deployment",
            RELEASE,
            "-n",
            RELEASE,
            "-o",
            "jsonpath={.status.readyReplicas}",
        ],
        None,
    );
    assert_eq!(
        ready.stdout, "2",
        "both replicas Ready after helm install --wait"
    );

    // A user's object, with squall's finalizer (as the operator adds it) and a foreign one.
    let ns = TestNamespace::create(&client, "chart").await;
    let services: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let ss: StormService = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "keep-me", "finalizers": [FINALIZER_STORMSERVICE, FOREIGN_FINALIZER]},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "keep-me"}},
            "template": {"metadata": {"labels": {"app": "keep-me"}}, "spec": {"roles": [{"name": "decode", "replicas": 1,
                "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}]}}}
    }))
    .unwrap();
    services.create(&PostParams::default(), &ss).await.unwrap();

    // helm upgrade applies a changed CRD (CRDs are templates, not crds/).
    assert!(!has_probe_column(&crds).await);
    let changed = chart_with_changed_crd(&work);
    let mut upgrade = vec![
        "upgrade",
        RELEASE,
        changed.to_str().unwrap(),
        "--namespace",
        RELEASE,
        "--wait",
        "--timeout",
        "120s",
    ];
    upgrade.extend(VALUES);
    run_helm(&upgrade);
    assert!(
        has_probe_column(&crds).await,
        "helm upgrade applied the changed CRD"
    );
    run_helm(&["rollback", RELEASE, "1", "--namespace", RELEASE, "--wait"]);
    assert!(
        !has_probe_column(&crds).await,
        "helm rollback restored the CRD"
    );

    // helm uninstall keeps CRDs and users' objects; the webhooks go.
    run_helm(&[
        "uninstall",
        RELEASE,
        "--namespace",
        RELEASE,
        "--wait",
        "--timeout",
        "120s",
    ]);
    for crd in CRDS {
        let kept = crds.get(crd).await.unwrap();
        assert!(kept.metadata.deletion_timestamp.is_none(), "{crd} kept");
    }
    assert!(
        services.get("keep-me").await.is_ok(),
        "the StormService kept"
    );
    let configs = kubectl(
        &[
            "get",
            "mutatingwebhookconfiguration,validatingwebhookconfiguration",
            RELEASE,
        ],
        None,
    );
    assert!(!configs.success, "the webhook configurations are removed");

    // Without the operator a deletion waits on squall's finalizer; cleanup removes it (and
    // only it).
    let deleted = kubectl(
        &[
            "delete",
            "stormservice",
            "keep-me",
            "-n",
            ns.name(),
            "--wait=false",
        ],
        None,
    );
    assert!(deleted.success, "{}", deleted.stderr);
    let cleanup = Command::new(squall_bin())
        .args(["cleanup", "--remove-finalizers", "--namespace", ns.name()])
        .output()
        .expect("squall cleanup runs");
    let stdout = String::from_utf8_lossy(&cleanup.stdout);
    assert!(
        cleanup.status.success(),
        "squall cleanup: {stdout}{}",
        String::from_utf8_lossy(&cleanup.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "StormService: removed {FINALIZER_STORMSERVICE} from 1 object(s)"
        )),
        "{stdout}"
    );
    let left = services.get("keep-me").await.unwrap();
    assert!(left.metadata.deletion_timestamp.is_some());
    assert_eq!(
        left.finalizers(),
        [FOREIGN_FINALIZER],
        "the foreign finalizer is kept"
    );
    services
        .patch(
            "keep-me",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_for(&services, "keep-me", "keep-me deleted", TIMEOUT, |s| {
        s.is_none()
    })
    .await
    .unwrap();

    kubectl(&["delete", "namespace", RELEASE, "--wait=false"], None);
    release_crds();
    let _ = std::fs::remove_dir_all(&work);
}
