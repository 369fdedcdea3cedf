//! Canary analysis providers (docs/rollouts.md#canary-analysis): the endpoints the cluster
//! admin configured (`squall run --analysis-config`), and the measurements a StormService's
//! due metrics take from them. A StormService names an endpoint, never an address: the
//! operator only ever calls the addresses in its own configuration.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};
use serde::Deserialize;
use tokio::sync::{Mutex, Semaphore};

use crate::api::analysis::{AnalysisMetric, QueryValues, render_query};
use crate::api::tenancy::{ConfiguredEndpoint, Tenancy, is_label_name};
use crate::api::{CanaryStep, StormService, parse_duration};
use crate::planner::analysis::{Due, Measured, Subject};

/// Most endpoints a configuration may name.
pub const MAX_ENDPOINTS: usize = 16;
/// Most provider queries in flight across the operator: one tenant's many analyses wait
/// their turn instead of opening unbounded connections.
pub const QUERIES_IN_FLIGHT: usize = 16;
/// Largest provider answer read: one number's answer is a few hundred bytes; a query that
/// returns thousands of series is refused, not buffered.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;
/// A query's timeout when the endpoint sets none, and the longest one may set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a bearer token read from its Secret is used before it is read again.
const TOKEN_TTL: Duration = Duration::from_secs(60);

/// The operator's analysis configuration (the file `--analysis-config` names; the Helm
/// chart renders it from `analysis.prometheus` in its values).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisConfig {
    /// Prometheus endpoints, by name.
    #[serde(default)]
    pub prometheus: Vec<PrometheusEndpoint>,
}

/// One Prometheus endpoint.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PrometheusEndpoint {
    /// The name metrics give as `provider.prometheus.endpoint` (`default` when they give
    /// none).
    pub name: String,
    /// Base address: `http://host:port` or `https://host:port`, optionally with a path
    /// prefix (`/api/v1/query` is appended).
    pub address: String,
    /// Per-query timeout (`10s` when absent, at most `60s`).
    #[serde(default)]
    pub timeout: Option<String>,
    /// A bearer token, read from this Secret in the operator's namespace.
    #[serde(default)]
    pub bearer_token_secret: Option<SecretKey>,
    /// Sends the bearer token to an `http://` address, in clear, to anyone on the path:
    /// refused unless set (a Prometheus reached only through a sidecar on loopback, say).
    #[serde(default)]
    pub bearer_token_over_http: bool,
    /// PEM CA bundle that signs an `https` address's certificate.
    #[serde(default)]
    pub ca_file: Option<String>,
    /// Whose series a StormService's queries may read: `namespace` (when absent) scopes
    /// every selector to the StormService's namespace; `none` runs queries as written.
    #[serde(default)]
    pub tenancy: Option<TenancyMode>,
    /// The label holding a series' namespace, for `tenancy: namespace` (`namespace` when
    /// absent).
    #[serde(default)]
    pub namespace_label: Option<String>,
}

/// The `tenancy` of an endpoint.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TenancyMode {
    /// Every selector carries the StormService's namespace.
    Namespace,
    /// Queries run as written, across every namespace the endpoint holds.
    None,
}

/// A key of a Secret in the operator's namespace.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SecretKey {
    /// The Secret.
    pub name: String,
    /// Its key.
    pub key: String,
}

/// Why a configuration is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file does not parse.
    #[error("analysis config: {0}")]
    Parse(String),
    /// An endpoint is wrong.
    #[error("analysis config: prometheus[{index}] ({name}): {detail}")]
    Endpoint {
        /// Its index.
        index: usize,
        /// Its name.
        name: String,
        /// What is wrong.
        detail: String,
    },
}

impl AnalysisConfig {
    /// Parses a configuration file's text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let config: AnalysisConfig =
            serde_saphyr::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        if config.prometheus.len() > MAX_ENDPOINTS {
            return Err(ConfigError::Parse(format!(
                "at most {MAX_ENDPOINTS} endpoints"
            )));
        }
        for (index, endpoint) in config.prometheus.iter().enumerate() {
            let fail = |detail: String| ConfigError::Endpoint {
                index,
                name: endpoint.name.clone(),
                detail,
            };
            if endpoint.name.is_empty() {
                return Err(fail("name is required".into()));
            }
            if config.prometheus[..index]
                .iter()
                .any(|e| e.name == endpoint.name)
            {
                return Err(fail("the name is used twice".into()));
            }
            let address = Address::parse(&endpoint.address).map_err(fail)?;
            if endpoint.bearer_token_secret.is_some()
                && !address.tls
                && !endpoint.bearer_token_over_http
            {
                return Err(fail(
                    "bearerTokenSecret with an http:// address sends the token in clear: use \
                     https://, or set bearerTokenOverHttp: true"
                        .into(),
                ));
            }
            endpoint.timeout().map_err(fail)?;
            endpoint.tenancy().map_err(fail)?;
        }
        Ok(config)
    }

    /// The endpoints as admission checks metrics against them.
    pub fn endpoints(&self) -> Vec<ConfiguredEndpoint> {
        self.prometheus
            .iter()
            .filter_map(|e| {
                Some(ConfiguredEndpoint {
                    name: e.name.clone(),
                    tenancy: e.tenancy().ok()?,
                })
            })
            .collect()
    }
}

impl PrometheusEndpoint {
    fn tenancy(&self) -> Result<Tenancy, String> {
        match (self.tenancy, &self.namespace_label) {
            (Some(TenancyMode::None), None) => Ok(Tenancy::AsWritten),
            (Some(TenancyMode::None), Some(_)) => {
                Err("namespaceLabel is for tenancy: namespace, not none".into())
            }
            (_, None) => Ok(Tenancy::default()),
            (_, Some(label)) if is_label_name(label) => Ok(Tenancy::Namespace {
                label: label.clone(),
            }),
            (_, Some(label)) => Err(format!(
                "namespaceLabel {label:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)"
            )),
        }
    }

    fn timeout(&self) -> Result<Duration, String> {
        let Some(text) = &self.timeout else {
            return Ok(DEFAULT_TIMEOUT);
        };
        let timeout = parse_duration(text)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("timeout {text:?} is not a duration such as 10s"))?;
        if timeout.is_zero() || timeout > MAX_TIMEOUT {
            return Err(format!("timeout {text:?} must be between 1s and 60s"));
        }
        Ok(timeout)
    }
}

/// A parsed base address.
#[derive(Clone, Debug, PartialEq)]
struct Address {
    tls: bool,
    host: String,
    port: u16,
    /// Path prefix without a trailing '/'.
    prefix: String,
}

impl Address {
    fn parse(address: &str) -> Result<Self, String> {
        let uri: http::Uri = address
            .parse()
            .map_err(|e| format!("address {address:?}: {e}"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(format!(
                    "address {address:?} must start with http:// or https://"
                ));
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| format!("address {address:?} has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if uri.query().is_some() {
            return Err(format!("address {address:?} must not have a query"));
        }
        Ok(Address {
            tls,
            host,
            port: uri.port_u16().unwrap_or(if tls { 443 } else { 80 }),
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

/// Where analysis numbers come from: one number per query, or why there is none. The
/// trait other providers (Datadog, a plain HTTP JSON endpoint) would implement.
pub trait MetricsProvider: Send + Sync {
    /// Runs `query`; the error says why no number came (it makes the measurement
    /// inconclusive).
    fn query<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<f64, String>>;
}

/// The configured endpoints, and the bound on queries in flight.
pub struct Providers {
    by_name: BTreeMap<String, Endpoint>,
    in_flight: Semaphore,
}

/// One configured endpoint: where numbers come from, and how queries to it are scoped.
pub struct Endpoint {
    /// The provider.
    pub provider: Arc<dyn MetricsProvider>,
    /// Whose series a query may read.
    pub tenancy: Tenancy,
}

impl Default for Providers {
    fn default() -> Self {
        Self::new(BTreeMap::new())
    }
}

impl Providers {
    /// Providers by endpoint name.
    pub fn new(by_name: BTreeMap<String, Endpoint>) -> Self {
        Self {
            by_name,
            in_flight: Semaphore::new(QUERIES_IN_FLIGHT),
        }
    }

    /// The providers a configuration names; bearer tokens are read with `client` from
    /// `namespace` (the operator's).
    pub fn from_config(
        config: &AnalysisConfig,
        client: Option<Client>,
        namespace: &str,
    ) -> anyhow::Result<Self> {
        let mut by_name = BTreeMap::new();
        for endpoint in &config.prometheus {
            let provider = Arc::new(Prometheus::new(endpoint, client.clone(), namespace)?);
            let tenancy = endpoint.tenancy().map_err(anyhow::Error::msg)?;
            by_name.insert(endpoint.name.clone(), Endpoint { provider, tenancy });
        }
        Ok(Self::new(by_name))
    }

    /// The endpoints, for the webhook's check of `provider.prometheus`.
    pub fn endpoints(&self) -> Vec<ConfiguredEndpoint> {
        self.by_name
            .iter()
            .map(|(name, endpoint)| ConfiguredEndpoint {
                name: name.clone(),
                tenancy: endpoint.tenancy.clone(),
            })
            .collect()
    }

    /// Takes the measurements `due` for `service`, side by side (each bounded by its
    /// endpoint's timeout, and all by [`QUERIES_IN_FLIGHT`]).
    /// The revision placeholders are `revisions`, the names the controller derived itself:
    /// the stored status is the tenant's to write.
    pub async fn measure(
        &self,
        service: &StormService,
        revisions: RevisionNames<'_>,
        due: Vec<Due>,
    ) -> Vec<Measured> {
        let namespace = service.namespace().unwrap_or_default();
        let name = service.name_any();
        let spec_steps = service.spec.canary_steps().unwrap_or_default();
        let background = service
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.canary.as_ref())
            .and_then(|c| c.analysis.as_ref());
        let measurements = due.into_iter().map(|due| {
            let metric = metric_of(spec_steps, background, due);
            let values = QueryValues {
                canary_revision: revisions.canary,
                stable_revision: revisions.stable,
                role: metric.and_then(|m| m.role.as_deref()),
                namespace: &namespace,
                name: &name,
            };
            async move {
                let value = match metric {
                    Some(metric) => self.measure_one(metric, &values).await,
                    None => Err("the metric is no longer in the spec".to_string()),
                };
                Measured { due, value }
            }
        });
        futures::future::join_all(measurements).await
    }

    async fn measure_one(
        &self,
        metric: &AnalysisMetric,
        values: &QueryValues<'_>,
    ) -> Result<f64, String> {
        let Some(prometheus) = &metric.provider.prometheus else {
            return Err("the metric names no provider".into());
        };
        let query = render_query(&prometheus.query, Some(values), metric.role.is_some())?;
        let endpoint = metric.endpoint();
        let Endpoint { provider, tenancy } = self.by_name.get(endpoint).ok_or_else(|| {
            format!(
                "no Prometheus endpoint {endpoint:?} is configured (squall run --analysis-config)"
            )
        })?;
        // Refused here too: a query stored before the endpoint was scoped is sent nowhere.
        let query = tenancy.apply(&query, values.namespace)?;
        let _permit = self
            .in_flight
            .acquire()
            .await
            .map_err(|_| "the operator is stopping".to_string())?;
        provider.query(&query).await
    }
}

/// The revisions a canary's queries are about, as the controller derived them.
#[derive(Clone, Copy, Debug)]
pub struct RevisionNames<'a> {
    /// The update revision: what the canary rolls out.
    pub canary: &'a str,
    /// The current revision: what the canary started from.
    pub stable: &'a str,
}

/// The metric a measurement is due for.
pub fn metric_of<'a>(
    spec_steps: &'a [CanaryStep],
    background: Option<&'a crate::api::analysis::Analysis>,
    due: Due,
) -> Option<&'a AnalysisMetric> {
    let analysis = match due.subject {
        Subject::Step(i) => spec_steps.get(i)?.analysis.as_ref()?,
        Subject::Background => background?,
    };
    analysis.metrics.get(due.metric)
}

/// A Prometheus endpoint: instant queries (`GET /api/v1/query`), one connection each.
pub struct Prometheus {
    address: Address,
    timeout: Duration,
    tls: Option<tokio_rustls::TlsConnector>,
    token: Option<TokenSource>,
}

/// A bearer token read from a Secret, kept for [`TOKEN_TTL`].
struct TokenSource {
    secrets: Api<Secret>,
    secret: SecretKey,
    cached: Mutex<Option<(String, Instant)>>,
}

impl TokenSource {
    async fn token(&self) -> Result<String, String> {
        let mut cached = self.cached.lock().await;
        if let Some((token, at)) = cached.as_ref()
            && at.elapsed() < TOKEN_TTL
        {
            return Ok(token.clone());
        }
        let SecretKey { name, key } = &self.secret;
        let secret = self
            .secrets
            .get(name)
            .await
            .map_err(|e| format!("bearer token Secret {name}: {e}"))?;
        let token = secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
            .ok_or_else(|| format!("bearer token Secret {name} has no UTF-8 key {key:?}"))?;
        let token = token.trim().to_string();
        *cached = Some((token.clone(), Instant::now()));
        Ok(token)
    }
}

impl Prometheus {
    /// The endpoint's client.
    pub fn new(
        endpoint: &PrometheusEndpoint,
        client: Option<Client>,
        namespace: &str,
    ) -> anyhow::Result<Self> {
        let address = Address::parse(&endpoint.address).map_err(anyhow::Error::msg)?;
        let tls = if address.tls {
            let Some(ca_file) = &endpoint.ca_file else {
                anyhow::bail!(
                    "Prometheus endpoint {}: an https address needs caFile",
                    endpoint.name
                );
            };
            let pem = std::fs::read(ca_file).map_err(|e| {
                anyhow::anyhow!("Prometheus endpoint {}: {ca_file}: {e}", endpoint.name)
            })?;
            let mut roots = rustls::RootCertStore::empty();
            use rustls::pki_types::pem::PemObject;
            for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
                roots.add(cert?)?;
            }
            let config = rustls::ClientConfig::builder()
                .with_root_certificates(roots)
                .with_no_client_auth();
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        } else {
            None
        };
        let token = match (&endpoint.bearer_token_secret, client) {
            (Some(secret), Some(client)) => Some(TokenSource {
                secrets: Api::namespaced(client, namespace),
                secret: secret.clone(),
                cached: Mutex::new(None),
            }),
            (Some(_), None) => anyhow::bail!(
                "Prometheus endpoint {}: bearerTokenSecret needs the cluster",
                endpoint.name
            ),
            (None, _) => None,
        };
        Ok(Self {
            address,
            timeout: endpoint.timeout().map_err(anyhow::Error::msg)?,
            tls,
            token,
        })
    }

    async fn get(&self, query: &str) -> Result<(http::StatusCode, Bytes), String> {
        let address = &self.address;
        let target = format!(
            "{}/api/v1/query?query={}",
            address.prefix,
            percent_encode(query)
        );
        let authority = if address.host.contains(':') {
            format!("[{}]:{}", address.host, address.port)
        } else {
            format!("{}:{}", address.host, address.port)
        };
        let mut request = hyper::Request::get(target).header(http::header::HOST, &authority);
        if let Some(token) = &self.token {
            request = request.header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", token.token().await?),
            );
        }
        let request = request
            .body(Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let tcp = tokio::net::TcpStream::connect((address.host.as_str(), address.port))
            .await
            .map_err(|e| format!("connecting to {authority}: {e}"))?;
        let response = match &self.tls {
            None => send(TokioIo::new(tcp), request).await?,
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(address.host.clone())
                    .map_err(|e| e.to_string())?;
                let tls = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {authority}: {e}"))?;
                send(TokioIo::new(tls), request).await?
            }
        };
        Ok(response)
    }
}

/// Sends one request on a new HTTP/1.1 connection and reads the answer (bounded).
async fn send<T>(
    io: TokioIo<T>,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<(http::StatusCode, Bytes), String>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .to_bytes();
    Ok((status, body))
}

impl MetricsProvider for Prometheus {
    fn query<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<f64, String>> {
        Box::pin(async move {
            let (status, body) = tokio::time::timeout(self.timeout, self.get(query))
                .await
                .map_err(|_| format!("no answer within {:?}", self.timeout))??;
            number_of(status, &body)
        })
    }
}

/// Percent-encodes a query string value (RFC 3986 unreserved characters stay).
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A Prometheus error text with every label set and list of series left out (`{…}`, `[…]`):
/// errors such as "found duplicate series for the match group {...}" quote series, which may
/// be another namespace's.
fn without_series(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(256));
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '{' | '[' => {
                if depth == 0 {
                    out.push(c);
                    out.push('…');
                }
                depth += 1;
            }
            '}' | ']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(c);
                }
            }
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// The one number of a Prometheus instant query's answer: a scalar, or a vector of exactly
/// one sample. No sample is "no data"; several are a query to aggregate.
fn number_of(status: http::StatusCode, body: &[u8]) -> Result<f64, String> {
    #[derive(Deserialize)]
    struct Answer {
        status: String,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        data: Option<Data>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Data {
        result_type: String,
        result: serde_json::Value,
    }
    // Nothing of the body is quoted: it may hold series of other namespaces.
    let answer: Answer = serde_json::from_slice(body).map_err(|_| {
        format!(
            "HTTP {status}: not a Prometheus answer ({} bytes)",
            body.len()
        )
    })?;
    if answer.status != "success" {
        return Err(format!(
            "Prometheus: {}",
            answer
                .error
                .map_or_else(|| format!("HTTP {status}"), |e| without_series(&e))
        ));
    }
    let data = answer.data.ok_or("Prometheus answered without data")?;
    let sample = match data.result_type.as_str() {
        "scalar" => &data.result,
        "vector" => {
            let samples = data
                .result
                .as_array()
                .ok_or("a vector that is not a list")?;
            match samples.as_slice() {
                [] => return Err("no data: the query matched no series".into()),
                [one] => &one["value"],
                many => {
                    return Err(format!(
                        "the query gave {} series; aggregate it to one (e.g. sum(...))",
                        many.len()
                    ));
                }
            }
        }
        other => return Err(format!("a {other} result; the query must give one number")),
    };
    let text = sample
        .get(1)
        .and_then(serde_json::Value::as_str)
        .ok_or("a sample without a value")?;
    // Prometheus writes NaN and ±Inf as "NaN", "+Inf", "-Inf".
    text.parse::<f64>()
        .map_err(|_| format!("the sample value {text:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_is_checked_endpoint_by_endpoint() {
        let config = AnalysisConfig::parse(
            "prometheus:\n- name: default\n  address: http://127.0.0.1:9090/prom/\n  timeout: 5s\n",
        )
        .unwrap();
        assert_eq!(
            config.prometheus[0].timeout().unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(
            Address::parse(&config.prometheus[0].address).unwrap(),
            Address {
                tls: false,
                host: "127.0.0.1".into(),
                port: 9090,
                prefix: "/prom".into()
            }
        );
        for (bad, says) in [
            (
                "prometheus:\n- name: a\n  address: ftp://x\n",
                "http:// or https://",
            ),
            (
                "prometheus:\n- name: a\n  address: http://x\n  timeout: 2m\n",
                "between 1s and 60s",
            ),
            (
                "prometheus:\n- name: a\n  address: http://x\n- name: a\n  address: http://y\n",
                "used twice",
            ),
            ("prometheus:\n- address: http://x\n", "name"),
            (
                "prometheus:\n- name: a\n  address: http://x\n  token: t\n",
                "token",
            ),
            (
                "prometheus:\n- name: a\n  address: http://x\n  bearerTokenSecret: {name: s, key: k}\n",
                "sends the token in clear",
            ),
        ] {
            let error = AnalysisConfig::parse(bad).unwrap_err().to_string();
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    #[test]
    fn tenancy_is_namespace_unless_set_to_none() {
        let endpoints = |extra: &str| {
            AnalysisConfig::parse(&format!(
                "prometheus:\n- name: default\n  address: http://127.0.0.1:9090\n{extra}"
            ))
            .map(|c| c.endpoints()[0].tenancy.clone())
            .map_err(|e| e.to_string())
        };
        assert_eq!(endpoints(""), Ok(Tenancy::default()));
        assert_eq!(endpoints("  tenancy: namespace\n"), Ok(Tenancy::default()));
        assert_eq!(endpoints("  tenancy: none\n"), Ok(Tenancy::AsWritten));
        assert_eq!(
            endpoints("  namespaceLabel: kube_namespace\n"),
            Ok(Tenancy::Namespace {
                label: "kube_namespace".into()
            })
        );
        let refused = endpoints("  tenancy: none\n  namespaceLabel: ns\n").unwrap_err();
        assert!(
            refused.contains("namespaceLabel is for tenancy: namespace"),
            "{refused}"
        );
        let refused = endpoints("  namespaceLabel: a-b\n").unwrap_err();
        assert!(refused.contains("not a Prometheus label name"), "{refused}");
        assert!(endpoints("  tenancy: everyone\n").is_err());
    }

    #[test]
    fn an_error_quotes_no_series() {
        let body = br#"{"status":"error","errorType":"execution","error":"found duplicate series for the match group {namespace=\"b\", pod=\"secret-0\"} on the right hand-side of the operation: [{__name__=\"up\", namespace=\"b\"}, {__name__=\"up\", namespace=\"b\"}];many-to-many matching not allowed"}"#;
        let why = number_of(http::StatusCode::UNPROCESSABLE_ENTITY, body).unwrap_err();
        assert!(
            !why.contains("secret-0") && !why.contains("namespace"),
            "{why}"
        );
        assert!(
            why.starts_with("Prometheus: found duplicate series for the match group {…}"),
            "{why}"
        );
        let html = b"<html>up{namespace=\"b\"} 1</html>";
        let why = number_of(http::StatusCode::OK, html).unwrap_err();
        assert!(!why.contains("namespace"), "{why}");
    }

    #[test]
    fn answers_give_one_number_or_say_why_not() {
        let ok = http::StatusCode::OK;
        let vector = |result: &str| {
            format!(r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#)
        };
        assert_eq!(
            number_of(
                ok,
                vector(r#"[{"metric":{},"value":[1.5,"0.25"]}]"#).as_bytes()
            ),
            Ok(0.25)
        );
        assert!(
            number_of(
                ok,
                vector(r#"[{"metric":{},"value":[1.5,"NaN"]}]"#).as_bytes()
            )
            .unwrap()
            .is_nan()
        );
        assert_eq!(
            number_of(
                ok,
                br#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"3"]}}"#
            ),
            Ok(3.0)
        );
        assert!(
            number_of(ok, vector("[]").as_bytes())
                .unwrap_err()
                .contains("no data")
        );
        assert!(
            number_of(
                ok,
                vector(r#"[{"value":[1,"1"]},{"value":[1,"2"]}]"#).as_bytes()
            )
            .unwrap_err()
            .contains("2 series")
        );
        assert!(
            number_of(
                http::StatusCode::BAD_REQUEST,
                br#"{"status":"error","errorType":"bad_data","error":"parse error at char 4"}"#
            )
            .unwrap_err()
            .contains("parse error at char 4")
        );
        assert!(
            number_of(http::StatusCode::BAD_GATEWAY, b"<html>")
                .unwrap_err()
                .contains("502")
        );
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            percent_encode(r#"sum(rate(x{a="b c"}[1m]))"#),
            "sum%28rate%28x%7Ba%3D%22b%20c%22%7D%5B1m%5D%29%29"
        );
    }
}
