//! Prometheus metrics (docs/architecture.md#observability), served on the admin port's `/metrics`.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::admission::hook::Hook;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    webhook: String,
    kind: String,
    operation: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    controller: String,
    verb: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    namespace: String,
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MeasurementLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AnalysisMetricLabels {
    namespace: String,
    name: String,
    metric: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleReplicaLabels {
    namespace: String,
    name: String,
    role: String,
    revision: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabels {
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

/// How an admission request ended: the `verdict` label of `squall_admission_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionOutcome {
    /// Allowed unchanged.
    Allowed,
    /// Allowed with a patch.
    Patched,
    /// Denied.
    Denied,
    /// Not an AdmissionReview (HTTP 400).
    BadRequest,
    /// Over the body limit (HTTP 413).
    TooLarge,
    /// Over an in-flight bound (HTTP 503).
    Overloaded,
    /// The review failed (HTTP 500).
    Error,
}

impl AdmissionOutcome {
    /// Every outcome, in discriminant order.
    pub const ALL: [Self; 7] = [
        Self::Allowed,
        Self::Patched,
        Self::Denied,
        Self::BadRequest,
        Self::TooLarge,
        Self::Overloaded,
        Self::Error,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Self::Allowed => "allowed",
            Self::Patched => "patched",
            Self::Denied => "denied",
            Self::BadRequest => "bad_request",
            Self::TooLarge => "too_large",
            Self::Overloaded => "overloaded",
            Self::Error => "error",
        }
    }
}

/// 1 s .. ~9 h: rollouts and pauses that wait for people.
fn rollout_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

fn latency_histogram() -> Histogram {
    // 0.1 ms .. ~1.6 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 15))
}

/// The process's metrics.
pub struct Metrics {
    registry: Mutex<Registry>,
    /// By `Hook::index() * AdmissionOutcome::ALL.len() + outcome`, resolved once: a
    /// request only increments.
    admission_requests: Vec<Counter>,
    /// By `Hook::index()`.
    admission_duration: Vec<Histogram>,
    cert_expiry: Gauge,
    api_writes: Family<WriteLabels, Counter>,
    api_requests: Family<WriteLabels, Counter>,
    cache_objects: Family<KindLabels, Gauge>,
    cache_bytes: Family<KindLabels, Gauge>,
    foreign_owner_claims: Family<KindLabels, Counter>,
    undecodable_objects: Family<KindLabels, Gauge>,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    leader: Gauge,
    aibrix_controller_active: Gauge,
    aibrix_lease_read_errors: Counter,
    /// What keeps the controllers from working as they should, by source, for `/readyz`.
    degraded: Mutex<std::collections::BTreeMap<&'static str, String>>,
    step_transitions: Family<TriggerLabels, Counter>,
    rollout_step: Family<ObjectLabels, Gauge>,
    invalid_spec: Family<ObjectLabels, Gauge>,
    role_replicas: Family<RoleReplicaLabels, Gauge>,
    /// Roles with `role_replicas` series, per StormService (to drop them with it).
    roles_seen:
        Mutex<std::collections::BTreeMap<(String, String), std::collections::BTreeSet<String>>>,
    rollout_duration: Family<OutcomeLabels, Histogram, fn() -> Histogram>,
    manual_pause: Histogram,
    analysis_measurements: Family<MeasurementLabels, Counter>,
    analysis_failed: Family<AnalysisMetricLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Metrics with `analysis_failed` series, per StormService (to drop them with it).
    failed_metrics_seen:
        Mutex<std::collections::BTreeMap<(String, String), std::collections::BTreeSet<String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let admission_requests = Family::<AdmissionLabels, Counter>::default();
        registry.register(
            "squall_admission_requests",
            "Admission requests by webhook, kind, operation and verdict (allowed, patched, denied, bad_request, too_large, overloaded, error)",
            admission_requests.clone(),
        );
        let admission_requests = Hook::ALL
            .iter()
            .flat_map(|hook| {
                AdmissionOutcome::ALL.map(|outcome| {
                    admission_requests
                        .get_or_create(&AdmissionLabels {
                            webhook: hook.name().into(),
                            kind: hook.kind().into(),
                            operation: hook.operation().into(),
                            verdict: outcome.label().into(),
                        })
                        .clone()
                })
            })
            .collect();
        let admission_duration =
            Family::<WebhookLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "squall_admission_duration_seconds",
            "Time to answer an admission request",
            admission_duration.clone(),
        );
        let admission_duration = Hook::ALL
            .iter()
            .map(|hook| {
                admission_duration
                    .get_or_create(&WebhookLabels {
                        webhook: hook.name().into(),
                    })
                    .clone()
            })
            .collect();
        let cert_expiry = Gauge::default();
        registry.register(
            "squall_webhook_cert_expiry_timestamp_seconds",
            "Expiry (Unix time) of the webhook serving certificate",
            cert_expiry.clone(),
        );
        let step_transitions = Family::<TriggerLabels, Counter>::default();
        registry.register(
            "squall_step_transitions",
            "Canary step transitions, by what triggered them (watch, timer, user)",
            step_transitions.clone(),
        );
        let rollout_step = Family::<ObjectLabels, Gauge>::default();
        registry.register(
            "squall_rollout_step",
            "Current canary step of a StormService",
            rollout_step.clone(),
        );
        let invalid_spec = Family::<ObjectLabels, Gauge>::default();
        registry.register(
            "squall_invalid_spec",
            "1 while a StormService's spec fails validation (it is not rolled)",
            invalid_spec.clone(),
        );
        let role_replicas = Family::<RoleReplicaLabels, Gauge>::default();
        registry.register(
            "squall_role_replicas",
            "Replicas of a StormService role on the stable or canary revision, updated or ready",
            role_replicas.clone(),
        );
        let rollout_duration =
            Family::<OutcomeLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                rollout_histogram,
            );
        registry.register(
            "squall_rollout_duration_seconds",
            "Canary rollouts from the new revision to completion or abort, by outcome",
            rollout_duration.clone(),
        );
        let manual_pause = rollout_histogram();
        registry.register(
            "squall_manual_pause_seconds",
            "Time canary pause steps waited for a promote",
            manual_pause.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "squall_leader",
            "1 while this process holds the controllers' Lease (or runs them without election)",
            leader.clone(),
        );
        let aibrix_controller_active = Gauge::default();
        registry.register(
            "squall_aibrix_controller_active",
            "1 while AIBrix's controller-manager holds its leader Lease and squall leaves every object to it",
            aibrix_controller_active.clone(),
        );
        let aibrix_lease_read_errors = Counter::default();
        registry.register(
            "squall_aibrix_lease_read_errors",
            "Reads of AIBrix's leader Lease that failed (squall keeps what it last read meanwhile)",
            aibrix_lease_read_errors.clone(),
        );
        let api_writes = Family::<WriteLabels, Counter>::default();
        registry.register(
            "squall_api_writes",
            "API writes made by the controllers, by controller, verb and resource",
            api_writes.clone(),
        );
        let api_requests = Family::<WriteLabels, Counter>::default();
        registry.register(
            "squall_api_requests",
            "Requests sent to the API server, by client (a controller, the caches, certificates, \
             leader election), verb (get, list, watch, create, update, patch, delete) and resource",
            api_requests.clone(),
        );
        let cache_objects = Family::<KindLabels, Gauge>::default();
        registry.register(
            "squall_cache_objects",
            "Objects held in the controllers' shared caches, by resource",
            cache_objects.clone(),
        );
        let cache_bytes = Family::<KindLabels, Gauge>::default();
        registry.register(
            "squall_cache_bytes",
            "Size of the objects held in the shared caches (as JSON), by resource",
            cache_bytes.clone(),
        );
        let foreign_owner_claims = Family::<KindLabels, Counter>::default();
        registry.register(
            "squall_foreign_owner_claims",
            "Children ignored because their controller ownerReference names an owner in another \
             namespace (a namespaced owner only ever owns children in its own namespace)",
            foreign_owner_claims.clone(),
        );
        let undecodable_objects = Family::<KindLabels, Gauge>::default();
        registry.register(
            "squall_undecodable_objects",
            "Watched objects the shared caches skip because they fail to decode (each is logged \
             by namespace and name, and served again once fixed)",
            undecodable_objects.clone(),
        );
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        registry.register(
            "squall_reconciles",
            "Reconciles by controller and outcome (ok; waiting for children to go; behind: skipped until the cache shows our last status write; error)",
            reconciles.clone(),
        );
        let reconcile_duration =
            Family::<ControllerLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram,
            );
        registry.register(
            "squall_reconcile_duration_seconds",
            "Time one reconcile took, by controller",
            reconcile_duration.clone(),
        );
        let analysis_measurements = Family::<MeasurementLabels, Counter>::default();
        registry.register(
            "squall_analysis_measurements",
            "Canary analysis measurements taken, by whether the provider gave a number (number) or not (none: inconclusive)",
            analysis_measurements.clone(),
        );
        let analysis_failed =
            Family::<AnalysisMetricLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "squall_canary_analysis_failed_value",
            "The value with which an analysis metric failed and aborted a StormService's canary (until the StormService is deleted)",
            analysis_failed.clone(),
        );
        Self {
            registry: Mutex::new(registry),
            reconciles,
            reconcile_duration,
            admission_requests,
            admission_duration,
            cert_expiry,
            api_writes,
            api_requests,
            cache_objects,
            cache_bytes,
            foreign_owner_claims,
            undecodable_objects,
            leader,
            aibrix_controller_active,
            aibrix_lease_read_errors,
            degraded: Mutex::default(),
            step_transitions,
            rollout_step,
            invalid_spec,
            role_replicas,
            roles_seen: Mutex::default(),
            rollout_duration,
            manual_pause,
            analysis_measurements,
            analysis_failed,
            failed_metrics_seen: Mutex::default(),
        }
    }
}

impl Metrics {
    /// Records one admission request.
    pub fn admission(&self, hook: Hook, outcome: AdmissionOutcome, took: Duration) {
        self.admission_requests[hook.index() * AdmissionOutcome::ALL.len() + outcome as usize]
            .inc();
        self.admission_duration[hook.index()].observe(took.as_secs_f64());
    }

    /// Records one reconcile: `outcome` is `ok`, `waiting` or `error`.
    pub fn reconciled(&self, controller: &str, outcome: &str, took: Duration) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                outcome: outcome.into(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// Counts one API write by a controller.
    pub fn api_write(&self, controller: &str, verb: &str, resource: &str) {
        self.api_writes
            .get_or_create(&WriteLabels {
                controller: controller.into(),
                verb: verb.into(),
                resource: resource.into(),
            })
            .inc();
    }

    /// Counts one request sent to the API server by `client`.
    pub fn api_request(&self, client: &str, verb: &str, resource: &str) {
        self.api_requests
            .get_or_create(&WriteLabels {
                controller: client.into(),
                verb: verb.into(),
                resource: resource.into(),
            })
            .inc();
    }

    /// The size of one kind's shared cache.
    pub fn cache_size(&self, resource: &str, objects: usize, bytes: usize) {
        let labels = KindLabels {
            resource: resource.into(),
        };
        self.cache_objects
            .get_or_create(&labels)
            .set(i64::try_from(objects).unwrap_or(i64::MAX));
        self.cache_bytes
            .get_or_create(&labels)
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Counts one child ignored for claiming an owner in another namespace.
    pub fn foreign_owner_claim(&self, resource: &str) {
        self.foreign_owner_claims
            .get_or_create(&KindLabels {
                resource: resource.into(),
            })
            .inc();
    }

    /// How many watched objects of `resource` the cache skips because they fail to decode.
    pub fn undecodable_objects(&self, resource: &str, count: usize) {
        self.undecodable_objects
            .get_or_create(&KindLabels {
                resource: resource.into(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Counts one canary analysis measurement: whether the provider gave a number.
    pub fn analysis_measurement(&self, number: bool) {
        self.analysis_measurements
            .get_or_create(&MeasurementLabels {
                result: if number { "number" } else { "none" },
            })
            .inc();
    }

    /// An analysis metric of a StormService failed with `value` (NaN when it gave none).
    pub fn analysis_failed(&self, namespace: &str, name: &str, metric: &str, value: f64) {
        self.failed_metrics_seen
            .lock()
            .expect("failed metrics lock")
            .entry((namespace.to_string(), name.to_string()))
            .or_default()
            .insert(metric.to_string());
        self.analysis_failed
            .get_or_create(&AnalysisMetricLabels {
                namespace: namespace.into(),
                name: name.into(),
                metric: metric.into(),
            })
            .set(value);
    }

    /// Counts one canary step transition.
    pub fn step_transition(&self, trigger: &str) {
        self.step_transitions
            .get_or_create(&TriggerLabels {
                trigger: trigger.into(),
            })
            .inc();
    }

    /// The canary step of a StormService.
    pub fn rollout_step(&self, namespace: &str, name: &str, step: i64) {
        self.rollout_step
            .get_or_create(&ObjectLabels {
                namespace: namespace.into(),
                name: name.into(),
            })
            .set(step);
    }

    /// Whether a StormService's spec fails validation.
    pub fn invalid_spec(&self, namespace: &str, name: &str, invalid: bool) {
        self.invalid_spec
            .get_or_create(&ObjectLabels {
                namespace: namespace.into(),
                name: name.into(),
            })
            .set(i64::from(invalid));
    }

    /// Drops the series of a deleted StormService.
    pub fn forget_service(&self, namespace: &str, name: &str) {
        let labels = ObjectLabels {
            namespace: namespace.into(),
            name: name.into(),
        };
        self.rollout_step.remove(&labels);
        self.invalid_spec.remove(&labels);
        let failed = self
            .failed_metrics_seen
            .lock()
            .expect("failed metrics lock")
            .remove(&(namespace.to_string(), name.to_string()))
            .unwrap_or_default();
        for metric in failed {
            self.analysis_failed.remove(&AnalysisMetricLabels {
                namespace: namespace.into(),
                name: name.into(),
                metric,
            });
        }
        let roles = self
            .roles_seen
            .lock()
            .expect("roles lock")
            .remove(&(namespace.to_string(), name.to_string()))
            .unwrap_or_default();
        for role in roles {
            for revision in ["stable", "canary"] {
                for state in ["updated", "ready"] {
                    self.role_replicas.remove(&RoleReplicaLabels {
                        namespace: namespace.into(),
                        name: name.into(),
                        role: role.clone(),
                        revision: revision.into(),
                        state: state.into(),
                    });
                }
            }
        }
    }

    /// A role's replicas: `(stable updated, stable ready, canary updated, canary ready)`.
    pub fn role_replicas(&self, namespace: &str, name: &str, role: &str, counts: [i64; 4]) {
        self.roles_seen
            .lock()
            .expect("roles lock")
            .entry((namespace.to_string(), name.to_string()))
            .or_default()
            .insert(role.to_string());
        let series = [
            ("stable", "updated"),
            ("stable", "ready"),
            ("canary", "updated"),
            ("canary", "ready"),
        ];
        for ((revision, state), value) in series.into_iter().zip(counts) {
            self.role_replicas
                .get_or_create(&RoleReplicaLabels {
                    namespace: namespace.into(),
                    name: name.into(),
                    role: role.into(),
                    revision: revision.into(),
                    state: state.into(),
                })
                .set(value);
        }
    }

    /// A canary rollout ended (`completed` or `aborted`) after `seconds`.
    pub fn rollout_finished(&self, outcome: &str, seconds: f64) {
        self.rollout_duration
            .get_or_create(&OutcomeLabels {
                outcome: outcome.into(),
            })
            .observe(seconds);
    }

    /// A pause step ended by a promote after `seconds`.
    pub fn manual_pause(&self, seconds: f64) {
        self.manual_pause.observe(seconds);
    }

    /// Whether this process runs the controllers.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Whether AIBrix's controller-manager holds its Lease (squall leaves everything to it).
    pub fn set_aibrix_controller_active(&self, active: bool) {
        self.aibrix_controller_active.set(i64::from(active));
    }

    /// Counts a failed read of AIBrix's Lease.
    pub fn aibrix_lease_read_failed(&self) {
        self.aibrix_lease_read_errors.inc();
    }

    /// Says (or, with `None`, clears) what keeps the controllers from working as they
    /// should, as `/readyz` reports it.
    pub fn set_degraded(&self, source: &'static str, problem: Option<String>) {
        let mut degraded = self.degraded.lock().expect("degraded lock");
        match problem {
            Some(problem) => degraded.insert(source, problem),
            None => degraded.remove(source),
        };
    }

    /// Everything [`Self::set_degraded`] holds, one line.
    pub fn degraded(&self) -> Option<String> {
        let degraded = self.degraded.lock().expect("degraded lock");
        (!degraded.is_empty()).then(|| degraded.values().cloned().collect::<Vec<_>>().join("; "))
    }

    /// Records the serving certificate's expiry.
    pub fn cert_expiry(&self, unix_seconds: i64) {
        self.cert_expiry.set(unix_seconds);
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(
            &mut out,
            &self.registry.lock().expect("registry lock"),
        )
        .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_admission_and_certificate_metrics() {
        let metrics = Metrics::default();
        metrics.admission(
            Hook::ValidateStormService,
            AdmissionOutcome::Denied,
            Duration::from_millis(2),
        );
        metrics.cert_expiry(1_800_000_000);
        let text = metrics.render();
        assert!(text.contains(
            r#"squall_admission_requests_total{webhook="vstormservice.squall.dev",kind="StormService",operation="validate",verdict="denied"} 1"#
        ), "{text}");
        // Every (webhook, verdict) series exists from the start; the others stay at 0.
        assert!(text.contains(
            r#"squall_admission_requests_total{webhook="vstormservice.squall.dev",kind="StormService",operation="validate",verdict="allowed"} 0"#
        ), "{text}");
        assert!(text.contains(
            r#"squall_admission_requests_total{webhook="mroleset.squall.dev",kind="RoleSet",operation="mutate",verdict="denied"} 0"#
        ), "{text}");
        assert!(
            text.contains(
                "squall_admission_duration_seconds_count{webhook=\"vstormservice.squall.dev\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("squall_webhook_cert_expiry_timestamp_seconds 1800000000"),
            "{text}"
        );
    }
}
