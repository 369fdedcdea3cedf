//! Watched objects decoded one at a time, so one bad object never stops a cache.
//!
//! A typed watch decodes a whole LIST response at once: one object that fails to decode
//! (a status integer past `int32` that the API server stored, an object written before the
//! CRD bounded a field) fails the list, the cache never syncs, and nothing is reconciled
//! anywhere. [`Decoded`] reads each object of a list or a watch event on its own: an object
//! whose status does not decode, or is outside the CRD's bounds, is served without it (its controller derives a fresh one and
//! writes it over the bad one), and one whose spec does not decode keeps only its metadata and
//! what failed (the cache keeps what it last held of it and reports it).

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::api::bounded_status::CheckedStatus;

/// At most this much of a decode error is kept: serde quotes the value it refused, which is
/// the tenant's (a megabyte string, say) and never belongs in a log line.
const REASON_BYTES: usize = 160;

/// A watched object, as far as it decodes.
#[derive(Clone, Debug)]
pub enum Decoded<K> {
    /// The whole object.
    Whole(K),
    /// The object without its status, which did not decode (why, with the field's path).
    WithoutStatus(K, String),
    /// Only the metadata: the rest did not decode even without the status.
    Unreadable(Box<ObjectMeta>, String),
}

impl<K> Decoded<K> {
    /// Why the object did not decode whole.
    pub fn problem(&self) -> Option<&str> {
        match self {
            Decoded::Whole(_) => None,
            Decoded::WithoutStatus(_, reason) | Decoded::Unreadable(_, reason) => Some(reason),
        }
    }

    /// The object, when its spec decoded.
    pub fn into_object(self) -> Option<K> {
        match self {
            Decoded::Whole(object) | Decoded::WithoutStatus(object, _) => Some(object),
            Decoded::Unreadable(..) => None,
        }
    }
}

/// The field path and message of a decode error, bounded to [`REASON_BYTES`].
fn reason(path: &serde_path_to_error::Path, error: &serde_json::Error) -> String {
    let mut reason = format!("{path}: {error}");
    if reason.len() > REASON_BYTES {
        let mut end = REASON_BYTES;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
        reason.push('…');
    }
    reason
}

/// Decodes `json` as `K`, tracking where it failed.
fn decode<K: DeserializeOwned>(json: &str) -> Result<K, String> {
    let mut reader = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut reader)
        .map_err(|error| reason(error.path(), error.inner()))
}

/// `json` (one object as the API server sends it) without `metadata.managedFields`: the
/// record of which client set which field, which no decision reads and which is often larger
/// than the rest of the object, is cut from the text instead of decoded and dropped — no
/// allocation per field of it, no transient tree. Anything unexpected leaves `json` whole.
pub fn without_managed_fields(json: &str) -> Cow<'_, str> {
    let Some((start, end)) = managed_fields_span(json.as_bytes()) else {
        return Cow::Borrowed(json);
    };
    let mut lean = String::with_capacity(json.len() - (end - start));
    lean.push_str(&json[..start]);
    lean.push_str(&json[end..]);
    Cow::Owned(lean)
}

/// Where `metadata.managedFields` is in `json`, with one comma beside it: the bytes to cut.
fn managed_fields_span(json: &[u8]) -> Option<(usize, usize)> {
    let mut top = Members::of(json, 0)?;
    while let Some((key, value)) = top.next_member()? {
        if key != b"metadata" {
            continue;
        }
        let mut metadata = Members::of(json, value)?;
        let mut previous_end = None;
        while let Some((key, _)) = metadata.next_member()? {
            let key_start = metadata.key_start;
            let value_end = metadata.at;
            if key == b"managedFields" {
                let after = skip_space(json, value_end);
                return Some(match (json.get(after), previous_end) {
                    (Some(b','), _) => (key_start, skip_space(json, after + 1)),
                    (_, Some(previous)) => (previous, value_end),
                    _ => (key_start, value_end),
                });
            }
            previous_end = Some(value_end);
        }
        return None;
    }
    None
}

/// The members of one JSON object, read key by key, each value skipped.
struct Members<'a> {
    json: &'a [u8],
    /// Just past the last value read (or the opening brace).
    at: usize,
    /// Where the last key read starts (its opening quote).
    key_start: usize,
}

impl<'a> Members<'a> {
    /// The object whose `{` is at `at` (after white space).
    fn of(json: &'a [u8], at: usize) -> Option<Self> {
        let at = skip_space(json, at);
        (json.get(at) == Some(&b'{')).then_some(Self {
            json,
            at: at + 1,
            key_start: at,
        })
    }

    /// The next key and where its value starts; None at the end of the object; an error
    /// (the outer None) where the text is not what the API server writes.
    fn next_member(&mut self) -> Option<Option<(&'a [u8], usize)>> {
        let mut at = skip_space(self.json, self.at);
        match self.json.get(at)? {
            b'}' => return Some(None),
            b',' => at = skip_space(self.json, at + 1),
            _ => {}
        }
        if self.json.get(at) != Some(&b'"') {
            return None;
        }
        self.key_start = at;
        let key_end = skip_string(self.json, at)?;
        let key = &self.json[at + 1..key_end - 1];
        let colon = skip_space(self.json, key_end);
        if self.json.get(colon) != Some(&b':') {
            return None;
        }
        let value = skip_space(self.json, colon + 1);
        self.at = skip_value(self.json, value)?;
        Some(Some((key, value)))
    }
}

fn skip_space(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// Just past the string whose opening quote is at `at`.
fn skip_string(json: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match json.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// Just past the value that starts at `at`.
fn skip_value(json: &[u8], at: usize) -> Option<usize> {
    match json.get(at)? {
        b'"' => skip_string(json, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            loop {
                match json.get(i)? {
                    b'"' => {
                        i = skip_string(json, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let mut i = at;
            while json
                .get(i)
                .is_some_and(|b| !matches!(b, b',' | b'}' | b']') && !b.is_ascii_whitespace())
            {
                i += 1;
            }
            (i > at).then_some(i)
        }
    }
}

impl<'de, K: DeserializeOwned + CheckedStatus> Deserialize<'de> for Decoded<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let lean = without_managed_fields(raw.get());
        // The common case costs one scan of the raw text and one decode.
        if let Ok(mut object) = serde_json::from_str::<K>(&lean) {
            return Ok(match object.status_out_of_bounds() {
                None => Decoded::Whole(object),
                Some(problem) => {
                    object.drop_status();
                    Decoded::WithoutStatus(object, problem)
                }
            });
        }
        // Rare: decoded again, to say where it failed.
        let problem = decode::<K>(&lean).err().unwrap_or_default();
        let mut fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&lean).map_err(D::Error::custom)?;
        if fields.remove("status").is_some()
            && let Ok(object) = serde_json::from_value::<K>(fields.clone().into())
        {
            return Ok(Decoded::WithoutStatus(object, problem));
        }
        let metadata = fields
            .remove("metadata")
            .map(serde_json::from_value::<ObjectMeta>)
            .transpose()
            .map_err(|error| D::Error::custom(format!("metadata: {error}")))?
            .unwrap_or_default();
        Ok(Decoded::Unreadable(Box::new(metadata), problem))
    }
}

impl<K: kube::Resource> kube::Resource for Decoded<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }

    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }

    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }

    fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::api_version(dt)
    }

    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Decoded::Whole(object) | Decoded::WithoutStatus(object, _) => object.meta(),
            Decoded::Unreadable(metadata, _) => metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Decoded::Whole(object) | Decoded::WithoutStatus(object, _) => object.meta_mut(),
            Decoded::Unreadable(metadata, _) => metadata,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::StormService;

    fn service(status: serde_json::Value, replicas: serde_json::Value) -> String {
        serde_json::json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": "s", "namespace": "a", "uid": "u"},
            "spec": {"replicas": replicas, "selector": {}, "template": {"spec": {"roles": []}}},
            "status": status,
        })
        .to_string()
    }

    #[test]
    fn a_list_with_one_bad_object_decodes_the_others_whole() {
        let good = service(serde_json::json!({"replicas": 2}), 1.into());
        let bad_status = service(serde_json::json!({"replicas": 2_147_483_648_i64}), 1.into());
        let bad_spec = service(serde_json::json!({}), 2_147_483_648_i64.into());
        let list = format!("[{good},{bad_status},{bad_spec}]");
        let decoded: Vec<Decoded<StormService>> = serde_json::from_str(&list).unwrap();
        assert!(matches!(decoded[0], Decoded::Whole(_)));
        match &decoded[1] {
            Decoded::WithoutStatus(object, reason) => {
                assert!(object.status.is_none(), "the bad status is dropped");
                assert!(reason.starts_with("status.replicas: "), "{reason}");
            }
            other => panic!("expected the object without its status: {other:?}"),
        }
        match &decoded[2] {
            Decoded::Unreadable(metadata, reason) => {
                assert_eq!(metadata.name.as_deref(), Some("s"));
                assert!(reason.starts_with("spec.replicas: "), "{reason}");
            }
            other => panic!("expected only metadata: {other:?}"),
        }
    }

    #[test]
    fn a_status_outside_the_crd_bounds_is_dropped_and_named() {
        let huge = "r".repeat(1 << 20);
        for (status, field) in [
            (
                serde_json::json!({"canaryStatus": {"canaryRevision": huge}}),
                "status.canaryStatus.canaryRevision",
            ),
            (serde_json::json!({"replicas": -1}), "status.replicas"),
            (
                serde_json::json!({"conditions": vec![serde_json::json!({"type": "Ready", "status": "True"}); 65]}),
                "status.conditions",
            ),
        ] {
            let body = service(status, 1.into());
            match serde_json::from_str::<Decoded<StormService>>(&body).unwrap() {
                Decoded::WithoutStatus(object, reason) => {
                    assert!(object.status.is_none(), "{field}: the status is dropped");
                    assert!(reason.starts_with(&format!("{field}: ")), "{reason}");
                }
                other => panic!("{field}: expected the object without its status: {other:?}"),
            }
        }
        let within = service(
            serde_json::json!({"canaryStatus": {"canaryRevision": "llm-7d9f"}}),
            1.into(),
        );
        assert!(matches!(
            serde_json::from_str::<Decoded<StormService>>(&within).unwrap(),
            Decoded::Whole(_)
        ));
    }

    #[test]
    fn a_reason_never_quotes_more_than_its_bound_of_the_body() {
        let huge = "x".repeat(1 << 20);
        let body = service(serde_json::json!({"replicas": huge}), 1.into());
        let decoded: Decoded<StormService> = serde_json::from_str(&body).unwrap();
        let reason = decoded.problem().expect("the status fails");
        assert!(
            reason.len() <= REASON_BYTES + '…'.len_utf8(),
            "{}",
            reason.len()
        );
        assert!(reason.starts_with("status.replicas: "), "{reason}");
    }

    #[test]
    fn managed_fields_are_cut_from_the_text_wherever_they_stand_in_the_metadata() {
        let managed = r#"[{"manager":"kubectl","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:a\"}":{}}}}}]"#;
        for (json, lean) in [
            (
                format!(r#"{{"metadata":{{"managedFields":{managed},"name":"p"}},"spec":{{}}}}"#),
                r#"{"metadata":{"name":"p"},"spec":{}}"#.to_string(),
            ),
            (
                format!(
                    r#"{{"kind":"Pod","metadata":{{"name":"p", "managedFields" : {managed} }}}}"#
                ),
                r#"{"kind":"Pod","metadata":{"name":"p" }}"#.to_string(),
            ),
            (
                format!(r#"{{"metadata":{{"managedFields":{managed}}}}}"#),
                r#"{"metadata":{}}"#.to_string(),
            ),
        ] {
            assert_eq!(without_managed_fields(&json), lean);
        }
        // Elsewhere, or where the text is not an object's, nothing is cut.
        for json in [
            r#"{"metadata":{"annotations":{"managedFields":"[]"}},"managedFields":[]}"#,
            r#"{"spec":{"managedFields":[]}}"#,
            r#"{"metadata":{"name":"p\"managedFields\":[]"}}"#,
            r#"{"metadata":{"managedFields":[{"a":"unterminated}]"#,
            "[1]",
        ] {
            assert_eq!(without_managed_fields(json), json);
        }
    }

    /// Any JSON value, strings and keys drawn from JSON's own punctuation.
    fn any_json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z\"\\\\{}\\[\\],: ]{0,8}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map("[a-zF\"{}:]{0,6}", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Wherever `managedFields` stands among the metadata's members, whatever the
        /// members and the rest hold, the cut text reads as the object without it.
        #[test]
        fn the_cut_text_reads_as_the_object_without_its_managed_fields(
            members in proptest::collection::vec(("[a-zF\"{}:]{0,6}", any_json()), 0..5),
            at in 0usize..6,
            managed in any_json(),
            rest in any_json(),
            space in proptest::bool::ANY,
        ) {
            let separator = if space { " , " } else { "," };
            let mut texts: Vec<String> = members
                .iter()
                .filter(|(key, _)| key != "managedFields")
                .map(|(key, value)| format!("{}:{value}", serde_json::to_string(key).unwrap()))
                .collect();
            let at = at.min(texts.len());
            texts.insert(at, format!("\"managedFields\" : {managed}"));
            let json = format!(
                "{{\"kind\":{rest},\"metadata\":{{{}}}}}",
                texts.join(separator)
            );
            let mut expected: serde_json::Value = serde_json::from_str(&json).unwrap();
            expected["metadata"].as_object_mut().unwrap().remove("managedFields");
            let cut = without_managed_fields(&json);
            let read: serde_json::Value = serde_json::from_str(&cut)
                .unwrap_or_else(|e| panic!("{e}: {cut}"));
            proptest::prop_assert_eq!(read, expected);
        }
    }

    #[test]
    fn an_object_decodes_the_same_with_its_managed_fields_cut() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "a", "labels": {"role-name": "decode"},
                "managedFields": [{"manager": "squall", "operation": "Update",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {}}}}]},
            "spec": {"containers": [{"name": "engine", "image": "engine:1"}]},
        })
        .to_string();
        let mut whole: k8s_openapi::api::core::v1::Pod = serde_json::from_str(&json).unwrap();
        assert!(whole.metadata.managed_fields.is_some());
        whole.metadata.managed_fields = None;
        let lean: k8s_openapi::api::core::v1::Pod =
            serde_json::from_str(&without_managed_fields(&json)).unwrap();
        assert_eq!(lean, whole);
    }

    #[test]
    fn a_value_that_is_not_an_object_is_an_error_of_the_list() {
        let result = serde_json::from_str::<Decoded<StormService>>("[1]");
        assert!(result.is_err());
    }
}
