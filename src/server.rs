//! The HTTPS webhook server: axum on a tokio-rustls accept loop, HTTP/1.1 and h2 by ALPN,
//! the serving certificate resolved per handshake (so a renewed certificate reaches new
//! connections without a restart), and graceful shutdown.
//!
//! The webhook port takes requests from anyone who can reach it (the API server presents no
//! client certificate), so everything it holds is bounded: connections, h2 streams, idle and
//! per-request time, the size of one body, the bytes of all bodies in flight together, and
//! the reviews decided at once. A large review is decided on a review thread of its own,
//! never on the async workers that renew the leader Lease and answer `/healthz`; a small one
//! (nearly all) takes microseconds and is decided where it was read. Past a bound a request waits briefly,
//! then gets a 503 saying which bound it hit.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower_http::timeout::TimeoutLayer;

use crate::admission::hook::Hook;
use crate::api::podgroup::PodGroupCrds;
use crate::api::tenancy::ConfiguredEndpoint;
use crate::metrics::{AdmissionOutcome, Metrics};
use crate::webhook;

/// Largest accepted request body: object and oldObject of a 3 MiB object, with room.
pub const BODY_LIMIT: usize = 8 << 20;
/// Request-body bytes all admission requests together may hold: six bodies of the largest
/// size: with [`CONCURRENT_REVIEWS`] this keeps the webhook's memory in the low hundreds of
/// MiB whatever arrives (the `make bench` hostile rows).
pub const BODY_BYTES_IN_FLIGHT: usize = 6 * BODY_LIMIT;
/// Large reviews (over [`INLINE_REVIEW_LIMIT`]) decided at once, on a thread of their own.
/// Reading one as a view takes a fraction of its size, but an object the view cannot read
/// is parsed whole to name the bad field (about 20 times its size: a JSON tree, then typed
/// objects), and the allocator keeps a thread's peak for reuse, so every further thread
/// would add the largest review's peak to the process for good (measured before views: 297
/// MiB after ten 3.4 MB reviews on two threads, 191 MiB on one).
pub const CONCURRENT_REVIEWS: usize = 1;
/// Largest body decided on the async worker that read it rather than on the review thread:
/// a review this size takes well under a millisecond and at most ~20× its size in memory
/// (an object the views cannot read, parsed whole to name the field), so it neither stalls
/// the Lease or `/healthz` nor needs the review thread's one-at-a-time bound — and skipping
/// the thread's queue and hand-off saves CPU and latency on every ordinary request.
pub const INLINE_REVIEW_LIMIT: usize = 64 << 10;
/// How long a request waits for room under [`BODY_BYTES_IN_FLIGHT`] or
/// [`CONCURRENT_REVIEWS`] before it is answered 503 (the API server's own timeout is 10 s).
pub const ADMISSION_QUEUE_WAIT: Duration = Duration::from_secs(3);
/// Open connections served at once; further ones wait in the kernel's accept queue. The API
/// server keeps a handful per replica.
pub const MAX_CONNECTIONS: usize = 256;
/// Concurrent h2 streams per connection (h2's default of 200 would let one connection hold
/// 200 request bodies).
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 16;
/// A connection that moves no byte for this long is closed (the API server reconnects when it
/// needs to). Longer than [`REQUEST_TIMEOUT`], so it never cuts a request short.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a client gets to send request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a request (body included) may take; the API server's own timeout is 10 s.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Time a client gets to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Read buffer of an HTTP/1.1 connection (headers must fit in it).
const HTTP1_MAX_BUF: usize = 64 << 10;
/// Largest h2 header list.
const HEADER_LIST_LIMIT: u32 = 64 << 10;

/// Closes a connection on which no byte moved for `idle`: the deadline moves on every read or
/// write that transfers data, and a read or write that would wait past it fails instead.
struct IdleTimeout<T> {
    inner: T,
    idle: Duration,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl<T> IdleTimeout<T> {
    fn new(inner: T, idle: Duration) -> Self {
        IdleTimeout {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn touch(&mut self) {
        let next = tokio::time::Instant::now() + self.idle;
        self.deadline.as_mut().reset(next);
    }

    /// Pending, or an error once the deadline has passed (the timer wakes the task).
    fn expired<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "connection idle",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for IdleTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.touch();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => self.expired(cx),
            error => error,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for IdleTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.touch();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => self.expired(cx),
            error => error,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Errors turning PEM into a servable certificate.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The PEM does not hold what is needed.
    #[error("serving certificate: {0}")]
    Pem(String),
    /// rustls rejected the key or chain.
    #[error("serving certificate: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Resolves the serving certificate at every handshake from what was last published.
#[derive(Debug, Default)]
pub struct CertResolver {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl CertResolver {
    /// Serves `cert_pem` / `key_pem` from the next handshake on.
    pub fn publish(&self, cert_pem: &str, key_pem: &str) -> Result<(), TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        if chain.is_empty() {
            return Err(TlsError::Pem("no certificate in tls.crt".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
            .map_err(|e| TlsError::Pem(e.to_string()))?;
        let provider = rustls::crypto::CryptoProvider::get_default()
            .ok_or_else(|| TlsError::Pem("no rustls crypto provider installed".into()))?;
        let certified = CertifiedKey::from_der(chain, key, provider)?;
        *self.current.write().expect("resolver lock") = Some(Arc::new(certified));
        Ok(())
    }

    /// Whether a certificate is being served.
    pub fn is_loaded(&self) -> bool {
        self.current.read().expect("resolver lock").is_some()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().expect("resolver lock").clone()
    }
}

/// A rustls server configuration resolving certificates through `resolver`, offering h2
/// and HTTP/1.1.
pub fn tls_config(resolver: Arc<CertResolver>) -> Arc<rustls::ServerConfig> {
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// What the webhook handlers share: metrics and the in-flight bounds (behind one `Arc`:
/// each request clones it).
struct Admission {
    metrics: Arc<Metrics>,
    /// Permits are bytes of request bodies ([`BODY_BYTES_IN_FLIGHT`]).
    body_bytes: Arc<Semaphore>,
    /// Permits are reviews being decided ([`CONCURRENT_REVIEWS`]).
    reviews: Arc<Semaphore>,
    /// The review threads.
    pool: ReviewPool,
    /// What answers a review.
    decide: Decide,
}

/// Answers one review body for a webhook: [`webhook::review_knowing`], or in the admission
/// benchmark a no-op that goes through the same layers.
pub type Decide =
    Arc<dyn Fn(Hook, &[u8]) -> Result<webhook::Answer, webhook::BadRequest> + Send + Sync>;

/// A fixed pool of threads deciding reviews, off the async runtime that renews the Lease and
/// answers `/healthz`.
#[derive(Clone)]
struct ReviewPool {
    jobs: std::sync::mpsc::SyncSender<Box<dyn FnOnce() + Send>>,
}

impl ReviewPool {
    fn new(threads: usize) -> Self {
        let (jobs, queue) = std::sync::mpsc::sync_channel::<Box<dyn FnOnce() + Send>>(threads);
        let queue = Arc::new(std::sync::Mutex::new(queue));
        for i in 0..threads {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("squall-review-{i}"))
                .spawn(move || {
                    loop {
                        let job = queue.lock().expect("review queue").recv();
                        match job {
                            // A panicking review (never seen; the handler is fuzzed) fails
                            // its own request only; the thread lives on for the next.
                            Ok(job) => {
                                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                            }
                            Err(_) => return, // every sender is gone
                        }
                    }
                })
                .expect("a review thread");
        }
        ReviewPool { jobs }
    }

    /// Runs `job` on a pool thread; None if the pool is gone (or the job panicked).
    async fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            let _ = done.send(job());
        });
        // A review permit is held for every queued job, so the queue always has room.
        self.jobs.try_send(job).ok()?;
        result.await.ok()
    }
}

/// The webhook routes: one POST path per [`Hook`], warning of gang strategies whose
/// PodGroup CRD `crds` (kept current by its lookup) says is missing, and denying analysis
/// metrics that name an endpoint other than `endpoints` (the operator's configuration) or
/// whose query that endpoint cannot scope to the namespace.
pub fn webhook_router(
    metrics: Arc<Metrics>,
    crds: watch::Receiver<PodGroupCrds>,
    endpoints: Arc<[ConfiguredEndpoint]>,
) -> Router {
    admission_router(
        metrics,
        Arc::new(move |hook, body| {
            let cluster = webhook::Cluster {
                crds: *crds.borrow(),
                endpoints: Some(&endpoints),
            };
            webhook::review_knowing(hook, body, cluster)
        }),
    )
}

/// One POST path per [`Hook`], answered by `decide` behind the bounds, timeouts and review
/// thread of the webhooks.
pub fn admission_router(metrics: Arc<Metrics>, decide: Decide) -> Router {
    let state = Arc::new(Admission {
        metrics,
        body_bytes: Arc::new(Semaphore::new(BODY_BYTES_IN_FLIGHT)),
        reviews: Arc::new(Semaphore::new(CONCURRENT_REVIEWS)),
        pool: ReviewPool::new(CONCURRENT_REVIEWS),
        decide,
    });
    let mut router = Router::new();
    for hook in Hook::ALL {
        router = router.route(
            hook.path(),
            post(
                move |State(state): State<Arc<Admission>>, request: Request| async move {
                    admit(hook, &state, request).await
                },
            ),
        );
    }
    router
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .with_state(state)
}

/// Reads the body within the bounds, decides (a large body on the review thread), answers.
async fn admit(hook: Hook, state: &Admission, request: Request) -> Response {
    let started = Instant::now();
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(length) = declared.filter(|l| *l > BODY_LIMIT) {
        state
            .metrics
            .admission(hook, AdmissionOutcome::TooLarge, started.elapsed());
        return too_large(length);
    }
    // Reserve what the body may take before reading it: its declared length, or the most a
    // body may be when none is declared. Reserving at once (never chunk by chunk) means two
    // half-read bodies can never wait on each other.
    let reserve = declared.unwrap_or(BODY_LIMIT);
    let Some(body_permit) = wait_for(
        state
            .body_bytes
            .clone()
            .acquire_many_owned(u32::try_from(reserve).expect("at most BODY_LIMIT")),
    )
    .await
    else {
        state
            .metrics
            .admission(hook, AdmissionOutcome::Overloaded, started.elapsed());
        return overloaded(&format!(
            "{} MiB of admission request bodies are in flight",
            BODY_BYTES_IN_FLIGHT >> 20
        ));
    };
    let body = match axum::body::to_bytes(request.into_body(), reserve).await {
        Ok(body) => body,
        Err(e) => {
            state
                .metrics
                .admission(hook, AdmissionOutcome::BadRequest, started.elapsed());
            tracing::warn!(webhook = hook.name(), error = %e, "admission request body unreadable");
            return (StatusCode::BAD_REQUEST, format!("request body: {e}")).into_response();
        }
    };
    if body.len() <= INLINE_REVIEW_LIMIT {
        // A panicking review (never seen; the handler is fuzzed) fails its own request only.
        let answer =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (state.decide)(hook, &body)));
        drop(body_permit);
        return respond(hook, state, started, answer.ok(), body.len());
    }
    let Some(review_permit) = wait_for(state.reviews.clone().acquire_owned()).await else {
        state
            .metrics
            .admission(hook, AdmissionOutcome::Overloaded, started.elapsed());
        return overloaded("reviews are queued behind one being decided");
    };
    let bytes = body.len();
    let decide = state.decide.clone();
    let decided = state
        .pool
        .run(move || {
            let answer = decide(hook, &body);
            drop((review_permit, body_permit));
            answer
        })
        .await;
    respond(hook, state, started, decided, bytes)
}

/// The HTTP answer to a decided review (`None`: the review failed).
fn respond(
    hook: Hook,
    state: &Admission,
    started: Instant,
    decided: Option<Result<webhook::Answer, webhook::BadRequest>>,
    bytes: usize,
) -> Response {
    let Some(answer) = decided else {
        // A panic in a review (never seen; the handler is fuzzed) fails only this request.
        tracing::error!(webhook = hook.name(), "admission review failed");
        state
            .metrics
            .admission(hook, AdmissionOutcome::Error, started.elapsed());
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let verdict = match &answer {
        Ok(answer) => AdmissionOutcome::from(answer.verdict),
        Err(_) => AdmissionOutcome::BadRequest,
    };
    state.metrics.admission(hook, verdict, started.elapsed());
    match answer {
        Ok(answer) => ([(header::CONTENT_TYPE, "application/json")], answer.json).into_response(),
        Err(e) => {
            tracing::warn!(webhook = hook.name(), error = %e, bytes, "bad admission request");
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
    }
}

/// Waits up to [`ADMISSION_QUEUE_WAIT`] for a permit; `None` when none came.
async fn wait_for<P, E>(acquire: impl Future<Output = Result<P, E>>) -> Option<P> {
    tokio::time::timeout(ADMISSION_QUEUE_WAIT, acquire)
        .await
        .ok()?
        .ok()
}

fn too_large(length: usize) -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request body of {length} bytes is larger than the {} MiB squall accepts",
            BODY_LIMIT >> 20
        ),
    )
        .into_response()
}

fn overloaded(which: &str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, "1")],
        format!("squall's admission webhook is at its limit ({which}); retry"),
    )
        .into_response()
}

/// Serves `router` over TLS on `listener` until `shutdown` turns true, then lets open
/// connections finish (up to 10 s).
pub async fn serve_tls(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(HTTP1_MAX_BUF);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(HEADER_LIST_LIMIT);
    let builder = Arc::new(builder);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let slot = tokio::select! {
            slot = connections.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = shutdown.changed() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _slot = slot;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let io = TokioIo::new(IdleTimeout::new(tls, IDLE_TIMEOUT));
            let conn = builder.serve_connection_with_upgrades(io, service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after 10 s; closing");
    }
}

/// Whether the server at `addr` presents a chain that verifies against `ca_bundle_pem` for
/// `server_name` — checked with a real handshake to the bound socket (never a DNS lookup).
pub async fn handshake_verifies(
    addr: SocketAddr,
    ca_bundle_pem: &str,
    server_name: &str,
) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| format!("caBundle: {e}"))?)
            .map_err(|e| format!("caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("caBundle holds no certificate".into());
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string())
        .map_err(|e| e.to_string())?;
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, stream))
        .await
        .map_err(|_| "handshake timed out".to_string())?
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Issue 14 (7): a connection on which nothing moves is closed; traffic keeps it open.
    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_times_out_and_traffic_keeps_it_open() {
        let (client, server) = tokio::io::duplex(64);
        let mut server = IdleTimeout::new(server, Duration::from_secs(60));
        let mut client = client;
        let mut buf = [0u8; 8];
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(45)).await;
            client.write_all(b"ping").await.unwrap();
            assert_eq!(server.read(&mut buf).await.unwrap(), 4, "still open");
        }
        let started = tokio::time::Instant::now();
        let error = server.read(&mut buf).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }
}
