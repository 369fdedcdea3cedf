//! Drain before delete (docs/rollouts.md#drain-before-delete): a role's pods leave traffic
//! and finish their requests before squall deletes them or updates them in place.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::analysis::{DEFAULT_ENDPOINT, MAX_QUERY_BYTES, fill};
use super::borrowed::IntOrStr;
use super::cached::meta::Labelled;
use super::duration::pause_seconds;
use super::keys::ANNOTATION_DRAIN_POLICY;

/// Longest drain: an LLM request rarely outlives it, and a rollout must not wait on a pod
/// forever.
pub const MAX_DRAIN_TIMEOUT: u64 = 3600;
/// Time between readings of a pod's requests in flight when `interval` is absent.
pub const DEFAULT_DRAIN_INTERVAL: u64 = 5;
/// Longest time between readings: a drained pod waits at most this long past its last
/// request.
pub const MAX_DRAIN_INTERVAL: u64 = 300;
/// Longest drain annotation read back (a query and its few settings): what a tenant's edit
/// can make the operator parse.
pub const MAX_POLICY_BYTES: usize = MAX_QUERY_BYTES + 512;
/// The placeholders a drain query may use.
pub const DRAIN_PLACEHOLDERS: [&str; 3] = ["pod", "namespace", "role"];

/// How a role's pods are drained.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct Drain {
    /// Longest wait, once a pod is out of traffic, for its requests to end: seconds or a
    /// duration such as `10m` (1 s to 1 h). Without `query` every pod waits exactly this
    /// long (a deregistration delay). Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<IntOrString>,
    /// A pod's requests in flight: it is deleted as soon as this reads 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<DrainQuery>,
}

/// A Prometheus query for one pod's requests in flight.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::common::without_property_defaults)]
pub struct DrainQuery {
    /// Name of the admin-configured endpoint (`squall run --analysis-config`); absent means
    /// `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// PromQL instant query giving one number, e.g.
    /// `sum(vllm:num_requests_running{namespace="{{namespace}}",pod="{{pod}}"})`.
    /// Placeholders: `{{pod}}`, `{{namespace}}`, `{{role}}`.
    #[serde(default)]
    pub query: String,
    /// Time between readings: seconds or a duration (1 s to 5 m); absent means 5 s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<IntOrString>,
}

impl Drain {
    /// The timeout in seconds, at most [`MAX_DRAIN_TIMEOUT`] (validation denies an
    /// unreadable one; it reads as the most).
    pub fn timeout_seconds(&self) -> u64 {
        seconds(self.timeout.as_ref()).map_or(MAX_DRAIN_TIMEOUT, |s| s.min(MAX_DRAIN_TIMEOUT))
    }

    /// The drain a child was created with (its annotation), when it reads as one.
    pub fn of_child(child: &impl Labelled) -> Option<Self> {
        let text = child.annotation(ANNOTATION_DRAIN_POLICY)?;
        if text.len() > MAX_POLICY_BYTES {
            return None;
        }
        serde_json::from_str(text).ok()
    }
}

impl DrainQuery {
    /// Seconds between readings, 1 to [`MAX_DRAIN_INTERVAL`].
    pub fn interval_seconds(&self) -> u64 {
        seconds(self.interval.as_ref())
            .map_or(DEFAULT_DRAIN_INTERVAL, |s| s.clamp(1, MAX_DRAIN_INTERVAL))
    }

    /// The endpoint the query runs against.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_deref().unwrap_or(DEFAULT_ENDPOINT)
    }
}

fn seconds(duration: Option<&IntOrString>) -> Option<u64> {
    pause_seconds(duration.map(IntOrStr::from).as_ref())
        .ok()
        .flatten()
}

/// What a drain query's placeholders stand for.
#[derive(Clone, Copy, Debug)]
pub struct DrainValues<'a> {
    /// `{{pod}}`.
    pub pod: &'a str,
    /// `{{namespace}}`.
    pub namespace: &'a str,
    /// `{{role}}`.
    pub role: &'a str,
}

/// The drain query with its placeholders filled in; `values` None only checks them.
pub fn render_drain_query(query: &str, values: Option<&DrainValues<'_>>) -> Result<String, String> {
    fill(query, &DRAIN_PLACEHOLDERS, |name| {
        Ok(values.map(|v| match name {
            "pod" => v.pod,
            "namespace" => v.namespace,
            _ => v.role,
        }))
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn a_drain_query_names_its_pod_and_knows_only_its_placeholders() {
        let values = DrainValues {
            pod: "decode-x7",
            namespace: "prod",
            role: "decode",
        };
        assert_eq!(
            render_drain_query(
                r#"sum(running{namespace="{{namespace}}",pod="{{ pod }}",role="{{role}}"})"#,
                Some(&values)
            )
            .unwrap(),
            r#"sum(running{namespace="prod",pod="decode-x7",role="decode"})"#
        );
        let unknown = render_drain_query("x{{revision.canary}}", None).unwrap_err();
        assert!(
            unknown.contains("{{pod}}, {{namespace}}, {{role}}"),
            "{unknown}"
        );
    }

    #[test]
    fn timeouts_and_intervals_read_as_seconds_with_their_defaults() {
        let drain = Drain {
            timeout: Some(IntOrString::String("10m".into())),
            query: Some(DrainQuery::default()),
        };
        assert_eq!(drain.timeout_seconds(), 600);
        assert_eq!(
            drain.query.unwrap().interval_seconds(),
            DEFAULT_DRAIN_INTERVAL
        );
        assert_eq!(Drain::default().timeout_seconds(), MAX_DRAIN_TIMEOUT);
    }

    #[test]
    fn a_childs_drain_reads_back_bounded() {
        let drain = Drain {
            timeout: Some(IntOrString::Int(1_000_000)),
            query: Some(DrainQuery {
                query: "q".into(),
                interval: Some(IntOrString::Int(0)),
                ..DrainQuery::default()
            }),
        };
        let child = |annotations: BTreeMap<String, String>| {
            let mut pod = k8s_openapi::api::core::v1::Pod::default();
            pod.metadata.annotations = Some(annotations);
            pod
        };
        let annotations = BTreeMap::from([(
            ANNOTATION_DRAIN_POLICY.to_string(),
            serde_json::to_string(&drain).unwrap(),
        )]);
        let read = Drain::of_child(&child(annotations)).unwrap();
        assert_eq!(
            read.timeout_seconds(),
            MAX_DRAIN_TIMEOUT,
            "edited past its bound"
        );
        assert_eq!(read.query.unwrap().interval_seconds(), 1);
        let long = BTreeMap::from([(
            ANNOTATION_DRAIN_POLICY.to_string(),
            format!(
                "{{\"timeout\": 5, \"pad\": \"{}\"}}",
                "x".repeat(MAX_POLICY_BYTES)
            ),
        )]);
        assert_eq!(Drain::of_child(&child(long)), None, "not parsed at all");
    }
}
