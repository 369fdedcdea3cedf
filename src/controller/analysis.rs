//! Canary analysis providers (docs/rollouts.md#canary-analysis): the endpoints the cluster
//! admin configured (`squall run --analysis-config`), and the measurements a StormService's
//! due metrics take from them. A StormService names an endpoint, never an address: the
//! operator only ever calls the addresses in its own configuration.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Deserialize;
use tokio::sync::{Mutex, Semaphore, broadcast};
use tokio::time::Instant;

use crate::api::analysis::{AnalysisMetric, QueryValues, render_query};
use crate::api::drain::{DrainQuery, DrainValues, render_drain_query};
use crate::api::duration::parse_duration;
use crate::api::tenancy::{ConfiguredEndpoint, Tenancy, is_label_name};
use crate::api::{CanaryStep, RoleSet, StormService};
use crate::planner::stormservice::canary::analysis::{Due, Measured, Subject};

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

/// The configured endpoints, and the worker that takes measurements off the reconcile
/// path: a reconcile hands over what is due and takes what has been measured; the queries
/// run in tasks of their own, bounded in number overall and per namespace, and each one
/// that finishes brings its StormService's reconcile back ([`Providers::finished`]).
pub struct Providers {
    by_name: BTreeMap<String, Endpoint>,
    in_flight: Semaphore,
    jobs: std::sync::Mutex<Jobs>,
    /// (kind, namespace, name) of the owner whose query has just been answered.
    finished: broadcast::Sender<(Kind, String, String)>,
}

/// One configured endpoint: where numbers come from, and how queries to it are scoped.
pub struct Endpoint {
    /// The provider.
    pub provider: Arc<dyn MetricsProvider>,
    /// Whose series a query may read.
    pub tenancy: Tenancy,
    /// How long a measurement may take, the wait for a query permit included.
    pub timeout: Duration,
}

/// Most measurements the worker keeps track of (running, or answered and remembered for the
/// cadence): a bound on its memory whatever the number of StormServices.
const MAX_JOBS: usize = 4096;
/// Most measurements of one namespace running at once: a quarter of the permits, so one
/// tenant's slow queries leave the rest to the others.
pub const NAMESPACE_SHARE: usize = QUERIES_IN_FLIGHT / 4;
/// Least time between two queries of a metric measured once (no `interval`), by the
/// operator's clock.
const ONCE_SPACING: Duration = Duration::from_secs(10);
/// How long an answer handed over is remembered (the longest interval): past it, a
/// measurement is due by the status alone.
const REMEMBERED: Duration = Duration::from_secs(crate::api::analysis::MAX_ANALYSIS_WAIT);

/// An owner's kind, as `kube::Resource::kind` gives it.
type Kind = std::borrow::Cow<'static, str>;

/// A query of one owner: a measurement of one metric of a StormService, or a reading of
/// a draining pod's requests in flight for its RoleSet.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct JobKey {
    namespace: String,
    /// The owner's UID.
    uid: String,
    asked: Asked,
}

/// What a query is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Asked {
    /// A due canary measurement.
    Measurement(Due),
    /// The requests in flight of the draining pod with this UID
    /// (docs/rollouts.md#drain-before-delete).
    InFlight(String),
}

struct Job {
    /// The owner's kind and name, to bring its reconcile back.
    owner: (Kind, String),
    /// When it was sent, by the wall clock (Unix seconds): a drain counts a reading by it.
    sent_at: i64,
    /// The query as sent.
    query: String,
    /// When it was sent, by the operator's clock.
    started: Instant,
    /// Time between measurements of the metric.
    interval: Duration,
    /// `None` while running.
    value: Option<Result<f64, String>>,
    /// Whether a reconcile has taken the answer.
    handed: bool,
}

#[derive(Default)]
struct Jobs {
    by_key: HashMap<JobKey, Job>,
    running: HashMap<String, usize>,
}

impl Jobs {
    /// Forgets answers older than any interval (taken or not: a StormService deleted, or
    /// moved on, never takes its last one).
    fn prune(&mut self) {
        self.by_key
            .retain(|_, job| job.value.is_none() || job.started.elapsed() < REMEMBERED);
    }

    /// Whether `key` may be tracked: it is, or there is room, or room is made by forgetting
    /// the oldest answer already taken (which only costs its cadence memory), so a tenant
    /// with many StormServices cannot stop everyone's measurements.
    fn room_for(&mut self, key: &JobKey) -> bool {
        if self.by_key.len() < MAX_JOBS || self.by_key.contains_key(key) {
            return true;
        }
        let oldest = self
            .by_key
            .iter()
            .filter(|(_, job)| job.handed)
            .min_by_key(|(_, job)| job.started)
            .map(|(key, _)| key.clone());
        oldest.is_some_and(|oldest| self.by_key.remove(&oldest).is_some())
    }
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
            jobs: std::sync::Mutex::default(),
            finished: broadcast::channel(1024).0,
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
            let timeout = endpoint.timeout().map_err(anyhow::Error::msg)?;
            by_name.insert(
                endpoint.name.clone(),
                Endpoint {
                    provider,
                    tenancy,
                    timeout,
                },
            );
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

    /// The owners of kind `K` (StormServices, RoleSets) whose query has just been answered.
    pub fn finished<K>(&self) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: kube::Resource<DynamicType = ()> + 'static,
    {
        let kind = K::kind(&());
        futures::stream::unfold(self.finished.subscribe(), move |mut finished| {
            let kind = kind.clone();
            async move {
                loop {
                    match finished.recv().await {
                        Ok((of, namespace, name)) if of == kind => {
                            return Some((ObjectRef::new(&name).within(&namespace), finished));
                        }
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            }
        })
    }

    /// Hands the measurements `due` for `service` to the worker and takes those it has
    /// answered; never waits for a query. A measurement due again within its interval of
    /// the last query by the operator's clock (the status, which the tenant may reset, says
    /// it is due) is given the last answer instead of a new query. The revision
    /// placeholders are `revisions`, the names the controller derived itself.
    pub fn measure(
        self: &Arc<Self>,
        service: &StormService,
        revisions: RevisionNames<'_>,
        due: Vec<Due>,
    ) -> Vec<Measured> {
        let namespace = service.namespace().unwrap_or_default();
        let name = service.name_any();
        let uid = service.uid().unwrap_or_default();
        let spec_steps = service.spec.canary_steps().unwrap_or_default();
        let background = service
            .spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.canary.as_ref())
            .and_then(|c| c.analysis.as_ref());
        let mut measured = Vec::new();
        let mut jobs = self.jobs.lock().expect("the analysis jobs");
        jobs.prune();
        for due in due {
            let metric = metric_of(spec_steps, background, due);
            let values = QueryValues {
                canary_revision: revisions.canary,
                stable_revision: revisions.stable,
                role: metric.and_then(|m| m.role.as_deref()),
                namespace: &namespace,
                name: &name,
            };
            let prepared = match metric {
                Some(metric) => self.prepare(metric, &values),
                None => Err("the metric is no longer in the spec".to_string()),
            };
            let (query, endpoint, interval) = match prepared {
                Ok(prepared) => prepared,
                Err(why) => {
                    measured.push(Measured {
                        due,
                        value: Err(why),
                    });
                    continue;
                }
            };
            let key = JobKey {
                namespace: namespace.clone(),
                uid: uid.clone(),
                asked: Asked::Measurement(due),
            };
            match Self::lookup(&mut jobs, &key, Some(&query)) {
                Lookup::Running => {}
                Lookup::Answer(value, _) => measured.push(Measured { due, value }),
                Lookup::Due => {
                    let owner = (StormService::kind(&()), name.clone());
                    self.start(&mut jobs, key, owner, query, endpoint, interval);
                }
            }
        }
        measured
    }

    /// The requests in flight of a RoleSet's draining pods (docs/rollouts.md#drain-before-delete),
    /// as answered: each pod's reading is asked of the worker like a measurement — off the
    /// reconcile path, within the namespace's share, again once its `interval` has passed —
    /// and an answer brings the RoleSet's reconcile back. `at` is when the query was sent.
    pub fn in_flight<'a>(
        self: &Arc<Self>,
        roleset: &RoleSet,
        asks: impl IntoIterator<Item = InFlightAsk<'a>>,
    ) -> BTreeMap<String, (Result<f64, String>, i64)> {
        let namespace = roleset.namespace().unwrap_or_default();
        let name = roleset.name_any();
        let uid = roleset.uid().unwrap_or_default();
        let mut readings = BTreeMap::new();
        let mut jobs = self.jobs.lock().expect("the analysis jobs");
        jobs.prune();
        for ask in asks {
            let key = JobKey {
                namespace: namespace.clone(),
                uid: uid.clone(),
                asked: Asked::InFlight(ask.pod_uid.to_string()),
            };
            // Rendered and scoped only when a query is due: a reconcile that finds every
            // reading running or fresh parses nothing.
            match Self::lookup(&mut jobs, &key, None) {
                Lookup::Running => continue,
                Lookup::Answer(value, at) => {
                    readings.insert(ask.pod.to_string(), (value, at));
                    continue;
                }
                Lookup::Due => {}
            }
            let values = DrainValues {
                pod: ask.pod,
                namespace: &namespace,
                role: ask.role,
            };
            let interval = Duration::from_secs(ask.query.interval_seconds());
            let prepared = render_drain_query(&ask.query.query, Some(&values)).and_then(|query| {
                let endpoint = self.endpoint(ask.query.endpoint())?;
                Ok((endpoint.tenancy.apply(&query, &namespace)?, endpoint))
            });
            match prepared {
                Ok((query, endpoint)) => {
                    let owner = (RoleSet::kind(&()), name.clone());
                    self.start(&mut jobs, key, owner, query, endpoint, interval);
                }
                Err(why) => {
                    let now = super::wall_clock().as_second();
                    readings.insert(ask.pod.to_string(), (Err(why), now));
                }
            }
        }
        readings
    }

    /// What the worker holds for `key`: a query running, an answer (with when its query was
    /// sent) not yet taken, or the last one while its interval has not passed since it was
    /// sent — and, given `query`, while it is the query asked — or nothing to use: a new
    /// query is due.
    fn lookup(jobs: &mut Jobs, key: &JobKey, query: Option<&str>) -> Lookup {
        let Some(job) = jobs.by_key.get_mut(key) else {
            return Lookup::Due;
        };
        match &job.value {
            None => Lookup::Running,
            Some(value) if !job.handed => {
                job.handed = true;
                Lookup::Answer(value.clone(), job.sent_at)
            }
            // Status timestamps are whole seconds: a measurement due by the status comes at
            // least `interval - 1s` after the last query began.
            Some(value)
                if query.is_none_or(|q| job.query == q)
                    && job.started.elapsed() + Duration::from_secs(1) < job.interval =>
            {
                Lookup::Answer(value.clone(), job.sent_at)
            }
            Some(_) => Lookup::Due,
        }
    }

    /// Starts `query` for `key` in a task of its own, within the namespace's share and the
    /// worker's room (else a later reconcile starts it); its answer brings `owner`'s
    /// reconcile back.
    fn start(
        self: &Arc<Self>,
        jobs: &mut Jobs,
        key: JobKey,
        owner: (Kind, String),
        query: String,
        endpoint: &Endpoint,
        interval: Duration,
    ) {
        let running = jobs.running.get(&key.namespace).copied().unwrap_or(0);
        if running >= NAMESPACE_SHARE || !jobs.room_for(&key) {
            // Taken by a later reconcile: the due measurement keeps the requeue short.
            return;
        }
        *jobs.running.entry(key.namespace.clone()).or_default() += 1;
        jobs.by_key.insert(
            key.clone(),
            Job {
                owner,
                sent_at: super::wall_clock().as_second(),
                query: query.clone(),
                started: Instant::now(),
                interval,
                value: None,
                handed: false,
            },
        );
        let providers = self.clone();
        let provider = endpoint.provider.clone();
        let timeout = endpoint.timeout;
        tokio::spawn(async move {
            let value = tokio::time::timeout(timeout, async {
                let _permit = providers
                    .in_flight
                    .acquire()
                    .await
                    .map_err(|_| "the operator is stopping".to_string())?;
                provider.query(&query).await
            })
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")));
            providers.answered(key, value);
        });
    }

    /// The endpoint `name`, or why there is none.
    fn endpoint(&self, name: &str) -> Result<&Endpoint, String> {
        self.by_name.get(name).ok_or_else(|| {
            format!("no Prometheus endpoint {name:?} is configured (squall run --analysis-config)")
        })
    }

    /// Keeps a query's answer for the next reconcile of its owner, and brings that
    /// reconcile back.
    fn answered(&self, key: JobKey, value: Result<f64, String>) {
        let mut jobs = self.jobs.lock().expect("the analysis jobs");
        if let Some(running) = jobs.running.get_mut(&key.namespace) {
            *running = running.saturating_sub(1);
            if *running == 0 {
                jobs.running.remove(&key.namespace);
            }
        }
        if let Some(job) = jobs.by_key.get_mut(&key) {
            job.value = Some(value);
            let (kind, name) = job.owner.clone();
            let _ = self.finished.send((kind, key.namespace, name));
        }
    }

    /// The query of `metric` as its endpoint will run it, the endpoint, and the metric's
    /// interval; or why it cannot run.
    fn prepare(
        &self,
        metric: &AnalysisMetric,
        values: &QueryValues<'_>,
    ) -> Result<(String, &Endpoint, Duration), String> {
        let Some(prometheus) = &metric.provider.prometheus else {
            return Err("the metric names no provider".into());
        };
        let query = render_query(&prometheus.query, Some(values), metric.role.is_some())?;
        let endpoint = self.endpoint(metric.endpoint())?;
        // Refused here too: a query stored before the endpoint was scoped is sent nowhere.
        let query = endpoint.tenancy.apply(&query, values.namespace)?;
        // A metric measured once has no interval: a status reset may still not ask again
        // more often than this.
        let interval = match metric.interval_seconds() {
            0 => ONCE_SPACING,
            seconds => Duration::from_secs(seconds),
        };
        Ok((query, endpoint, interval))
    }
}

/// What the worker holds for a query ([`Providers::lookup`]).
enum Lookup {
    /// Its query runs.
    Running,
    /// An answer to use, and when its query was sent (Unix seconds).
    Answer(Result<f64, String>, i64),
    /// Nothing to use: a new query is due.
    Due,
}

/// A draining pod whose requests in flight a RoleSet reads.
#[derive(Clone, Copy, Debug)]
pub struct InFlightAsk<'a> {
    /// The pod's name (`{{pod}}`).
    pub pod: &'a str,
    /// Its UID: a pod of the same name later is another drain.
    pub pod_uid: &'a str,
    /// Its role (`{{role}}`).
    pub role: &'a str,
    /// Its role's drain query.
    pub query: &'a DrainQuery,
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
/// one sample. No sample is "no data"; several are a query to aggregate. Read into typed
/// shapes that skip every label set: no `Value` of the answer is built.
fn number_of(status: http::StatusCode, body: &[u8]) -> Result<f64, String> {
    use serde::de::IgnoredAny;
    use serde_json::value::RawValue;
    #[derive(Deserialize)]
    struct Answer<'a> {
        status: &'a str,
        #[serde(default)]
        error: Option<String>,
        #[serde(default, borrow)]
        data: Option<Data<'a>>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Data<'a> {
        result_type: &'a str,
        #[serde(borrow)]
        result: &'a RawValue,
    }
    /// `[time, "value"]`.
    type Sample = (IgnoredAny, String);
    /// A vector's element; its `metric` (the label set) is skipped.
    #[derive(Deserialize)]
    struct Element {
        value: Option<Sample>,
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
    let text = match data.result_type {
        "scalar" => {
            let (_, value): Sample =
                serde_json::from_str(data.result.get()).map_err(|_| "a scalar without a value")?;
            value
        }
        "vector" => {
            let mut elements: Vec<Element> = serde_json::from_str(data.result.get())
                .map_err(|_| "a vector that is not a list of samples")?;
            match elements.len() {
                0 => return Err("no data: the query matched no series".into()),
                1 => {
                    elements
                        .pop()
                        .and_then(|e| e.value)
                        .ok_or("a sample without a value")?
                        .1
                }
                many => {
                    return Err(format!(
                        "the query gave {many} series; aggregate it to one (e.g. sum(...))"
                    ));
                }
            }
        }
        other => {
            return Err(format!(
                "a {} result; the query must give one number",
                without_series(&other.chars().take(32).collect::<String>())
            ));
        }
    };
    // Prometheus writes NaN and ±Inf as "NaN", "+Inf", "-Inf".
    text.parse::<f64>().map_err(|_| {
        format!(
            "the sample value {:?} is not a number",
            text.chars().take(32).collect::<String>()
        )
    })
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

    /// A provider counting its queries, and keeping them: answers `answer`, or never.
    struct Counting {
        queries: std::sync::atomic::AtomicUsize,
        sent: std::sync::Mutex<Vec<String>>,
        answer: Option<f64>,
    }

    impl MetricsProvider for Counting {
        fn query<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<f64, String>> {
            self.queries
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.sent.lock().unwrap().push(query.to_string());
            let answer = self.answer;
            Box::pin(async move {
                match answer {
                    Some(value) => Ok(value),
                    None => futures::future::pending().await,
                }
            })
        }
    }

    fn providers(endpoints: &[(&str, Arc<Counting>)]) -> Arc<Providers> {
        let by_name = endpoints
            .iter()
            .map(|(name, provider)| {
                let endpoint = Endpoint {
                    provider: provider.clone(),
                    tenancy: Tenancy::default(),
                    timeout: Duration::from_secs(2),
                };
                (name.to_string(), endpoint)
            })
            .collect();
        Arc::new(Providers::new(by_name))
    }

    fn counting(answer: Option<f64>) -> Arc<Counting> {
        Arc::new(Counting {
            queries: Default::default(),
            sent: Default::default(),
            answer,
        })
    }

    /// A StormService of `namespace` whose step 1 measures `up` on `endpoint` every 30 s.
    fn analysed(namespace: &str, name: &str, endpoint: &str) -> StormService {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": name, "namespace": namespace, "uid": format!("{namespace}-{name}")},
            "spec": {"selector": {"matchLabels": {"app": "a"}},
                "template": {"metadata": {"labels": {"app": "a"}}, "spec": {"roles": [{"name": "decode"}]}},
                "updateStrategy": {"canary": {"steps": [{"setWeight": 50}, {"analysis": {"metrics": [
                    {"name": "up", "interval": "30s", "count": 3, "successCondition": "result > 0",
                     "provider": {"prometheus": {"endpoint": endpoint, "query": "sum(up)"}}}]}}]}}}
        }))
        .unwrap()
    }

    const STEP: Due = Due {
        subject: Subject::Step(1),
        metric: 0,
    };
    const REVISIONS: RevisionNames<'static> = RevisionNames {
        canary: "r2",
        stable: "r1",
    };

    /// A reconcile never waits for a query: the first hands it over, the answer brings the
    /// StormService back, the next takes it. Due again at once (a status reset says so), it
    /// is given the same answer, not a new query.
    #[tokio::test]
    async fn measurements_run_off_the_reconcile_and_keep_the_operators_cadence() {
        use futures::StreamExt;
        let healthy = counting(Some(1.0));
        let providers = providers(&[("default", healthy.clone())]);
        let mut finished = Box::pin(providers.finished::<StormService>());
        let service = analysed("team-a", "llm", "default");
        assert_eq!(providers.measure(&service, REVISIONS, vec![STEP]), []);
        let back = tokio::time::timeout(Duration::from_secs(5), finished.next())
            .await
            .expect("the answer brings the reconcile back")
            .unwrap();
        assert_eq!(
            (back.name.as_str(), back.namespace.as_deref()),
            ("llm", Some("team-a"))
        );
        let taken = providers.measure(&service, REVISIONS, vec![STEP]);
        assert_eq!(
            taken,
            [Measured {
                due: STEP,
                value: Ok(1.0)
            }]
        );
        for _ in 0..5 {
            let again = providers.measure(&service, REVISIONS, vec![STEP]);
            assert_eq!(
                again,
                [Measured {
                    due: STEP,
                    value: Ok(1.0)
                }]
            );
        }
        assert_eq!(healthy.queries.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A RoleSet's draining pods are read off the reconcile: the first pass hands the
    /// queries over (each naming its pod, scoped to the namespace), each answer brings the
    /// RoleSet back — not a StormService of the same name — and passes within the interval
    /// take the same readings without a new query.
    #[tokio::test]
    async fn readings_of_draining_pods_bring_their_roleset_back_and_keep_their_interval() {
        use futures::{FutureExt, StreamExt};
        let busy = counting(Some(3.0));
        let providers = providers(&[("default", busy.clone())]);
        let mut rolesets = Box::pin(providers.finished::<RoleSet>());
        let mut services = Box::pin(providers.finished::<StormService>());
        let roleset: RoleSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "llm", "namespace": "team-a", "uid": "rs-uid"},
            "spec": {"roles": []}
        }))
        .unwrap();
        let query: DrainQuery = serde_json::from_value(serde_json::json!({
            "query": r#"sum(running{pod="{{pod}}"})"#, "interval": "30s"}))
        .unwrap();
        let asks = || {
            [("a", "uid-a"), ("b", "uid-b")].map(|(pod, pod_uid)| InFlightAsk {
                pod,
                pod_uid,
                role: "decode",
                query: &query,
            })
        };
        assert!(providers.in_flight(&roleset, asks()).is_empty());
        for _ in 0..2 {
            let back = tokio::time::timeout(Duration::from_secs(5), rolesets.next())
                .await
                .expect("an answer brings the RoleSet back")
                .unwrap();
            assert_eq!(back.name, "llm");
        }
        assert!(
            services.next().now_or_never().is_none(),
            "no StormService is due"
        );
        for _ in 0..3 {
            let read = providers.in_flight(&roleset, asks());
            let values: Vec<(&str, &Result<f64, String>)> = read
                .iter()
                .map(|(pod, (value, _))| (pod.as_str(), value))
                .collect();
            assert_eq!(values, [("a", &Ok(3.0)), ("b", &Ok(3.0))]);
        }
        assert_eq!(busy.queries.load(std::sync::atomic::Ordering::SeqCst), 2);
        let mut sent = busy.sent.lock().unwrap().clone();
        sent.sort();
        assert_eq!(
            sent,
            [
                r#"sum(running{namespace="team-a",pod="a"})"#,
                r#"sum(running{namespace="team-a",pod="b"})"#
            ]
        );
    }

    /// One namespace's queries to an endpoint that never answers hold at most its share of
    /// the permits; another namespace's measurement is taken meanwhile; a query its
    /// endpoint cannot scope is answered at once, sent nowhere.
    #[tokio::test]
    async fn one_namespace_holds_at_most_its_share() {
        use futures::StreamExt;
        let (silent, healthy) = (counting(None), counting(Some(2.0)));
        let providers = providers(&[("silent", silent.clone()), ("default", healthy.clone())]);
        let mut finished = Box::pin(providers.finished::<StormService>());
        for i in 0..16 {
            let slow = analysed("team-a", &format!("slow-{i}"), "silent");
            assert_eq!(providers.measure(&slow, REVISIONS, vec![STEP]), []);
        }
        let other = analysed("team-b", "llm", "default");
        assert_eq!(providers.measure(&other, REVISIONS, vec![STEP]), []);
        tokio::time::timeout(Duration::from_secs(5), finished.next())
            .await
            .expect("team-b's answer");
        assert_eq!(
            providers.measure(&other, REVISIONS, vec![STEP]),
            [Measured {
                due: STEP,
                value: Ok(2.0)
            }]
        );
        // Sent: team-a's share of the silent queries, none of the others.
        tokio::task::yield_now().await;
        assert_eq!(
            silent.queries.load(std::sync::atomic::Ordering::SeqCst),
            NAMESPACE_SHARE
        );
        let mut unscoped = analysed("team-c", "llm", "default");
        let metric = &mut unscoped
            .spec
            .update_strategy
            .as_mut()
            .unwrap()
            .canary
            .as_mut()
            .unwrap()
            .steps
            .as_mut()
            .unwrap()[1]
            .analysis
            .as_mut()
            .unwrap()
            .metrics[0];
        metric.provider.prometheus.as_mut().unwrap().query = r#"up{namespace="team-b"}"#.into();
        let refused = providers.measure(&unscoped, REVISIONS, vec![STEP]);
        assert!(
            matches!(&refused[..], [Measured { value: Err(why), .. }] if why.contains("itself")),
            "{refused:?}"
        );
        assert_eq!(healthy.queries.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// The worker's memory is bounded: full, it forgets the oldest answer already taken to
    /// make room, never a running measurement or an answer not yet taken.
    #[test]
    fn the_worker_forgets_the_oldest_taken_answer_when_full() {
        let key = |i: usize| JobKey {
            namespace: "team-a".into(),
            uid: format!("uid-{i}"),
            asked: Asked::Measurement(STEP),
        };
        let start = Instant::now();
        let job = |i: usize, handed: bool| Job {
            owner: (StormService::kind(&()), format!("s-{i}")),
            sent_at: 0,
            query: "up".into(),
            started: start + Duration::from_millis(i as u64),
            interval: Duration::from_secs(30),
            value: handed.then_some(Ok(1.0)),
            handed,
        };
        let mut jobs = Jobs::default();
        for i in 0..MAX_JOBS {
            jobs.by_key.insert(key(i), job(i, i % 2 == 1));
        }
        assert!(jobs.room_for(&key(MAX_JOBS)));
        assert_eq!(jobs.by_key.len(), MAX_JOBS - 1);
        assert!(
            !jobs.by_key.contains_key(&key(1)),
            "the oldest taken answer"
        );
        assert!(
            jobs.by_key.contains_key(&key(0)),
            "a running measurement stays"
        );
        let mut running = Jobs::default();
        for i in 0..MAX_JOBS {
            running.by_key.insert(key(i), job(i, false));
        }
        assert!(!running.room_for(&key(MAX_JOBS)));
        assert!(running.room_for(&key(0)), "a measurement it tracks");
    }

    /// Answers are forgotten once older than any interval, by the operator's clock (paused
    /// here, so the test runs no time), and a running measurement never.
    #[tokio::test(start_paused = true)]
    async fn the_worker_forgets_answers_older_than_any_interval() {
        let key = |i: usize| JobKey {
            namespace: "team-a".into(),
            uid: format!("uid-{i}"),
            asked: Asked::Measurement(STEP),
        };
        let job = |value: Option<Result<f64, String>>| Job {
            owner: (StormService::kind(&()), "s".into()),
            sent_at: 0,
            query: "up".into(),
            started: Instant::now(),
            interval: Duration::from_secs(30),
            handed: value.is_some(),
            value,
        };
        let mut jobs = Jobs::default();
        jobs.by_key.insert(key(0), job(Some(Ok(1.0))));
        jobs.by_key.insert(key(1), job(None));
        tokio::time::advance(REMEMBERED - Duration::from_secs(1)).await;
        jobs.prune();
        assert_eq!(jobs.by_key.len(), 2, "both still within the window");
        tokio::time::advance(Duration::from_secs(1)).await;
        jobs.prune();
        assert!(!jobs.by_key.contains_key(&key(0)), "the old answer goes");
        assert!(jobs.by_key.contains_key(&key(1)), "a running one stays");
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
