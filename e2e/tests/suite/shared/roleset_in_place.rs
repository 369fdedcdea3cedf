//! `InPlaceIfPossible` roles on the local control plane (shared operator): an image change
//! is patched into the live pods — names and UIDs kept — one pod at a time (maxUnavailable 1),
//! and each update completes only once the kubelet emulation reports the new imageID; a
//! change beyond images recreates the pods and says so with an `InPlaceFallback` event. The
//! role budgets hold at every observed state of both.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::kubelet::apply_in_place_update;
use e2e::roles::{assert_pod_budgets, hash_of, replay, roleset, settled};
use e2e::{Observed, Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use squall::api::RoleSet;

const TIMEOUT: Duration = Duration::from_secs(120);
const TARGET: &str = "stormservice.orchestration.aibrix.ai/in-place-update-target-hash";

fn in_place_roleset() -> RoleSet {
    let mut rs = roleset("rs", &[("decode", 3, None)], "engine:1");
    rs.spec.roles.as_mut().unwrap()[0].update_strategy =
        Some(serde_json::from_value(json!({"type": "InPlaceIfPossible"})).unwrap());
    rs
}

/// The image the pod's spec names and the image its container status reports.
fn images(pod: &Pod) -> (String, String) {
    let spec = pod.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default();
    let status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map(|c| c.image.clone())
        .unwrap_or_default();
    (spec, status)
}

async fn patch_template(rolesets: &Api<RoleSet>, ops: Value) {
    rolesets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(ops).unwrap()),
        )
        .await
        .unwrap();
}

async fn events_with_reason(client: &kube::Client, ns: &str, reason: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// Creates the in-place RoleSet and waits until it is Ready; returns pod name → UID.
async fn ready_roleset(rolesets: &Api<RoleSet>, pods: &Api<Pod>) -> BTreeMap<String, String> {
    rolesets
        .create(&PostParams::default(), &in_place_roleset())
        .await
        .unwrap();
    wait_for(rolesets, "rs", "RoleSet rs Ready", TIMEOUT, |rs| {
        settled(rs, 1)
    })
    .await
    .unwrap();
    pods.list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect()
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn an_image_change_updates_pods_in_place_one_at_a_time() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "inplace").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let recorder = Recorder::start(pods.clone()).await;
    let before = ready_roleset(&rolesets, &pods).await;
    let old_hash = hash_of(&pods.list(&Default::default()).await.unwrap().items[0]);
    recorder.catch_up(&pods).await;
    let start = recorder.events().len();

    patch_template(
        &rolesets,
        json!([{"op": "replace", "path": "/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"}]),
    )
    .await;
    // Play the kubelet: whenever squall has patched a pod's image, report it running.
    let mut emulated = Vec::new();
    while emulated.len() < before.len() {
        let waiting = wait_for_all(
            &pods,
            "a pod whose image squall patched in place",
            TIMEOUT,
            |all| {
                all.iter().any(|p| {
                    let (spec, status) = images(p);
                    p.annotations().contains_key(TARGET) && spec != status
                })
            },
        )
        .await
        .unwrap();
        for pod in waiting.iter().filter(|p| {
            let (spec, status) = images(p);
            p.annotations().contains_key(TARGET) && spec != status
        }) {
            apply_in_place_update(&pods, &pod.name_any()).await.unwrap();
            emulated.push(pod.name_any());
        }
    }
    wait_for(
        &rolesets,
        "rs",
        "RoleSet rs Ready after the in-place update",
        TIMEOUT,
        |rs| settled(rs, 2),
    )
    .await
    .unwrap();

    let after = pods.list(&Default::default()).await.unwrap().items;
    let after_uids: BTreeMap<String, String> = after
        .iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect();
    assert_eq!(after_uids, before, "names and UIDs are kept");
    for pod in &after {
        assert_ne!(hash_of(pod), old_hash);
        assert_eq!(images(pod), ("engine:2".into(), "engine:2".into()));
        assert!(
            !pod.annotations()
                .keys()
                .any(|k| k.contains("in-place-update")),
            "in-place annotations are removed on completion: {:?}",
            pod.annotations()
        );
    }
    for reason in ["InPlaceUpdateStarted", "InPlaceUpdateCompleted"] {
        assert_eq!(
            events_with_reason(&client, ns.name(), reason).await.len(),
            3,
            "one {reason} event per pod"
        );
    }

    // Mechanism, at every observed state: no pod is deleted, at most one pod is under
    // update (maxUnavailable 1), and a pod moves to the new hash only after the kubelet
    // emulation reported its new image.
    recorder.catch_up(&pods).await;
    let events = recorder.events();
    assert!(
        !events[start..]
            .iter()
            .any(|e| matches!(e, Observed::Deleted(_))),
        "no pod was deleted"
    );
    let mut reported: BTreeMap<String, usize> = BTreeMap::new();
    replay(&events, start, |i, state| {
        assert_pod_budgets(i, state, &[("decode", 3)], 0, 1);
        let updating = state
            .values()
            .filter(|p| p.annotations().contains_key(TARGET))
            .count();
        assert!(updating <= 1, "event {i}: {updating} pods under update");
        for pod in state.values() {
            let (spec, status) = images(pod);
            if spec == "engine:2" && status == "engine:2" {
                reported.entry(pod.name_any()).or_insert(i);
            }
            if hash_of(pod) != old_hash {
                let at = reported.get(&pod.name_any());
                assert!(
                    at.is_some_and(|&r| r <= i),
                    "event {i}: pod {} completed before its new image was reported",
                    pod.name_any()
                );
            }
        }
    });
    assert_eq!(emulated.len(), 3);
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_change_beyond_images_recreates_pods_with_a_fallback_event() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "fallback").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let recorder = Recorder::start(pods.clone()).await;
    let before = ready_roleset(&rolesets, &pods).await;
    recorder.catch_up(&pods).await;
    let start = recorder.events().len();

    patch_template(
        &rolesets,
        json!([
            {"op": "replace", "path": "/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"},
            {"op": "add", "path": "/spec/roles/0/template/spec/containers/0/env", "value": [{"name": "MODE", "value": "fast"}]},
        ]),
    )
    .await;
    wait_for(
        &rolesets,
        "rs",
        "RoleSet rs Ready after recreating its pods",
        TIMEOUT,
        |rs| settled(rs, 2),
    )
    .await
    .unwrap();
    let after = pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(after.len(), 3);
    for pod in &after {
        assert!(
            !before.values().any(|uid| Some(uid) == pod.uid().as_ref()),
            "pod {} was recreated",
            pod.name_any()
        );
    }
    let fallbacks = events_with_reason(&client, ns.name(), "InPlaceFallback").await;
    let note = fallbacks
        .first()
        .and_then(|e| e.note.clone())
        .expect("an InPlaceFallback event");
    assert!(
        note.contains("env") && note.contains("falling back to recreate"),
        "the event names the changed field: {note}"
    );
    assert!(
        events_with_reason(&client, ns.name(), "InPlaceUpdateStarted")
            .await
            .is_empty()
    );
    // The recreation kept the role's budgets (maxSurge 0, maxUnavailable 1) throughout.
    recorder.catch_up(&pods).await;
    replay(&recorder.events(), start, |i, state| {
        assert_pod_budgets(i, state, &[("decode", 3)], 0, 1)
    });
}
