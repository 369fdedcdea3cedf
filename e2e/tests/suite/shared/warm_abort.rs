//! Warm abort on the local control plane (docs/rollouts.md#warm-abort): a pooled canary with
//! `abortScaleDownDelaySeconds` is aborted, and its canary pod leaves the EndpointSlices at
//! once while it keeps running; `squall retry` within the delay takes the same pod back (same
//! UID, no pod created for the canary); aborted again with a short delay, the pod goes when
//! the delay ends, and a retry after it creates a new one. Pods and slices are recorded, and
//! the role budgets checked at every observed pod state.

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::operator::squall;
use e2e::roles::{assert_pod_budgets, replay, stormservice, stormservice_settled};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::keys::CONDITION_PAIRING_SERVABLE;
use squall::api::{CanaryPhase, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);

fn image(pod: &Pod) -> &str {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref()
        .unwrap_or_default()
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

/// The live canary (`engine:2`) pods.
fn canary_pods(all: &[Pod]) -> Vec<&Pod> {
    all.iter()
        .filter(|p| image(p) == "engine:2" && p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Whether the slices list `pod` as serving.
fn serving(slices: &[EndpointSlice], pod: &str) -> bool {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(pod))
        .any(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
}

fn canary_phase(ss: Option<&StormService>) -> Option<(CanaryPhase, i32)> {
    let canary = ss?.status.as_ref()?.canary_status.as_ref()?;
    Some((canary.phase?, canary.current_step))
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn an_aborted_canary_stays_warm_out_of_traffic_and_a_retry_takes_the_same_pod_back() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "warmabort").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
    let strategy = json!({"type": "RollingUpdate", "canary": {
        "abortScaleDownDelaySeconds": 600,
        "steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}]}});
    let mut service = stormservice("warm", 1, strategy, &[("decode", 2)]);
    let roles = service.spec.template.spec.as_mut().unwrap().roles.as_mut();
    roles.unwrap()[0].update_strategy =
        Some(serde_json::from_value(json!({"maxSurge": 1, "maxUnavailable": 1})).unwrap());
    api.create(&PostParams::default(), &service).await.unwrap();
    wait_for(&api, "warm", "warm Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    let pod_recorder = Recorder::start(pods.clone()).await;
    pod_recorder.catch_up(&pods).await;
    let start = pod_recorder.events().len();
    let slice_recorder = Recorder::start(slices.clone()).await;

    // The canary at its gate: one of two pods on engine:2, serving.
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
    wait_for(&api, "warm", "the canary at its gate", TIMEOUT, |ss| {
        canary_phase(ss) == Some((CanaryPhase::Paused, 1))
    })
    .await
    .unwrap();
    let at_gate = wait_for_all(&pods, "the canary pod up", TIMEOUT, |all| {
        canary_pods(all).len() == 1
    })
    .await
    .unwrap();
    let canary = canary_pods(&at_gate)[0].name_any();
    let canary_uid = canary_pods(&at_gate)[0].uid().unwrap();
    wait_for_all(&slices, "the canary pod serving", TIMEOUT, |all| {
        serving(all, &canary)
    })
    .await
    .unwrap();

    // Aborted: out of the slices at once, still running, the stable side whole again.
    let (code, output) = squall(&["abort", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    wait_for_all(&slices, "the canary pod out of traffic", TIMEOUT, |all| {
        !serving(all, &canary)
    })
    .await
    .unwrap();
    let aborted = wait_for_all(
        &pods,
        "two stable pods Ready beside the warm one",
        TIMEOUT,
        |all| {
            let stable_ready = all
                .iter()
                .filter(|p| image(p) == "engine:1" && p.metadata.deletion_timestamp.is_none())
                .filter(|p| condition(p, "Ready") == Some("True"))
                .count();
            stable_ready == 2 && canary_pods(all).len() == 1
        },
    )
    .await
    .unwrap();
    let warm = canary_pods(&aborted)[0];
    assert_eq!(warm.uid().as_deref(), Some(canary_uid.as_str()));
    assert_eq!(condition(warm, CONDITION_PAIRING_SERVABLE), Some("False"));
    assert_eq!(
        condition(warm, "ContainersReady"),
        Some("True"),
        "it keeps running"
    );
    let (_, status) = squall(&["status", "warm", "-n", ns.name()]);
    assert!(
        status.contains("kept warm, out of traffic, until"),
        "{status}"
    );

    // Retry within the delay: the same pod serves again; none is created for the canary.
    // Until then, no state of the slices listed it as serving since it left them.
    slice_recorder.catch_up(&slices).await;
    let mut state = std::collections::BTreeMap::new();
    let (mut served, mut left) = (false, false);
    for (i, event) in slice_recorder.events().iter().enumerate() {
        event.apply_to(&mut state);
        let listed: Vec<EndpointSlice> = state.values().cloned().collect();
        let now_serving = serving(&listed, &canary);
        assert!(
            !(left && now_serving),
            "slice event {i}: the aborted canary pod served again before the retry"
        );
        left |= served && !now_serving;
        served |= now_serving;
    }
    assert!(left, "the slices showed the canary pod leave");
    let (code, output) = squall(&["retry", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    wait_for(&api, "warm", "the canary back at its gate", TIMEOUT, |ss| {
        canary_phase(ss) == Some((CanaryPhase::Paused, 1))
    })
    .await
    .unwrap();
    wait_for_all(
        &slices,
        "the same canary pod serving again",
        TIMEOUT,
        |all| serving(all, &canary),
    )
    .await
    .unwrap();
    pod_recorder.catch_up(&pods).await;
    let canary_uids: BTreeSet<String> = pod_recorder
        .events()
        .iter()
        .flat_map(|e| e.applied().into_iter().cloned().collect::<Vec<_>>())
        .filter(|p| image(p) == "engine:2")
        .filter_map(|p| p.uid())
        .collect();
    assert_eq!(
        canary_uids,
        BTreeSet::from([canary_uid.clone()]),
        "one canary pod, taken back"
    );

    // Aborted with a short delay: the pod goes when it ends, and a retry after that starts
    // a new one.
    api.patch(
        "warm",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"updateStrategy": {"canary": {
            "abortScaleDownDelaySeconds": 5}}}})),
    )
    .await
    .unwrap();
    let (code, output) = squall(&["abort", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    let aborted = wait_for(&api, "warm", "aborted again", TIMEOUT, |ss| {
        canary_phase(ss).is_some_and(|(phase, _)| phase == CanaryPhase::Aborted)
    })
    .await
    .unwrap()
    .unwrap();
    let canary_status = aborted.status.unwrap().canary_status.unwrap();
    let warm_until = canary_status
        .warm_until
        .expect("the status says until when the pod stays")
        .0
        .as_second();
    assert_eq!(
        warm_until,
        canary_status.aborted_at.unwrap().0.as_second() + 5,
        "abortScaleDownDelaySeconds after the abort"
    );
    let gone = wait_for_all(&pods, "the warm pod deleted", TIMEOUT, |all| {
        all.iter()
            .all(|p| p.uid().as_deref() != Some(canary_uid.as_str()))
            || all.iter().any(|p| {
                p.uid().as_deref() == Some(canary_uid.as_str())
                    && p.metadata.deletion_timestamp.is_some()
            })
    })
    .await
    .unwrap();
    if let Some(deleted) = gone
        .iter()
        .find(|p| p.uid().as_deref() == Some(canary_uid.as_str()))
    {
        let asked = deleted
            .metadata
            .deletion_timestamp
            .as_ref()
            .unwrap()
            .0
            .as_second()
            - deleted.metadata.deletion_grace_period_seconds.unwrap_or(0);
        assert!(
            asked >= warm_until,
            "deleted {} s before the delay ended",
            warm_until - asked
        );
    }
    let (code, output) = squall(&["retry", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    let retried = wait_for_all(&pods, "a new canary pod", TIMEOUT, |all| {
        canary_pods(all)
            .iter()
            .any(|p| p.uid().as_deref() != Some(canary_uid.as_str()))
    })
    .await
    .unwrap();
    assert_eq!(canary_pods(&retried).len(), 1);

    // decode: 2 pods, maxSurge 1 (a warm pod holds it), maxUnavailable 1 (the canary pod
    // leaves traffic at the abort).
    pod_recorder.catch_up(&pods).await;
    replay(&pod_recorder.events(), start, |i, state| {
        assert_pod_budgets(i, state, &[("decode", 2)], 1, 1)
    });
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn an_aborted_replica_canary_keeps_its_roleset_warm_out_of_traffic_for_a_retry() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "warmreplica").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<squall::api::RoleSet> = Api::namespaced(client.clone(), ns.name());
    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0,
        "canary": {"abortScaleDownDelaySeconds": 600,
            "steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}]}});
    let service = stormservice("warm", 2, strategy, &[("decode", 1)]);
    api.create(&PostParams::default(), &service).await.unwrap();
    wait_for(&api, "warm", "warm Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    let roleset_recorder = Recorder::start(rolesets.clone()).await;
    roleset_recorder.catch_up(&rolesets).await;
    let start = roleset_recorder.events().len();
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
    wait_for(&api, "warm", "the canary at its gate", TIMEOUT, |ss| {
        canary_phase(ss) == Some((CanaryPhase::Paused, 1))
    })
    .await
    .unwrap();
    let at_gate = wait_for_all(&pods, "the canary RoleSet's pod serving", TIMEOUT, |all| {
        canary_pods(all).len() == 1 && condition(canary_pods(all)[0], "Ready") == Some("True")
    })
    .await
    .unwrap();
    let canary = canary_pods(&at_gate)[0].name_any();
    let canary_uid = canary_pods(&at_gate)[0].uid().unwrap();
    let canary_roleset = canary_pods(&at_gate)[0].labels()["roleset-name"].clone();

    let (code, output) = squall(&["abort", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    wait_for_all(&slices, "the canary pod out of traffic", TIMEOUT, |all| {
        !serving(all, &canary)
    })
    .await
    .unwrap();
    wait_for_all(
        &rolesets,
        "two stable RoleSets Ready beside the warm one",
        TIMEOUT,
        |all| {
            let stable_ready = all
                .iter()
                .filter(|r| r.name_any() != canary_roleset)
                .filter(|r| e2e::roles::roleset_ready(r))
                .count();
            stable_ready == 2 && all.iter().any(|r| r.name_any() == canary_roleset)
        },
    )
    .await
    .unwrap();
    let warm = pods.get(&canary).await.unwrap();
    assert_eq!(
        warm.uid().as_deref(),
        Some(canary_uid.as_str()),
        "it keeps running"
    );
    assert_eq!(condition(&warm, CONDITION_PAIRING_SERVABLE), Some("False"));

    let (code, output) = squall(&["retry", "warm", "-n", ns.name()]);
    assert_eq!(code, 0, "{output}");
    wait_for(&api, "warm", "the canary back at its gate", TIMEOUT, |ss| {
        canary_phase(ss) == Some((CanaryPhase::Paused, 1))
    })
    .await
    .unwrap();
    wait_for_all(
        &slices,
        "the same canary pod serving again",
        TIMEOUT,
        |all| serving(all, &canary),
    )
    .await
    .unwrap();
    let back = pods.get(&canary).await.unwrap();
    assert_eq!(back.uid().as_deref(), Some(canary_uid.as_str()));
    // No RoleSet was created on the canary revision after the first: the same one came back.
    roleset_recorder.catch_up(&rolesets).await;
    let canary_revision =
        rolesets.get(&canary_roleset).await.unwrap().labels()["storm-service-revision"].clone();
    let on_canary: BTreeSet<String> = roleset_recorder
        .events()
        .iter()
        .flat_map(|e| e.applied().into_iter().cloned().collect::<Vec<_>>())
        .filter(|r| r.labels().get("storm-service-revision") == Some(&canary_revision))
        .map(|r| r.name_any())
        .collect();
    assert_eq!(on_canary, BTreeSet::from([canary_roleset]));
    // 2 RoleSets, maxSurge 1 (the warm one holds it); Ready ones never below 2 − 0 but for
    // the canary taken out of traffic at the abort.
    replay(&roleset_recorder.events(), start, |i, state| {
        e2e::roles::assert_roleset_budgets(i, state, 3, 1)
    });
}
