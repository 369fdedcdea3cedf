//! Pairing (docs/rollouts.md#pairing) on the local control plane (shared operator): the
//! pods of a pairing group's roles carry one key, a change to a role outside the group keeps
//! it, and a change to a role of the group gives the whole group a new key — the unchanged
//! role's pods without a restart. Rollouts of paired roles, watched through the headless
//! Service's EndpointSlices at every observed state: a serving pod always has a partner of its
//! version, the old version serves whole until the new one does, the budgets hold — and the
//! same rollouts without `pairing` mix versions, so the check can fail.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::operator::squall_bin;
use e2e::roles::{
    assert_pod_budgets, is_ready, replay, role_of, roleset, settled, stormservice,
    stormservice_settled,
};
use e2e::serving::{Replayed, version_of};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use squall::api::keys::{CONDITION_PAIRED, CONDITION_PAIRING_SERVABLE, LABEL_PAIRING_KEY};
use squall::api::{RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Role → (pod UID, pairing key) of the live pods, one pod per role.
type Keys = BTreeMap<String, (String, Option<String>)>;

fn keys(pods: &[Pod]) -> Keys {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                role_of(p),
                (
                    p.uid().unwrap_or_default(),
                    p.labels().get(LABEL_PAIRING_KEY).cloned(),
                ),
            )
        })
        .collect()
}

/// The pods once one per role is left and the paired ones are keyed alike.
async fn keyed_alike(pods: &Api<Pod>, what: &str) -> Keys {
    let settled = wait_for_all(pods, what, TIMEOUT, |pods| {
        let now = keys(pods);
        let key = |role: &str| now.get(role).map(|(_, key)| key);
        pods.len() == 3
            && now.len() == 3
            && key("prefill").is_some()
            && key("prefill") == key("decode")
    })
    .await
    .unwrap();
    keys(&settled)
}

/// Sets role `index`'s image and waits for the RoleSet to settle at `generation` with every
/// paired pod keyed alike.
async fn set_image(
    rolesets: &Api<RoleSet>,
    pods: &Api<Pod>,
    index: usize,
    image: &str,
    generation: i64,
) -> Keys {
    let path = format!("/spec/roles/{index}/template/spec/containers/0/image");
    rolesets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace", "path": path, "value": image}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    wait_for(
        rolesets,
        "rs",
        &format!("RoleSet rs Ready at generation {generation}"),
        TIMEOUT,
        |rs| settled(rs, generation),
    )
    .await
    .unwrap();
    keyed_alike(
        pods,
        &format!("paired pods keyed alike at generation {generation}"),
    )
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_pairing_groups_pods_share_a_key_that_follows_the_groups_templates_only() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "pairing").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let mut rs = roleset(
        "rs",
        &[
            ("router", 1, None),
            ("prefill", 1, None),
            ("decode", 1, None),
        ],
        "engine:1",
    );
    rs.spec.pairing = serde_json::from_value(json!([{"roles": ["prefill", "decode"]}])).unwrap();
    rolesets.create(&PostParams::default(), &rs).await.unwrap();
    wait_for(&rolesets, "rs", "RoleSet rs Ready", TIMEOUT, |rs| {
        settled(rs, 1)
    })
    .await
    .unwrap();
    let first = keyed_alike(&pods, "paired pods keyed alike").await;
    assert_eq!(first.len(), 3, "{first:?}");
    let key = first["prefill"]
        .1
        .clone()
        .expect("the prefill pod is keyed");
    assert_eq!(
        first["decode"].1.as_deref(),
        Some(key.as_str()),
        "{first:?}"
    );
    assert_eq!(
        first["router"].1, None,
        "the router is not paired: {first:?}"
    );
    // The API server kept the field: the CRD serves it.
    let stored = rolesets.get("rs").await.unwrap();
    assert_eq!(stored.spec.pairing.map(|p| p.len()), Some(1));

    let router_changed = set_image(&rolesets, &pods, 0, "router:2", 2).await;
    assert_ne!(
        router_changed["router"].0, first["router"].0,
        "the router rolled"
    );
    for role in ["prefill", "decode"] {
        assert_eq!(
            router_changed[role], first[role],
            "{role}: the same pod, the same key"
        );
    }

    let decode_changed = set_image(&rolesets, &pods, 2, "engine:2", 3).await;
    let new_key = decode_changed["decode"].1.clone().expect("keyed");
    assert_ne!(new_key, key, "a role of the group changed: a new key");
    assert_ne!(
        decode_changed["decode"].0, first["decode"].0,
        "decode rolled"
    );
    assert_eq!(
        decode_changed["prefill"],
        (first["prefill"].0.clone(), Some(new_key)),
        "prefill's pod takes the new key without a restart"
    );
}

/// The paired roles of the rollout tests.
const GROUP: [&str; 2] = ["prefill", "decode"];

/// A StormService `name` with `replicas`, `strategy` and `roles` (every one on `engine:1`),
/// prefill and decode paired when `paired`, its RoleSets rolling roles `Sequential`ly.
fn paired_service(
    name: &str,
    replicas: i32,
    strategy: Value,
    roles: &[(&str, i32)],
    paired: bool,
) -> StormService {
    let mut ss = serde_json::to_value(stormservice(name, replicas, strategy, roles)).unwrap();
    let spec = &mut ss["spec"]["template"]["spec"];
    spec["updateStrategy"] = json!("Sequential");
    if paired {
        spec["pairing"] = json!([{"roles": GROUP}]);
    }
    serde_json::from_value(ss).unwrap()
}

/// A rollout watched from its template change on: the pods and the EndpointSlices.
struct Watched {
    pods: Api<Pod>,
    slices: Api<EndpointSlice>,
    pod_recorder: Recorder<Pod>,
    slice_recorder: Recorder<EndpointSlice>,
    since: Instant,
}

impl Watched {
    /// Creates `ss` in a new namespace, waits until it is Ready and its `pod_count` pods serve,
    /// and starts watching.
    async fn start(
        client: &Client,
        prefix: &str,
        ss: &StormService,
        pod_count: usize,
    ) -> (TestNamespace, Self) {
        let ns = TestNamespace::create(client, prefix).await;
        let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
        api.create(&PostParams::default(), ss).await.unwrap();
        let name = ss.name_any();
        wait_for(
            &api,
            &name,
            &format!("{prefix}: {name} Ready"),
            TIMEOUT,
            |ss| stormservice_settled(ss, Some(1)),
        )
        .await
        .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
        let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
        // The endpoints list every pod before the rollout starts (the initial state judged).
        wait_for_all(
            &slices,
            &format!("{prefix}: the endpoints serve every pod"),
            TIMEOUT,
            |all| {
                let serving: usize = all
                    .iter()
                    .flat_map(|s| &s.endpoints)
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
                    .count();
                serving == pod_count
            },
        )
        .await
        .unwrap();
        let pod_recorder = Recorder::start(pods.clone()).await;
        let slice_recorder = Recorder::start(slices.clone()).await;
        pod_recorder.catch_up(&pods).await;
        slice_recorder.catch_up(&slices).await;
        let since = Instant::now();
        (
            ns,
            Self {
                pods,
                slices,
                pod_recorder,
                slice_recorder,
                since,
            },
        )
    }

    /// Replays what was observed (after catching up with the lists), checking the pod
    /// budgets of `roles` (role, replicas) with `max_surge` and `max_unavailable` at every
    /// pod state on the way.
    async fn replay(
        &self,
        service: &str,
        roles: &[(&str, i32)],
        max_surge: i32,
        max_unavailable: i32,
    ) -> Replayed {
        self.replay_gangs(service, roles, &[], (max_surge, max_unavailable))
            .await
    }

    /// [`Watched::replay`], with the pods per replica of multi-node roles (`gangs`: role,
    /// `podGroupSize`): their budgets count whole gangs.
    async fn replay_gangs(
        &self,
        service: &str,
        roles: &[(&str, i32)],
        gangs: &[(&str, i32)],
        (max_surge, max_unavailable): (i32, i32),
    ) -> Replayed {
        self.pod_recorder.catch_up(&self.pods).await;
        self.slice_recorder.catch_up(&self.slices).await;
        let pod_events = self.pod_recorder.timed_events();
        let start = pod_events
            .iter()
            .take_while(|(t, _)| *t < self.since)
            .count();
        let events: Vec<_> = pod_events.iter().map(|(_, e)| e.clone()).collect();
        let size = |role: &str| {
            gangs
                .iter()
                .find(|(name, _)| *name == role)
                .map_or(1, |(_, size)| *size)
        };
        replay(&events, start, |i, state| {
            for (role, replicas) in roles {
                let size = size(role);
                let pods = [(*role, replicas * size)];
                assert_pod_budgets(i, state, &pods, max_surge * size, max_unavailable * size);
            }
        });
        e2e::serving::replay(
            &pod_events,
            &self.slice_recorder.timed_events(),
            service,
            &GROUP,
            &GROUP.map(|group_role| {
                roles
                    .iter()
                    .find(|(role, _)| *role == group_role)
                    .map_or(0, |(_, n)| (n * size(group_role)) as u32)
            }),
            self.since,
        )
    }
}

/// Changes prefill's and decode's images (roles 1 and 2 of the template) to `engine:2`.
async fn roll_engine(api: &Api<StormService>, name: &str) {
    let ops: Vec<Value> = (1..=2)
        .map(|role| {
            json!({"op": "replace",
            "path": format!("/spec/template/spec/roles/{role}/template/spec/containers/0/image"),
            "value": "engine:2"})
        })
        .collect();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(Value::Array(ops)).unwrap()),
    )
    .await
    .unwrap();
}

/// A rollout with pairing: no violation, both versions served whole in order, the ratio
/// within one batch (`batch_pods`), at most one gate change per new pod, one key per version.
fn assert_paired(what: &str, replayed: &Replayed, batch_pods: u32) {
    assert!(replayed.states > 0, "{what}: no slice state observed");
    if let Some(violation) = &replayed.violation {
        panic!("{what}: {violation}");
    }
    assert_eq!(
        replayed.served_whole,
        ["engine:1", "engine:2"],
        "{what}: the old version serves whole, then the new one"
    );
    // The ratio: within one batch (these rollouts move one replica of each role a batch,
    // `batch_pods` pods at most).
    assert!(
        replayed.max_skew.0 <= batch_pods,
        "{what}: the serving pods strayed {} pods from the ratio at event {}",
        replayed.max_skew.0,
        replayed.max_skew.1
    );
    // One pods/status write per change: a new pod's gate opens once; an old pod's closes at
    // most once, when its version stops being served whole.
    for (pod, (version, changes)) in &replayed.gate_changes {
        let most = if version == "engine:2" { 1 } else { 2 };
        assert!(
            *changes <= most,
            "{what}: {pod} ({version}) changed its gate {changes} times"
        );
    }
    let keys: Vec<&String> = replayed.keys.values().flatten().collect();
    assert!(
        replayed.keys.values().all(|k| k.len() == 1) && keys[0] != keys[1],
        "{what}: one key per version: {:?}",
        replayed.keys
    );
}

/// Waits for a canary's manual pause (step 3 of [`CANARY_STEPS`]) with both versions
/// running, then promotes it with `squall promote`.
async fn promote_at_the_manual_pause(
    api: &Api<StormService>,
    pods: &Api<Pod>,
    namespace: &str,
    prefix: &str,
) {
    wait_for(
        api,
        "llm",
        &format!("{prefix}: the manual pause"),
        TIMEOUT,
        |ss| {
            ss.and_then(|s| s.status.as_ref())
                .and_then(|s| s.canary_status.as_ref())
                .is_some_and(|c| c.current_step == 3)
        },
    )
    .await
    .unwrap();
    // 50 %: half of each paired role on the new version, every pod Ready or waiting.
    wait_for_all(
        pods,
        &format!("{prefix}: half on engine:2"),
        TIMEOUT,
        |pods| {
            GROUP.iter().all(|role| {
                let of: Vec<&Pod> = pods
                    .iter()
                    .filter(|p| role_of(p) == *role && p.metadata.deletion_timestamp.is_none())
                    .collect();
                of.len() == 4
                    && of.iter().filter(|p| version_of(p) == "engine:2").count() == 2
                    && of.iter().all(|p| is_ready(p))
            })
        },
    )
    .await
    .unwrap();
    let out = std::process::Command::new(squall_bin())
        .args(["promote", "llm", "-n", namespace])
        .output()
        .expect("squall runs");
    assert!(
        out.status.success(),
        "{prefix}: squall promote: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pooled canary's steps: 25 %, a timed pause, 50 %, a manual pause, 100 %.
const CANARY_STEPS: &str = r#"[{"setWeight": 25}, {"pause": {"duration": "2s"}},
    {"setWeight": 50}, {"pause": {}}, {"setWeight": 100}]"#;

/// Runs the same rollout of `roles` (multi-node ones with their `gangs`' `podGroupSize`)
/// with and without pairing, side by side, and returns both replays: (paired, unpaired). A
/// `canary` is promoted at its manual pause.
async fn with_and_without_pairing(
    prefix: &str,
    replicas: i32,
    strategy: Value,
    roles: &[(&str, i32)],
    gangs: &[(&str, i32)],
    budgets: (i32, i32),
) -> (Replayed, Replayed) {
    let canary = strategy.get("canary").is_some();
    let client = client().await;
    let run = |paired: bool| {
        let client = client.clone();
        let strategy = strategy.clone();
        async move {
            let prefix = format!("{prefix}-{}", if paired { "paired" } else { "unpaired" });
            let size = |role: &str| {
                gangs
                    .iter()
                    .find(|(name, _)| *name == role)
                    .map_or(1, |(_, size)| *size)
            };
            let mut ss = paired_service("llm", replicas, strategy, roles, paired);
            for role in ss
                .spec
                .template
                .spec
                .iter_mut()
                .flat_map(|s| s.roles.iter_mut().flatten())
            {
                if size(&role.name) > 1 {
                    role.pod_group_size = Some(size(&role.name));
                }
            }
            let per_replica: i32 = roles.iter().map(|(role, n)| n * size(role)).sum();
            let pod_count = (replicas * per_replica) as usize;
            let (ns, watched) = Watched::start(&client, &prefix, &ss, pod_count).await;
            let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
            roll_engine(&api, "llm").await;
            if canary {
                promote_at_the_manual_pause(&api, &watched.pods, ns.name(), &prefix).await;
            }
            wait_for(
                &api,
                "llm",
                &format!("{prefix}: rolled out"),
                TIMEOUT,
                |ss| stormservice_settled(ss, Some(2)),
            )
            .await
            .unwrap();
            // Settled: every pod serves the new version.
            wait_for_all(
                &watched.pods,
                &format!("{prefix}: every pod on engine:2"),
                TIMEOUT,
                |pods| {
                    pods.iter()
                        .filter(|p| GROUP.contains(&role_of(p).as_str()))
                        .all(|p| version_of(p) == "engine:2" && is_ready(p))
                },
            )
            .await
            .unwrap();
            watched.replay_gangs("llm", roles, gangs, budgets).await
        }
    };
    tokio::join!(run(true), run(false))
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_pooled_rollout_in_sequential_order_serves_each_version_whole() {
    install_crds();
    // Pooled: one RoleSet whose roles are pools, moved in place; the role defaults are
    // maxSurge 0, maxUnavailable 1.
    let roles = [("router", 1), ("prefill", 3), ("decode", 3)];
    let (paired, unpaired) = with_and_without_pairing(
        "pairpooled",
        1,
        json!({"type": "InPlaceUpdate"}),
        &roles,
        &[],
        (0, 1),
    )
    .await;
    assert_paired("pooled, paired", &paired, 1);
    assert!(
        unpaired.violation.is_some(),
        "without pairing the same rollout mixes versions: {unpaired:?}"
    );
    assert!(
        unpaired.max_skew.0 > 1,
        "without lock-step batches a version's roles stray from the ratio: {unpaired:?}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_replica_mode_in_place_update_serves_each_version_whole_per_roleset() {
    install_crds();
    // Two RoleSets updated in place: each one is a routing domain that rolls its roles one
    // after the other.
    let roles = [("router", 1), ("prefill", 2), ("decode", 2)];
    let strategy = json!({"type": "InPlaceUpdate"});
    let (paired, unpaired) =
        with_and_without_pairing("pairreplica", 2, strategy, &roles, &[], (0, 1)).await;
    assert_paired("replica mode, paired", &paired, 1);
    assert!(
        unpaired.violation.is_some(),
        "without pairing the same rollout mixes versions: {unpaired:?}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_multi_node_decode_serves_each_version_whole_gang_by_gang() {
    install_crds();
    // Decode runs gangs of two pods (a PodSet each), replaced whole; prefill moves in place.
    let roles = [("router", 1), ("prefill", 2), ("decode", 2)];
    let (paired, unpaired) = with_and_without_pairing(
        "pairgang",
        1,
        json!({"type": "InPlaceUpdate"}),
        &roles,
        &[("decode", 2)],
        (0, 1),
    )
    .await;
    assert_paired("multi-node decode, paired", &paired, 2);
    let new_gang_pods: Vec<_> = paired
        .gate_changes
        .iter()
        .filter(|(pod, (version, _))| pod.contains("-decode-") && version == "engine:2")
        .collect();
    assert!(
        new_gang_pods.len() == 4 && new_gang_pods.iter().all(|(_, (_, changes))| *changes == 1),
        "each new gang pod is opened once: {new_gang_pods:?}"
    );
    assert!(
        unpaired.violation.is_some(),
        "without pairing the same rollout mixes versions: {unpaired:?}"
    );
}

/// The serving endpoints of `slices`: (pod name, serving).
fn endpoint_serving(slices: &[EndpointSlice], pod: &str) -> Option<bool> {
    slices
        .iter()
        .flat_map(|s| &s.endpoints)
        .find(|e| e.target_ref.as_ref().and_then(|t| t.name.as_deref()) == Some(pod))
        .map(|e| e.conditions.as_ref().and_then(|c| c.serving) == Some(true))
}

async fn set_gate(pods: &Api<Pod>, name: &str, status: &str) {
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": CONDITION_PAIRING_SERVABLE, "status": status}]}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn the_e2e_kubelet_keeps_a_pod_with_a_false_gate_out_of_the_endpoints() {
    // What the rollout tests rely on: kwok computes Ready as a kubelet does, from
    // ContainersReady and every readiness gate, and the endpoint controller follows Ready.
    let client = client().await;
    let ns = TestNamespace::create(&client, "pairgate").await;
    let services: Api<Service> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns.name());
    // Like a StormService's: headless, publishing pods that are not Ready (so a pod's place
    // in the endpoints is its `serving` condition).
    services
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "gated"},
                "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
                    "selector": {"app": "gated"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "gated", "labels": {"app": "gated"}},
            "spec": {"readinessGates": [{"conditionType": CONDITION_PAIRING_SERVABLE}],
                "containers": [{"name": "engine", "image": "engine:1"}]}}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let condition = |pod: Option<&Pod>, type_: &str| {
        pod.and_then(|p| p.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_))
            .map(|c| c.status.clone())
    };
    let listed_not_serving = |what: &str| {
        let slices = slices.clone();
        let what = what.to_string();
        async move {
            wait_for_all(&slices, &what, TIMEOUT, |all| {
                endpoint_serving(all, "gated") == Some(false)
            })
            .await
            .unwrap();
        }
    };
    wait_for(
        &pods,
        "gated",
        "containers ready, the gate unset: not Ready",
        TIMEOUT,
        |p| {
            condition(p, "ContainersReady").as_deref() == Some("True")
                && condition(p, "Ready").as_deref() != Some("True")
        },
    )
    .await
    .unwrap();
    listed_not_serving("the pod listed, not serving").await;
    set_gate(&pods, "gated", "True").await;
    wait_for(&pods, "gated", "the gate True: Ready", TIMEOUT, |p| {
        condition(p, "Ready").as_deref() == Some("True")
    })
    .await
    .unwrap();
    wait_for_all(&slices, "the pod serving", TIMEOUT, |all| {
        endpoint_serving(all, "gated") == Some(true)
    })
    .await
    .unwrap();
    set_gate(&pods, "gated", "False").await;
    wait_for(&pods, "gated", "the gate False: not Ready", TIMEOUT, |p| {
        condition(p, "Ready").as_deref() == Some("False")
            && condition(p, "ContainersReady").as_deref() == Some("True")
    })
    .await
    .unwrap();
    listed_not_serving("the pod out of service").await;
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_pooled_canary_serves_each_version_whole_at_every_step() {
    install_crds();
    let roles = [("router", 1), ("prefill", 4), ("decode", 4)];
    let steps: Value = serde_json::from_str(CANARY_STEPS).unwrap();
    let (paired, unpaired) = with_and_without_pairing(
        "paircanary",
        1,
        json!({"type": "InPlaceUpdate", "canary": {"steps": steps}}),
        &roles,
        &[],
        (0, 1),
    )
    .await;
    assert_paired("pooled canary, paired", &paired, 1);
    assert!(
        unpaired.violation.is_some(),
        "without pairing the same canary mixes versions: {unpaired:?}"
    );
}

/// The pairing condition of a pod, when it has one.
fn gate_of(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_PAIRING_SERVABLE)
        .map(|c| c.status.clone())
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_kept_protocol_mixes_versions_and_a_router_change_leaves_the_gates_alone() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "pairprotocol").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let mut rs = roleset(
        "rs",
        &[
            ("router", 1, None),
            ("prefill", 2, None),
            ("decode", 2, None),
        ],
        "engine:1",
    );
    rs.spec.pairing =
        serde_json::from_value(json!([{"roles": GROUP, "protocol": "kv-v2"}])).unwrap();
    rolesets.create(&PostParams::default(), &rs).await.unwrap();
    wait_for(&rolesets, "rs", "RoleSet rs Ready", TIMEOUT, |rs| {
        settled(rs, 1)
    })
    .await
    .unwrap();
    let recorder = Recorder::start(pods.clone()).await;
    recorder.catch_up(&pods).await;
    let start = recorder.events().len();
    let paired = |pod: &Pod| GROUP.contains(&role_of(pod).as_str());

    let patch_images = |ops: Vec<Value>| {
        let rolesets = rolesets.clone();
        async move {
            rolesets
                .patch(
                    "rs",
                    &PatchParams::default(),
                    &Patch::Json::<()>(serde_json::from_value(Value::Array(ops)).unwrap()),
                )
                .await
                .unwrap();
        }
    };
    let image = |role: usize, image: &str| {
        json!({"op": "replace", "value": image,
            "path": format!("/spec/roles/{role}/template/spec/containers/0/image")})
    };

    // The router alone: not one write to a paired pod.
    patch_images(vec![image(0, "router:2")]).await;
    wait_for(
        &rolesets,
        "rs",
        "RoleSet rs Ready on router:2",
        TIMEOUT,
        |rs| settled(rs, 2),
    )
    .await
    .unwrap();
    recorder.catch_up(&pods).await;
    let touched: Vec<String> = recorder.events()[start..]
        .iter()
        .flat_map(|e| e.applied())
        .filter(|p| paired(p))
        .map(|p| p.name_any())
        .collect();
    assert!(
        touched.is_empty(),
        "a router change wrote paired pods: {touched:?}"
    );

    // Both paired roles change and the protocol stays: one key throughout, and no pod that
    // serves is taken out of service for a partner of another version.
    let before_engine = recorder.events().len();
    patch_images(vec![image(1, "engine:2"), image(2, "engine:2")]).await;
    wait_for(
        &rolesets,
        "rs",
        "RoleSet rs Ready on engine:2",
        TIMEOUT,
        |rs| settled(rs, 3),
    )
    .await
    .unwrap();
    wait_for_all(&pods, "every paired pod on engine:2", TIMEOUT, |all| {
        all.iter()
            .filter(|p| paired(p))
            .all(|p| version_of(p) == "engine:2" && is_ready(p))
    })
    .await
    .unwrap();
    recorder.catch_up(&pods).await;
    let mut last_gate: BTreeMap<String, String> = BTreeMap::new();
    let mut versions_serving_together = false;
    replay(&recorder.events(), before_engine, |i, state| {
        let serving: Vec<&Pod> = state
            .values()
            .filter(|p| paired(p) && is_ready(p) && p.metadata.deletion_timestamp.is_none())
            .collect();
        versions_serving_together |= serving.iter().any(|p| version_of(p) == "engine:1")
            && serving.iter().any(|p| version_of(p) == "engine:2");
        for pod in state.values().filter(|p| paired(p)) {
            assert_eq!(
                pod.labels().get(LABEL_PAIRING_KEY).map(String::as_str),
                Some("kv-v2"),
                "event {i}: {}",
                pod.name_any()
            );
            let gate = gate_of(pod).unwrap_or_default();
            let before = last_gate.insert(pod.name_any(), gate.clone());
            assert!(
                !(before.as_deref() == Some("True") && gate == "False"),
                "event {i}: {} was taken out of service though the protocol is kept; the states:\n{}",
                pod.name_any(),
                recorder.events()[before_engine..=i]
                    .iter()
                    .flat_map(|e| e.applied())
                    .map(|p| format!(
                        "{} {} ready={} gate={:?} deleting={}",
                        p.name_any(),
                        version_of(p),
                        is_ready(p),
                        gate_of(p),
                        p.metadata.deletion_timestamp.is_some()
                    ))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    });
    assert!(
        versions_serving_together,
        "the kept protocol let both versions serve at once"
    );
}

/// The `Paired` condition of a status's conditions, when False: what a key waits for.
fn waiting(conditions: Option<&Vec<squall::api::Condition>>) -> Option<String> {
    conditions?
        .iter()
        .find(|c| c.type_ == CONDITION_PAIRED && c.status == "False")
        .map(|c| c.message.clone().unwrap_or_default())
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_partner_that_cannot_start_holds_the_group_with_a_condition_naming_its_role() {
    install_crds();
    let client = client().await;
    let roles = [("prefill", 2), ("decode", 2)];
    let ss = paired_service("llm", 1, json!({"type": "InPlaceUpdate"}), &roles, true);
    let (ns, watched) = Watched::start(&client, "pairstall", &ss, 4).await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    // A new key whose decode can never be scheduled (no node has the label).
    let unschedulable = |decode: Value| {
        let ops = json!([
            {"op": "replace", "path": "/spec/template/spec/roles/0/template/spec/containers/0/image",
             "value": "engine:2"},
            {"op": "replace", "path": "/spec/template/spec/roles/1/template/spec/containers/0/image",
             "value": "engine:2"},
            {"op": "add", "path": "/spec/template/spec/roles/1/template/spec/nodeSelector",
             "value": decode},
        ]);
        Patch::Json::<()>(serde_json::from_value(ops).unwrap())
    };
    api.patch(
        "llm",
        &PatchParams::default(),
        &unschedulable(json!({"squall.dev/nowhere": "true"})),
    )
    .await
    .unwrap();
    let held = wait_for(
        &api,
        "llm",
        "pairstall: Paired False naming decode",
        TIMEOUT,
        |ss| {
            waiting(ss.and_then(|ss| ss.status.as_ref()?.conditions.as_ref()))
                .is_some_and(|m| m.contains("waits for role decode"))
        },
    )
    .await
    .unwrap()
    .unwrap();
    let rs = rolesets.list(&Default::default()).await.unwrap().items;
    assert!(
        rs.iter().any(
            |r| waiting(r.status.as_ref().and_then(|s| s.conditions.as_ref()))
                .is_some_and(|m| m.contains("role decode"))
        ),
        "the RoleSet says it too"
    );
    // The old key serves in both roles while the new one waits; the status counts it.
    let keys = held
        .status
        .as_ref()
        .and_then(|s| s.pairing.clone())
        .unwrap();
    let serving = |key: &squall::api::PairingKeyStatus, role: &str| {
        key.roles
            .iter()
            .find(|r| r.name == role)
            .map_or(0, |r| r.serving)
    };
    assert_eq!(keys.len(), 2, "the old and the new key: {keys:?}");
    let (old, new): (Vec<_>, Vec<_>) = keys.iter().partition(|k| serving(k, "decode") > 0);
    assert!(
        old.len() == 1 && serving(old[0], "prefill") > 0,
        "the old key keeps serving: {keys:?}"
    );
    assert_eq!(
        serving(new[0], "prefill"),
        0,
        "the new prefill waits: {keys:?}"
    );
    let out = std::process::Command::new(squall_bin())
        .args(["status", "llm", "-n", ns.name()])
        .output()
        .expect("squall runs");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && table.contains("PAIRING-KEY")
            && table.contains(&format!("{:<20} {:<16}", new[0].key, "prefill"))
            && table.contains("pairing waits: RoleSet"),
        "squall status shows the keys and the wait: {table}"
    );
    // Never a stall: a template the decode can start on completes the rollout.
    api.patch("llm", &PatchParams::default(), &unschedulable(json!({})))
        .await
        .unwrap();
    let done = wait_for(&api, "llm", "pairstall: rolled out", TIMEOUT, |ss| {
        stormservice_settled(ss, Some(3))
            && waiting(ss.and_then(|ss| ss.status.as_ref()?.conditions.as_ref())).is_none()
    })
    .await
    .unwrap()
    .unwrap();
    let keys = done.status.and_then(|s| s.pairing).unwrap_or_default();
    assert!(
        keys.len() == 1 && keys[0].roles.iter().all(|r| r.serving == 2) && keys[0].skew == 0,
        "one key, serving whole: {keys:?}"
    );
    let replayed = watched.replay("llm", &roles, 0, 1).await;
    assert!(
        replayed.violation.is_none(),
        "no pod served without a partner of its version: {replayed:?}"
    );
}
