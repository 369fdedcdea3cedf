//! Admission benchmark: the mutate and validate webhooks over TLS with keep-alive, at
//! concurrency 1, 16 and 64, side by side with a no-op handler in the same run. The no-op
//! goes through the same layers as the webhooks (TLS, hyper, axum, timeouts, the body bounds,
//! where a review is decided) and answers a fixed AdmissionReview without reading the body,
//! so the ratios are the cost of squall's own admission logic.
//!
//! Each cell runs five times, the handlers in turn, and reports its median round (at
//! concurrency 1 single rounds move by ±0.04 in ratio on a 2-core machine). Per cell:
//! CPU time per request (this process: client and server, user and kernel — stable
//! on a noisy 2-core machine, where req/s swings between runs), requests/s and p50 / p99
//! latency. Then the heap allocations one review makes (a counting allocator around the
//! system one), for each webhook.
//!
//! The cells run twice: on every CPU the process may use, then with all its threads on one
//! CPU. With two CPUs, client and server wake each other across CPUs for every request; on
//! a virtual machine each such wake-up of an idle CPU goes through the hypervisor, and at
//! concurrency 1 that is most of a request's CPU (measured on a 2-vCPU VM: a no-op request
//! took 44 µs on two CPUs and 11 µs on one). It also grows with the handler's latency, so it
//! multiplies what a webhook adds. On one CPU the figure is the work a request takes.
//!
//! Run with `make bench` (`cargo bench --bench admission`); each cell runs for
//! `BENCH_SECONDS` (default 3) seconds, and `BENCH_REVIEWS` (default 1,000) reviews are
//! counted (raise it to profile the handler with `perf record`). Loopback only.

use std::alloc::System;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustix::process::Pid;
use rustix::thread::CpuSet;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use squall::admission::hook::Hook;
use squall::api::podgroup::PodGroupCrds;
use squall::metrics::Metrics;
use squall::server::{CertResolver, admission_router, serve_tls, tls_config, webhook_router};
use squall::webhook::{Answer, BadRequest, Verdict, review};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use time::OffsetDateTime;
use tokio::net::TcpListener;

#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Reviews per allocation count and time (`BENCH_REVIEWS`, for profiling the handler).
fn counted_reviews() -> usize {
    std::env::var("BENCH_REVIEWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

/// The no-op handler: a fixed answer, the body unread.
fn noop(_hook: Hook, _body: &[u8]) -> Result<Answer, BadRequest> {
    Ok(Answer {
        json: br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000001","allowed":true}}"#.to_vec(),
        verdict: Verdict::Allowed,
    })
}

/// CPU seconds this process has used (user + kernel), from /proc (clock ticks of 10 ms:
/// a cell uses hundreds of them).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    ticks / 100.0
}

fn review_body() -> Bytes {
    let stormservice = json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "bench", "namespace": "default"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "bench"}},
            "updateStrategy": {"canary": {"steps": [
                {"setWeight": 25}, {"pause": {"duration": "60s"}}, {"setWeight": 50}, {"pause": {}}
            ]}},
            "template": {"metadata": {"labels": {"app": "bench"}}, "spec": {"roles": [
                {"name": "router", "template": {"spec": {"containers": [{"name": "r", "image": "router:1"}]}}},
                {"name": "prefill", "replicas": 2, "template": {"spec": {"containers": [
                    {"name": "e", "image": "vllm/vllm-openai:v0.9.0", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                ]}}},
                {"name": "decode", "replicas": 2, "template": {"spec": {"containers": [
                    {"name": "e", "image": "vllm/vllm-openai:v0.9.0", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                ]}}}
            ]}}
        }
    });
    Bytes::from(
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "00000000-0000-0000-0000-000000000001",
                "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": "StormService"},
                "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": "stormservices"},
                "name": "bench", "namespace": "default", "operation": "CREATE",
                "userInfo": {"username": "bench"}, "object": stormservice, "dryRun": false
            }
        }))
        .expect("serializes"),
    )
}

/// Rounds of each cell; the median one is reported.
const ROUNDS: usize = 5;

/// The round with the median CPU per request.
fn median(mut cells: Vec<Cell>) -> Cell {
    cells.sort_by_key(Cell::cpu_per_request);
    cells.swap_remove(cells.len() / 2)
}

struct Cell {
    requests: usize,
    elapsed: Duration,
    cpu: Duration,
    p50: Duration,
    p99: Duration,
}

impl Cell {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn cpu_per_request(&self) -> Duration {
        self.cpu / u32::try_from(self.requests).expect("requests fit")
    }
}

/// Keeps `concurrency` keep-alive connections busy on `path` for `duration`.
async fn run_cell(
    addr: SocketAddr,
    client_tls: Arc<rustls::ClientConfig>,
    path: &'static str,
    concurrency: usize,
    duration: Duration,
) -> Cell {
    let body = review_body();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let client_tls = client_tls.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let name = ServerName::try_from("127.0.0.1").unwrap();
            let tls = tokio_rustls::TlsConnector::from(client_tls)
                .connect(name, tcp)
                .await
                .expect("handshake");
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .expect("http handshake");
            tokio::spawn(conn);
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let request = hyper::Request::post(path)
                    .header("content-type", "application/json")
                    .body(Full::new(body.clone()))
                    .unwrap();
                let t = Instant::now();
                let response = sender.send_request(request).await.expect("request");
                assert!(response.status().is_success(), "{}", response.status());
                response.into_body().collect().await.expect("body");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("client task"));
    }
    let elapsed = started.elapsed();
    let cpu = Duration::from_secs_f64(cpu_seconds() - cpu_before);
    latencies.sort();
    let pick = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Cell {
        requests: latencies.len(),
        elapsed,
        cpu,
        p50: pick(0.50),
        p99: pick(0.99),
    }
}

/// Where the cells send their requests.
struct Targets {
    noop: SocketAddr,
    webhooks: SocketAddr,
    client_tls: Arc<rustls::ClientConfig>,
    duration: Duration,
}

impl Targets {
    /// Runs every cell, printing a line for each; the Markdown table of them.
    async fn table(&self) -> String {
        let mut table = String::from(
            "| concurrency | no-op: CPU / req, req/s, p99 | mutate: CPU / req (ratio), req/s (ratio), p50 / p99 | validate: CPU / req (ratio), req/s (ratio), p50 / p99 |\n|---|---|---|---|\n",
        );
        for concurrency in [1, 16, 64] {
            // ROUNDS rounds of no-op, mutate, validate in turn; each handler's median round (by
            // CPU per request) is reported, so a noisy moment skews one round, not the ratio.
            let targets = [
                (self.noop, Hook::MutateStormService.path()),
                (self.webhooks, Hook::MutateStormService.path()),
                (self.webhooks, Hook::ValidateStormService.path()),
            ];
            let mut rounds: [Vec<Cell>; 3] = Default::default();
            for _ in 0..ROUNDS {
                for (i, (addr, path)) in targets.iter().enumerate() {
                    let tls = self.client_tls.clone();
                    rounds[i].push(run_cell(*addr, tls, path, concurrency, self.duration).await);
                }
            }
            let [noop, mutate, validate] = rounds.map(median);
            let print = |label: &str, cell: &Cell| {
                // The ratios are the no-op's cost over the webhook's: 1.00× costs nothing more.
                let cpu_ratio =
                    noop.cpu_per_request().as_secs_f64() / cell.cpu_per_request().as_secs_f64();
                let rate_ratio = cell.rate() / noop.rate();
                println!(
                    "{label:<10} {concurrency:>5} {:>12.2?} {:>10.0} {:>10.2?} {:>10.2?} {cpu_ratio:>5.2}x CPU, {rate_ratio:.2}x req/s",
                    cell.cpu_per_request(),
                    cell.rate(),
                    cell.p50,
                    cell.p99,
                );
                format!(
                    "{:.1?} ({cpu_ratio:.2}×), {:.0} ({rate_ratio:.2}×), {:.2?} / {:.2?}",
                    cell.cpu_per_request(),
                    cell.rate(),
                    cell.p50,
                    cell.p99
                )
            };
            print("no-op", &noop);
            let cells = [print("mutate", &mutate), print("validate", &validate)];
            table.push_str(&format!(
                "| {concurrency} | {:.1?}, {:.0}, {:.2?} | {} | {} |\n",
                noop.cpu_per_request(),
                noop.rate(),
                noop.p99,
                cells[0],
                cells[1]
            ));
        }
        table
    }
}

/// Sets the CPUs every thread of this process may run on (a thread that has ended since it
/// was listed is passed over).
fn set_affinity(cpus: &CpuSet) {
    for task in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let tid = task
            .expect("a thread")
            .file_name()
            .to_str()
            .and_then(|t| t.parse().ok())
            .and_then(Pid::from_raw)
            .expect("a thread id");
        match rustix::thread::sched_setaffinity(Some(tid), cpus) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => panic!("setting thread {tid:?}'s CPUs: {e}"),
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let seconds: u64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let now = OffsetDateTime::now_utc();
    let (ca_crt, ca_key) = webhook_certs::pki::new_ca(now, Duration::from_secs(3600)).unwrap();
    let (tls_crt, tls_key) = webhook_certs::pki::issue_serving(
        &ca_crt,
        &ca_key,
        &["127.0.0.1".into()],
        now,
        Duration::from_secs(3600),
    )
    .unwrap();
    let resolver = Arc::new(CertResolver::default());
    resolver.publish(&tls_crt, &tls_key).unwrap();

    // The webhooks, and the no-op behind the same layers, on servers of their own.
    let mut addrs = Vec::new();
    let mut stops = Vec::new();
    for router in [
        // A cluster without gang schedulers, as most are: validation looks for strategies.
        webhook_router(
            Arc::new(Metrics::default()),
            tokio::sync::watch::channel(PodGroupCrds::known([])).1,
            Arc::from([squall::api::tenancy::ConfiguredEndpoint {
                name: "default".to_string(),
                tenancy: squall::api::tenancy::Tenancy::default(),
            }]),
        ),
        admission_router(Arc::new(Metrics::default()), Arc::new(noop)),
    ] {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        addrs.push(listener.local_addr().unwrap());
        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        stops.push(stop);
        tokio::spawn(serve_tls(
            listener,
            tls_config(resolver.clone()),
            router,
            stop_rx,
        ));
    }
    let (webhooks, noop_addr) = (addrs[0], addrs[1]);

    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_crt.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let client_tls = Arc::new(
        rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    );

    println!(
        "admission benchmark: TLS + HTTP/1.1 keep-alive on loopback, {seconds} s per cell, a 3-role StormService review"
    );
    println!(
        "{:<10} {:>5} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "handler", "conc", "CPU/req", "req/s", "p50", "p99", "vs no-op"
    );
    let targets = Targets {
        noop: noop_addr,
        webhooks,
        client_tls,
        duration: Duration::from_secs(seconds),
    };
    let mut table = String::from("On every CPU (two here):\n\n");
    table.push_str(&targets.table().await);
    // Every thread of this process (tokio's workers, the review pool) on the first CPU it may
    // use; threads started later inherit it.
    let cpus = rustix::thread::sched_getaffinity(None).expect("this thread's CPUs");
    let first = (0..CpuSet::MAX_CPU)
        .find(|&cpu| cpus.is_set(cpu))
        .expect("a CPU");
    let mut one = CpuSet::new();
    one.set(first);
    set_affinity(&one);
    println!("all threads on CPU {first}:");
    table.push_str("\nOn one CPU (client and server share it):\n\n");
    table.push_str(&targets.table().await);
    set_affinity(&cpus);
    drop(stops);

    // Heap allocations per review, on this thread (the server's threads are idle now).
    let body = review_body();
    let mut counts = Vec::new();
    let reviews = counted_reviews();
    for (label, hook) in [
        ("mutate", Hook::MutateStormService),
        ("validate", Hook::ValidateStormService),
    ] {
        let region = Region::new(ALLOCATOR);
        let started = Instant::now();
        for _ in 0..reviews {
            std::hint::black_box(review(hook, std::hint::black_box(&body)).expect("answered"));
        }
        let took = started.elapsed() / u32::try_from(reviews).expect("fits");
        let stats = region.change();
        let per = |n: usize| n as f64 / reviews as f64;
        println!(
            "{label}: {:.1} allocations, {:.0} bytes allocated, {took:.2?} per review (in process, one thread)",
            per(stats.allocations + stats.reallocations),
            per(stats.bytes_allocated)
        );
        counts.push(format!(
            "{label} {:.1} ({:.0} bytes, {took:.1?})",
            per(stats.allocations + stats.reallocations),
            per(stats.bytes_allocated)
        ));
    }
    table.push_str(&format!(
        "\nPer review, in process on one thread (no TLS or HTTP): heap allocations (reallocations included), bytes allocated and time: {}.\n",
        counts.join(", ")
    ));
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out).expect("target/bench");
    std::fs::write(out.join("admission.md"), table).expect("write target/bench/admission.md");
}
