//! The plain-HTTP admin server: `/healthz`, `/readyz`, `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::watch;
use webhook_certs::manager::CertState;

use crate::metrics::Metrics;
use crate::server::handshake_verifies;

/// What readiness is checked against.
#[derive(Clone)]
pub struct Readiness {
    /// Published certificates and the injected `caBundle`.
    pub certs: watch::Receiver<CertState>,
    /// The webhook server's bound socket (a wildcard address is dialled on loopback).
    pub webhook_addr: SocketAddr,
    /// The name the API server uses to reach the webhook (a SAN of the certificate).
    pub server_name: String,
    /// Verify against the served `ca.crt` instead of the configurations' `caBundle` (when
    /// squall does not read the configurations).
    pub own_bundle: bool,
}

impl Readiness {
    /// Ready when the served chain verifies, by a TLS handshake to the bound socket, against
    /// the `caBundle` currently in both webhook configurations (docs/certificates.md).
    pub async fn check(&self) -> Result<(), String> {
        let state = self.certs.borrow().clone();
        if let Some(problem) = state.problem {
            return Err(problem);
        }
        let current = state.current.ok_or("no serving certificate loaded yet")?;
        let bundle = if self.own_bundle {
            current.bundle.ca_crt.clone()
        } else {
            state
                .injected_bundle
                .ok_or("the webhook configurations do not carry one caBundle yet")?
        };
        let mut addr = self.webhook_addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            });
        }
        handshake_verifies(addr, &bundle, &self.server_name).await
    }
}

/// The admin routes.
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(
                |State((metrics, readiness)): State<(Arc<Metrics>, Readiness)>| async move {
                    match readiness.check().await {
                        // Readiness gates webhook traffic, which a controller's trouble does
                        // not affect: said, but the pod stays ready.
                        Ok(()) => match metrics.degraded() {
                            Some(problem) => (StatusCode::OK, format!("ok; degraded: {problem}")),
                            None => (StatusCode::OK, "ok".to_string()),
                        },
                        Err(reason) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {reason}"),
                        ),
                    }
                },
            ),
        )
        .route(
            "/metrics",
            get(
                |State((metrics, _)): State<(Arc<Metrics>, Readiness)>| async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.render(),
                    )
                },
            ),
        )
        .with_state((metrics, readiness))
}
