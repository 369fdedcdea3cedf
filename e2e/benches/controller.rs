//! Controller benchmark on the local control plane (`make bench` starts it): what squall
//! costs at scale, against floors measured in the same run.
//!
//! 1. Two floors, each on a quiet cluster: the API server's own pod-create rate, from a raw
//!    client creating as many pods as the scale phase will (16 in flight); and the same pods
//!    with, per 8 of them, the headless Service a StormService owns (AIBrix's contract: the
//!    controller-manager then keeps its Endpoints and EndpointSlices current as pods start and
//!    turn Ready) — everything squall's pods cost the control plane without squall. The
//!    control plane's CPU (API server, etcd, controller-manager, scheduler, kwok and squall)
//!    is measured in every phase: on these 2 cores it, more than any one process, sets the
//!    time (and each process's share says where it goes). And a budgeted roll floor: the same
//!    pods in groups shaped like the StormServices (2 replicas of 4), each group selected by
//!    its headless Service as in the same-objects floor, replaced replica by replica as
//!    `maxSurge` 1 / `maxUnavailable` 0 allows (new replica created and Ready, then the old
//!    deleted and gone) by a raw client: what the roll's ratio is taken against, since no
//!    budgeted rollout may replace every pod at once. The same floor without the Services is
//!    shown beside it (the ratio against it is what the Services' endpoint upkeep adds too).
//! 2. Scale: `BENCH_SERVICES` (default 200) StormServices of 2 roles × 2 pods, replicas 2
//!    (8 pods each: 1,600 pods). Time until all are Ready at their revision, and until
//!    their counts show it too (the kwok stages alone take
//!    1.7–3.2 s per pod), API write requests per StormService (`squall_api_requests_total`:
//!    finalizer patches and refused writes included) and what they were, squall's
//!    reads (LIST + GET sent while reconciling), peak RSS and CPU seconds; then an image
//!    change on all of them, measured again. The caches' bytes per pod come from squall's
//!    `squall_cache_bytes` / `squall_cache_objects`.
//!    Then the same again at a larger fleet with floors and an operator of its own,
//!    `BENCH_LARGE_SERVICES` (default 625: 5,000 pods; 0 skips it; the nodes must hold one and
//!    a half fleets, `e2e/cluster.sh nodes 4`): per pod, the time over its floors', squall's
//!    CPU, writes per StormService, peak RSS and where the control plane's CPU went, beside
//!    the first fleet's — whether squall's cost per pod holds as the fleet grows.
//! 3. Steady state, once all are settled: squall's CPU over 60 idle seconds, then a forced
//!    re-reconcile of every StormService (an annotation) — the writes and the LIST / GET
//!    requests it caused, from squall's `squall_api_requests_total` and cross-checked with the
//!    API server's own `apiserver_request_total` (LISTs from anyone).
//! 4. Step latency: `BENCH_CANARIES` (default 25) canaries of 4 weight steps (100 step
//!    transitions): from the bench observing the last pod that completes a step become
//!    Ready to it observing the next step start; p50 / p99.
//! 5. Pairing: `BENCH_PAIRED` (default 50) StormServices of the scale phase's shape created
//!    and rolled twice in turn, unpaired and then with prefill and decode in one pairing
//!    group: the writes per StormService each costs, what they were, and the gate writes
//!    (pods/status patches) per pod in the roll.
//!
//! Prints a Markdown table and writes it to `target/bench/controller.md`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use e2e::operator::{Operator, counter_sum, write_requests};
use e2e::process::usage;
use e2e::roles::{set_role_image, stormservice};
use e2e::{TestNamespace, client, install_crds};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use squall::api::StormService;
use tokio::sync::Mutex;

const TIMEOUT: Duration = Duration::from_secs(1800);
const IN_FLIGHT: usize = 16;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The control plane's processes, by the PID files `cluster.sh` keeps.
const PLANE: [&str; 5] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
];

/// CPU seconds of each local control-plane process and of `squall`: where a phase's time
/// goes on 2 cores.
#[derive(Clone, Default)]
struct PlaneCpu(BTreeMap<&'static str, f64>);

impl PlaneCpu {
    fn sample(squall: Option<u32>) -> Self {
        let dir = e2e::operator::cluster_dir();
        let plane = PLANE.iter().filter_map(|c| {
            let pid = std::fs::read_to_string(dir.join(format!("{c}.pid"))).ok()?;
            Some((*c, usage(pid.trim().parse().ok()?).0))
        });
        let squall = squall.map(|pid| ("squall", usage(pid).0));
        Self(plane.chain(squall).collect())
    }

    /// The CPU spent since `before`.
    fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .map(|(c, s)| (*c, s - before.0.get(c).copied().unwrap_or_default()))
                .collect(),
        )
    }

    fn total(&self) -> f64 {
        self.0.values().sum()
    }

    /// `kube-apiserver 60.1, etcd 20.3, …`, largest first.
    fn by_process(&self) -> String {
        let mut by: Vec<_> = self.0.iter().collect();
        by.sort_by(|a, b| b.1.total_cmp(a.1));
        by.iter()
            .map(|(c, s)| format!("{c} {s:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The write requests sent between two samples, per StormService, largest first:
/// `8.0 create pods, 2.1 patch rolesets/status, …`.
fn breakdown(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    services: usize,
) -> String {
    let mut sent: Vec<(f64, &String)> = after
        .iter()
        .map(|(kind, n)| {
            (
                (n - before.get(kind).copied().unwrap_or_default()) / services as f64,
                kind,
            )
        })
        .filter(|(n, _)| *n >= 0.05)
        .collect();
    sent.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    sent.iter()
        .map(|(n, kind)| format!("{n:.1} {kind}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Whether `ss` is done at `generation`: Ready at it, every RoleSet at the update revision —
/// what `kubectl wait --for=condition=Ready` and a rollout check read.
fn done_at(ss: &StormService, generation: i64) -> bool {
    ss.status.as_ref().is_some_and(|s| {
        s.observed_generation == Some(generation)
            && s.current_revision == s.update_revision
            && s.conditions.iter().flatten().any(|c| {
                c.type_ == "Ready"
                    && c.status == "True"
                    && c.observed_generation == Some(generation)
            })
    })
}

/// Whether `ss` is done at `generation` and its counts show it (counts may be written a
/// little later than the decisions, planner::status::coalesce_window).
fn settled_at(ss: &StormService, generation: i64, replicas: i32) -> bool {
    done_at(ss, generation)
        && ss
            .status
            .as_ref()
            .is_some_and(|s| s.ready_replicas == replicas && s.updated_replicas == replicas)
}

/// When every StormService was done, and when their counts had all caught up, from a start.
struct Settled {
    done: Duration,
    counted: Duration,
}

/// Waits until every StormService of `api` is settled at `generation`.
async fn all_settled(
    api: &Api<StormService>,
    count: usize,
    generation: i64,
    replicas: i32,
    started: Instant,
) -> Settled {
    let (mut done, mut counted) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
    );
    let mut all_done = None;
    let stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while counted.len() < count {
        let next = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("{} of {count} settled after {TIMEOUT:?}", counted.len()));
        let Ok(Some(ss)) = next else { continue };
        if done_at(&ss, generation) {
            done.insert(ss.name_any());
            if done.len() == count && all_done.is_none() {
                all_done = Some(started.elapsed());
            }
        }
        if settled_at(&ss, generation, replicas) {
            counted.insert(ss.name_any());
        }
    }
    let counted = started.elapsed();
    Settled {
        done: all_done.unwrap_or(counted),
        counted,
    }
}

/// What a floor measured: the raw client's pod-create rate (pods/s), the time until all its
/// pods are Ready, and the control plane's CPU seconds until then.
struct Floor {
    rate: f64,
    ready: Duration,
    cpu: PlaneCpu,
}

/// A floor: `pods` pods from a raw client, Ready through the API server, scheduler and kwok
/// without squall; with `services`, each 8 of them also selected by a headless Service
/// like the one a StormService owns.
async fn raw_pods(client: &kube::Client, pods: usize, services: bool) -> Floor {
    let ns = TestNamespace::create(client, "bench-raw").await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let service_api: Api<Service> = Api::namespaced(client.clone(), ns.name());
    let cpu0 = PlaneCpu::sample(None);
    let started = Instant::now();
    stream::iter(0..pods)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let (api, service_api) = (api.clone(), service_api.clone());
            async move {
                let group = format!("raw-{:04}", i / 8);
                if services && i % 8 == 0 {
                    service_api
                        .create(&PostParams::default(), &headless(&group))
                        .await
                        .unwrap();
                }
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("raw-{i}"), "labels": {"storm-service-name": group}},
                    "spec": {"subdomain": group, "containers": [{"name": "engine", "image": "engine:1"}]}
                }))
                .unwrap();
                api.create(&PostParams::default(), &pod).await.unwrap();
            }
        })
        .await;
    let rate = pods as f64 / started.elapsed().as_secs_f64();
    let mut ready = std::collections::BTreeSet::new();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while ready.len() < pods {
        let next = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .expect("raw pods Ready in time");
        let Ok(Some(pod)) = next else { continue };
        if pod_ready(&pod) {
            ready.insert(pod.name_any());
        }
    }
    let ready = started.elapsed();
    let cpu = PlaneCpu::sample(None).since(&cpu0);
    delete_namespace(ns.name());
    Floor { rate, ready, cpu }
}

/// The headless Service a StormService owns, selecting the raw pods of `group`.
fn headless(group: &str) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": group},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true,
            "selector": {"storm-service-name": group}}
    }))
    .unwrap()
}

/// Pods a raw client watches: Ready or not, by name (absent once deleted), with a wake-up
/// on every change.
#[derive(Default)]
struct Observed {
    pods: std::sync::Mutex<BTreeMap<String, bool>>,
    changed: tokio::sync::Notify,
}

impl Observed {
    /// Waits until `holds` is true of the pods (a change wakes every waiter; the timeout is
    /// the bench's).
    async fn until(&self, what: &str, holds: impl Fn(&BTreeMap<String, bool>) -> bool) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            let changed = self.changed.notified();
            if holds(&self.pods.lock().unwrap()) {
                return;
            }
            tokio::time::timeout_at(deadline, changed)
                .await
                .unwrap_or_else(|_| panic!("budgeted floor: {what} in time"));
        }
    }
}

/// The budgeted roll floor: `pods` pods in groups of 8 shaped like the scale phase's
/// StormServices (2 replicas of 4 pods; with `services`, each group also selected by the
/// headless Service its StormService would own), created and Ready, then replaced replica by replica
/// the way a `maxSurge` 1 / `maxUnavailable` 0 rollout may — per group, the new replica's
/// pods are created, the group waits until they are Ready, then deletes the old replica's
/// and waits until they are gone before the next — all groups at once, at most
/// `IN_FLIGHT` requests in flight. What a budgeted rollout costs the control plane with
/// nothing deciding it: the time from the first create to the last group done, and the
/// control plane's CPU meanwhile.
async fn budgeted_roll_floor(client: &kube::Client, pods: usize, services: bool) -> RollFloor {
    const REPLICA_PODS: usize = 4;
    let ns = TestNamespace::create(client, "bench-raw-roll").await;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let service_api: Api<Service> = Api::namespaced(client.clone(), ns.name());
    let observed = Arc::new(Observed::default());
    let watch = {
        let (api, observed) = (api.clone(), observed.clone());
        tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default()).default_backoff();
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                let mut pods = observed.pods.lock().unwrap();
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                        pods.insert(pod.name_any(), pod_ready(&pod));
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        pods.remove(&pod.name_any());
                    }
                    _ => continue,
                }
                drop(pods);
                observed.changed.notify_waiters();
            }
        })
    };
    let requests = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let replica = |group: usize, replica: usize, image: &'static str| {
        (0..REPLICA_PODS).map(move |i| {
            let name = format!("raw-{group:04}-{replica}-{}-{i}", &image[7..]);
            let group = format!("raw-{group:04}");
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"storm-service-name": group}},
                "spec": {"subdomain": group, "containers": [{"name": "engine", "image": image}]}
            }))
            .unwrap();
            pod
        })
    };
    let create = |pods: Vec<Pod>| {
        let (api, requests) = (api.clone(), requests.clone());
        async move {
            for pod in &pods {
                let _permit = requests.acquire().await.unwrap();
                api.create(&PostParams::default(), pod).await.unwrap();
            }
            pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
        }
    };
    let groups = pods / (2 * REPLICA_PODS);
    // The fleet, Ready (not measured).
    stream::iter(0..groups)
        .for_each_concurrent(IN_FLIGHT, |g| {
            let service_api = service_api.clone();
            let pods: Vec<Pod> = (0..2).flat_map(|r| replica(g, r, "engine:1")).collect();
            async move {
                if services {
                    let service = headless(&format!("raw-{g:04}"));
                    service_api
                        .create(&PostParams::default(), &service)
                        .await
                        .unwrap();
                }
                create(pods).await;
            }
        })
        .await;
    observed
        .until("the fleet Ready", |p| {
            p.len() == groups * 2 * REPLICA_PODS && p.values().all(|ready| *ready)
        })
        .await;

    let cpu0 = PlaneCpu::sample(None);
    let started = Instant::now();
    stream::iter(0..groups)
        .for_each_concurrent(groups, |g| {
            let (api, requests, observed) = (api.clone(), requests.clone(), observed.clone());
            let create = &create;
            async move {
                for r in 0..2 {
                    let new = create(replica(g, r, "engine:2").collect()).await;
                    observed
                        .until("a new replica Ready", |p| {
                            new.iter().all(|n| p.get(n) == Some(&true))
                        })
                        .await;
                    let old: Vec<String> =
                        replica(g, r, "engine:1").map(|p| p.name_any()).collect();
                    for name in &old {
                        let _permit = requests.acquire().await.unwrap();
                        api.delete(name, &Default::default()).await.unwrap();
                    }
                    observed
                        .until("an old replica gone", |p| {
                            old.iter().all(|n| !p.contains_key(n))
                        })
                        .await;
                }
            }
        })
        .await;
    let rolled = started.elapsed();
    let cpu = PlaneCpu::sample(None).since(&cpu0);
    watch.abort();
    delete_namespace(ns.name());
    RollFloor { rolled, cpu }
}

/// What a budgeted roll floor measured: the time from the first create to the last group
/// done, and the control plane's CPU meanwhile.
struct RollFloor {
    rolled: Duration,
    cpu: PlaneCpu,
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes a namespace and waits until it is gone (while squall still runs, so its
/// finalizers are removed), so the next phase runs on a quiet cluster.
fn delete_namespace(name: &str) {
    let out = e2e::kubectl(
        &["delete", "namespace", name, "--wait=true", "--timeout=900s"],
        None,
    );
    assert!(out.success, "deleting {name}: {}", out.stderr);
}

fn service(name: &str) -> StormService {
    stormservice(
        name,
        2,
        json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0}),
        &[("prefill", 2), ("decode", 2)],
    )
}

/// [`service`] with prefill and decode in one pairing group (docs/rollouts.md#pairing).
fn paired_service(name: &str) -> StormService {
    let mut ss = service(name);
    ss.spec.template.spec.as_mut().unwrap().pairing =
        serde_json::from_value(json!([{"roles": ["prefill", "decode"]}])).unwrap();
    ss
}

/// The write requests of one fleet's create and roll: per StormService, and what they were.
struct FleetWrites {
    create: f64,
    create_by: String,
    roll: f64,
    roll_by: String,
    /// pods/status patches per pod over the roll (the pairing gates').
    roll_gates_per_pod: f64,
}

/// Creates `count` StormServices made by `make` in a new namespace, waits until they are
/// settled, rolls one role's image on all of them and waits again, counting the writes.
async fn fleet_writes(
    client: &kube::Client,
    operator: &Operator,
    prefix: &str,
    count: usize,
    make: fn(&str) -> StormService,
) -> FleetWrites {
    let ns = TestNamespace::create(client, prefix).await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let writes_by = || write_requests(operator.admin_addr, &["stormservice", "roleset", "podset"]);
    let total = |by: &BTreeMap<String, f64>| by.values().sum::<f64>();
    let by0 = writes_by();
    let started = Instant::now();
    stream::iter(0..count)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &make(&format!("llm-{i:04}")))
                    .await
                    .unwrap();
            }
        })
        .await;
    all_settled(&api, count, 1, 2, started).await;
    let by1 = writes_by();
    let started = Instant::now();
    stream::iter(0..count)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let api = api.clone();
            async move {
                set_role_image(&api, &format!("llm-{i:04}"), 1, "engine:2").await;
            }
        })
        .await;
    all_settled(&api, count, 2, 2, started).await;
    let by2 = writes_by();
    delete_namespace(ns.name());
    let gates = |by: &BTreeMap<String, f64>| by.get("patch pods/status").copied().unwrap_or(0.0);
    FleetWrites {
        create: (total(&by1) - total(&by0)) / count as f64,
        create_by: breakdown(&by0, &by1, count),
        roll: (total(&by2) - total(&by1)) / count as f64,
        roll_by: breakdown(&by1, &by2, count),
        roll_gates_per_pod: (gates(&by2) - gates(&by1)) / (count * 8) as f64,
    }
}

/// LIST requests the API server has served, from anyone (its `apiserver_request_total`).
async fn apiserver_lists(client: &kube::Client) -> f64 {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let body = client
        .request_text(request)
        .await
        .expect("the API server's /metrics");
    body.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("verb=\"LIST\""))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Annotates every StormService (no spec change: each is reconciled, nothing should be
/// written) and waits until squall has reconciled them all.
async fn force_reconcile(api: &Api<StormService>, services: usize, admin: std::net::SocketAddr) {
    let reconciles = || {
        counter_sum(
            admin,
            "squall_reconciles_total",
            &["controller=\"stormservice\""],
        )
    };
    let before = reconciles();
    stream::iter(0..services)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let api = api.clone();
            async move {
                let patch = json!({"metadata": {"annotations": {"bench/poke": "1"}}});
                api.patch(
                    &format!("llm-{i:04}"),
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .unwrap();
            }
        })
        .await;
    let deadline = Instant::now() + Duration::from_secs(300);
    while reconciles() - before < services as f64 {
        assert!(
            Instant::now() < deadline,
            "the forced reconciles did not all run in 300 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Step latencies (seconds) of `canaries` canaries of 4 weight steps each.
async fn step_latencies(client: &kube::Client, canaries: usize) -> Vec<f64> {
    let ns = TestNamespace::create(client, "bench-steps").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0,
        "canary": {"steps": [{"setWeight": 25}, {"setWeight": 50}, {"setWeight": 75}, {"setWeight": 100}]}});
    let names: Vec<String> = (0..canaries).map(|i| format!("canary-{i:03}")).collect();
    for name in &names {
        api.create(
            &PostParams::default(),
            &stormservice(name, 4, strategy.clone(), &[("decode", 1)]),
        )
        .await
        .unwrap();
    }
    all_settled(&api, canaries, 1, 4, Instant::now()).await;

    // The last Ready transition of a pod per StormService, as this client observed it.
    let last_ready: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let pod_watch = {
        let last_ready = last_ready.clone();
        let mut seen_ready = std::collections::BTreeSet::new();
        let stream = watcher(pods, watcher::Config::default())
            .default_backoff()
            .applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(Ok(pod)) = stream.next().await {
                if pod_ready(&pod) && seen_ready.insert(pod.name_any()) {
                    let service = pod
                        .labels()
                        .get("storm-service-name")
                        .cloned()
                        .unwrap_or_default();
                    last_ready.lock().await.insert(service, Instant::now());
                }
            }
        })
    };
    let mut steps: BTreeMap<String, i32> = BTreeMap::new();
    let mut latencies = Vec::new();
    let services = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects();
    let mut services = std::pin::pin!(services);
    for name in &names {
        set_role_image(&api, name, 0, "engine:2").await;
    }
    let mut completed = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while completed.len() < canaries {
        let next = tokio::time::timeout_at(deadline, services.try_next())
            .await
            .expect("canaries complete in time");
        let Ok(Some(ss)) = next else { continue };
        let name = ss.name_any();
        let step = ss
            .status
            .as_ref()
            .and_then(|s| s.canary_status.as_ref())
            .map(|c| c.current_step);
        let done = ss.metadata.generation == Some(2) && settled_at(&ss, 2, 4);
        let previous = steps.get(&name).copied();
        // A step starts when currentStep moves past the previous one; the canary's end
        // (status settled at the new generation) ends the last step.
        let advanced = match (previous, step) {
            (Some(p), Some(s)) => s > p,
            _ => false,
        };
        let step_ended = advanced || (done && !completed.contains(&name) && previous.is_some());
        if step_ended && let Some(ready) = last_ready.lock().await.get(&name) {
            latencies.push(ready.elapsed().as_secs_f64());
        }
        if let Some(s) = step {
            steps.insert(name.clone(), s);
        }
        if done {
            completed.insert(name);
        }
    }
    pod_watch.abort();
    delete_namespace(ns.name());
    latencies
}

/// One fleet size's floors and squall's create and roll of it, measured in one run.
struct ScaleRun {
    services: usize,
    pods: usize,
    floor: Floor,
    same_objects: Floor,
    /// The budgeted roll floor with the Services, and (in the detailed run) without them.
    budgeted_roll: RollFloor,
    pods_roll: Option<RollFloor>,
    created_in: Duration,
    create: Settled,
    create_cpu: f64,
    create_rss: f64,
    create_plane: PlaneCpu,
    create_writes: f64,
    create_by: String,
    create_reads: f64,
    roll: Settled,
    roll_cpu: f64,
    roll_rss: f64,
    roll_plane: PlaneCpu,
    roll_writes: f64,
    roll_by: String,
    roll_reads: f64,
    /// Cached bytes per pod, from squall's gauges after the create.
    bytes_per_pod: f64,
    steady: Option<Steady>,
}

/// The steady state of the detailed run: squall's idle CPU, then what a forced re-reconcile
/// of every StormService sent.
struct Steady {
    idle_cpu: f64,
    writes: f64,
    lists: f64,
    server_lists: f64,
}

/// The nodes' allocatable pods: a fleet of `pods` rolled with a surge of half of it must fit,
/// or pods stay Pending and the bench measures the scheduler's backlog instead.
async fn check_capacity(client: &kube::Client, pods: usize) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let capacity: usize = nodes
        .list(&Default::default())
        .await
        .expect("the nodes")
        .items
        .iter()
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get("pods"))
        .filter_map(|q| match q.0.strip_suffix('k') {
            Some(thousands) => thousands.parse::<usize>().ok().map(|k| k * 1000),
            None => q.0.parse().ok(),
        })
        .sum();
    let needed = pods + pods / 2;
    assert!(
        capacity >= needed,
        "the nodes hold {capacity} pods; a fleet of {pods} rolled with its surge needs {needed}: \
         add fake nodes with `e2e/cluster.sh nodes {}` (2,000 pods each)",
        needed.div_ceil(2000)
    );
}

/// Floors, then squall (an operator of its own) creating `services` StormServices and rolling
/// them; with `detailed`, also the budgeted floor without Services and the steady state.
/// Returns the operator, still running, for the phases that follow.
async fn scale_run(client: &kube::Client, services: usize, detailed: bool) -> (ScaleRun, Operator) {
    let pods = services * 8;
    check_capacity(client, pods).await;
    println!(
        "floors: {pods} pods from a raw client, {IN_FLIGHT} in flight, without and with Services ..."
    );
    let floor = raw_pods(client, pods, false).await;
    let same_objects = raw_pods(client, pods, true).await;
    println!("budgeted roll floor: {pods} pods replaced replica by replica from a raw client ...");
    let budgeted_roll = budgeted_roll_floor(client, pods, true).await;
    let pods_roll = if detailed {
        Some(budgeted_roll_floor(client, pods, false).await)
    } else {
        None
    };

    let operator = Operator::start("bench", &["--controllers=true"]);
    let pid = operator.pid();
    let ns = TestNamespace::create(client, &format!("bench-scale-{pods}")).await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let writes_by = || write_requests(operator.admin_addr, &["stormservice", "roleset", "podset"]);
    let writes = |by: &BTreeMap<String, f64>| by.values().sum::<f64>();
    // Reads the controllers send (the caches' own list-then-watch is not a reconcile's).
    let reads = || {
        ["stormservice", "roleset", "podset"]
            .iter()
            .map(|c| {
                let controller = format!("controller=\"{c}\"");
                counter_sum(
                    operator.admin_addr,
                    "squall_api_requests_total",
                    &[&controller, "verb=\"list\""],
                ) + counter_sum(
                    operator.admin_addr,
                    "squall_api_requests_total",
                    &[&controller, "verb=\"get\""],
                )
            })
            .sum::<f64>()
    };
    let lists = || {
        counter_sum(
            operator.admin_addr,
            "squall_api_requests_total",
            &["verb=\"list\""],
        )
    };

    println!("scale: {services} StormServices, {pods} pods ...");
    let (cpu0, _) = usage(pid);
    let plane0 = PlaneCpu::sample(Some(pid));
    let by0 = writes_by();
    let reads0 = reads();
    let started = Instant::now();
    stream::iter(0..services)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let api = api.clone();
            async move {
                api.create(&PostParams::default(), &service(&format!("llm-{i:04}")))
                    .await
                    .unwrap();
            }
        })
        .await;
    let created_in = started.elapsed();
    let create = all_settled(&api, services, 1, 2, started).await;
    let (cpu1, create_rss) = usage(pid);
    let create_plane = PlaneCpu::sample(Some(pid)).since(&plane0);
    let by1 = writes_by();
    let reads1 = reads();
    let gauge = |name| counter_sum(operator.admin_addr, name, &["resource=\"pods\""]);
    let bytes_per_pod = gauge("squall_cache_bytes") / gauge("squall_cache_objects").max(1.0);

    let steady = if detailed {
        println!("steady state: 60 s idle, then a forced re-reconcile of all ...");
        let (idle0, _) = usage(pid);
        tokio::time::sleep(Duration::from_secs(60)).await;
        let (idle1, _) = usage(pid);
        let (writes0, lists0, server_lists0) =
            (writes(&writes_by()), lists(), apiserver_lists(client).await);
        force_reconcile(&api, services, operator.admin_addr).await;
        Some(Steady {
            idle_cpu: idle1 - idle0,
            writes: writes(&writes_by()) - writes0,
            lists: lists() - lists0,
            server_lists: apiserver_lists(client).await - server_lists0,
        })
    } else {
        None
    };
    let reads_steady = reads();

    println!("roll: image change on all of them ...");
    let (cpu_roll0, _) = usage(pid);
    let plane_roll0 = PlaneCpu::sample(Some(pid));
    let by_roll0 = writes_by();
    let started = Instant::now();
    stream::iter(0..services)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let api = api.clone();
            async move {
                set_role_image(&api, &format!("llm-{i:04}"), 1, "engine:2").await;
            }
        })
        .await;
    let roll = all_settled(&api, services, 2, 2, started).await;
    let (cpu2, roll_rss) = usage(pid);
    let roll_plane = PlaneCpu::sample(Some(pid)).since(&plane_roll0);
    let by2 = writes_by();
    let reads2 = reads();
    delete_namespace(ns.name());
    let run = ScaleRun {
        services,
        pods,
        floor,
        same_objects,
        budgeted_roll,
        pods_roll,
        created_in,
        create,
        create_cpu: cpu1 - cpu0,
        create_rss,
        create_plane,
        create_writes: (writes(&by1) - writes(&by0)) / services as f64,
        create_by: breakdown(&by0, &by1, services),
        create_reads: reads1 - reads0,
        roll,
        roll_cpu: cpu2 - cpu_roll0,
        roll_rss,
        roll_plane,
        roll_writes: (writes(&by2) - writes(&by_roll0)) / services as f64,
        roll_by: breakdown(&by_roll0, &by2, services),
        roll_reads: reads2 - reads_steady,
        bytes_per_pod,
        steady,
    };
    (run, operator)
}

/// The larger fleet beside the detailed one, both measured in this run: whether time, CPU,
/// writes and memory per pod hold as the fleet grows (each time taken against its own
/// fleet's floors, so the control plane's own growth is not counted against squall).
fn compare(small: &ScaleRun, large: &ScaleRun) -> String {
    let secs = |d: Duration| d.as_secs_f64();
    let per_pod_ms = |cpu: f64, run: &ScaleRun| cpu * 1000.0 / run.pods as f64;
    let mut rows = vec![
        format!(
            "\nController benchmark at {} pods ({} StormServices), beside the {} pods above, in the same run with operators of their own (each time is taken against its own fleet's floors; growth is the larger fleet's figure over the smaller's):\n",
            large.pods, large.services, small.pods
        ),
        format!(
            "| measure | {} pods | {} pods | growth |\n|---|---|---|---|",
            small.pods, large.pods
        ),
    ];
    let mut row = |measure: &str, unit: &str, a: f64, b: f64| {
        rows.push(format!(
            "| {measure} | {a:.2}{unit} | {b:.2}{unit} | {:.2}× |",
            b / a
        ));
    };
    let create_vs_floor = |r: &ScaleRun| secs(r.create.counted) / secs(r.floor.ready);
    let create_vs_same = |r: &ScaleRun| secs(r.create.counted) / secs(r.same_objects.ready);
    let roll_vs_floor = |r: &ScaleRun| secs(r.roll.counted) / secs(r.budgeted_roll.rolled);
    row(
        "create: time over the floor's",
        "×",
        create_vs_floor(small),
        create_vs_floor(large),
    );
    row(
        "create: time over the same-objects floor's",
        "×",
        create_vs_same(small),
        create_vs_same(large),
    );
    row(
        "roll: time over the budgeted floor's",
        "×",
        roll_vs_floor(small),
        roll_vs_floor(large),
    );
    row(
        "create: squall CPU per pod",
        " ms",
        per_pod_ms(small.create_cpu, small),
        per_pod_ms(large.create_cpu, large),
    );
    row(
        "roll: squall CPU per pod",
        " ms",
        per_pod_ms(small.roll_cpu, small),
        per_pod_ms(large.roll_cpu, large),
    );
    row(
        "create: API write requests per StormService",
        "",
        small.create_writes,
        large.create_writes,
    );
    row(
        "roll: API write requests per StormService",
        "",
        small.roll_writes,
        large.roll_writes,
    );
    row(
        "create: squall peak RSS",
        " MiB",
        small.create_rss,
        large.create_rss,
    );
    row(
        "roll: squall peak RSS",
        " MiB",
        small.roll_rss,
        large.roll_rss,
    );
    rows.push(format!(
        "| LIST + GET requests from the controllers, create / roll | {:.0} / {:.0} | {:.0} / {:.0} | |",
        small.create_reads, small.roll_reads, large.create_reads, large.roll_reads
    ));
    rows.push(format!(
        "| create: what the writes were, per StormService | {} | {} | |",
        small.create_by, large.create_by
    ));
    rows.push(format!(
        "| roll: what the writes were, per StormService | {} | {} | |",
        small.roll_by, large.roll_by
    ));
    rows.push(format!(
        "| roll: control-plane CPU by process, seconds, squall / budgeted floor | {} / {} | {} / {} | |",
        small.roll_plane.by_process(),
        small.budgeted_roll.cpu.by_process(),
        large.roll_plane.by_process(),
        large.budgeted_roll.cpu.by_process()
    ));
    rows.join("\n") + "\n"
}

#[tokio::main]
async fn main() {
    let services = env_number("BENCH_SERVICES", 200);
    let large_services = env_number("BENCH_LARGE_SERVICES", 625);
    let canaries = env_number("BENCH_CANARIES", 25);
    let paired_services = env_number("BENCH_PAIRED", 50);
    install_crds();
    let client = client().await;

    let (run, operator) = scale_run(&client, services, true).await;
    println!("step latency: {canaries} canaries x 4 steps ...");
    let mut latencies = step_latencies(&client, canaries).await;
    latencies.sort_by(f64::total_cmp);
    println!("pairing: {paired_services} StormServices, unpaired then paired ...");
    let unpaired = fleet_writes(
        &client,
        &operator,
        "bench-unpaired",
        paired_services,
        service,
    )
    .await;
    let paired = fleet_writes(
        &client,
        &operator,
        "bench-paired",
        paired_services,
        paired_service,
    )
    .await;
    drop(operator);
    let large = if large_services > 0 {
        let (large, operator) = scale_run(&client, large_services, false).await;
        drop(operator);
        Some(large)
    } else {
        None
    };

    let (pods, services) = (run.pods, run.services);
    let steady = run
        .steady
        .as_ref()
        .expect("the detailed run's steady state");
    let pods_roll = run
        .pods_roll
        .as_ref()
        .expect("the detailed run's floor without Services");
    let squall_rate = pods as f64 / run.create.done.as_secs_f64();
    let machine = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut table = String::new();
    table.push_str(&format!(
        "Controller benchmark ({services} StormServices × 2 roles × 2 pods × 2 replicas = {pods} pods; {cores} cores, {machine}):\n\n"
    ));
    table.push_str("| measure | value |\n|---|---|\n");
    table.push_str(&format!(
        "| floor: {pods} pods from a raw client ({IN_FLIGHT} in flight), created / all Ready / control-plane CPU | {:.0} pods/s / {:.1} s / {:.1} s |\n",
        run.floor.rate,
        run.floor.ready.as_secs_f64(),
        run.floor.cpu.total()
    ));
    table.push_str(&format!(
        "| same-objects floor: those pods and {services} headless Services (one per 8 pods) from a raw client | {:.0} pods/s / {:.1} s ({:.2}× the floor's) / {:.1} s |\n",
        run.same_objects.rate,
        run.same_objects.ready.as_secs_f64(),
        run.same_objects.ready.as_secs_f64() / run.floor.ready.as_secs_f64(),
        run.same_objects.cpu.total()
    ));
    table.push_str(&format!(
        "| create: all {services} StormServices Ready (creates sent in {:.1} s; counts caught up at {:.1} s) | {:.1} s ({squall_rate:.0} pods/s): {:.2}× the floor's time, {:.2}× the same-objects floor's |\n",
        run.created_in.as_secs_f64(),
        run.create.counted.as_secs_f64(),
        run.create.done.as_secs_f64(),
        run.create.done.as_secs_f64() / run.floor.ready.as_secs_f64(),
        run.create.done.as_secs_f64() / run.same_objects.ready.as_secs_f64()
    ));
    table.push_str(&format!(
        "| create: control-plane CPU (squall included) | {:.1} s: {:.2}× the floor's, {:.2}× the same-objects floor's |\n",
        run.create_plane.total(),
        run.create_plane.total() / run.floor.cpu.total(),
        run.create_plane.total() / run.same_objects.cpu.total()
    ));
    table.push_str(&format!(
        "| create: control-plane CPU by process, seconds, squall / same-objects floor | {} / {} |\n",
        run.create_plane.by_process(),
        run.same_objects.cpu.by_process()
    ));
    table.push_str(&format!(
        "| create: API write requests per StormService | {:.1} |\n",
        run.create_writes
    ));
    table.push_str(&format!(
        "| create: what they were, per StormService | {} |\n",
        run.create_by
    ));
    table.push_str(&format!(
        "| create: LIST + GET requests from the controllers | {:.0} |\n",
        run.create_reads
    ));
    table.push_str(&format!(
        "| create: squall CPU / peak RSS | {:.1} s / {:.0} MiB |\n",
        run.create_cpu, run.create_rss
    ));
    table.push_str(&format!(
        "| steady: squall CPU over 60 idle seconds | {:.2} s |\n",
        steady.idle_cpu
    ));
    table.push_str(&format!(
        "| steady: forced re-reconcile of all {services}: writes / squall LISTs / API server LISTs (anyone) | {:.0} / {:.0} / {:.0} |\n",
        steady.writes,
        steady.lists,
        steady.server_lists
    ));
    table.push_str(&format!(
        "| budgeted roll floor: those pods in groups of 2 × 4, each group selected by its headless Service, replaced replica by replica from a raw client (new replica created, Ready, old deleted, gone: maxSurge 1 / maxUnavailable 0) / control-plane CPU | {:.1} s / {:.1} s |\n",
        run.budgeted_roll.rolled.as_secs_f64(),
        run.budgeted_roll.cpu.total()
    ));
    table.push_str(&format!(
        "| budgeted roll floor without the Services: time / control-plane CPU | {:.1} s / {:.1} s |\n",
        pods_roll.rolled.as_secs_f64(),
        pods_roll.cpu.total()
    ));
    table.push_str(&format!(
        "| roll (image change of one role): all Ready at the new revision / counts caught up | {:.1} s / {:.1} s: {:.2}× the budgeted floor's ({:.2}× the one without Services) |\n",
        run.roll.done.as_secs_f64(),
        run.roll.counted.as_secs_f64(),
        run.roll.counted.as_secs_f64() / run.budgeted_roll.rolled.as_secs_f64(),
        run.roll.counted.as_secs_f64() / pods_roll.rolled.as_secs_f64()
    ));
    table.push_str(&format!(
        "| roll: control-plane CPU (squall included) | {:.1} s: {:.2}× the budgeted floor's |\n",
        run.roll_plane.total(),
        run.roll_plane.total() / run.budgeted_roll.cpu.total()
    ));
    table.push_str(&format!(
        "| roll: control-plane CPU by process, seconds, squall / budgeted floor | {} / {} |\n",
        run.roll_plane.by_process(),
        run.budgeted_roll.cpu.by_process()
    ));
    table.push_str(&format!(
        "| roll: API write requests per StormService | {:.1} |\n",
        run.roll_writes
    ));
    table.push_str(&format!(
        "| roll: what they were, per StormService | {} |\n",
        run.roll_by
    ));
    table.push_str(&format!(
        "| roll: LIST + GET requests from the controllers | {:.0} |\n",
        run.roll_reads
    ));
    table.push_str(&format!(
        "| roll: squall CPU / peak RSS | {:.1} s / {:.0} MiB |\n",
        run.roll_cpu, run.roll_rss
    ));
    table.push_str(&format!(
        "| cached pod (lean JSON) | {:.0} bytes |\n",
        run.bytes_per_pod
    ));
    table.push_str(&format!(
        "| canary step latency, last pod Ready → next step ({} steps) | p50 {:.0} ms, p99 {:.0} ms |\n",
        latencies.len(),
        percentile(&latencies, 50.0) * 1000.0,
        percentile(&latencies, 99.0) * 1000.0
    ));
    table.push_str(&format!(
        "| pairing ({paired_services} StormServices each, prefill and decode in one group, vs the same fleet unpaired in the same run): API write requests per StormService, create / roll | {:.1} / {:.1} vs {:.1} / {:.1}: {:+.1} / {:+.1} |\n",
        paired.create,
        paired.roll,
        unpaired.create,
        unpaired.roll,
        paired.create - unpaired.create,
        paired.roll - unpaired.roll
    ));
    table.push_str(&format!(
        "| pairing: what the create's were, per StormService, paired / unpaired | {} / {} |\n",
        paired.create_by, unpaired.create_by
    ));
    table.push_str(&format!(
        "| pairing: what the roll's were, per StormService, paired / unpaired | {} / {} |\n",
        paired.roll_by, unpaired.roll_by
    ));
    table.push_str(&format!(
        "| pairing: gate writes (pods/status patches) per pod in the roll (goal ≤ 1) | {:.2} |\n",
        paired.roll_gates_per_pod
    ));
    if let Some(large) = &large {
        table.push_str(&compare(&run, large));
    }
    println!("\n{table}");
    let out = e2e::workspace_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("controller.md"), table).unwrap();
}
