//! The shared operator is installed the way admins install squall (e2e/operator.sh): the
//! chart's release, and one process on loopback with the Deployment's args and env, under
//! the chart ServiceAccount's token, as the image's non-root user. These checks keep that
//! true (so every ordinary e2e test proves the chart's RBAC), and read its `/metrics` in the
//! middle of a rollout.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use e2e::operator::{cluster_dir, shared_operator_admin};
use e2e::roles::{set_role_image, stormservice};
use e2e::{TestNamespace, client, install_crds, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use squall::api::StormService;

const NAMESPACE: &str = "squall-system";
const RELEASE: &str = "squall";
const IMAGE_USER: u32 = 65532;
const TIMEOUT: Duration = Duration::from_secs(120);

fn operator_pid() -> u32 {
    std::fs::read_to_string(cluster_dir().join("squall.pid"))
        .expect("the shared operator's PID file (e2e/operator.sh start)")
        .trim()
        .parse()
        .expect("a PID")
}

/// A value of the shared operator's `operator.env`.
fn operator_env(key: &str) -> String {
    std::fs::read_to_string(cluster_dir().join("operator.env"))
        .expect("operator.env (e2e/operator.sh start)")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        .unwrap_or_else(|| panic!("operator.env has {key}"))
}

/// Whether this test runs as root (then the harness ran the operator as the image's user).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// The process's environment.
fn environ(pid: u32) -> Vec<(String, String)> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .expect("the operator's environment")
        .split(|b| *b == 0)
        .filter_map(|item| {
            let item = String::from_utf8_lossy(item);
            let (k, v) = item.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

fn env_of<'a>(env: &'a [(String, String)], key: &str) -> &'a str {
    env.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("the operator has {key} set"))
}

/// Sum of a metric's samples whose line contains every one of `labels`.
fn metric(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|l| l.starts_with(name) && labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn the_shared_operator_runs_as_the_chart_deploys_it() {
    let client = client().await;
    let pid = operator_pid();

    // The image's user (when the harness runs as root and can switch to it), with a working
    // directory and HOME it cannot write.
    let user = operator_env("SQUALL_OPERATOR_UID");
    if running_as_root() {
        assert_eq!(
            user,
            IMAGE_USER.to_string(),
            "the harness runs it as the image's user"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(
        uid_line.split_whitespace().skip(1).all(|uid| uid == user),
        "runs as {user}: {uid_line}"
    );
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    let env = environ(pid);
    assert_eq!(env_of(&env, "HOME"), cwd.to_str().unwrap());
    let meta = std::fs::metadata(&cwd).unwrap();
    assert_ne!(user, "0", "not root, which would ignore the permissions");
    assert!(
        meta.mode() & 0o222 == 0,
        "{} is not writable by {user} (owner {}, mode {:o})",
        cwd.display(),
        meta.uid(),
        meta.mode()
    );

    // Under the ServiceAccount's token, as the pod the env names.
    let kubeconfig = std::fs::read_to_string(env_of(&env, "KUBECONFIG")).unwrap();
    assert!(kubeconfig.contains("token:") && !kubeconfig.contains("client-key"));
    let pod_name = env_of(&env, "POD_NAME");
    assert_eq!(env_of(&env, "POD_NAMESPACE"), NAMESPACE);
    let pod = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .get(pod_name)
        .await
        .expect("POD_NAME is a pod of the release");
    assert_eq!(
        pod.metadata.labels.unwrap()["app.kubernetes.io/instance"],
        RELEASE
    );
    assert_eq!(
        pod.spec.unwrap().service_account_name.as_deref(),
        Some(RELEASE)
    );
    let lease = Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get("squall-controllers")
        .await
        .expect("the controllers' Lease");
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some(pod_name),
        "the process leads as its pod"
    );

    // The chart's configurations, pointed at loopback, with the caBundle squall injected.
    let config = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get(RELEASE)
        .await
        .unwrap();
    assert_eq!(
        config.metadata.labels.unwrap()["app.kubernetes.io/managed-by"],
        "Helm"
    );
    for hook in config.webhooks.unwrap() {
        let url = hook.client_config.url.unwrap_or_default();
        assert!(
            url.starts_with("https://127.0.0.1:"),
            "{}: {url}",
            hook.name
        );
        assert!(
            hook.client_config
                .ca_bundle
                .is_some_and(|b| !b.0.is_empty()),
            "{}: caBundle injected",
            hook.name
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn metrics_during_a_rollout_show_reconciles_admissions_writes_and_rollout_state() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "metrics").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let ss = stormservice(
        "llm",
        2,
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            "canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}}),
        &[("decode", 1)],
    );
    api.create(&PostParams::default(), &ss).await.unwrap();
    wait_for(&api, "llm", "llm Ready", TIMEOUT, |s| {
        s.and_then(|s| s.status.as_ref())
            .is_some_and(|s| s.ready_replicas == 2 && s.observed_generation == Some(1))
    })
    .await
    .unwrap();
    set_role_image(&api, "llm", 0, "engine:2").await;
    // Mid-rollout: parked at the manual gate after the first step.
    wait_for(&api, "llm", "the canary at its manual gate", TIMEOUT, |s| {
        s.and_then(|s| s.status.as_ref())
            .and_then(|s| s.canary_status.as_ref())
            .is_some_and(|c| c.current_step == 1)
    })
    .await
    .unwrap();

    let namespace = format!("namespace=\"{}\"", ns.name());
    let expected: Vec<(&str, Vec<&str>)> = vec![
        (
            "squall_reconciles_total",
            vec!["controller=\"stormservice\"", "outcome=\"ok\""],
        ),
        (
            "squall_reconciles_total",
            vec!["controller=\"roleset\"", "outcome=\"ok\""],
        ),
        (
            "squall_reconcile_duration_seconds_count",
            vec!["controller=\"stormservice\""],
        ),
        (
            "squall_admission_requests_total",
            vec!["kind=\"StormService\""],
        ),
        ("squall_api_writes_total", vec!["resource=\"rolesets\""]),
        ("squall_api_writes_total", vec!["resource=\"pods\""]),
        ("squall_step_transitions_total", vec![]),
        ("squall_rollout_step", vec![namespace.as_str()]),
        (
            "squall_role_replicas",
            vec![namespace.as_str(), "revision=\"canary\"", "state=\"ready\""],
        ),
        ("squall_leader", vec![]),
    ];
    // The metrics follow the status write of the same reconcile: wait for them to catch up.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = e2e::operator::http_get(shared_operator_admin(), "/metrics").unwrap();
        let missing: Vec<_> = expected
            .iter()
            .filter(|(name, labels)| metric(&body, name, labels) <= 0.0)
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "zero mid-rollout after 30 s: {missing:?}; /metrics:\n{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
