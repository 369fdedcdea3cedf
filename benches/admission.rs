//! Admission benchmark: requests/s and p50/p99 latency of the mutate and validate webhooks
//! over TLS with keep-alive, at concurrency 1, 16 and 64, side by side with a no-op handler
//! on the same stack (TLS, hyper, axum, body read) in the same run. The ratio to the no-op
//! handler is the cost of squall's own admission logic.
//!
//! Run with `make bench` (`cargo bench --bench admission`); each cell runs for
//! `BENCH_SECONDS` (default 3) seconds. Loopback only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes as AxumBytes;
use axum::routing::post;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use rustls::pki_types::pem::PemObject;
use serde_json::json;
use squall::metrics::Metrics;
use squall::server::{CertResolver, serve_tls, tls_config, webhook_router};
use squall::webhook::Hook;
use time::OffsetDateTime;
use tokio::net::TcpListener;

const NOOP_PATH: &str = "/noop";

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

struct Cell {
    requests: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
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
    latencies.sort();
    let pick = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q).round() as usize];
    Cell {
        requests: latencies.len(),
        elapsed,
        p50: pick(0.50),
        p99: pick(0.99),
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

    // The webhook routes and a no-op route behind the same TLS, hyper and axum stack.
    let router = webhook_router(Arc::new(Metrics::default())).route(
        NOOP_PATH,
        post(|_body: AxumBytes| async {
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(serve_tls(listener, tls_config(resolver), router, stop_rx));

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
        "{:<10} {:>5} {:>10} {:>10} {:>10} {:>16}",
        "handler", "conc", "req/s", "p50", "p99", "req/s vs no-op"
    );
    let mut table = String::from(
        "| concurrency | no-op req/s | mutate req/s (ratio, p50 / p99) | validate req/s (ratio, p50 / p99) |\n|---|---|---|---|\n",
    );
    for concurrency in [1, 16, 64] {
        let duration = Duration::from_secs(seconds);
        let noop = run_cell(addr, client_tls.clone(), NOOP_PATH, concurrency, duration).await;
        let noop_rate = noop.requests as f64 / noop.elapsed.as_secs_f64();
        let print = |label: &str, cell: &Cell| {
            let rate = cell.requests as f64 / cell.elapsed.as_secs_f64();
            println!(
                "{label:<10} {concurrency:>5} {rate:>10.0} {:>10.2?} {:>10.2?} {:>15.2}x",
                cell.p50,
                cell.p99,
                rate / noop_rate
            );
            format!(
                "{rate:.0} ({:.2}×, {:.2?} / {:.2?})",
                rate / noop_rate,
                cell.p50,
                cell.p99
            )
        };
        print("no-op", &noop);
        let mut cells = Vec::new();
        for (label, hook) in [
            ("mutate", Hook::MutateStormService),
            ("validate", Hook::ValidateStormService),
        ] {
            let cell = run_cell(addr, client_tls.clone(), hook.path(), concurrency, duration).await;
            cells.push(print(label, &cell));
        }
        table.push_str(&format!(
            "| {concurrency} | {noop_rate:.0} | {} | {} |\n",
            cells[0], cells[1]
        ));
    }
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out).expect("target/bench");
    std::fs::write(out.join("admission.md"), table).expect("write target/bench/admission.md");
}
