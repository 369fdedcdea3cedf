//! Canary analysis (docs/rollouts.md#canary-analysis): metrics a canary step (or the whole
//! canary, in the background) measures from a Prometheus the cluster admin configured, and the
//! status that keeps every measurement's timing, so an operator restart neither repeats nor
//! skips one.
//!
//! Shaped after Argo Rollouts' `AnalysisTemplate` metrics, with one difference on purpose: a
//! step names a provider endpoint the admin configured (`squall run --analysis-config`), never
//! an address, so no StormService can make the operator call an address of its choosing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::borrowed::IntOrStr;
use super::duration::pause_seconds;

/// Most metrics per analysis: each is one query per measurement, so the bound caps the
/// queries one StormService can cause per reconcile.
pub const MAX_ANALYSIS_METRICS: usize = 10;
/// Most measurements a metric may take (`count`): a step's analysis ends.
pub const MAX_ANALYSIS_COUNT: i32 = 100;
/// Measurements kept per metric in `canaryStatus` (the counters keep the totals).
pub const MEASUREMENTS_KEPT: usize = 10;
/// Shortest `interval`, seconds: a Prometheus scrape interval is rarely below this.
pub const MIN_ANALYSIS_INTERVAL: u64 = 1;
/// Longest `interval` and `initialDelay`, seconds.
pub const MAX_ANALYSIS_WAIT: u64 = 3600;
/// Longest query, bytes: a query goes into the request line of every measurement.
pub const MAX_QUERY_BYTES: usize = 4096;
/// Longest query once its placeholders are filled, bytes: a query of 4,096 bytes made of
/// placeholders for 253-byte revision names would otherwise be 130 KB per measurement.
pub const MAX_RENDERED_QUERY_BYTES: usize = 16 * 1024;
/// Longest metric name, bytes (it appears in events and conditions).
pub const MAX_METRIC_NAME_BYTES: usize = 63;
/// The provider endpoint a metric uses when it names none.
pub const DEFAULT_ENDPOINT: &str = "default";
/// Measurements a metric takes when `count` is absent.
pub const DEFAULT_ANALYSIS_COUNT: i32 = 1;

/// An analysis: metrics measured side by side. It fails as soon as one metric fails, is
/// inconclusive as soon as one is, and succeeds when every metric has taken `count`
/// measurements.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct Analysis {
    /// The metrics, at least one and at most 10, names unique.
    #[serde(default)]
    #[schemars(length(max = MAX_ANALYSIS_METRICS))]
    pub metrics: Vec<AnalysisMetric>,
}

/// One metric of an analysis.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct AnalysisMetric {
    /// Name, unique in its analysis; status, events and conditions report by it.
    #[serde(default)]
    pub name: String,
    /// Where the number comes from.
    #[serde(default)]
    pub provider: MetricProvider,
    /// The role `{{role}}` stands for in the query, so a canary can judge each role on its
    /// own (prefill on time to first token, decode on inter-token latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// When a measurement is good, over `result` (the query's number), e.g.
    /// `result < 0.01`. With `failureCondition` also set, a measurement neither condition
    /// holds for is inconclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    /// When a measurement is bad, e.g. `result >= 0.05`; it wins over `successCondition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<String>,
    /// Time between measurements: seconds, or a duration such as `30s`, `5m`
    /// (1 s to 1 h). Required when `count` is above 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<IntOrString>,
    /// Measurements to take (1 to 100); absent means 1 in a step, and as many as the canary
    /// lasts in the background analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_ANALYSIS_COUNT))]
    pub count: Option<i32>,
    /// Failed measurements tolerated; one more fails the metric. Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_ANALYSIS_COUNT))]
    pub failure_limit: Option<i32>,
    /// Inconclusive measurements tolerated (no data, the provider unreachable, neither
    /// condition held); one more makes the metric inconclusive. Absent means 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = MAX_ANALYSIS_COUNT))]
    pub inconclusive_limit: Option<i32>,
    /// Wait before the first measurement (up to 1 h), e.g. for traffic to reach the canary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay: Option<IntOrString>,
}

/// The provider of a metric: exactly one.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct MetricProvider {
    /// A PromQL instant query against a Prometheus endpoint the cluster admin configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusMetric>,
}

/// A Prometheus query.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct PrometheusMetric {
    /// Name of the admin-configured endpoint (`squall run --analysis-config`); absent means
    /// `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// PromQL instant query giving one number (a scalar, or a vector of one sample: wrap
    /// it in `sum(...)`). Placeholders: `{{revision.canary}}`, `{{revision.stable}}`,
    /// `{{role}}`, `{{namespace}}`, `{{name}}`.
    #[serde(default)]
    pub query: String,
}

/// State of one analysis in `canaryStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct AnalysisStatus {
    /// The step this analysis belongs to; absent for the background analysis.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<i32>,
    /// Where the analysis stands.
    pub phase: AnalysisPhase,
    /// When it started: the first measurement of each metric is due `initialDelay` later.
    pub start_time: Time,
    /// One entry per metric, in the spec's order.
    #[serde(default)]
    #[schemars(length(max = MAX_ANALYSIS_METRICS))]
    pub metrics: Vec<MetricStatus>,
    /// What decided the phase, e.g. which metric failed with which value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::STATUS_MESSAGE_CHARS))]
    pub message: Option<String>,
}

/// Phase of an analysis or of one metric.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum AnalysisPhase {
    /// Measurements are still due.
    Running,
    /// Every measurement needed was taken and the failures stayed within their limits.
    Successful,
    /// More measurements failed than `failureLimit` allows.
    Failed,
    /// More measurements were inconclusive than `inconclusiveLimit` allows.
    Inconclusive,
}

/// Measurements of one metric.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct MetricStatus {
    /// The metric's name.
    pub name: String,
    /// Where the metric stands.
    pub phase: AnalysisPhase,
    /// Measurements taken.
    #[serde(default)]
    pub measured: i32,
    /// Of those, successful.
    #[serde(default)]
    pub successful: i32,
    /// Of those, failed.
    #[serde(default)]
    pub failed: i32,
    /// Of those, inconclusive.
    #[serde(default)]
    pub inconclusive: i32,
    /// The last 10 measurements, oldest first.
    #[serde(default)]
    #[schemars(length(max = MEASUREMENTS_KEPT))]
    pub measurements: Vec<Measurement>,
}

/// One measurement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    /// Its number within the metric, from 1: the history shows none repeated or skipped.
    pub number: i32,
    /// How it was judged.
    pub phase: MeasurementPhase,
    /// The number the query gave (as text: it may be `NaN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// When it was taken; the next is due `interval` later.
    pub time: Time,
    /// Why it is inconclusive, when it is (e.g. the provider did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = super::bounded_status::MEASUREMENT_MESSAGE_BYTES))]
    pub message: Option<String>,
}

/// How a measurement was judged.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MeasurementPhase {
    /// The success condition held (or the failure condition did not).
    Successful,
    /// The failure condition held (or the success condition did not).
    Failed,
    /// No number, or neither condition held.
    Inconclusive,
}

impl AnalysisMetric {
    /// Measurements to take.
    pub fn count_or_default(&self) -> i32 {
        self.count.unwrap_or(DEFAULT_ANALYSIS_COUNT)
    }

    /// Failed measurements tolerated.
    pub fn failure_limit_or_default(&self) -> i32 {
        self.failure_limit.unwrap_or(0)
    }

    /// Inconclusive measurements tolerated.
    pub fn inconclusive_limit_or_default(&self) -> i32 {
        self.inconclusive_limit.unwrap_or(0)
    }

    /// Seconds between measurements (validation denies an unreadable one; it reads as 0).
    pub fn interval_seconds(&self) -> u64 {
        wait_seconds(self.interval.as_ref())
    }

    /// Seconds before the first measurement.
    pub fn initial_delay_seconds(&self) -> u64 {
        wait_seconds(self.initial_delay.as_ref())
    }

    /// The provider endpoint the metric queries.
    pub fn endpoint(&self) -> &str {
        self.provider
            .prometheus
            .as_ref()
            .and_then(|p| p.endpoint.as_deref())
            .unwrap_or(DEFAULT_ENDPOINT)
    }
}

fn wait_seconds(duration: Option<&IntOrString>) -> u64 {
    pause_seconds(duration.map(IntOrStr::from).as_ref())
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// What a query's placeholders stand for.
#[derive(Clone, Copy, Debug)]
pub struct QueryValues<'a> {
    /// `{{revision.canary}}`: the revision being rolled out (pods' `storm-service-revision`).
    pub canary_revision: &'a str,
    /// `{{revision.stable}}`: the revision the canary started from.
    pub stable_revision: &'a str,
    /// `{{role}}`: the metric's `role`.
    pub role: Option<&'a str>,
    /// `{{namespace}}`.
    pub namespace: &'a str,
    /// `{{name}}`: the StormService.
    pub name: &'a str,
}

/// The placeholders a query may use.
pub const PLACEHOLDERS: [&str; 5] = [
    "revision.canary",
    "revision.stable",
    "role",
    "namespace",
    "name",
];

/// The query with its placeholders filled in; `values` None only checks them. The error
/// names the first placeholder that is unknown, unclosed, or (`{{role}}` without a `role`)
/// has no value, or says the filled query would pass [`MAX_RENDERED_QUERY_BYTES`] (found
/// before it is built).
pub fn render_query(
    query: &str,
    values: Option<&QueryValues<'_>>,
    has_role: bool,
) -> Result<String, String> {
    fill(query, &PLACEHOLDERS, |name| match name {
        "role" if !has_role => Err("uses `{{role}}` but the metric has no `role`".into()),
        _ => Ok(values.map(|v| match name {
            "revision.canary" => v.canary_revision,
            "revision.stable" => v.stable_revision,
            "role" => v.role.unwrap_or_default(),
            "namespace" => v.namespace,
            _ => v.name,
        })),
    })
}

/// `query` with each `{{name}}` of `known` replaced by `value(name)` (None: only checked).
/// The error names the first placeholder that is unknown or unclosed, passes on `value`'s,
/// or says the filled query would pass [`MAX_RENDERED_QUERY_BYTES`] (found before it is
/// built). The one placeholder grammar of analysis and drain queries.
pub fn fill<'v>(
    query: &str,
    known: &[&str],
    value: impl Fn(&str) -> Result<Option<&'v str>, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(query.len() + 64);
    let mut rest = query;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| "a `{{` is not closed by `}}`".to_string())?;
        let name = after[..close].trim();
        if !known.contains(&name) {
            let known: Vec<String> = known.iter().map(|p| format!("{{{{{p}}}}}")).collect();
            return Err(format!(
                "unknown placeholder `{{{{{name}}}}}`; known: {}",
                known.join(", ")
            ));
        }
        let value = value(name)?.unwrap_or_default();
        rest = &after[close + 2..];
        if out.len() + value.len() + rest.len() > MAX_RENDERED_QUERY_BYTES {
            return Err(format!(
                "the query is longer than {MAX_RENDERED_QUERY_BYTES} bytes once its placeholders are filled"
            ));
        }
        out.push_str(value);
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> QueryValues<'static> {
        QueryValues {
            canary_revision: "llm-7f9c",
            stable_revision: "llm-5d2a",
            role: Some("decode"),
            namespace: "prod",
            name: "llm",
        }
    }

    #[test]
    fn placeholders_are_filled_in() {
        let query = r#"sum(rate(errors{namespace="{{namespace}}",service="{{ name }}",revision="{{revision.canary}}",role="{{role}}"}[1m])) / ignoring() {{revision.stable}}"#;
        assert_eq!(
            render_query(query, Some(&values()), true).unwrap(),
            r#"sum(rate(errors{namespace="prod",service="llm",revision="llm-7f9c",role="decode"}[1m])) / ignoring() llm-5d2a"#
        );
        assert_eq!(render_query("up", None, false).unwrap(), "up");
    }

    proptest::proptest! {
        /// Whatever the query (within its own bound) and the names, the filled query stays
        /// within its bound, or the render says so.
        #[test]
        fn a_filled_query_never_passes_its_bound(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("{{revision.canary}}".to_string()),
                    proptest::strategy::Just("{{ name }}".to_string()),
                    "[a-z(){}=\"]{0,40}",
                ],
                0..400,
            ),
            name_bytes in 1usize..=253,
        ) {
            let query: String = parts.concat();
            proptest::prop_assume!(query.len() <= MAX_QUERY_BYTES);
            let long = "r".repeat(name_bytes);
            let filled = QueryValues { canary_revision: &long, name: &long, ..values() };
            match render_query(&query, Some(&filled), true) {
                Ok(rendered) => proptest::prop_assert!(rendered.len() <= MAX_RENDERED_QUERY_BYTES),
                Err(why) => proptest::prop_assert!(
                    why.contains("longer than") || why.contains("placeholder") || why.contains("not closed"),
                    "{}", why
                ),
            }
        }
    }

    #[test]
    fn a_query_of_placeholders_for_long_names_is_refused_not_built() {
        let query = "{{revision.canary}}".repeat(MAX_QUERY_BYTES / 19);
        let long = "r".repeat(253);
        let filled = QueryValues {
            canary_revision: &long,
            ..values()
        };
        let why = render_query(&query, Some(&filled), false).unwrap_err();
        assert!(why.contains("longer than 16384 bytes"), "{why}");
        let short = QueryValues {
            canary_revision: "llm-7f9c",
            ..values()
        };
        assert!(render_query(&query, Some(&short), false).is_ok());
    }

    #[test]
    fn a_bad_placeholder_is_named() {
        assert!(
            render_query("x{{revision.new}}", None, true)
                .unwrap_err()
                .contains("`{{revision.new}}`")
        );
        assert!(
            render_query("x{{role", None, true)
                .unwrap_err()
                .contains("not closed")
        );
        assert!(
            render_query("{{role}}", Some(&values()), false)
                .unwrap_err()
                .contains("no `role`")
        );
    }

    #[test]
    fn defaults() {
        let metric = AnalysisMetric::default();
        assert_eq!(metric.count_or_default(), 1);
        assert_eq!(metric.failure_limit_or_default(), 0);
        assert_eq!(metric.inconclusive_limit_or_default(), 0);
        assert_eq!(metric.interval_seconds(), 0);
        assert_eq!(metric.endpoint(), DEFAULT_ENDPOINT);
        let metric = AnalysisMetric {
            interval: Some(IntOrString::String("1m30s".into())),
            initial_delay: Some(IntOrString::Int(5)),
            ..AnalysisMetric::default()
        };
        assert_eq!(
            (metric.interval_seconds(), metric.initial_delay_seconds()),
            (90, 5)
        );
    }
}
