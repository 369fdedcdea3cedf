//! `minReadySeconds` on the local control plane (docs/rollouts.md#minreadyseconds), with an
//! operator of its own so that its request counter is this test's alone: a pooled canary
//! rolls a role whose new pods count as available only once Ready for 20 s. No old pod is
//! deleted, and no canary step is reached, against a younger pod; the status counts Ready
//! and available apart; and between a pod turning Ready and turning available the
//! controllers send no request at all — the pass comes back by a wake-up at that moment,
//! not by polling.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::operator::{Operator, counter_sum, http_get, squall};
use e2e::roles::{hash_of, replay, stormservice, stormservice_settled};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::{CanaryPhase, RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);
const MIN_READY: i64 = 20;
/// Controllers on, no webhook registered (the shared operator's are not running yet).
const FLAGS: &[&str] = &["--controllers=true", "--webhook-configs", "none"];

/// Requests the controllers sent, all verbs (reads included), from the operator's counter.
fn controller_requests(operator: &Operator) -> f64 {
    let (status, body) = http_get(operator.admin_addr, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "/metrics: {body}");
    body.lines()
        .filter(|l| l.starts_with("squall_api_requests_total{"))
        .filter(|l| {
            ["roleset", "stormservice", "podset"]
                .iter()
                .any(|c| l.contains(&format!("controller=\"{c}\"")))
        })
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Since when (Unix seconds) the pod has been Ready, when it is.
fn ready_since(pod: &Pod) -> Option<i64> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0.as_second())
}

/// When the pod's deletion was asked for (Unix seconds): its deletion timestamp less its
/// grace period.
fn deletion_asked(pod: &Pod) -> Option<i64> {
    let at = pod.metadata.deletion_timestamp.as_ref()?.0.as_second();
    Some(at - pod.metadata.deletion_grace_period_seconds.unwrap_or(0))
}

fn image(pod: &Pod) -> &str {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref()
        .unwrap_or_default()
}

fn decode_status(rs: &RoleSet) -> Option<(i32, Option<i32>)> {
    let role = rs
        .status
        .as_ref()?
        .roles
        .iter()
        .flatten()
        .find(|r| r.name == "decode")?;
    Some((role.ready_replicas, role.available_replicas))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn min_ready_seconds_holds_deletes_and_canary_steps_until_pods_are_warm_and_nothing_polls() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "minready").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let pod_recorder = Recorder::start(pods.clone()).await;
    let operator = Operator::start("minready", FLAGS);

    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1,
        "canary": {"steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}]}});
    let mut service = stormservice("warm", 1, strategy, &[("decode", 2)]);
    service.spec.min_ready_seconds = Some(MIN_READY as i32);
    let roles = service.spec.template.spec.as_mut().unwrap().roles.as_mut();
    roles.unwrap()[0].update_strategy =
        Some(serde_json::from_value(json!({"maxSurge": 1, "maxUnavailable": 0})).unwrap());
    api.create(&PostParams::default(), &service).await.unwrap();
    wait_for(&api, "warm", "warm Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    let roleset = rolesets.list(&Default::default()).await.unwrap().items[0].name_any();
    pod_recorder.catch_up(&pods).await;
    let start = pod_recorder.events().len();

    api.patch(
        "warm",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "replace",
            "path": "/spec/template/spec/roles/0/template/spec/containers/0/image",
            "value": "engine:2"}]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();
    let new_pods = wait_for_all(&pods, "the canary pod Ready", TIMEOUT, |all| {
        all.iter()
            .any(|p| image(p) == "engine:2" && ready_since(p).is_some())
    })
    .await
    .unwrap();
    let since = new_pods
        .iter()
        .filter(|p| image(p) == "engine:2")
        .find_map(ready_since)
        .unwrap();
    // The status tells Ready from available: 3 Ready, 2 available (the count is written
    // after the status writer's coalescing window, well inside the 20 s).
    let counted = wait_for(
        &rolesets,
        &roleset,
        "the RoleSet counting 3 Ready, 2 available",
        TIMEOUT,
        |rs| rs.and_then(decode_status) == Some((3, Some(2))),
    )
    .await
    .unwrap();
    wait_for(
        &api,
        "warm",
        "the StormService counting 3 Ready",
        TIMEOUT,
        |ss| {
            ss.and_then(|s| s.status.as_ref())
                .and_then(|s| s.role_statuses.as_ref())
                .is_some_and(|r| {
                    r.iter().any(|r| {
                        r.name == "decode"
                            && r.ready_replicas == 3
                            && r.available_replicas == Some(2)
                    })
                })
        },
    )
    .await
    .unwrap();
    assert!(
        unix_now() < since + MIN_READY - 3,
        "the status writes took until {} s after the pod turned Ready: no window left to \
         watch ({:?})",
        unix_now() - since,
        counted.and_then(|rs| rs.status)
    );
    // The window: from here to just before the pod becomes available, the controllers
    // have nothing to do, and must send nothing (a poll would read, at least).
    let roleset_passes = || {
        counter_sum(
            operator.admin_addr,
            "squall_reconciles_total",
            &["controller=\"roleset\""],
        )
    };
    let (before, passes_before) = (controller_requests(&operator), roleset_passes());
    let window_end = UNIX_EPOCH + Duration::from_secs((since + MIN_READY - 1) as u64);
    tokio::time::sleep(
        window_end
            .duration_since(SystemTime::now())
            .unwrap_or_default(),
    )
    .await;
    let (after, passes_after) = (controller_requests(&operator), roleset_passes());
    let old_left = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| image(p) == "engine:1" && p.metadata.deletion_timestamp.is_none())
        .count();
    assert_eq!(
        old_left, 2,
        "no old pod goes before the new one is available"
    );
    assert_eq!(
        before,
        after,
        "the controllers sent {} requests while waiting for availability",
        after - before
    );
    // Nor does the RoleSet's reconcile run meanwhile: it is due when the pod is available.
    assert_eq!(
        passes_before,
        passes_after,
        "the RoleSet was reconciled {} times while waiting for availability",
        passes_after - passes_before
    );

    // The step is reached once the canary pod is available, by the wake-up alone.
    wait_for(&api, "warm", "the canary at its gate", TIMEOUT, |ss| {
        ss.and_then(|s| s.status.as_ref())
            .and_then(|s| s.canary_status.as_ref())
            .is_some_and(|c| c.current_step == 1 && c.phase == Some(CanaryPhase::Paused))
    })
    .await
    .unwrap();
    let gate = api.get_status("warm").await.unwrap();
    let gate_started = gate
        .status
        .as_ref()
        .unwrap()
        .canary_status
        .as_ref()
        .unwrap();
    let gate_started = gate_started.step_start_time.as_ref().unwrap().0.as_second();
    assert!(
        gate_started >= since + MIN_READY,
        "the 50 % step was reached {} s after its pod turned Ready",
        gate_started - since
    );

    let (code, output) = squall(&["promote", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    let done = wait_for(&api, "warm", "warm Ready on engine:2", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
            && ss
                .and_then(|s| s.status.as_ref())
                .and_then(|s| s.canary_status.as_ref())
                .is_some_and(|c| c.phase == Some(CanaryPhase::Completed))
    })
    .await
    .unwrap();
    let status = done.unwrap().status.unwrap();
    assert_eq!(
        (status.available_replicas, status.updated_available_replicas),
        (Some(1), Some(1))
    );

    // Every old pod's deletion was asked for while, without it, two pods had been Ready
    // for 20 s (maxUnavailable 0); and the RoleSet turned Ready only once the last new pod
    // was available.
    pod_recorder.catch_up(&pods).await;
    let events = pod_recorder.events();
    let mut deleted = std::collections::BTreeSet::new();
    let mut last_new_ready = 0;
    replay(&events, start, |i, state| {
        for pod in state.values() {
            if image(pod) == "engine:2" {
                last_new_ready = last_new_ready.max(ready_since(pod).unwrap_or(0));
            }
        }
        // The state at which an old pod is first seen deleted.
        let newly: Vec<(String, i64)> = state
            .values()
            .filter(|p| image(p) == "engine:1" && !deleted.contains(&p.name_any()))
            .filter_map(|p| Some((p.name_any(), deletion_asked(p)?)))
            .collect();
        for (name, asked) in newly {
            let available = state
                .values()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| ready_since(p).is_some_and(|s| s + MIN_READY <= asked))
                .count();
            assert!(
                available >= 2,
                "event {i}: {name} deleted with {available} other pods available"
            );
            deleted.insert(name);
        }
    });
    assert_eq!(deleted.len(), 2, "both old pods' deletions were observed");
    let hashes: std::collections::BTreeSet<String> = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(hash_of)
        .collect();
    assert_eq!(hashes.len(), 1, "one template left: {hashes:?}");
    let rs = rolesets.get_status(&roleset).await.unwrap();
    let ready_at = rs
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .unwrap()
        .0
        .as_second();
    assert!(
        ready_at >= last_new_ready + MIN_READY,
        "the RoleSet turned Ready {} s after its last pod did",
        ready_at - last_new_ready
    );
    drop(operator);
}
