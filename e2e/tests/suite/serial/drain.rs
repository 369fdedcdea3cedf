//! Drain before delete against a real Prometheus (docs/rollouts.md#drain-before-delete): the
//! role's drain query reads a per-pod gauge of requests in flight that the test sets, from an
//! exporter Prometheus scrapes, both on loopback; the test runs its own operator configured
//! with that Prometheus. A rolling update drains each old pod — out of the EndpointSlices,
//! still running — and deletes it only after the test set its gauge to 0, within one
//! reading; a scale-down whose pod never reads 0 deletes it at its timeout with a Warning
//! event, and an operator SIGKILL in the middle of that drain neither restarts its clock nor
//! skips it. Pods and slices are recorded, and the role budgets checked at every observed pod
//! state of the rollout.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e::Observed;
use e2e::operator::{Operator, cluster_dir, squall};
use e2e::prometheus::{Exporter, Prometheus};
use e2e::roles::{assert_pod_budgets, replay, set_role_image, stormservice, stormservice_settled};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::StormService;
use squall::api::keys::{ANNOTATION_DRAIN_IN_FLIGHT, ANNOTATION_DRAIN_STARTED};

const TIMEOUT: Duration = Duration::from_secs(180);
/// Seconds between readings of a draining pod.
const INTERVAL: u64 = 3;
/// The gauge the drain query reads, by pod.
const GAUGE: &str = "in_flight";
/// Controllers on, no webhook registered (the shared operator's are not running yet).
const FLAGS: &[&str] = &["--controllers=true", "--webhook-configs", "none"];

fn image(pod: &Pod) -> &str {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .as_deref()
        .unwrap_or_default()
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.annotations().get(key).map(String::as_str)
}

/// When the drain of `pod` started (Unix seconds), when it drains.
fn drain_started(pod: &Pod) -> Option<i64> {
    let started = annotation(pod, ANNOTATION_DRAIN_STARTED)?;
    Some(
        started
            .parse::<k8s_openapi::jiff::Timestamp>()
            .ok()?
            .as_second(),
    )
}

/// When the pod's deletion was asked for (Unix seconds): its deletion timestamp less its
/// grace period.
fn deletion_asked(pod: &Pod) -> Option<i64> {
    let at = pod.metadata.deletion_timestamp.as_ref()?.0.as_second();
    Some(at - pod.metadata.deletion_grace_period_seconds.unwrap_or(0))
}

/// Whether the slices list `pod` as serving.
fn serving(slices: &[EndpointSlice], pod: &str) -> bool {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .filter(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(pod))
        .any(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
}

/// The live pod draining that is not among `seen`, when there is one.
fn new_drain(all: &[Pod], seen: &BTreeSet<String>) -> Option<String> {
    all.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| drain_started(p).is_some() && !seen.contains(&p.name_any()))
        .map(ResourceExt::name_any)
        .next()
}

/// Whether `name` is gone or being deleted.
fn going(all: &[Pod], name: &str) -> bool {
    all.iter()
        .find(|p| p.name_any() == name)
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
}

/// Each pod's first observed state with a deletion timestamp, and when it arrived.
fn deletions(events: &[(Instant, Observed<Pod>)]) -> BTreeMap<String, (Instant, Pod)> {
    let mut first = BTreeMap::new();
    for (at, event) in events {
        for pod in event.applied() {
            if pod.metadata.deletion_timestamp.is_some() {
                first
                    .entry(pod.name_any())
                    .or_insert_with(|| (*at, pod.clone()));
            }
        }
    }
    first
}

/// Whether the slices, as recorded up to `until`, list `pod` as serving.
fn serving_at(slices: &[(Instant, Observed<EndpointSlice>)], until: Instant, pod: &str) -> bool {
    let mut state = BTreeMap::new();
    for (_, event) in slices.iter().filter(|(at, _)| *at <= until) {
        event.apply_to(&mut state);
    }
    let listed: Vec<EndpointSlice> = state.into_values().collect();
    serving(&listed, pod)
}

/// Whether some recorded state of the slices listed `pod` as serving.
fn ever_serving(slices: &[(Instant, Observed<EndpointSlice>)], pod: &str) -> bool {
    let mut state = BTreeMap::new();
    slices.iter().any(|(_, event)| {
        event.apply_to(&mut state);
        let listed: Vec<EndpointSlice> = state.values().cloned().collect();
        serving(&listed, pod)
    })
}

#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn drained_pods_leave_traffic_first_and_go_when_idle_or_at_their_timeout() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "drain").await;
    let exporter = Exporter::start();
    // The series carry the namespace, as Kubernetes service discovery labels a pod's: the
    // endpoint's tenancy scopes every query to it.
    let prometheus = Prometheus::start_in_namespaces("drain", &[(exporter.addr, Some(ns.name()))]);
    let config_path = cluster_dir().join("analysis-drain.yaml");
    std::fs::write(
        &config_path,
        format!(
            "prometheus:\n- name: default\n  address: http://{}\n  timeout: 2s\n",
            prometheus.addr
        ),
    )
    .unwrap();
    let config = format!("--analysis-config={}", config_path.display());
    let flags: Vec<&str> = FLAGS.iter().copied().chain([config.as_str()]).collect();
    let mut operator = Some(Operator::start("drain", &flags));
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());

    // Pooled: one RoleSet whose decode role rolls its own pods, one at a time, each drained.
    let mut service = stormservice(
        "drain",
        1,
        json!({"type": "InPlaceUpdate"}),
        &[("decode", 3)],
    );
    let decode = &mut service
        .spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .roles
        .as_mut()
        .unwrap()[0];
    decode.update_strategy =
        Some(serde_json::from_value(json!({"maxSurge": 0, "maxUnavailable": 1})).unwrap());
    decode.drain = Some(
        serde_json::from_value(json!({"timeout": "60s", "query": {
            "query": format!(r#"max(squall_e2e_pod_gauge{{name="{GAUGE}",pod="{{{{pod}}}}"}})"#),
            "interval": format!("{INTERVAL}s")}}))
        .unwrap(),
    );
    api.create(&PostParams::default(), &service).await.unwrap();
    wait_for(&api, "drain", "drain Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    wait_for_all(&slices, "three pods serving", TIMEOUT, |all| {
        all.iter()
            .flat_map(|s| &s.endpoints)
            .filter(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
            .count()
            == 3
    })
    .await
    .unwrap();
    for pod in pods.list(&Default::default()).await.unwrap() {
        exporter.set_pod(GAUGE, &pod.name_any(), 2.0);
    }
    let pod_recorder = Recorder::start(pods.clone()).await;
    let slice_recorder = Recorder::start(slices.clone()).await;
    pod_recorder.catch_up(&pods).await;
    let rollout_start = pod_recorder.events().len();

    // The rolling update: each old pod drains, leaves the slices, and goes once read idle.
    set_role_image(&api, "drain", 0, "engine:2").await;
    let mut zeroed: BTreeMap<String, Instant> = BTreeMap::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for _ in 0..3 {
        let all = wait_for_all(&pods, "an old pod draining", TIMEOUT, |all| {
            new_drain(all, &seen).is_some()
        })
        .await
        .unwrap();
        let name = new_drain(&all, &seen).unwrap();
        seen.insert(name.clone());
        wait_for_all(
            &slices,
            "the draining pod out of the slices",
            TIMEOUT,
            |all| !serving(all, &name),
        )
        .await
        .unwrap();
        zeroed.insert(name.clone(), Instant::now());
        exporter.set_pod(GAUGE, &name, 0.0);
        wait_for_all(&pods, "the idle pod deleted", TIMEOUT, |all| {
            going(all, &name)
        })
        .await
        .unwrap();
    }
    wait_for(&api, "drain", "the rollout done", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    pod_recorder.catch_up(&pods).await;
    slice_recorder.catch_up(&slices).await;
    let pod_events = pod_recorder.timed_events();
    let slice_events = slice_recorder.timed_events();
    let observed: Vec<Observed<Pod>> = pod_events.iter().map(|(_, e)| e.clone()).collect();
    replay(&observed, rollout_start, |i, state| {
        assert_pod_budgets(i, state, &[("decode", 3)], 0, 1);
    });
    let deleted = deletions(&pod_events[rollout_start..]);
    let old: Vec<&String> = deleted
        .iter()
        .filter(|(_, (_, pod))| image(pod) == "engine:1")
        .map(|(name, _)| name)
        .collect();
    assert_eq!(old.len(), 3, "every old pod was deleted: {old:?}");
    for name in old {
        let (at, pod) = &deleted[name];
        let zero = zeroed
            .get(name)
            .unwrap_or_else(|| panic!("{name} was deleted without being drained"));
        assert!(
            at >= zero,
            "{name} was deleted while its gauge read 2, before its timeout"
        );
        assert!(
            at.duration_since(*zero) <= Duration::from_secs(INTERVAL + 5),
            "{name} went {:?} after its gauge read 0: more than one reading",
            at.duration_since(*zero)
        );
        assert_eq!(
            annotation(pod, ANNOTATION_DRAIN_IN_FLIGHT),
            Some("0"),
            "{name} went on a reading of 0, noted before its deletion"
        );
        assert!(
            !serving_at(&slice_events, *at, name),
            "{name} was still serving in the slices when it was deleted"
        );
        assert!(
            ever_serving(&slice_events, name),
            "{name} served before its drain"
        );
    }
    let timed_out = drain_warnings(&client, ns.name()).await;
    assert!(
        timed_out.is_empty(),
        "no rollout drain timed out: {timed_out:?}"
    );

    // A scale-down whose pod never reads 0 goes at its timeout, with a Warning; the operator
    // killed mid-drain changes neither.
    let live = pods.list(&Default::default()).await.unwrap();
    for pod in &live.items {
        exporter.set_pod(GAUGE, &pod.name_any(), 2.0);
    }
    let scale_start = pod_recorder.events().len();
    let scale = json!([
        {"op": "replace", "path": "/spec/template/spec/roles/0/replicas", "value": 2},
        {"op": "replace", "path": "/spec/template/spec/roles/0/drain/timeout", "value": "15s"}]);
    api.patch(
        "drain",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(scale).unwrap()),
    )
    .await
    .unwrap();
    let all = wait_for_all(&pods, "a pod draining for the scale-down", TIMEOUT, |all| {
        new_drain(all, &seen).is_some()
    })
    .await
    .unwrap();
    let name = new_drain(&all, &seen).unwrap();
    let noted = wait_for_all(&pods, "its requests in flight noted", TIMEOUT, |all| {
        all.iter()
            .any(|p| p.name_any() == name && annotation(p, ANNOTATION_DRAIN_IN_FLIGHT) == Some("2"))
    })
    .await
    .unwrap();
    let started = drain_started(noted.iter().find(|p| p.name_any() == name).unwrap()).unwrap();
    let (code, status) = squall(&["status", "drain", "-n", ns.name()]);
    assert_eq!(code, 0, "{status}");
    assert!(
        status.contains(&format!("draining: pod {name} (role decode)"))
            && status.contains("in flight: 2"),
        "{status}"
    );
    operator.take().unwrap().kill();
    operator = Some(Operator::start("drain", &flags));
    wait_for_all(&pods, "the pod deleted at its timeout", TIMEOUT, |all| {
        going(all, &name)
    })
    .await
    .unwrap();
    pod_recorder.catch_up(&pods).await;
    let states: Vec<Pod> = pod_recorder
        .events()
        .iter()
        .flat_map(|e| e.applied().into_iter().cloned().collect::<Vec<_>>())
        .filter(|p| p.name_any() == name)
        .collect();
    let starts: BTreeSet<Option<i64>> = states
        .iter()
        .filter(|p| drain_started(p).is_some())
        .map(drain_started)
        .collect();
    assert_eq!(
        starts,
        BTreeSet::from([Some(started)]),
        "the drain's clock was not restarted"
    );
    let asked = states
        .iter()
        .find_map(deletion_asked)
        .expect("its deletion");
    assert!(
        asked >= started + 15,
        "deleted {} s into a 15 s drain with requests in flight",
        asked - started
    );
    slice_recorder.catch_up(&slices).await;
    let (at, _) = &deletions(&pod_recorder.timed_events())[&name];
    assert!(
        !serving_at(&slice_recorder.timed_events(), *at, &name),
        "{name} was still serving in the slices when it was deleted"
    );
    // Scaling 3 pods down to 2: never more than the 3, never fewer than 1 Ready.
    let observed: Vec<Observed<Pod>> = pod_recorder.events();
    replay(&observed, scale_start, |i, state| {
        assert_pod_budgets(i, state, &[("decode", 2)], 1, 1);
    });
    let warned = wait_for_warning(&client, ns.name(), &name).await;
    assert!(warned.contains("reached its drain timeout"), "{warned}");
    drop(operator);
    drop(prometheus);
}

/// The notes of the namespace's `DrainTimedOut` Warning events.
async fn drain_warnings(client: &kube::Client, ns: &str) -> Vec<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DrainTimedOut"))
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// The note of the `DrainTimedOut` Warning about `pod`, once it is there.
async fn wait_for_warning(client: &kube::Client, ns: &str, pod: &str) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let found = wait_for_all(&events, "the DrainTimedOut warning", TIMEOUT, |all| {
        all.iter().any(|e| {
            e.reason.as_deref() == Some("DrainTimedOut")
                && e.note.as_deref().is_some_and(|n| n.contains(pod))
        })
    })
    .await
    .unwrap();
    found
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("DrainTimedOut"))
        .filter_map(|e| e.note.filter(|n| n.contains(pod)))
        .next()
        .unwrap_or_default()
}
