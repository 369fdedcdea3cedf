//! Leader election (docs/architecture.md#one-reconcile) with two replicas as the chart runs them:
//! both serve webhooks on one loopback port (`--reuse-port`) with certificates from one Secret
//! injected into the configurations; exactly one holds the Lease and reconciles (its metrics and
//! log say so, the other wrote nothing). SIGKILL the leader in the middle of a rollout: the
//! webhooks keep answering on the same port, the standby takes the Lease over and completes the
//! rollout. Prints the measured takeover time against lease duration + grace.

use std::time::{Duration, Instant};

use e2e::operator::{Operator, counter_sum, free_port, http_get};
use e2e::{TestNamespace, client, install_crds, kubectl, wait_for};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::StormService;
use squall::webhook::config::{Registration, configurations};

const TIMEOUT: Duration = Duration::from_secs(120);
const RELEASE: &str = "lease";
const LEASE: &str = "lease-controllers";
const LEASE_SECONDS: u64 = 4;
/// The grace kube-lease-manager is given (`--lease-duration` / 3, at least 1 s).
const GRACE_SECONDS: u64 = 1;

/// The `squall_leader` gauge of an operator.
fn leading(operator: &Operator) -> bool {
    let (_, body) = http_get(operator.admin_addr, "/metrics").expect("GET /metrics");
    body.lines().any(|l| l == "squall_leader 1")
}

fn holder(lease: Option<&Lease>) -> Option<String> {
    lease?.spec.as_ref()?.holder_identity.clone()
}

fn ready_at(ss: Option<&StormService>, generation: i64) -> bool {
    ss.and_then(|s| s.status.as_ref()).is_some_and(|s| {
        s.observed_generation == Some(generation)
            && s.current_revision == s.update_revision
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Webhook configurations as the chart creates them (no caBundle), on the shared port,
/// calling out only for the test's namespace.
async fn register_webhooks(client: &kube::Client, port: u16, namespace: &str) {
    let (mut mutating, mut validating) = configurations(&Registration {
        name: RELEASE.into(),
        base_url: format!("https://127.0.0.1:{port}"),
        failure_policy: "Fail".into(),
        exclude_user: None,
    });
    let only_test_namespace = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "kubernetes.io/metadata.name".into(),
            operator: "In".into(),
            values: Some(vec![namespace.into()]),
        }]),
        ..LabelSelector::default()
    };
    for hook in mutating.webhooks.iter_mut().flatten() {
        hook.namespace_selector = Some(only_test_namespace.clone());
    }
    for hook in validating.webhooks.iter_mut().flatten() {
        hook.namespace_selector = Some(only_test_namespace.clone());
    }
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &mutating)
        .await
        .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &validating)
        .await
        .unwrap();
}

/// Removes the configurations even when the test fails.
struct Registered;

impl Drop for Registered {
    fn drop(&mut self) {
        kubectl(
            &[
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                RELEASE,
                "--ignore-not-found",
            ],
            None,
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn replicas_share_a_webhook_port_one_reconciles_and_a_standby_completes_a_rollout() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "lease").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let port = free_port();
    register_webhooks(&client, port, ns.name()).await;
    let _registered = Registered;

    let bind = format!("--webhook-bind=127.0.0.1:{port}");
    let duration = format!("{LEASE_SECONDS}s");
    let args = [
        bind.as_str(),
        "--reuse-port",
        "--controllers=true",
        "--leader-elect=true",
        "--lease-duration",
        &duration,
    ];
    let mut replicas = vec![
        Operator::start_replica(RELEASE, ns.name(), 0, "inject", &args),
        Operator::start_replica(RELEASE, ns.name(), 1, "inject", &args),
    ];
    assert_eq!(replicas[0].webhook_addr, replicas[1].webhook_addr);
    let held = wait_for(&leases, LEASE, "a holder of the Lease", TIMEOUT, |l| {
        holder(l).is_some()
    })
    .await
    .unwrap();
    let first = holder(held.as_ref()).unwrap();
    let leader_index = replicas
        .iter()
        .position(|o| first == format!("squall-{}", o.pid()))
        .expect("the holder is one of the two processes");

    // Created through the shared port's webhooks (failurePolicy Fail): defaults are stored.
    let ss: StormService = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "llm"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "llm"}},
            "updateStrategy": {"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"roles": [{"name": "decode", "replicas": 1,
                "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}]}}}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &ss).await.unwrap();
    assert_eq!(
        created
            .spec
            .template
            .spec
            .as_ref()
            .unwrap()
            .roles
            .as_ref()
            .unwrap()[0]
            .upgrade_order,
        Some(0),
        "the mutating webhook answered on the shared port"
    );
    wait_for(&api, "llm", "llm Ready", TIMEOUT, |s| ready_at(s, 1))
        .await
        .unwrap();
    let standby = &replicas[1 - leader_index];
    assert!(
        leading(&replicas[leader_index]) && !leading(standby),
        "exactly one leads"
    );
    assert_eq!(
        counter_sum(standby.admin_addr, "squall_api_writes_total", &[]),
        0.0,
        "the standby wrote nothing"
    );
    assert!(
        replicas[leader_index]
            .log()
            .contains("leading: starting controllers")
    );
    assert!(
        !standby.log().contains("leading: starting controllers"),
        "the standby's log shows it never led"
    );

    // A rollout whose new pods stay not Ready until released: kill the leader in the middle.
    api.patch(
        "llm",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([
            {"op": "replace", "path": "/spec/template/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"},
            {"op": "add", "path": "/spec/template/spec/roles/0/template/metadata",
             "value": {"annotations": {"e2e.squall.dev/hold-ready": "true"}}},
        ])).unwrap()),
    )
    .await
    .unwrap();
    wait_for(&api, "llm", "the rollout under way", TIMEOUT, |s| {
        s.and_then(|s| s.status.as_ref())
            .is_some_and(|s| s.observed_generation == Some(2) && s.updated_replicas >= 1)
    })
    .await
    .unwrap();
    let killed_at = Instant::now();
    replicas.remove(leader_index).kill();

    // Webhooks keep answering on the same port (the API server may first hit a connection
    // the killed process held; a new one reaches the survivor).
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut probe = ss.clone();
    probe.metadata.name = Some("probe".into());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match api.create(&dry_run, &probe).await {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no webhook answer on the shared port after the kill: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    let taken = wait_for(
        &leases,
        LEASE,
        "the standby holding the Lease",
        TIMEOUT,
        |l| holder(l).is_some_and(|h| h != first),
    )
    .await
    .unwrap();
    let takeover = killed_at.elapsed();
    println!(
        "leader election: takeover after {:.1}s (lease duration {LEASE_SECONDS}s + grace {GRACE_SECONDS}s)",
        takeover.as_secs_f64()
    );
    assert_eq!(
        holder(taken.as_ref()).unwrap(),
        format!("squall-{}", replicas[0].pid())
    );
    // Release the new pods; the new leader completes the rollout.
    let release = |pods: Vec<Pod>| {
        pods.into_iter().filter(|p| {
            p.annotations().contains_key("e2e.squall.dev/hold-ready")
                && !p.annotations().contains_key("e2e.squall.dev/ready")
        })
    };
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let listed = pods.list(&ListParams::default()).await.unwrap().items;
        for pod in release(listed) {
            pods.patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"e2e.squall.dev/ready": "true"}}}),
                ),
            )
            .await
            .unwrap();
        }
        if ready_at(api.get_opt("llm").await.unwrap().as_ref(), 2) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout did not complete under the new leader"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(leading(&replicas[0]));
    assert!(replicas[0].log().contains("leading: starting controllers"));
    assert!(counter_sum(replicas[0].admin_addr, "squall_api_writes_total", &[]) > 0.0);
}

/// A leader whose Lease is taken away (another holder renewed it) stops its controllers and
/// exits non-zero, so its restart campaigns again: two processes never reconcile at once.
#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn a_leader_that_loses_its_lease_stops_its_controllers_and_exits() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "lost-lease").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let duration = format!("{LEASE_SECONDS}s");
    let mut leader = Operator::start_replica(
        RELEASE,
        ns.name(),
        0,
        "none",
        &[
            "--controllers=true",
            "--leader-elect=true",
            "--lease-duration",
            &duration,
        ],
    );
    let identity = format!("squall-{}", leader.pid());
    wait_for(
        &leases,
        LEASE,
        "the replica holding the Lease",
        TIMEOUT,
        |l| holder(l).as_deref() == Some(identity.as_str()),
    )
    .await
    .unwrap();
    // The gauge follows the Lease once the controllers start.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leading(&leader) {
        assert!(
            Instant::now() < deadline,
            "squall_leader is not 1 10 s after taking the Lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Another candidate takes the Lease over, as after a partition that outlived it.
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    leases
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"holderIdentity": "intruder", "renewTime": now,
                "acquireTime": now, "leaseDurationSeconds": 60}}),
            ),
        )
        .await
        .unwrap();
    let status = leader
        .wait_exit(Duration::from_secs(30))
        .expect("the replica exits after losing its Lease");
    assert!(!status.success(), "a lost Lease is an error exit: {status}");
    let log = leader.log();
    assert!(log.contains("lost the Lease"), "the log says why:\n{log}");
    let lease = leases.get(LEASE).await.unwrap();
    assert_eq!(
        holder(Some(&lease)).as_deref(),
        Some("intruder"),
        "the Lease is left to its holder"
    );
}

/// Issue 14 (6): a leader that loses its Lease stops writing at once. The leader is in the
/// middle of one long pass (a RoleSet of 4 roles × 500 pods, created one by one) when the
/// Lease is taken from it; it exits, and the pass is cut short — before, in-flight reconciles
/// finished first, so the pass created all 2,000 pods as a non-leader.
#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn a_leader_that_loses_its_lease_stops_writing_at_once() {
    const RELEASE: &str = "lost";
    const LEASE: &str = "lost-controllers";
    const ROLES: usize = 4;
    const PODS_PER_ROLE: i32 = 500;
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "lost-lease").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<squall::api::RoleSet> = Api::namespaced(client.clone(), ns.name());
    let namespaces = format!("--namespaces={}", ns.name());
    let mut leader = Operator::start_replica(
        RELEASE,
        ns.name(),
        0,
        "none",
        &[
            "--controllers=true",
            "--leader-elect=true",
            "--lease-duration",
            "3s",
            &namespaces,
        ],
    );
    wait_for(
        &leases,
        LEASE,
        "the replica holds the Lease",
        TIMEOUT,
        |l| holder(l).is_some(),
    )
    .await
    .unwrap();
    let roles: Vec<(String, i32, Option<i32>)> = (0..ROLES)
        .map(|i| (format!("role-{i}"), PODS_PER_ROLE, None))
        .collect();
    let roles: Vec<(&str, i32, Option<i32>)> =
        roles.iter().map(|(n, r, o)| (n.as_str(), *r, *o)).collect();
    rolesets
        .create(
            &PostParams::default(),
            &e2e::roles::roleset("big", &roles, "engine:1"),
        )
        .await
        .unwrap();
    let count = || async {
        pods.list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
    };
    let deadline = Instant::now() + TIMEOUT;
    while count().await < 50 {
        assert!(
            Instant::now() < deadline,
            "the leader never started creating pods"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another holder takes the Lease for an hour.
    let now = json!(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now()
    ));
    leases
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "holderIdentity": "another-operator",
                "acquireTime": now, "renewTime": now, "leaseDurationSeconds": 3600
            }})),
        )
        .await
        .unwrap();
    let exited = leader.wait_exit(Duration::from_secs(30));
    assert!(
        exited.is_some_and(|s| !s.success()),
        "the leader must exit on losing the Lease: {exited:?}\n{}",
        leader.log()
    );
    assert!(leader.log().contains("lost the Lease"), "{}", leader.log());
    let created = count().await;
    let total = ROLES * PODS_PER_ROLE as usize;
    assert!(
        created < total,
        "the pass went on after the Lease was lost: {created} of {total} pods created"
    );
    eprintln!("the pass was cut short at {created} of {total} pods");
}
