//! The HTTPS webhook server in-process, over real TLS on loopback: HTTP/1.1 and h2 by ALPN,
//! clear HTTP errors for bad input (never a panic), the body limit, the bounds on bodies in
//! flight and h2 streams, and a renewed certificate reaching new connections without a
//! restart.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use squall::admission::hook::Hook;
use squall::api::podgroup::PodGroupCrds;
use squall::metrics::Metrics;
use squall::server::{
    BODY_BYTES_IN_FLIGHT, BODY_LIMIT, CertResolver, H2_MAX_CONCURRENT_STREAMS, INLINE_REVIEW_LIMIT,
    admission_router, serve_tls, tls_config, webhook_router,
};
use squall::webhook::{Answer, BadRequest, Verdict};
use time::OffsetDateTime;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::client::TlsStream;

struct Server {
    addr: SocketAddr,
    ca_crt: String,
    ca_key: String,
    resolver: Arc<CertResolver>,
    metrics: Arc<Metrics>,
    _stop: tokio::sync::watch::Sender<bool>,
}

async fn start() -> Server {
    start_router(|metrics| {
        webhook_router(
            metrics,
            watch::channel(PodGroupCrds::Unknown).1,
            Arc::from([squall::api::tenancy::ConfiguredEndpoint {
                name: "default".to_string(),
                tenancy: squall::api::tenancy::Tenancy::default(),
            }]),
        )
    })
    .await
}

/// A server answering with the router `make` builds around the server's metrics.
async fn start_router(make: impl FnOnce(Arc<Metrics>) -> axum::Router) -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let now = OffsetDateTime::now_utc();
    let (ca_crt, ca_key) = webhook_certs::pki::new_ca(now, Duration::from_secs(3600)).unwrap();
    let resolver = Arc::new(CertResolver::default());
    let server = Server {
        addr: "127.0.0.1:0".parse().unwrap(),
        ca_crt,
        ca_key,
        resolver: resolver.clone(),
        metrics: Arc::new(Metrics::default()),
        _stop: tokio::sync::watch::channel(false).0,
    };
    server.renew();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_tls(
        listener,
        tls_config(resolver),
        make(server.metrics.clone()),
        stop_rx,
    ));
    Server {
        addr,
        _stop: stop,
        ..server
    }
}

impl Server {
    /// Issues and publishes a new serving certificate; returns its serial.
    fn renew(&self) -> String {
        let (crt, key) = webhook_certs::pki::issue_serving(
            &self.ca_crt,
            &self.ca_key,
            &["127.0.0.1".into()],
            OffsetDateTime::now_utc(),
            Duration::from_secs(3600),
        )
        .unwrap();
        self.resolver.publish(&crt, &key).unwrap();
        serial_of(
            CertificateDer::from_pem_slice(crt.as_bytes())
                .unwrap()
                .as_ref(),
        )
    }

    async fn connect(&self, alpn: &[u8]) -> TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.ca_crt.as_bytes()).unwrap())
            .unwrap();
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        let tcp = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .expect("the server's chain verifies against the CA")
    }

    /// POSTs `body` to `path` over HTTP/1.1: `(status, body)`.
    async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let tls = self.connect(b"http/1.1").await;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(conn);
        let response = sender
            .send_request(
                hyper::Request::post(path)
                    .body(Full::new(Bytes::from(body)))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status().as_u16();
        (
            status,
            response
                .into_body()
                .collect()
                .await
                .unwrap()
                .to_bytes()
                .to_vec(),
        )
    }
}

fn serial_of(der: &[u8]) -> String {
    x509_parser::parse_x509_certificate(der)
        .unwrap()
        .1
        .raw_serial_as_string()
}

fn review() -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "11111111-2222-3333-4444-555555555555",
            "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": "RoleSet"},
            "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": "rolesets"},
            "name": "rs", "namespace": "default", "operation": "CREATE", "userInfo": {"username": "u"},
            "object": {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                       "metadata": {"name": "rs"}, "spec": {"roles": [{"name": "a"}]}},
            "dryRun": false
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn answers_admission_reviews_over_http1() {
    let server = start().await;
    let (status, body) = server.post(Hook::MutateRoleSet.path(), review()).await;
    assert_eq!(status, 200);
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["kind"], "AdmissionReview");
    assert_eq!(
        answer["response"]["uid"],
        "11111111-2222-3333-4444-555555555555"
    );
    assert_eq!(answer["response"]["allowed"], true);
    assert_eq!(answer["response"]["patchType"], "JSONPatch");
    assert!(server.metrics.render().contains(r#"verdict="patched"} 1"#));
}

#[tokio::test]
async fn answers_over_h2_negotiated_by_alpn() {
    let server = start().await;
    let tls = server.connect(b"h2").await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let uri = format!("https://127.0.0.1{}", Hook::ValidateRoleSet.path());
    let response = sender
        .send_request(
            hyper::Request::post(uri)
                .body(Full::new(Bytes::from(review())))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn bad_input_gets_a_clear_http_error() {
    let server = start().await;
    let path = Hook::ValidateStormService.path();
    for (body, what) in [
        (b"{not json".to_vec(), "malformed JSON"),
        (
            br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec(),
            "not an AdmissionReview",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            "no request",
        ),
        (vec![0xff, 0xfe, 0xfd], "invalid UTF-8"),
        (vec![b'['; 100_000], "deeply nested"),
    ] {
        let (status, message) = server.post(path, body).await;
        assert_eq!(status, 400, "{what}");
        let message = String::from_utf8_lossy(&message);
        assert!(message.contains("AdmissionReview"), "{what}: {message}");
    }
    let (status, _) = server.post(path, vec![b' '; BODY_LIMIT + 1]).await;
    assert_eq!(status, 413, "bodies above 8 MiB are refused");
    let (status, _) = server.post("/not-a-webhook", review()).await;
    assert_eq!(status, 404);
    // The server is still serving after all of it.
    assert_eq!(
        server.post(Hook::MutateRoleSet.path(), review()).await.0,
        200
    );
}

#[tokio::test]
async fn a_renewed_certificate_reaches_new_connections_without_a_restart() {
    let server = start().await;
    let served = |tls: &TlsStream<tokio::net::TcpStream>| {
        serial_of(tls.get_ref().1.peer_certificates().unwrap()[0].as_ref())
    };
    let before = served(&server.connect(b"http/1.1").await);
    let old_connection = server.connect(b"http/1.1").await;
    let renewed = server.renew();
    assert_ne!(before, renewed);
    assert_eq!(served(&server.connect(b"http/1.1").await), renewed);
    assert_eq!(
        served(&old_connection),
        before,
        "open connections keep their certificate"
    );
}

/// Well-formed reviews with odd content: each gets an answer (never a 5xx, never a panic),
/// allowed with a warning when squall cannot judge, denied naming the field when it can.
#[tokio::test]
async fn odd_but_well_formed_reviews_get_answers_naming_what_is_wrong() {
    let server = start().await;
    let with_request = |request: Value| {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request
        }))
        .unwrap()
    };
    let base = |kind: &str, operation: &str, object: Value| {
        json!({
            "uid": "11111111-2222-3333-4444-555555555555",
            "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": kind},
            "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": "stormservices"},
            "name": "x", "namespace": "default", "operation": operation,
            "userInfo": {"username": "u"}, "object": object, "dryRun": false
        })
    };
    let stormservice = |spec: Value| {
        json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
               "metadata": {"name": "x"}, "spec": spec})
    };
    let validate = Hook::ValidateStormService.path();
    let mutate = Hook::MutateStormService.path();
    // (path, body, HTTP status, allowed, text the answer must contain)
    type Case<'a> = (&'a str, Vec<u8>, u16, Option<bool>, &'a str);
    let table: Vec<Case> = vec![
        (
            validate,
            serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1beta1",
                "kind": "AdmissionReview", "request": base("StormService", "CREATE", Value::Null)}))
            .unwrap(),
            400,
            None,
            "expected admission.k8s.io/v1 AdmissionReview",
        ),
        (
            validate,
            with_request(json!({"kind": {"group": "g", "version": "v", "kind": "K"}})),
            400,
            None,
            "AdmissionReview",
        ),
        (
            validate,
            with_request(base("StormService", "CREATE", Value::Null)),
            200,
            Some(true),
            "the request has no object",
        ),
        (
            validate,
            with_request(base("Deployment", "CREATE", stormservice(json!({})))),
            200,
            Some(true),
            "does not handle",
        ),
        (
            validate,
            with_request(base("StormService", "DELETE", Value::Null)),
            200,
            Some(true),
            "\"allowed\":true",
        ),
        (
            validate,
            with_request(base(
                "StormService",
                "CREATE",
                stormservice(json!("not an object")),
            )),
            200,
            Some(false),
            "spec",
        ),
        (
            mutate,
            with_request(base(
                "StormService",
                "CREATE",
                stormservice(json!("not an object")),
            )),
            200,
            Some(true),
            "\"allowed\":true",
        ),
        (
            validate,
            with_request(base(
                "StormService",
                "CREATE",
                stormservice(json!({"replicas": "three"})),
            )),
            200,
            Some(false),
            "spec.replicas",
        ),
    ];
    for (path, body, status, allowed, text) in table {
        let (got, answer) = server.post(path, body).await;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        assert_eq!(got, status, "{path}: {answer}");
        if let Some(allowed) = allowed {
            let review: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(review["response"]["allowed"], allowed, "{answer}");
        }
        assert!(
            answer.contains(text),
            "{path}: the answer names {text:?}: {answer}"
        );
    }
}

/// A client that announces a body of the largest size and sends only its first bytes: the
/// server has reserved room for all of it.
async fn stalled_upload(server: &Server, path: &str) -> TlsStream<tokio::net::TcpStream> {
    let mut tls = server.connect(b"http/1.1").await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {BODY_LIMIT}\r\n\r\n{{"
    );
    tls.write_all(head.as_bytes()).await.unwrap();
    tls.flush().await.unwrap();
    tls
}

/// Issue 14 (3): bodies in flight are bounded for the whole server, not per request. Once
/// the stalled uploads hold every byte of the bound, a further review waits, then gets a 503
/// naming the bound — and the server answers again as soon as they go away.
#[tokio::test]
async fn request_bodies_in_flight_are_bounded_for_the_whole_server() {
    let server = start().await;
    let path = Hook::ValidateRoleSet.path();
    let holders = BODY_BYTES_IN_FLIGHT / BODY_LIMIT;
    let mut stalled = Vec::new();
    for _ in 0..holders {
        stalled.push(stalled_upload(&server, path).await);
    }
    // The uploads are accepted in order; wait until the server has routed all of them.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let (status, answer) = loop {
        let (status, answer) = server.post(path, review()).await;
        if status == 503 || tokio::time::Instant::now() > deadline {
            break (status, answer);
        }
    };
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status, 503, "{answer}");
    assert!(
        answer.contains("MiB of admission request bodies are in flight"),
        "{answer}"
    );
    assert!(server.metrics.render().contains(r#"verdict="overloaded"}"#));
    drop(stalled);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = server.post(path, review()).await;
        if status == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still {status} after the stalled uploads closed"
        );
    }
}

/// Issue 14 (3): one h2 connection may not open more than a few streams (h2's default of 200
/// let one connection hold 200 request bodies).
#[tokio::test]
async fn an_h2_connection_gets_few_concurrent_streams() {
    let server = start().await;
    let tls = server.connect(b"h2").await;
    let (client, connection) = h2::client::handshake(tls).await.unwrap();
    tokio::spawn(connection);
    let client = client.ready().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while client.current_max_send_streams() != H2_MAX_CONCURRENT_STREAMS as usize {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the server's SETTINGS never arrived: {}",
            client.current_max_send_streams()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The h2 server refuses (REFUSED_STREAM) any stream past the limit it announced, so the
    // announcement is the bound a client gets.
}

/// Answers with the name of the thread that decided.
fn decided_on(_hook: Hook, _body: &[u8]) -> Result<Answer, BadRequest> {
    Ok(Answer {
        json: std::thread::current()
            .name()
            .unwrap_or_default()
            .as_bytes()
            .to_vec(),
        verdict: Verdict::Allowed,
    })
}

/// A small review (nearly all) is decided on the async worker that read it; a large one on
/// the review thread, one at a time, away from the workers that answer `/healthz`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_reviews_are_decided_where_read_and_large_ones_on_the_review_thread() {
    let server = start_router(|metrics| admission_router(metrics, Arc::new(decided_on))).await;
    let path = Hook::ValidateStormService.path();
    for size in [10, INLINE_REVIEW_LIMIT] {
        let (status, thread) = server.post(path, vec![b' '; size]).await;
        assert_eq!(status, 200);
        let thread = String::from_utf8(thread).unwrap();
        assert!(
            !thread.starts_with("squall-review"),
            "{size} bytes decided on {thread}"
        );
    }
    let (status, thread) = server.post(path, vec![b' '; INLINE_REVIEW_LIMIT + 1]).await;
    assert_eq!(status, 200);
    assert_eq!(String::from_utf8(thread).unwrap(), "squall-review-0");
}
