//! Drain before delete in replica mode (docs/rollouts.md#drain-before-delete): a rollout
//! replaces the StormService's RoleSet, and the old RoleSet, once deleted, drains its pod
//! before it goes — out of the EndpointSlices while it keeps running, for the role's
//! `timeout` (no query: a fixed deregistration delay) — and only then deletes it and lets
//! its own deletion finish; a role removed from a pooled StormService drains its pod the
//! same way, by the drain it was created with. Pods, slices and RoleSets are recorded, and
//! the StormService's RoleSet budgets checked at every observed RoleSet state.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::roles::{
    assert_roleset_budgets, replay, set_role_image, stormservice, stormservice_settled,
};
use e2e::{Observed, Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::json;
use squall::api::keys::ANNOTATION_DRAIN_STARTED;
use squall::api::{RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);
/// The role's drain: a fixed delay, in seconds.
const DELAY: i64 = 8;

fn image(pod: &Pod) -> &str {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref()
        .unwrap_or_default()
}

fn serving(slices: &[EndpointSlice], pod: &str) -> bool {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(pod))
        .any(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
}

fn seconds(time: &str) -> i64 {
    time.parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap()
        .as_second()
}

/// The first recorded state of `name` for which `when` holds, and when it arrived.
fn first<K: kube::Resource + Clone>(
    events: &[(Instant, Observed<K>)],
    name: &str,
    when: impl Fn(&K) -> bool,
) -> Option<(Instant, K)> {
    events.iter().find_map(|(at, event)| {
        event
            .applied()
            .into_iter()
            .find(|o| o.meta().name.as_deref() == Some(name) && when(o))
            .map(|o| (*at, o.clone()))
    })
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_deleted_roleset_drains_its_pods_out_of_traffic_before_it_goes() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "drainrs").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0});
    let mut service = stormservice("drainrs", 1, strategy, &[("decode", 1)]);
    let decode = &mut service
        .spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .roles
        .as_mut()
        .unwrap()[0];
    decode.drain = Some(serde_json::from_value(json!({"timeout": DELAY})).unwrap());
    api.create(&PostParams::default(), &service).await.unwrap();
    wait_for(&api, "drainrs", "drainrs Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    let serving_now = wait_for_all(&slices, "the pod serving", TIMEOUT, |all| {
        all.iter()
            .flat_map(|s| &s.endpoints)
            .any(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
    })
    .await
    .unwrap();
    let old_pod = serving_now
        .iter()
        .flat_map(|s| &s.endpoints)
        .find_map(|e| e.target_ref.as_ref()?.name.clone())
        .unwrap();
    let old_roleset = rolesets.list(&Default::default()).await.unwrap().items[0].name_any();
    let pod_recorder = Recorder::start(pods.clone()).await;
    let slice_recorder = Recorder::start(slices.clone()).await;
    let roleset_recorder = Recorder::start(rolesets.clone()).await;
    roleset_recorder.catch_up(&rolesets).await;
    let rollout_start = roleset_recorder.events().len();

    set_role_image(&api, "drainrs", 0, "engine:2").await;
    wait_for_all(&rolesets, "the old RoleSet gone", TIMEOUT, |all| {
        all.iter().all(|r| r.name_any() != old_roleset)
    })
    .await
    .unwrap();
    wait_for(&api, "drainrs", "the rollout done", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    pod_recorder.catch_up(&pods).await;
    slice_recorder.catch_up(&slices).await;
    roleset_recorder.catch_up(&rolesets).await;

    let roleset_events = roleset_recorder.timed_events();
    let observed: Vec<Observed<RoleSet>> = roleset_events.iter().map(|(_, e)| e.clone()).collect();
    replay(&observed, rollout_start, |i, state| {
        assert_roleset_budgets(i, state, 2, 1);
    });
    let pod_events = pod_recorder.timed_events();
    let (deleting_at, _) = first(&roleset_events, &old_roleset, |r| {
        r.metadata.deletion_timestamp.is_some()
    })
    .expect("the old RoleSet was deleted");
    let (drain_at, drained) = first(&pod_events, &old_pod, |p| {
        p.annotations().contains_key(ANNOTATION_DRAIN_STARTED)
    })
    .expect("the old pod drained");
    assert!(
        drain_at >= deleting_at,
        "the drain is the old RoleSet's deletion"
    );
    assert_eq!(image(&drained), "engine:1");
    let started = seconds(&drained.annotations()[ANNOTATION_DRAIN_STARTED]);
    let (deleted_at, deleted) = first(&pod_events, &old_pod, |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .expect("the old pod was deleted");
    let asked = deleted
        .metadata
        .deletion_timestamp
        .as_ref()
        .unwrap()
        .0
        .as_second()
        - deleted.metadata.deletion_grace_period_seconds.unwrap_or(0);
    assert!(
        asked >= started + DELAY,
        "deleted {} s into a {DELAY} s drain",
        asked - started
    );
    let mut state = BTreeMap::new();
    for (_, event) in slice_recorder
        .timed_events()
        .iter()
        .filter(|(at, _)| *at <= deleted_at)
    {
        event.apply_to(&mut state);
    }
    let listed: Vec<EndpointSlice> = state.into_values().collect();
    assert!(
        !serving(&listed, &old_pod),
        "the old pod still served when it was deleted"
    );
    let (gone_at, _) = roleset_events
        .iter()
        .find(|(_, e)| matches!(e, Observed::Deleted(r) if r.name_any() == old_roleset))
        .map(|(at, e)| (*at, e.clone()))
        .expect("the old RoleSet's deletion finished");
    assert!(
        gone_at >= deleted_at,
        "the old RoleSet went before its drained pod"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_removed_roles_pods_drain_as_they_were_created_to_before_they_go() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "drainrole").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
    // Pooled: the one RoleSet is re-specced without the removed role.
    let strategy = json!({"type": "InPlaceUpdate"});
    let mut service = stormservice("drainrole", 1, strategy, &[("router", 1), ("decode", 1)]);
    let decode = &mut service
        .spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .roles
        .as_mut()
        .unwrap()[1];
    decode.drain = Some(serde_json::from_value(json!({"timeout": DELAY})).unwrap());
    api.create(&PostParams::default(), &service).await.unwrap();
    wait_for(&api, "drainrole", "drainrole Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    let listed = pods.list(&Default::default()).await.unwrap();
    let decode_pod = listed
        .iter()
        .find(|p| p.labels().get("role-name").map(String::as_str) == Some("decode"))
        .unwrap()
        .name_any();
    wait_for_all(&slices, "the decode pod serving", TIMEOUT, |all| {
        serving(all, &decode_pod)
    })
    .await
    .unwrap();
    let pod_recorder = Recorder::start(pods.clone()).await;
    let slice_recorder = Recorder::start(slices.clone()).await;

    let remove = json!([{"op": "remove", "path": "/spec/template/spec/roles/1"}]);
    api.patch(
        "drainrole",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Json::<()>(serde_json::from_value(remove).unwrap()),
    )
    .await
    .unwrap();
    wait_for_all(&pods, "the removed role's pod deleted", TIMEOUT, |all| {
        all.iter()
            .find(|p| p.name_any() == decode_pod)
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
    })
    .await
    .unwrap();
    pod_recorder.catch_up(&pods).await;
    slice_recorder.catch_up(&slices).await;
    let pod_events = pod_recorder.timed_events();
    let (_, drained) = first(&pod_events, &decode_pod, |p| {
        p.annotations().contains_key(ANNOTATION_DRAIN_STARTED)
    })
    .expect("the removed role's pod drained");
    let started = seconds(&drained.annotations()[ANNOTATION_DRAIN_STARTED]);
    let (deleted_at, deleted) = first(&pod_events, &decode_pod, |p| {
        p.metadata.deletion_timestamp.is_some()
    })
    .expect("its deletion");
    let asked = deleted
        .metadata
        .deletion_timestamp
        .as_ref()
        .unwrap()
        .0
        .as_second()
        - deleted.metadata.deletion_grace_period_seconds.unwrap_or(0);
    assert!(
        asked >= started + DELAY,
        "deleted {} s into a {DELAY} s drain",
        asked - started
    );
    let mut state = BTreeMap::new();
    for (_, event) in slice_recorder
        .timed_events()
        .iter()
        .filter(|(at, _)| *at <= deleted_at)
    {
        event.apply_to(&mut state);
    }
    let listed: Vec<EndpointSlice> = state.into_values().collect();
    assert!(
        !serving(&listed, &decode_pod),
        "the removed role's pod still served when it was deleted"
    );
}
