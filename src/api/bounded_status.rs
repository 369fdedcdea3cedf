//! Status is input too: every tenant with `edit` may write `*/status`, and the webhooks do
//! not see those writes. So every status string, integer and list of the three kinds has a
//! bound in the CRD (`bounded`, applied to each status type's schema), and a stored status
//! that is outside them anyway — written before the CRD had the bounds, or into a CRD that
//! lacks them (AIBrix's) — is treated as absent: [`CheckedStatus`] finds the first field out
//! of bounds, checked against the very schema the CRD carries, and the caches drop that
//! status so the controller derives it afresh.

use std::sync::OnceLock;

use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::{PodSet, RoleSet, StormService};

/// Longest status string without a bound of its own (`reason`, names, hashes, selectors):
/// a Kubernetes condition's `reason` may have 1,024 characters.
pub const STATUS_TEXT_CHARS: u32 = 1024;
/// Longest status message (conditions, the canary's, an analysis's): a Kubernetes
/// condition's `message` may have 32,768 characters.
pub const STATUS_MESSAGE_CHARS: u32 = 32_768;
/// Longest measurement message (why it is inconclusive): short enough that a provider's
/// error text cannot carry much of what it answered.
pub const MEASUREMENT_MESSAGE_BYTES: u32 = 256;
/// Longest object name in status (ControllerRevision names): a DNS subdomain's 253.
pub const STATUS_NAME_CHARS: u32 = 253;
/// Most items of a status list without a bound of its own (conditions, pause gates): more
/// than every condition type and gate there is.
pub const STATUS_LIST_ITEMS: u32 = 64;

/// Bounds every status string, integer and list of `schema` that has none of its own:
/// strings (other than enums and formats such as `date-time`, which the API server checks)
/// at [`STATUS_TEXT_CHARS`], integers at 0 and their format's range, lists at
/// [`STATUS_LIST_ITEMS`]. Applied to each status type, whose nested types are inlined.
pub(crate) fn bounded(schema: &mut schemars::Schema) {
    if let Some(object) = schema.as_object_mut() {
        bound_node(object);
    }
}

fn bound_node(node: &mut serde_json::Map<String, Value>) {
    // An optional field's type is `[T, "null"]` until the CRD's structural rewrite.
    let kind = match node.get("type") {
        Some(Value::String(kind)) => Some(kind.clone()),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|kind| *kind != "null")
            .map(str::to_string),
        _ => None,
    };
    match kind.as_deref() {
        Some("string") if !node.contains_key("enum") && !node.contains_key("format") => {
            node.entry("maxLength").or_insert(json!(STATUS_TEXT_CHARS));
        }
        Some("integer") => {
            node.entry("minimum").or_insert(json!(0));
            if node.get("format").and_then(Value::as_str) == Some("int32") {
                node.entry("maximum").or_insert(json!(i32::MAX));
            }
        }
        Some("array") => {
            node.entry("maxItems").or_insert(json!(STATUS_LIST_ITEMS));
        }
        _ => {}
    }
    for key in ["properties", "items", "anyOf", "oneOf", "allOf"] {
        match node.get_mut(key) {
            Some(Value::Object(children)) if key == "properties" => {
                for child in children.values_mut().filter_map(Value::as_object_mut) {
                    bound_node(child);
                }
            }
            Some(Value::Object(child)) => bound_node(child),
            Some(Value::Array(children)) => {
                for child in children.iter_mut().filter_map(Value::as_object_mut) {
                    bound_node(child);
                }
            }
            _ => {}
        }
    }
}

/// The first place in `value` outside the bounds of `schema` (`maxLength`, `minimum`,
/// `maximum`, `maxItems`), as `<path>: why`. Only the bounds: types, enums and formats the
/// typed decode has checked already.
pub fn out_of_bounds(schema: &Value, value: &Value, path: &str) -> Option<String> {
    match value {
        Value::String(text) => {
            let max = schema.get("maxLength").and_then(Value::as_u64)?;
            // Counting stops past the bound: a megabyte string costs no more than the bound.
            let chars = text.chars().take(max as usize + 1).count();
            (chars as u64 > max).then(|| format!("{path}: longer than {max} characters"))
        }
        Value::Number(number) => {
            let below = schema
                .get("minimum")
                .and_then(Value::as_f64)
                .filter(|min| number.as_f64().is_some_and(|n| n < *min));
            let above = schema
                .get("maximum")
                .and_then(Value::as_f64)
                .filter(|max| number.as_f64().is_some_and(|n| n > *max));
            match (below, above) {
                (Some(min), _) => Some(format!("{path}: below {min}")),
                (_, Some(max)) => Some(format!("{path}: above {max}")),
                _ => None,
            }
        }
        Value::Array(items) => {
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                return Some(format!("{path}: more than {max} items"));
            }
            let item = schema.get("items")?;
            items
                .iter()
                .enumerate()
                .find_map(|(i, v)| out_of_bounds(item, v, &format!("{path}[{i}]")))
        }
        Value::Object(fields) => {
            let properties = schema.get("properties")?;
            fields.iter().find_map(|(name, v)| {
                out_of_bounds(properties.get(name)?, v, &format!("{path}.{name}"))
            })
        }
        Value::Null | Value::Bool(_) => None,
    }
}

/// A kind whose stored status the caches check before the controllers see it.
pub trait CheckedStatus {
    /// The first status field outside the CRD's bounds, as `status.<path>: why`.
    fn status_out_of_bounds(&self) -> Option<String> {
        None
    }

    /// Forgets the status: the controller derives it afresh.
    fn drop_status(&mut self) {}
}

/// The status schema of `K`'s CRD, as the API server has it.
fn status_schema<K: CustomResourceExt>() -> Value {
    let crd = serde_json::to_value(K::crd()).expect("a CRD serializes");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"].clone()
}

macro_rules! checked_status {
    ($kind:ty) => {
        impl CheckedStatus for $kind {
            fn status_out_of_bounds(&self) -> Option<String> {
                static SCHEMA: OnceLock<Value> = OnceLock::new();
                let schema = SCHEMA.get_or_init(status_schema::<$kind>);
                let status = serde_json::to_value(self.status.as_ref()?).ok()?;
                out_of_bounds(schema, &status, "status")
            }

            fn drop_status(&mut self) {
                self.status = None;
            }
        }
    };
}

checked_status!(StormService);
checked_status!(RoleSet);
checked_status!(PodSet);

impl CheckedStatus for super::cached::pod::WatchedPod {}
impl CheckedStatus for super::cached::revision::WatchedRevision {}
impl CheckedStatus for k8s_openapi::api::apps::v1::ControllerRevision {}
impl CheckedStatus for k8s_openapi::api::core::v1::Service {}
impl CheckedStatus for k8s_openapi::api::core::v1::Pod {}
impl<S: super::podgroup::SchedulerKind> CheckedStatus for super::podgroup::PodGroup<S> {}

/// `text` cut to at most `max_bytes` bytes (so as many characters at most), on a character
/// boundary and marked with `…` when cut: what squall writes into status stays inside the
/// bounds it asks of others.
pub fn bounded_text(mut text: String, max_bytes: u32) -> String {
    const MARK: char = '…';
    let max = max_bytes as usize;
    if text.len() <= max {
        return text;
    }
    let mut cut = max.saturating_sub(MARK.len_utf8());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push(MARK);
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn status_schema_of<K: CustomResourceExt>() -> Value {
        status_schema::<K>()
    }

    /// Every string (but enums and formats), integer and list under `schema`, with its path,
    /// that lacks a bound.
    fn unbounded(schema: &Value, path: &str, out: &mut Vec<String>) {
        let bounded = match schema["type"].as_str() {
            Some("string") => {
                schema.get("maxLength").is_some()
                    || schema.get("enum").is_some()
                    || schema.get("format").is_some()
            }
            Some("integer") => {
                schema.get("minimum").is_some()
                    && (schema.get("maximum").is_some() || schema["format"] == "int64")
            }
            Some("array") => schema.get("maxItems").is_some(),
            _ => true,
        };
        if !bounded {
            out.push(path.to_string());
        }
        if let Some(properties) = schema["properties"].as_object() {
            for (name, child) in properties {
                unbounded(child, &format!("{path}.{name}"), out);
            }
        }
        if let Some(items) = schema.get("items") {
            unbounded(items, &format!("{path}[]"), out);
        }
    }

    #[test]
    fn every_status_string_integer_and_list_of_every_kind_is_bounded_in_the_crd() {
        for (kind, schema) in [
            ("StormService", status_schema_of::<StormService>()),
            ("RoleSet", status_schema_of::<RoleSet>()),
            ("PodSet", status_schema_of::<PodSet>()),
        ] {
            let mut missing = Vec::new();
            unbounded(&schema, "status", &mut missing);
            assert!(missing.is_empty(), "{kind}: unbounded {missing:?}");
        }
        let ss = status_schema_of::<StormService>();
        let canary = &ss["properties"]["canaryStatus"]["properties"];
        assert_eq!(
            canary["canaryRevision"]["maxLength"],
            json!(STATUS_NAME_CHARS)
        );
        assert_eq!(
            canary["stableRevision"]["maxLength"],
            json!(STATUS_NAME_CHARS)
        );
        assert_eq!(
            ss["properties"]["replicas"]["maximum"],
            json!(f64::from(i32::MAX))
        );
    }

    #[test]
    fn out_of_bounds_names_the_first_field_past_a_bound() {
        let schema = status_schema_of::<StormService>();
        let check = |status: Value| out_of_bounds(&schema, &status, "status");
        assert_eq!(
            check(json!({"replicas": 3, "currentRevision": "llm-1"})),
            None
        );
        assert_eq!(
            check(json!({"canaryStatus": {"roles": [{"name": "a", "target": -2}]}})).as_deref(),
            Some("status.canaryStatus.roles[0].target: below 0")
        );
        assert_eq!(
            check(json!({"collisionCount": 2_147_483_648_i64})).as_deref(),
            Some("status.collisionCount: above 2147483647")
        );
        let long = "x".repeat(STATUS_NAME_CHARS as usize + 1);
        assert_eq!(
            check(json!({"updateRevision": long})).as_deref(),
            Some("status.updateRevision: longer than 253 characters")
        );
        // Multi-byte characters count as one each, as the API server counts them.
        assert_eq!(check(json!({"updateRevision": "é".repeat(253)})), None);
    }

    proptest! {
        #[test]
        fn bounded_text_keeps_within_its_bytes_on_a_char_boundary(
            text in "\\PC{0,400}", max in 4u32..300,
        ) {
            let bounded = bounded_text(text.clone(), max);
            prop_assert!(bounded.len() <= max as usize);
            if text.len() <= max as usize {
                prop_assert_eq!(bounded, text);
            } else {
                prop_assert!(bounded.ends_with('…'));
                prop_assert!(text.starts_with(bounded.trim_end_matches('…')));
            }
        }

        #[test]
        fn a_status_within_its_counts_bounds_is_accepted_and_past_them_refused(
            replicas in -5i64..5, step in 0i64..(i64::from(i32::MAX) + 5),
        ) {
            static SCHEMA: OnceLock<Value> = OnceLock::new();
            let schema = SCHEMA.get_or_init(status_schema_of::<StormService>);
            let status = json!({"replicas": replicas, "canaryStatus": {"currentStep": step}});
            let within = replicas >= 0 && step <= i64::from(i32::MAX);
            prop_assert_eq!(out_of_bounds(schema, &status, "status").is_none(), within);
        }
    }
}
