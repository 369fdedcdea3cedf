//! Leader election (SPEC §5.1): of two squall processes sharing a Lease, exactly one runs the
//! controllers; SIGKILL it and the other takes the Lease over and reconciles. Prints the
//! measured takeover time against the lease duration.

use std::time::{Duration, Instant};

use e2e::operator::{Operator, counter_sum, http_get};
use e2e::{TestNamespace, client, install_crds, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::StormService;

const TIMEOUT: Duration = Duration::from_secs(120);
const LEASE: &str = "e2e-controllers";

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

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn one_replica_reconciles_and_a_standby_takes_over_after_a_kill() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "lease").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let lease_seconds = 4;
    let duration = format!("{lease_seconds}s");
    let args = [
        "--controllers=true",
        "--webhook-configs",
        "none",
        "--leader-elect=true",
        "--lease-name",
        LEASE,
        "--lease-duration",
        &duration,
        "--namespace",
        ns.name(),
    ];
    let mut replicas = vec![
        Operator::start("lease-a", &args),
        Operator::start("lease-b", &args),
    ];
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

    let ss: StormService = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "llm"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "llm"}},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"roles": [{"name": "decode", "replicas": 1,
                "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &ss).await.unwrap();
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

    // SIGKILL the leader: the standby takes over once the Lease expires.
    let killed_at = Instant::now();
    replicas.remove(leader_index).kill();
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
        "leader election: takeover after {:.1}s (lease duration {lease_seconds}s)",
        takeover.as_secs_f64()
    );
    assert_eq!(
        holder(taken.as_ref()).unwrap(),
        format!("squall-{}", replicas[0].pid())
    );
    api.patch(
        "llm",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([{"op": "replace",
            "path": "/spec/template/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"}])).unwrap()),
    )
    .await
    .unwrap();
    wait_for(&api, "llm", "llm rolled by the new leader", TIMEOUT, |s| {
        ready_at(s, 2)
    })
    .await
    .unwrap();
    assert!(leading(&replicas[0]));
}
