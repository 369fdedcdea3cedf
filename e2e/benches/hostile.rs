//! Memory under hostile admission traffic (issue 14): a real `squall run` process (webhooks
//! only) gets the bodies that used to take it down, and the bench reports its peak RSS
//! against its own idle peak in the same run, whether it stayed up, and how long `/healthz`
//! took at worst while it happened (probed every 100 ms).
//!
//! 1. a 3 MB review of a StormService with 72,000 minimal roles, to the mutating and the
//!    validating webhook, five times each;
//! 2. 40 concurrent 7.5 MB UPDATE reviews (object and oldObject of 3.7 MB each, built of
//!    many small annotations: the most memory per byte a JSON parse can take), one per
//!    HTTP/1.1 connection;
//! 3. one h2 connection opening 100 streams of such reviews at once.
//!
//! Loopback only. Prints a Markdown table and writes it to `target/bench/hostile.md`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2e::operator::{Operator, http_get};
use e2e::process::{PEAK_RSS_BOUND_MIB, reset_peak, usage};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn review(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-000000000001",
            "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": "StormService"},
            "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": "stormservices"},
            "name": "hostile", "namespace": "default", "operation": operation,
            "userInfo": {"username": "tenant"}, "object": object, "oldObject": old
        }
    }))
    .unwrap()
}

fn stormservice(roles: Vec<Value>, annotations: serde_json::Map<String, Value>) -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "hostile", "namespace": "default", "annotations": annotations},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {"metadata": {"labels": {"app": "x"}}, "spec": {"roles": roles}}
        }
    })
}

/// The 72,000-role review (each role asks for a warning, as in the report).
fn many_roles() -> Vec<u8> {
    let roles = (0..72_000)
        .map(|i| json!({"name": format!("role-{i:05}"), "disruptionTolerance": {}}))
        .collect();
    review("CREATE", stormservice(roles, Default::default()), None)
}

/// A 7.5 MB UPDATE review: object and oldObject of ~3.7 MB of small annotations each.
fn large_update() -> Vec<u8> {
    let annotations: serde_json::Map<String, Value> = (0..280_000)
        .map(|i| (format!("a{i}"), json!("v")))
        .collect();
    let object = stormservice(
        vec![
            json!({"name": "decode", "template": {"spec": {"containers": [{"name": "e", "image": "e:1"}]}}}),
        ],
        annotations,
    );
    review("UPDATE", object.clone(), Some(object))
}

fn tls_config(ca_pem: &str, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

async fn connect(
    addr: SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

/// POSTs `body` over a fresh HTTP/1.1 connection; the status code (0: no answer).
async fn post(addr: SocketAddr, config: Arc<rustls::ClientConfig>, path: &str, body: &[u8]) -> u16 {
    let mut tls = connect(addr, config).await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    // The server may answer (503) and close before the body is sent: read the answer anyway.
    if tls.write_all(head.as_bytes()).await.is_ok() {
        let _ = tls.write_all(body).await;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), tls.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer[..answer.len().min(32)]);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Counts of answers by status.
fn tally(statuses: &[u16]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for s in statuses {
        *counts.entry(*s).or_insert(0) += 1;
    }
    counts
        .iter()
        .map(|(s, n)| match s {
            0 => format!("{n}× none"),
            1 => format!("{n}× stream refused"),
            _ => format!("{n}× {s}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut operator = Operator::start("hostile", &["--webhook-configs", "none"]);
    let pid = operator.pid();
    let ca = std::fs::read_to_string(operator.cert_dir.join("ca.crt")).expect("ca.crt");
    let h1 = tls_config(&ca, b"http/1.1");
    let addr = operator.webhook_addr;
    let mutate = squall::admission::hook::Hook::MutateStormService.path();
    let validate = squall::admission::hook::Hook::ValidateStormService.path();

    // /healthz every 100 ms, from its own thread: the worst latency and any failure.
    let probing = Arc::new(AtomicBool::new(true));
    let worst_micros = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let prober = {
        let (probing, worst, failures) = (probing.clone(), worst_micros.clone(), failures.clone());
        let admin = operator.admin_addr;
        std::thread::spawn(move || {
            while probing.load(Ordering::Relaxed) {
                let started = Instant::now();
                match http_get(admin, "/healthz") {
                    Ok((200, _)) => {}
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
                worst.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // Idle: started, and one ordinary review answered.
    let small = review(
        "CREATE",
        stormservice(vec![json!({"name": "decode"})], Default::default()),
        None,
    );
    assert_eq!(post(addr, h1.clone(), mutate, &small).await, 200);
    let idle = usage(pid).1;
    reset_peak(pid);
    let mut rows = Vec::new();
    let mut record = |phase: &str, statuses: &[u16], operator: &mut Operator| {
        let peak = usage(pid).1;
        reset_peak(pid);
        let alive = operator.wait_exit(Duration::ZERO).is_none();
        let worst = Duration::from_micros(worst_micros.swap(0, Ordering::Relaxed));
        let failed = failures.swap(0, Ordering::Relaxed);
        rows.push(format!(
            "| {phase} | {} | {peak:.0} MiB | {:.2}× | {} | {:.0} ms{} |",
            tally(statuses),
            peak / idle,
            if alive { "yes" } else { "**no**" },
            worst.as_secs_f64() * 1000.0,
            if failed > 0 {
                format!(" ({failed} failed)")
            } else {
                String::new()
            }
        ));
        (peak, alive, worst, failed)
    };

    let body = many_roles();
    let mut statuses = Vec::new();
    for _ in 0..5 {
        for path in [mutate, validate] {
            statuses.push(post(addr, h1.clone(), path, &body).await);
        }
    }
    let roles = record(
        &format!("72,000-role review ({:.1} MB) ×10", body.len() as f64 / 1e6),
        &statuses,
        &mut operator,
    );

    let body = Arc::new(large_update());
    let posts = (0..40).map(|_| {
        let (h1, body) = (h1.clone(), body.clone());
        tokio::spawn(async move { post(addr, h1, validate, &body).await })
    });
    let statuses: Vec<u16> = futures::future::join_all(posts)
        .await
        .into_iter()
        .map(|r| r.unwrap_or(0))
        .collect();
    let concurrent = record(
        &format!("40 concurrent {:.1} MB reviews", body.len() as f64 / 1e6),
        &statuses,
        &mut operator,
    );

    let tls = connect(addr, tls_config(&ca, b"h2")).await;
    let (client, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(connection);
    let mut streams = Vec::new();
    let mut client = client;
    for _ in 0..100 {
        client = client.ready().await.unwrap();
        let request = http::Request::post(format!("https://127.0.0.1{validate}"))
            .header("content-length", body.len().to_string())
            .body(())
            .unwrap();
        let (response, mut send) = client.send_request(request, false).unwrap();
        let body = body.clone();
        streams.push(tokio::spawn(async move {
            // Send as the window allows; the answer may come before the body is done.
            let mut rest = bytes::Bytes::copy_from_slice(&body);
            while !rest.is_empty() {
                send.reserve_capacity(rest.len());
                let Some(Ok(room)) = std::future::poll_fn(|cx| send.poll_capacity(cx)).await else {
                    break;
                };
                let chunk = rest.split_to(room.min(rest.len()));
                if send.send_data(chunk, rest.is_empty()).is_err() {
                    break;
                }
            }
            match tokio::time::timeout(Duration::from_secs(60), response).await {
                Ok(Ok(r)) => r.status().as_u16(),
                // The server refuses (REFUSED_STREAM) streams past its limit.
                Ok(Err(e)) if e.reason() == Some(h2::Reason::REFUSED_STREAM) => 1,
                Ok(Err(_)) => 0,
                Err(_) => 0,
            }
        }));
    }
    let statuses: Vec<u16> = futures::future::join_all(streams)
        .await
        .into_iter()
        .map(|r| r.unwrap_or(0))
        .collect();
    let flood = record(
        "one h2 connection, 100 streams of those",
        &statuses,
        &mut operator,
    );

    probing.store(false, Ordering::Relaxed);
    prober.join().unwrap();
    let table = format!(
        "Hostile admission traffic (`e2e/benches/hostile.rs`, a `squall run` process serving webhooks only; peak RSS is VmHWM over each load, against its idle peak of {idle:.0} MiB after one ordinary review; `/healthz` probed every 100 ms):\n\n\
         | load | answers | peak RSS | vs idle | alive | worst /healthz |\n|---|---|---|---|---|---|\n{}\n",
        rows.join("\n")
    );
    println!("{table}");
    let out = e2e::workspace_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("hostile.md"), &table).unwrap();
    for (phase, (peak, alive, worst, failed)) in
        [("roles", roles), ("concurrent", concurrent), ("h2", flood)]
    {
        assert!(alive, "{phase}: the operator died");
        assert!(
            peak < PEAK_RSS_BOUND_MIB,
            "{phase}: peak RSS {peak:.0} MiB, bound {PEAK_RSS_BOUND_MIB} MiB"
        );
        assert!(
            worst < Duration::from_secs(1) && failed == 0,
            "{phase}: /healthz took {worst:?} at worst, {failed} failed"
        );
    }
    drop(operator);
}
