//! Cut-over from AIBrix (run serially, each test with its own operator).
//! - The guard: while AIBrix's controller-manager holds its leader Lease, squall writes
//!   nothing to any object; it says so with an event on each and a gauge, takes over within
//!   one lease period once the Lease expires, and steps aside again if AIBrix comes back.
//!   The Lease is timed by the operator's own clock: one whose `renewTime` is far in the
//!   future expires once it stops changing, and a deleted one is free.
//! - Adoption: every `aibrix-live` scenario (objects exactly as AIBrix's controller left
//!   them) is taken over with no pod restarted and no RoleSet replaced, under squall's own
//!   revision and labels, then rolls normally within its budgets; a service whose spec
//!   drifted while AIBrix was stopped rolls exactly the pods `squall adopt --dry-run`
//!   predicted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use e2e::operator::{Operator, counter_sum, write_requests};
use e2e::roles::{live_rolesets, role_of, set_role_image, stormservice, stormservice_settled};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::keys::LABEL_REVISION_OWNER;
use squall::api::{PodSet, RoleSet, StormService};
use squall::planner::revision::revision_data;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The fake AIBrix's lease period (AIBrix's default is 15 s; shorter keeps the test short).
const LEASE_SECONDS: i32 = 6;
const LEASE: &str = "aibrix-controller-manager";

/// A stand-in for AIBrix's controller-manager: holds the Lease as `holder`, renewing it every
/// second (AIBrix renews every 2 s) until dropped.
struct FakeAibrix {
    running: Arc<AtomicBool>,
    renewer: tokio::task::JoinHandle<()>,
}

impl FakeAibrix {
    async fn start(leases: &Api<Lease>, holder: &str) -> Self {
        let spec = |now: Timestamp| {
            json!({"spec": {"holderIdentity": holder, "leaseDurationSeconds": LEASE_SECONDS,
                "acquireTime": MicroTime(now), "renewTime": MicroTime(now)}})
        };
        let mut lease: Lease =
            serde_json::from_value(json!({"metadata": {"name": LEASE}})).unwrap();
        lease.spec = serde_json::from_value(spec(Timestamp::now())["spec"].clone()).unwrap();
        if leases.get_opt(LEASE).await.unwrap().is_none() {
            leases.create(&PostParams::default(), &lease).await.unwrap();
        } else {
            leases
                .patch(
                    LEASE,
                    &PatchParams::default(),
                    &Patch::Merge(spec(Timestamp::now())),
                )
                .await
                .unwrap();
        }
        let running = Arc::new(AtomicBool::new(true));
        let (leases, still) = (leases.clone(), running.clone());
        let renewer = tokio::spawn(async move {
            while still.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if still.load(Ordering::SeqCst) {
                    let renewed = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                    if let Err(error) = leases
                        .patch(LEASE, &PatchParams::default(), &Patch::Merge(renewed))
                        .await
                    {
                        eprintln!("renewing the fake AIBrix Lease failed: {error}");
                    }
                }
            }
        });
        Self { running, renewer }
    }

    /// Stops renewing; returns once no renewal is in flight.
    async fn stop(self) {
        self.running.store(false, Ordering::SeqCst);
        self.renewer.await.unwrap();
    }
}

/// Waits until the operator's `squall_aibrix_controller_active` gauge reads `active`.
async fn guard_reads(operator: &Operator, active: bool) {
    let want = if active { 1.0 } else { 0.0 };
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    let mut interval = tokio::time::interval(Duration::from_millis(200));
    loop {
        interval.tick().await;
        let (_, body) = e2e::operator::http_get(operator.admin_addr, "/metrics").unwrap();
        let value = body
            .lines()
            .find_map(|l| l.strip_prefix("squall_aibrix_controller_active "))
            .and_then(|v| v.trim().parse::<f64>().ok());
        if value == Some(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "squall_aibrix_controller_active stayed {value:?}, expected {want}"
        );
    }
}

/// Waits until squall has said `count` times (one per generation it left to AIBrix) that it
/// leaves the StormService `name` to AIBrix: `AIBrixControllerActive` events, a repeat
/// counted in the event's series.
async fn guard_events(client: &kube::Client, namespace: &str, name: &str, count: i32) {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    e2e::wait_for_all(
        &events,
        &format!("{count} AIBrixControllerActive event(s) on {name}"),
        TIMEOUT,
        |all| {
            all.iter()
                .filter(|e| {
                    e.reason.as_deref() == Some("AIBrixControllerActive")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                })
                .map(|e| e.series.as_ref().map_or(1, |s| s.count))
                .sum::<i32>()
                >= count
        },
    )
    .await
    .unwrap();
}

/// The controllers' writes other than events: what "touching an object" means here.
fn object_writes(operator: &Operator) -> f64 {
    write_requests(operator.admin_addr, &["stormservice", "roleset", "podset"])
        .iter()
        .filter(|(what, _)| !what.ends_with(" events"))
        .map(|(_, n)| n)
        .sum()
}

// Two threads: the fake AIBrix keeps renewing while the test blocks on the operator's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn squall_leaves_everything_to_a_live_aibrix_and_takes_over_when_its_lease_expires() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "guard").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let aibrix = FakeAibrix::start(&leases, "aibrix-controller-manager-7c9f").await;
    let lease_flag = format!("--aibrix-lease={}/{LEASE}", ns.name());
    let operator = Operator::start(
        "guard",
        &[
            "--controllers=true",
            "--webhook-configs",
            "none",
            &lease_flag,
        ],
    );
    guard_reads(&operator, true).await;

    let service = stormservice(
        "llm",
        2,
        json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1}),
        &[("decode", 1)],
    );
    api.create(&PostParams::default(), &service).await.unwrap();
    // The event proves squall saw the StormService and left it to AIBrix.
    guard_events(&client, ns.name(), "llm", 1).await;
    assert_eq!(
        object_writes(&operator),
        0.0,
        "no write while AIBrix holds its Lease"
    );
    assert!(live_rolesets(&rolesets).await.is_empty());

    // AIBrix stops: its Lease expires one period after its last renewal.
    aibrix.stop().await;
    let last_renewal = leases
        .get(LEASE)
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap()
        .0;
    let expiry = last_renewal + SignedDuration::from_secs(LEASE_SECONDS.into());
    wait_for(
        &api,
        "llm",
        "llm Ready once the Lease expired",
        TIMEOUT,
        |ss| {
            ss.and_then(|s| s.status.as_ref())
                .is_some_and(|st| st.ready_replicas == 2)
        },
    )
    .await
    .unwrap();
    let first_roleset = live_rolesets(&rolesets)
        .await
        .iter()
        .filter_map(|r| r.metadata.creation_timestamp.clone())
        .map(|t| t.0)
        .min()
        .unwrap();
    // creationTimestamp has whole seconds: the first write came after the expiry, and within
    // one lease period of it.
    assert!(
        first_roleset + SignedDuration::from_secs(1) > expiry,
        "squall wrote at {first_roleset}, before the Lease expired at {expiry}"
    );
    assert!(
        first_roleset <= expiry + SignedDuration::from_secs(LEASE_SECONDS.into()),
        "squall took over at {first_roleset}, more than one lease period after {expiry}"
    );

    // AIBrix comes back: squall steps aside again. A reconcile already running when the
    // Lease is seen held may finish its writes; every one that starts after leaves the
    // object alone — shown across two spec changes, each acknowledged by the event.
    let aibrix = FakeAibrix::start(&leases, "aibrix-controller-manager-d41e").await;
    guard_reads(&operator, true).await;
    set_role_image(&api, "llm", 0, "engine:2").await;
    guard_events(&client, ns.name(), "llm", 2).await;
    let writes = object_writes(&operator);
    let before: Vec<RoleSet> = live_rolesets(&rolesets).await;
    api.patch(
        "llm",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    guard_events(&client, ns.name(), "llm", 3).await;
    assert_eq!(
        object_writes(&operator),
        writes,
        "no write while AIBrix is back"
    );
    let versions = |all: &[RoleSet]| -> Vec<(String, Option<String>)> {
        all.iter()
            .map(|r| (r.name_any(), r.resource_version()))
            .collect()
    };
    assert_eq!(
        versions(&live_rolesets(&rolesets).await),
        versions(&before),
        "the changes are left to AIBrix"
    );
    assert!(
        counter_sum(
            operator.admin_addr,
            "squall_reconciles_total",
            &["outcome=\"guarded\""]
        ) > 0.0
    );
    aibrix.stop().await;
}

/// Pods' UIDs by name.
// Two threads: the fake AIBrix keeps renewing while the test blocks on the operator's start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn a_lease_renewed_into_the_future_expires_by_the_operators_clock_and_a_deleted_one_is_free()
{
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "guard-clock").await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns.name());
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    // A holder whose clock (or whose tenant) says 2099, and which never renews again.
    let future = Timestamp::from_second(4_070_908_800).unwrap();
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": LEASE},
        "spec": {"holderIdentity": "aibrix-from-2099", "leaseDurationSeconds": LEASE_SECONDS,
            "acquireTime": MicroTime(future), "renewTime": MicroTime(future)}}))
    .unwrap();
    let written = leases.create(&PostParams::default(), &lease).await.unwrap();
    let written_at = written.metadata.creation_timestamp.unwrap().0;
    let lease_flag = format!("--aibrix-lease={}/{LEASE}", ns.name());
    let operator = Operator::start(
        "guard-clock",
        &[
            "--controllers=true",
            "--webhook-configs",
            "none",
            &lease_flag,
        ],
    );
    guard_reads(&operator, true).await;
    api.create(
        &PostParams::default(),
        &stormservice("llm", 1, json!({"type": "RollingUpdate"}), &[("decode", 1)]),
    )
    .await
    .unwrap();
    // The unchanged Lease expires by the operator's clock, its 2099 renewTime regardless.
    guard_reads(&operator, false).await;
    wait_for(
        &api,
        "llm",
        "llm Ready after the stale Lease",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    let first_roleset = live_rolesets(&rolesets)
        .await
        .iter()
        .filter_map(|r| r.metadata.creation_timestamp.clone())
        .map(|t| t.0)
        .min()
        .unwrap();
    assert!(
        first_roleset + SignedDuration::from_secs(1)
            > written_at + SignedDuration::from_secs(LEASE_SECONDS.into()),
        "squall wrote at {first_roleset}, less than a lease period after the Lease was last \
         written at {written_at}"
    );
    assert_eq!(
        leases
            .get(LEASE)
            .await
            .unwrap()
            .spec
            .unwrap()
            .renew_time
            .map(|t| t.0),
        Some(future),
        "the Lease still says 2099"
    );

    // A live holder's Lease deleted (its renewals then fail, as they patch it): free.
    let aibrix = FakeAibrix::start(&leases, "aibrix-controller-manager-5b2a").await;
    guard_reads(&operator, true).await;
    leases.delete(LEASE, &Default::default()).await.unwrap();
    guard_reads(&operator, false).await;
    aibrix.stop().await;
    let (status, body) = e2e::operator::http_get(operator.admin_addr, "/readyz").unwrap();
    assert_eq!(
        (status, body.as_str()),
        (200, "ok"),
        "no read error to report"
    );
}

fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
        .collect()
}

/// A scenario AIBrix's controller left, taken over by squall.
struct TakenOver {
    client: kube::Client,
    ns: TestNamespace,
    name: String,
    operator: Operator,
    /// The pods AIBrix left: name → UID.
    before: BTreeMap<String, String>,
    pods: Recorder<Pod>,
    rolesets: Recorder<RoleSet>,
}

/// Loads `scenario`, starts squall on it, and proves the take-over restarted nothing: at
/// every observed state no pod or RoleSet was deleted and no pod created, every pod ends on
/// the template hash squall computes for its role, and the StormService is Ready under squall.
async fn take_over(scenario: &str) -> Option<TakenOver> {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "adopt").await;
    let loaded = e2e::aibrix_live::load(&client, ns.name(), scenario).await?;
    let name = loaded.stormservice.clone();
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets_api: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let before = uids(&pods_api.list(&Default::default()).await.unwrap().items);
    let rolesets_before: BTreeMap<String, String> = rolesets_api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| (r.name_any(), r.uid().unwrap_or_default()))
        .collect();
    let pods = Recorder::start(pods_api.clone()).await;
    let rolesets = Recorder::start(rolesets_api.clone()).await;
    let operator = Operator::start(
        &format!("adopt-{scenario}"),
        &[
            "--controllers=true",
            "--webhook-configs",
            "none",
            "--aibrix-lease=none",
        ],
    );
    // Every pod ends on the template hash squall computes for its role.
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let hashes: BTreeMap<(String, String), String> = rolesets_api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .flat_map(|rs| {
                rs.spec.roles.iter().flatten().map(|role| {
                    let template = role.template.clone().unwrap_or_default();
                    (
                        (rs.name_any(), role.name.clone()),
                        squall::planner::render::template_hash(&template),
                    )
                })
            })
            .collect();
        let all = pods_api.list(&Default::default()).await.unwrap().items;
        let off: Vec<String> = all
            .iter()
            .filter(|p| {
                let key = (
                    p.labels().get("roleset-name").cloned().unwrap_or_default(),
                    role_of(p),
                );
                hashes.get(&key) != p.labels().get("role-template-hash")
            })
            .map(|p| p.name_any())
            .collect();
        if off.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{scenario}: pods not on squall's template hash: {off:?}; operator log:\n{}",
            operator.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Ready under squall's own revision (the status AIBrix left names AIBrix's).
    let aibrix_revisions: BTreeSet<&str> = loaded
        .uids
        .keys()
        .filter_map(|k| k.strip_prefix("ControllerRevision/"))
        .collect();
    wait_for(
        &api,
        &name,
        "Ready under squall's revision",
        TIMEOUT,
        |ss| {
            ss.is_some_and(|s| {
                s.status.as_ref().is_some_and(|st| {
                    st.observed_generation == s.metadata.generation
                        && st.current_revision == st.update_revision
                        && st
                            .update_revision
                            .as_deref()
                            .is_some_and(|r| !aibrix_revisions.contains(r))
                        && st.ready_replicas == s.spec.replicas_or_default()
                })
            })
        },
    )
    .await
    .unwrap();
    // squall's revision takes AIBrix's revision's place; every RoleSet is relabelled.
    let status = api.get(&name).await.unwrap().status.unwrap();
    let update = status.update_revision.unwrap();
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns.name());
    let newest_aibrix = revisions
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.name_any() != update)
        .map(|r| r.revision)
        .max()
        .unwrap();
    assert_eq!(
        revisions.get(&update).await.unwrap().revision,
        newest_aibrix,
        "{scenario}: squall's revision takes AIBrix's place in the history"
    );
    for roleset in live_rolesets(&rolesets_api).await {
        assert_eq!(
            roleset.labels().get("storm-service-revision"),
            Some(&update),
            "{scenario}: RoleSet {} relabelled",
            roleset.name_any()
        );
    }
    // Every pod not in a gang carries its RoleSet's role-revision labels (squall's, once
    // the RoleSet moved to squall's revision).
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let sets: BTreeMap<String, RoleSet> = live_rolesets(&rolesets_api)
            .await
            .into_iter()
            .map(|r| (r.name_any(), r))
            .collect();
        let stale: Vec<String> = pods_api
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| {
                !p.labels()
                    .contains_key("stormservice.orchestration.aibrix.ai/podset-name")
            })
            .filter(|p| {
                let rs = &sets[&p.labels()["roleset-name"]];
                let role = role_of(p);
                ["role-revision", "role-revision-name"].iter().any(|key| {
                    p.labels()
                        .get(&format!("stormservice.orchestration.aibrix.ai/{key}"))
                        != rs.annotations().get(&format!(
                            "stormservice.orchestration.aibrix.ai/{key}.{role}"
                        ))
                })
            })
            .map(|p| p.name_any())
            .collect();
        if stale.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{scenario}: pods without their RoleSet's role-revision labels: {stale:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The CutOver event says what happened, and `squall status` shows it.
    let out = std::process::Command::new(e2e::operator::squall_bin())
        .args(["status", "-n", ns.name(), &name])
        .output()
        .expect("squall status runs");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = shown
        .lines()
        .find(|l| l.starts_with("cut-over: took over from revision"))
        .unwrap_or_else(|| panic!("{scenario}: squall status shows no cut-over:\n{shown}"));
    assert!(
        line.contains("0 replaced") && line.contains("0 to roll"),
        "{scenario}: {line}"
    );
    pods.catch_up(&pods_api).await;
    rolesets.catch_up(&rolesets_api).await;
    for (i, event) in pods.events().iter().enumerate() {
        match event {
            e2e::Observed::Applied(pod) => assert_eq!(
                before.get(&pod.name_any()),
                pod.uid().as_ref(),
                "{scenario}: pod event {i}: pod {} is not one AIBrix left",
                pod.name_any()
            ),
            e2e::Observed::Deleted(pod) => {
                panic!(
                    "{scenario}: pod event {i}: pod {} went away",
                    pod.name_any()
                )
            }
            e2e::Observed::Relisted(_) => {}
        }
    }
    for (i, event) in rolesets.events().iter().enumerate() {
        match event {
            e2e::Observed::Applied(rs) => assert_eq!(
                rolesets_before.get(&rs.name_any()),
                rs.uid().as_ref(),
                "{scenario}: RoleSet event {i}: {} is not one AIBrix left",
                rs.name_any()
            ),
            e2e::Observed::Deleted(rs) => {
                panic!("{scenario}: RoleSet event {i}: {} went away", rs.name_any())
            }
            e2e::Observed::Relisted(_) => {}
        }
    }
    assert_eq!(
        uids(&pods_api.list(&Default::default()).await.unwrap().items),
        before
    );
    Some(TakenOver {
        client,
        ns,
        name,
        operator,
        before,
        pods,
        rolesets,
    })
}

/// A pooled-mode StormService exactly as AIBrix's controller left it (a router, stateful
/// prefill and decode pools) is taken over without restarting a pod; then a change of
/// decode's image rolls decode only, within its budgets at every observed state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn a_pooled_mode_service_aibrix_left_is_adopted_without_restarting_a_pod() {
    let Some(t) = take_over("pooled-mode").await else {
        return;
    };
    let api: Api<StormService> = Api::namespaced(t.client.clone(), t.ns.name());
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), t.ns.name());
    let roll = t.pods.events().len();
    set_role_image(&api, &t.name, 2, "bench/decode:2").await;
    wait_for(
        &api,
        &t.name,
        "Ready after the decode change",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    t.pods.catch_up(&pods).await;
    // AIBrix's role defaults: maxSurge 0, maxUnavailable 1.
    e2e::roles::replay(&t.pods.events(), roll, |i, state| {
        e2e::roles::assert_pod_budgets(
            i,
            state,
            &[("router", 1), ("prefill", 2), ("decode", 3)],
            0,
            1,
        )
    });
    let after = pods.list(&Default::default()).await.unwrap().items;
    let kept = |role: &str| -> usize {
        after
            .iter()
            .filter(|p| role_of(p) == role && t.before.get(&p.name_any()) == p.uid().as_ref())
            .count()
    };
    assert_eq!(
        (kept("router"), kept("prefill"), kept("decode")),
        (1, 2, 0),
        "router and prefill kept their pods, decode rolled"
    );
    drop(t.operator);
}

/// A replica-mode StormService AIBrix left (2 RoleSets of prefill and decode) is taken over
/// without replacing a RoleSet or restarting a pod; then a change of decode's image replaces
/// the RoleSets within the StormService's budgets (maxSurge 1, maxUnavailable 1) at every
/// observed state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn a_replica_mode_service_aibrix_left_is_adopted_without_restarting_a_pod() {
    let Some(t) = take_over("replica-mode").await else {
        return;
    };
    let api: Api<StormService> = Api::namespaced(t.client.clone(), t.ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(t.client.clone(), t.ns.name());
    let old: Vec<String> = live_rolesets(&rolesets)
        .await
        .iter()
        .map(|r| r.name_any())
        .collect();
    let roll = t.rolesets.events().len();
    set_role_image(&api, &t.name, 1, "bench/decode:2").await;
    wait_for(
        &api,
        &t.name,
        "Ready after the decode change",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    t.rolesets.catch_up(&rolesets).await;
    e2e::roles::replay(&t.rolesets.events(), roll, |i, state| {
        e2e::roles::assert_roleset_budgets(i, state, 3, 1)
    });
    let now: Vec<String> = live_rolesets(&rolesets)
        .await
        .iter()
        .map(|r| r.name_any())
        .collect();
    assert_eq!(now.len(), 2);
    assert!(
        now.iter().all(|n| !old.contains(n)),
        "every RoleSet replaced: {old:?} -> {now:?}"
    );
    drop(t.operator);
}

/// A service AIBrix had rolled once (two revisions, prefill's pods still labelled with the
/// first) is taken over without restarting a pod; then a change of prefill's image replaces
/// the RoleSets within the StormService's budgets at every observed state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn a_service_aibrix_had_rolled_is_adopted_without_restarting_a_pod() {
    let Some(t) = take_over("rolled").await else {
        return;
    };
    let api: Api<StormService> = Api::namespaced(t.client.clone(), t.ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(t.client.clone(), t.ns.name());
    let old: Vec<String> = live_rolesets(&rolesets)
        .await
        .iter()
        .map(|r| r.name_any())
        .collect();
    let roll = t.rolesets.events().len();
    set_role_image(&api, &t.name, 0, "bench/prefill:2").await;
    wait_for(
        &api,
        &t.name,
        "Ready after the prefill change",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    t.rolesets.catch_up(&rolesets).await;
    e2e::roles::replay(&t.rolesets.events(), roll, |i, state| {
        e2e::roles::assert_roleset_budgets(i, state, 3, 1)
    });
    let now: Vec<String> = live_rolesets(&rolesets)
        .await
        .iter()
        .map(|r| r.name_any())
        .collect();
    assert!(
        now.len() == 2 && now.iter().all(|n| !old.contains(n)),
        "every RoleSet replaced: {old:?} -> {now:?}"
    );
    drop(t.operator);
}

/// A service with a multi-node role (2 PodSets of 2 pods) is taken over without restarting
/// a pod; then a change of the router's image replaces its one RoleSet (replica mode) within
/// the StormService's budgets at every observed state — at most one RoleSet more — gangs
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn a_podset_mode_service_aibrix_left_is_adopted_without_restarting_a_pod() {
    let Some(t) = take_over("podset-mode").await else {
        return;
    };
    let api: Api<StormService> = Api::namespaced(t.client.clone(), t.ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(t.client.clone(), t.ns.name());
    let podsets: Api<PodSet> = Api::namespaced(t.client.clone(), t.ns.name());
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), t.ns.name());
    let roll = t.rolesets.events().len();
    set_role_image(&api, &t.name, 0, "bench/router:2").await;
    wait_for(
        &api,
        &t.name,
        "Ready after the router change",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    t.rolesets.catch_up(&rolesets).await;
    e2e::roles::replay(&t.rolesets.events(), roll, |i, state| {
        e2e::roles::assert_roleset_budgets(i, state, 2, 0)
    });
    let gangs = podsets.list(&Default::default()).await.unwrap().items;
    let live: Vec<&PodSet> = gangs
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    assert_eq!(live.len(), 2, "two gangs");
    assert!(
        live.iter()
            .all(|p| p.status.as_ref().is_some_and(|s| s.ready_pods == 2)),
        "every gang whole and Ready"
    );
    let after = pods.list(&Default::default()).await.unwrap().items;
    assert!(
        after
            .iter()
            .all(|p| t.before.get(&p.name_any()) != p.uid().as_ref()),
        "the RoleSet was replaced with every pod"
    );
    drop(t.operator);
}

/// AIBrix's pooled-mode service whose decode image was changed while AIBrix was stopped:
/// `squall adopt --dry-run` predicts that decode's pods are replaced and the others adopted,
/// and squall then replaces exactly those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the local control plane (make test)"]
async fn adopt_dry_run_predicts_exactly_the_pods_that_roll() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "adopt-drift").await;
    let Some(loaded) = e2e::aibrix_live::load(&client, ns.name(), "pooled-mode").await else {
        return;
    };
    let name = loaded.stormservice;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    set_role_image(&api, &name, 2, "bench/decode:2").await;
    // A tenant's revision of the drifted template, labelled as this StormService's and
    // newest, but controlled by nothing: the prediction, like the controller, does not count
    // it as history (counted, it would be kept and every RoleSet predicted replaced).
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns.name());
    let newest = revisions
        .list(&ListParams::default().labels(&format!("{LABEL_REVISION_OWNER}={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .max_by_key(|r| r.revision)
        .expect("AIBrix's revisions");
    let copy = ControllerRevision {
        metadata: ObjectMeta {
            name: Some("tenant-revision".into()),
            labels: newest.metadata.labels.clone(),
            ..Default::default()
        },
        data: Some(RawExtension(revision_data(
            &api.get(&name).await.unwrap().spec.template,
        ))),
        revision: newest.revision + 1,
    };
    revisions
        .create(&PostParams::default(), &copy)
        .await
        .unwrap();

    let out = std::process::Command::new(e2e::operator::squall_bin())
        .args(["adopt", "--dry-run", "-n", ns.name(), &name])
        .output()
        .expect("squall adopt runs");
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "squall adopt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !report.contains("tenant-revision"),
        "a revision the StormService does not control is not its history:\n{report}"
    );
    let predicted = |verb: &str| -> BTreeSet<String> {
        report
            .lines()
            .filter_map(|l| l.trim().strip_prefix(verb))
            .map(str::to_string)
            .collect()
    };
    let (adopt, replace) = (predicted("adopt "), predicted("replace "));
    let before = uids(&pods.list(&Default::default()).await.unwrap().items);
    let of_role = |role: &str| -> BTreeSet<String> {
        before
            .keys()
            .filter(|n| n.contains(&format!("-{role}-")))
            .cloned()
            .collect()
    };
    assert_eq!(
        replace,
        of_role("decode"),
        "decode is predicted to roll:\n{report}"
    );
    assert_eq!(
        adopt,
        &of_role("router") | &of_role("prefill"),
        "the rest is predicted to be adopted:\n{report}"
    );

    let recorder = Recorder::start(pods.clone()).await;
    let operator = Operator::start(
        "adopt-drift",
        &[
            "--controllers=true",
            "--webhook-configs",
            "none",
            "--aibrix-lease=none",
        ],
    );
    wait_for(&api, &name, "Ready after the take-over", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    recorder.catch_up(&pods).await;
    let deleted: BTreeSet<String> = recorder
        .events()
        .iter()
        .filter_map(|e| match e {
            e2e::Observed::Deleted(pod) => Some(pod.name_any()),
            _ => None,
        })
        .filter(|n| before.contains_key(n))
        .collect();
    assert_eq!(
        deleted, replace,
        "squall replaced exactly the predicted pods"
    );
    let kept: BTreeSet<String> = pods
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| before.get(&p.name_any()) == p.uid().as_ref())
        .map(|p| p.name_any())
        .collect();
    assert_eq!(kept, adopt, "and kept exactly the predicted ones");
    let out = std::process::Command::new(e2e::operator::squall_bin())
        .args(["status", "-n", ns.name(), &name])
        .output()
        .expect("squall status runs");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.lines().any(|l| l.starts_with("cut-over: ")
            && l.contains(&format!("{} pod(s) or PodSet(s) adopted", adopt.len()))
            && l.contains(&format!("{} to roll", replace.len()))),
        "squall status shows the cut-over:\n{shown}"
    );
    drop(operator);
}
