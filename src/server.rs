//! The HTTPS webhook server: axum on a tokio-rustls accept loop, HTTP/1.1 and h2 by ALPN,
//! the serving certificate resolved per handshake (so a renewed certificate reaches new
//! connections without a restart), header and request timeouts, an 8 MiB body limit and
//! graceful shutdown.

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tower_http::timeout::TimeoutLayer;

use crate::metrics::Metrics;
use crate::webhook::{self, Hook, Verdict};

/// Largest accepted request body: object and oldObject of a 3 MiB object, with room.
pub const BODY_LIMIT: usize = 8 << 20;
/// Time a client gets to send request headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a request (body included) may take; the API server's own timeout is 10 s.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Time a client gets to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The webhook routes: one POST path per [`Hook`].
pub fn webhook_router(metrics: Arc<Metrics>) -> Router {
    let mut router = Router::new();
    for hook in Hook::ALL {
        router = router.route(
            hook.path(),
            post(
                move |State(metrics): State<Arc<Metrics>>, body: Bytes| async move {
                    admit(hook, &metrics, &body)
                },
            ),
        );
    }
    router
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        .with_state(metrics)
}

fn admit(hook: Hook, metrics: &Metrics, body: &[u8]) -> Response {
    let started = Instant::now();
    let result = webhook::review(hook, body);
    let verdict = match &result {
        Ok((_, verdict)) => match verdict {
            Verdict::Allowed => "allowed",
            Verdict::Patched => "patched",
            Verdict::Denied => "denied",
        },
        Err(_) => "bad_request",
    };
    metrics.admission(hook, verdict, started.elapsed());
    match result {
        Ok((review, _)) => axum::Json(review).into_response(),
        Err(e) => {
            tracing::warn!(webhook = hook.name(), error = %e, bytes = body.len(), "bad admission request");
            (StatusCode::BAD_REQUEST, e.to_string()).into_response()
        }
    }
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
        .header_read_timeout(HEADER_TIMEOUT);
    builder.http2().timer(TokioTimer::new());
    let builder = Arc::new(builder);
    loop {
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
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
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
