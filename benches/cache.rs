//! Cache scale: what squall's shared caches hold per pod, measured where it is decided — the
//! real cache ingestion (the decode of each watch event, the lean transform, the store, the
//! owner index, the fan-out to a subscriber: `Driver::feed`, what the watch calls) fed with
//! a generated fleet, without an API server.
//!
//! The fleet is shaped like the controller bench's (`e2e/benches/controller.rs`):
//! StormServices of 2 roles × 2 pods, replicas 2 — 8 pods, 2 RoleSets, 1 ControllerRevision
//! and 1 headless Service each. Every object is one of `benches/fleet/*.json`, taken from a
//! LIST of that run (one StormService settled on the local control plane, `kubectl get -o
//! json --show-managed-fields`), renamed and re-UID'd by text substitution; objects of one
//! kind differ the way a real fleet's do (names, UIDs, owner UIDs, resource versions, pod
//! IPs, service-account volume names).
//!
//! For each fleet size (1,600, 20,000 and 150,000 pods) a fresh process: idle RSS (runtime,
//! empty caches, the fixtures), then the first list of each kind in pages of 500 objects as
//! the watcher asks for them, then one rollout of every StormService the way the controllers
//! make it with `maxSurge` 1, all services at once, replica by replica: a new revision and
//! the StormService's update; a new RoleSet and its pods (created, scheduled, Ready: three
//! events each), then the old RoleSet's pods and the RoleSet marked deleted and deleted — so
//! old and new pods of a replica are in the caches together, as in the real roll. Reported:
//! RSS over idle after the list; the peak RSS over idle (the kernel's high-water mark,
//! transient peaks included) and that per pod; the live heap over idle after the list, at
//! its peak and at the end (a counting allocator: bytes asked for, without the allocator's
//! own overhead; the peak is the roll's surge, old and new replicas held together), whose
//! distance from the RSS is the allocator's overhead; this thread's CPU time per event fed;
//! and the heap each kind's objects hold once listed, per object, which says where the RSS
//! goes.
//!
//! Run with `make bench` (or `cargo bench --bench cache`); writes `target/bench/cache.md`.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use squall::api::bounded_status::CheckedStatus;
use squall::controller::cache::decoded::Decoded;
use squall::controller::cache::scope::Caches;
use squall::controller::cache::{Cache, Cached, Driver};
use squall::metrics::Metrics;

/// Fleet sizes, in pods.
const FLEETS: [usize; 3] = [1_600, 20_000, 150_000];
const PODS_PER_SERVICE: usize = 8;
const REPLICAS: usize = 2;
const ROLES: [&str; 2] = ["prefill", "decode"];
const PODS_PER_ROLE: usize = 2;
/// Objects per list page: the watcher's default (`watcher::Config::page_size`).
const PAGE: usize = 500;

/// squall's allocator (jemalloc, as `src/main.rs` sets it), counting the bytes live on the
/// heap and their high-water mark: where RSS goes, kind by kind.
struct Counting;

static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
static HEAP: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to jemalloc unchanged; only counts are kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = HEAP.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        HEAP_PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: the caller's contract is the allocator's.
        unsafe { JEMALLOC.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HEAP.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { JEMALLOC.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let live = HEAP
            .fetch_add(new_size.wrapping_sub(layout.size()), Ordering::Relaxed)
            .wrapping_add(new_size.wrapping_sub(layout.size()));
        HEAP_PEAK.fetch_max(live, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { JEMALLOC.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes live on the heap.
fn heap() -> usize {
    HEAP.load(Ordering::Relaxed)
}

/// The most bytes live on the heap at once so far.
fn heap_peak() -> usize {
    HEAP_PEAK.load(Ordering::Relaxed)
}

/// The sample's own names and identifiers, replaced in every generated object.
const SAMPLE_SERVICE: &str = "bench-000";
const SAMPLE_ROLESET_SUFFIX: &str = "gmhx7";
const SAMPLE_POD_SUFFIX: &str = "h2c57";
const SAMPLE_ROLE: &str = "decode";
const SAMPLE_REVISION_HASH: &str = "mrjmvn";
const SAMPLE_TEMPLATE_HASH: &str = "6cc4479f85";
const SAMPLE_IMAGE: &str = "engine:1";
const SAMPLE_TOKEN_VOLUME: &str = "8smlf";
const SAMPLE_POD_IP: &str = "10.244.0.8";

/// One sample object, compacted as the API server sends it, with what it is known by.
struct Sample {
    text: String,
    uid: String,
    owner_uid: Option<String>,
    version: String,
}

impl Sample {
    fn of(pretty: &str) -> Self {
        let value: serde_json::Value = serde_json::from_str(pretty).expect("a fixture");
        let meta = &value["metadata"];
        let string = |v: &serde_json::Value| v.as_str().map(str::to_string);
        Self {
            uid: string(&meta["uid"]).expect("a uid"),
            owner_uid: string(&meta["ownerReferences"][0]["uid"]),
            version: string(&meta["resourceVersion"]).expect("a version"),
            text: value.to_string(),
        }
    }
}

/// Which template an object is on: the fleet's first, or the rollout's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rev {
    Old,
    New,
}

impl Rev {
    fn index(self) -> usize {
        match self {
            Rev::Old => 0,
            Rev::New => 1,
        }
    }
}

/// A pod's place in the fleet: service, replica, role, pod, revision.
#[derive(Clone, Copy)]
struct PodAt {
    service: usize,
    replica: usize,
    role: usize,
    pod: usize,
    rev: Rev,
}

impl PodAt {
    fn number(self) -> usize {
        ((roleset_number(self.service, self.replica, self.rev) * ROLES.len() + self.role)
            * PODS_PER_ROLE)
            + self.pod
    }
}

fn roleset_number(service: usize, replica: usize, rev: Rev) -> usize {
    (service * REPLICAS + replica) * 2 + rev.index()
}

/// A UID of its own for object `n` of kind `tag`.
fn uid(tag: u32, n: usize) -> String {
    format!("{tag:08x}-0000-4000-8000-{n:012x}")
}

fn service_name(service: usize) -> String {
    format!("bench-{service:06}")
}

/// The fleet's objects, rendered from the samples.
struct Fleet {
    service: Sample,
    roleset: Sample,
    pod: Sample,
    revision: Sample,
    headless: Sample,
    version: u64,
}

impl Fleet {
    fn new() -> Self {
        Self {
            service: Sample::of(include_str!("fleet/stormservice.json")),
            roleset: Sample::of(include_str!("fleet/roleset.json")),
            pod: Sample::of(include_str!("fleet/pod.json")),
            revision: Sample::of(include_str!("fleet/revision.json")),
            headless: Sample::of(include_str!("fleet/service.json")),
            version: 10_000,
        }
    }

    /// `sample` for `service`, its UID `uid` and its owner's `owner_uid`, on `rev`, at the
    /// next resource version; `more` replaces the rest.
    fn render(
        &mut self,
        sample: fn(&Self) -> &Sample,
        service: usize,
        uid: &str,
        owner_uid: Option<&str>,
        rev: Rev,
        more: &[(&str, &str)],
    ) -> String {
        self.version += 1;
        let sample = sample(self);
        let mut text = sample
            .text
            .replace(
                &format!("\"resourceVersion\":\"{}\"", sample.version),
                &format!("\"resourceVersion\":\"{}\"", self.version),
            )
            .replace(&sample.uid, uid);
        if let (Some(from), Some(to)) = (&sample.owner_uid, owner_uid) {
            text = text.replace(from, to);
        }
        for (from, to) in more {
            text = text.replace(from, to);
        }
        if rev == Rev::New {
            text = text
                .replace(SAMPLE_IMAGE, "engine:2")
                .replace(SAMPLE_REVISION_HASH, "q7wz4x")
                .replace(SAMPLE_TEMPLATE_HASH, "7dd5580a96");
        }
        text.replace(SAMPLE_SERVICE, &service_name(service))
    }

    fn stormservice(&mut self, service: usize, rev: Rev) -> String {
        self.render(|f| &f.service, service, &uid(1, service), None, rev, &[])
    }

    fn headless(&mut self, service: usize) -> String {
        let owner = uid(1, service);
        self.render(
            |f| &f.headless,
            service,
            &uid(5, service),
            Some(&owner),
            Rev::Old,
            &[],
        )
    }

    fn revision(&mut self, service: usize, rev: Rev) -> String {
        let owner = uid(1, service);
        let me = uid(4, service * 2 + rev.index());
        let number = format!("\"revision\":{}", rev.index() + 1);
        self.render(
            |f| &f.revision,
            service,
            &me,
            Some(&owner),
            rev,
            &[("\"revision\":1", &number)],
        )
    }

    fn roleset_suffix(replica: usize, rev: Rev) -> String {
        format!("r{}x{replica}", rev.index())
    }

    fn roleset(&mut self, service: usize, replica: usize, rev: Rev) -> String {
        let owner = uid(1, service);
        let me = uid(2, roleset_number(service, replica, rev));
        let suffix = Self::roleset_suffix(replica, rev);
        self.render(
            |f| &f.roleset,
            service,
            &me,
            Some(&owner),
            rev,
            &[(SAMPLE_ROLESET_SUFFIX, &suffix)],
        )
    }

    fn pod(&mut self, at: PodAt) -> String {
        let owner = uid(2, roleset_number(at.service, at.replica, at.rev));
        let n = at.number();
        let suffix = format!("p{}{}", at.role, at.pod);
        let roleset = Self::roleset_suffix(at.replica, at.rev);
        let volume = format!("{:05x}", n & 0xf_ffff);
        let ip = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
        self.render(
            |f| &f.pod,
            at.service,
            &uid(3, n),
            Some(&owner),
            at.rev,
            &[
                (SAMPLE_ROLESET_SUFFIX, &roleset),
                (SAMPLE_POD_SUFFIX, &suffix),
                (SAMPLE_ROLE, ROLES[at.role]),
                (SAMPLE_TOKEN_VOLUME, &volume),
                (SAMPLE_POD_IP, &ip),
            ],
        )
    }
}

/// Marks `text` deleted (the update that sets `deletionTimestamp`).
fn deleting(text: &str) -> String {
    text.replacen(
        "\"metadata\":{",
        "\"metadata\":{\"deletionTimestamp\":\"2026-12-07T05:00:00Z\",",
        1,
    )
}

/// One watch event's object of a cache of `K`, decoded as the watcher reads it.
type Watched<K> = Decoded<<K as Cached>::Watched>;

/// Decodes one watch event's object, as the watcher reads it.
fn decoded<K: DeserializeOwned + CheckedStatus>(text: &str) -> Decoded<K> {
    serde_json::from_str(text).expect("an object")
}

/// What one fleet's run counts: events fed and the CPU time they took.
#[derive(Default)]
struct Fed {
    events: u64,
    cpu: Duration,
}

impl Fed {
    /// Feeds `event` to `driver` on `runtime`, timing only the feed.
    fn feed<K: Cached>(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        driver: &mut Driver<K>,
        event: Event<Watched<K>>,
    ) {
        let started = thread_cpu();
        runtime.block_on(driver.feed(event));
        self.cpu += thread_cpu() - started;
        self.events += 1;
    }

    /// Decodes `text` and feeds it as `event`, timing both.
    fn object<K: Cached>(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        driver: &mut Driver<K>,
        text: &str,
        event: fn(Watched<K>) -> Event<Watched<K>>,
    ) {
        let started = thread_cpu();
        let object = decoded::<K::Watched>(text);
        self.cpu += thread_cpu() - started;
        self.feed(runtime, driver, event(object));
    }

    /// A first list of `count` objects, `render` making each, in pages as the watcher
    /// reads them: one page's body and its decoded objects at a time.
    fn list<K: Cached>(
        &mut self,
        runtime: &tokio::runtime::Runtime,
        driver: &mut Driver<K>,
        count: usize,
        mut render: impl FnMut(usize) -> String,
    ) {
        runtime.block_on(driver.feed(Event::Init));
        for first in (0..count).step_by(PAGE) {
            let texts: Vec<String> = (first..count.min(first + PAGE)).map(&mut render).collect();
            let body = format!("[{}]", texts.join(","));
            drop(texts);
            let started = thread_cpu();
            let page: Vec<Watched<K>> = serde_json::from_str(&body).expect("a page");
            self.cpu += thread_cpu() - started;
            drop(body);
            for object in page {
                self.feed(runtime, driver, Event::InitApply(object));
            }
        }
        runtime.block_on(driver.feed(Event::InitDone));
    }
}

/// Every change fed, taken by a subscriber the way a controller's queue takes it.
fn subscribe<K: Cached>(cache: &Cache<K>, runtime: &tokio::runtime::Runtime) {
    let mut changes = cache.subscribe();
    runtime.spawn(async move { while changes.next().await.is_some() {} });
}

/// RSS and its high-water mark, in KiB.
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// One fleet of `pods` pods, measured in this process; prints one JSON line.
fn measure(pods: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _entered = runtime.enter();
    let client = kube::Client::try_from(kube::Config::new(
        "http://127.0.0.1:1".parse().expect("a URL"),
    ))
    .expect("a client that is never used");
    let metrics = Arc::new(Metrics::default());
    let (caches, mut drivers) = Caches::unfilled(&client, None, &metrics);
    subscribe(&caches.pods, &runtime);
    subscribe(&caches.rolesets, &runtime);
    subscribe(&caches.stormservices, &runtime);
    subscribe(&caches.revisions, &runtime);
    subscribe(&caches.services, &runtime);
    let mut fleet = Fleet::new();
    let services = pods / PODS_PER_SERVICE;
    let every_pod = |service: usize, replica: usize, rev: Rev| {
        (0..ROLES.len()).flat_map(move |role| {
            (0..PODS_PER_ROLE).map(move |pod| PodAt {
                service,
                replica,
                role,
                pod,
                rev,
            })
        })
    };
    runtime.block_on(tokio::task::yield_now());
    let (idle, _) = rss();
    let idle_heap = heap();
    let mut fed = Fed::default();

    // The first lists, with the heap each kind's objects hold once listed (bytes per object).
    let held = |before: usize, count: usize| heap().saturating_sub(before) / count.max(1);
    let before = heap();
    fed.list(&runtime, &mut drivers.stormservices, services, |s| {
        fleet.stormservice(s, Rev::Old)
    });
    let per_stormservice = held(before, services);
    let before = heap();
    fed.list(&runtime, &mut drivers.services, services, |s| {
        fleet.headless(s)
    });
    let per_service = held(before, services);
    let before = heap();
    fed.list(&runtime, &mut drivers.revisions, services, |s| {
        fleet.revision(s, Rev::Old)
    });
    let per_revision = held(before, services);
    let before = heap();
    fed.list(&runtime, &mut drivers.rolesets, services * REPLICAS, |n| {
        fleet.roleset(n / REPLICAS, n % REPLICAS, Rev::Old)
    });
    let per_roleset = held(before, services * REPLICAS);
    let all_pods: Vec<PodAt> = (0..services)
        .flat_map(|s| (0..REPLICAS).flat_map(move |r| every_pod(s, r, Rev::Old)))
        .collect();
    let before = heap();
    fed.list(&runtime, &mut drivers.pods, all_pods.len(), |n| {
        fleet.pod(all_pods[n])
    });
    let per_pod = held(before, all_pods.len());
    runtime.block_on(tokio::task::yield_now());
    let (listed, _) = rss();
    let listed_heap = heap().saturating_sub(idle_heap);

    // The rollout: all services at once, replica by replica.
    for s in 0..services {
        let revision = fleet.revision(s, Rev::New);
        fed.object(&runtime, &mut drivers.revisions, &revision, Event::Apply);
        let service = fleet.stormservice(s, Rev::New);
        fed.object(&runtime, &mut drivers.stormservices, &service, Event::Apply);
    }
    for replica in 0..REPLICAS {
        for s in 0..services {
            for _ in 0..2 {
                let roleset = fleet.roleset(s, replica, Rev::New);
                fed.object(&runtime, &mut drivers.rolesets, &roleset, Event::Apply);
            }
            for at in every_pod(s, replica, Rev::New) {
                for _ in 0..3 {
                    let pod = fleet.pod(at);
                    fed.object(&runtime, &mut drivers.pods, &pod, Event::Apply);
                }
            }
        }
        for s in 0..services {
            let roleset = deleting(&fleet.roleset(s, replica, Rev::Old));
            fed.object(&runtime, &mut drivers.rolesets, &roleset, Event::Apply);
            for at in every_pod(s, replica, Rev::Old) {
                let pod = deleting(&fleet.pod(at));
                fed.object(&runtime, &mut drivers.pods, &pod, Event::Apply);
                fed.object(&runtime, &mut drivers.pods, &pod, Event::Delete);
            }
            fed.object(&runtime, &mut drivers.rolesets, &roleset, Event::Delete);
        }
    }
    for s in 0..services {
        let service = fleet.stormservice(s, Rev::New);
        fed.object(&runtime, &mut drivers.stormservices, &service, Event::Apply);
    }
    runtime.block_on(tokio::task::yield_now());
    let (settled, peak) = rss();
    assert_eq!(
        caches.pods.count(),
        pods,
        "every old pod replaced by a new one"
    );
    println!(
        "{}",
        serde_json::json!({
            "pods": pods, "services": services, "rolesets": services * REPLICAS,
            "idle_kib": idle, "listed_kib": listed.saturating_sub(idle),
            "settled_kib": settled.saturating_sub(idle), "peak_kib": peak.saturating_sub(idle),
            "listed_heap_kib": listed_heap / 1024, "peak_heap_kib": heap_peak().saturating_sub(idle_heap) / 1024,
            "settled_heap_kib": heap().saturating_sub(idle_heap) / 1024,
            "events": fed.events, "cpu_ns_per_event": fed.cpu.as_nanos() as u64 / fed.events.max(1),
            "heap_bytes_per": {"pod": per_pod, "roleset": per_roleset,
                "stormservice": per_stormservice, "revision": per_revision, "service": per_service},
        })
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--fleet") {
        measure(args[at + 1].parse().expect("--fleet PODS"));
        return;
    }
    let fleets: Vec<usize> = std::env::var("BENCH_CACHE_FLEETS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| FLEETS.to_vec());
    let me = std::env::current_exe().expect("this bench");
    let mut rows = Vec::new();
    for pods in fleets {
        let out = std::process::Command::new(&me)
            .args(["--fleet", &pods.to_string()])
            .output()
            .expect("a fleet's run");
        assert!(
            out.status.success(),
            "the {pods}-pod run failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8_lossy(&out.stdout);
        let row: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON line");
        eprintln!("{row}");
        rows.push(row);
    }
    let mib = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0) / 1024.0;
    let mut table = String::from(
        "Cache scale (`benches/cache.rs`: the caches' real ingestion fed a generated fleet shaped like the controller bench's, objects from a LIST of that run; one process per fleet; RSS over the process's idle RSS; the peak is the kernel's high-water mark during the first list and a rollout of every StormService, old and new pods of a replica cached together; the live heap is what the objects hold, at its peak the roll's surge, and the rest of the RSS the allocator's overhead; allocator jemalloc, as squall's):\n\n\
         | pods | RoleSets / StormServices | RSS after the list | peak RSS | peak per pod | live heap after the list / at its peak / at the end | CPU per event | heap per object listed: pod / RoleSet / StormService / revision / Service |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for row in &rows {
        let pods = row["pods"].as_f64().unwrap_or(1.0);
        table.push_str(&format!(
            "| {} | {} / {} | {:.1} MiB | {:.1} MiB | {:.2} KiB | {:.1} / {:.1} / {:.1} MiB | {:.1} µs | {} / {} / {} / {} / {} bytes |\n",
            row["pods"],
            row["rolesets"],
            row["services"],
            mib(&row["listed_kib"]),
            mib(&row["peak_kib"]),
            row["peak_kib"].as_f64().unwrap_or(0.0) / pods,
            mib(&row["listed_heap_kib"]),
            mib(&row["peak_heap_kib"]),
            mib(&row["settled_heap_kib"]),
            row["cpu_ns_per_event"].as_f64().unwrap_or(0.0) / 1000.0,
            row["heap_bytes_per"]["pod"],
            row["heap_bytes_per"]["roleset"],
            row["heap_bytes_per"]["stormservice"],
            row["heap_bytes_per"]["revision"],
            row["heap_bytes_per"]["service"],
        ));
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out).expect("target/bench");
    std::fs::write(out.join("cache.md"), &table).expect("cache.md");
    println!("{table}");
}
