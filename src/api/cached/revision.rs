//! A ControllerRevision as the controllers cache it. A revision holds a whole StormService
//! template, and decoded into a JSON tree (`RawExtension`'s `serde_json::Value`) a kilobyte
//! of it takes ten: a map of three keys allocates room for eleven. Every StormService keeps
//! up to `revisionHistoryLimit` of them, so the cache keeps the data as the API server's
//! JSON text (packed: [`super::packed`]) and a reconcile decodes the few revisions it reads
//! ([`CachedRevision::to_revision`]). Its metadata is kept compact ([`super::meta`]); a
//! watch reads it as a [`WatchedRevision`].

use std::borrow::Cow;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde::{Deserialize, Serialize};

use super::meta::CachedMeta;
use super::packed::PackedJson;

/// A cached ControllerRevision: metadata, number, and the data as JSON text.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct CachedRevision {
    /// As the API server sent it, compact.
    #[serde(default)]
    pub metadata: CachedMeta,
    /// The revision's number.
    #[serde(default)]
    pub revision: i64,
    /// The data's JSON, undecoded (packed against a sibling's by the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<PackedJson>,
}

super::meta::cached_kind!(
    CachedRevision,
    "ControllerRevision",
    "apps",
    "v1",
    "controllerrevisions"
);

impl From<WatchedRevision> for CachedRevision {
    fn from(revision: WatchedRevision) -> Self {
        Self {
            metadata: CachedMeta::from(&revision.metadata),
            revision: revision.revision,
            data: revision.data,
        }
    }
}

/// A revision as a watch reads it: a [`CachedRevision`] whose metadata is still the API's.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct WatchedRevision {
    /// As the API server sent it.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The revision's number.
    #[serde(default)]
    pub revision: i64,
    /// The data's JSON, undecoded (packed against a sibling's by the cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<PackedJson>,
}

impl kube::Resource for WatchedRevision {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "ControllerRevision".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "apps".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "apps/v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "controllerrevisions".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl CachedRevision {
    /// The whole revision, its data decoded: what the planner reads. The text was JSON when
    /// it was cached; were it ever not, the revision reads as holding no data, which the
    /// planner reports as a malformed revision.
    pub fn to_revision(&self) -> ControllerRevision {
        ControllerRevision {
            metadata: self.metadata.to_object_meta(),
            revision: self.revision,
            data: self
                .data
                .as_ref()
                .and_then(PackedJson::text)
                .and_then(|text| serde_json::from_str(&text).ok())
                .map(RawExtension),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_revision_reads_back_as_the_revision_it_was() {
        let revision: ControllerRevision = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "llm-7d9f", "namespace": "team", "labels": {"name": "llm"}},
            "revision": 3,
            "data": {"spec": {"template": {"$patch": "replace", "spec": {"roles": [
                {"name": "decode", "template": {"spec": {"containers": [
                    {"name": "engine", "image": "engine:2"}]}}}]}}}},
        }))
        .unwrap();
        let text = serde_json::to_string(&revision).unwrap();
        let cached: CachedRevision = serde_json::from_str(&text).unwrap();
        assert_eq!(cached.to_revision(), revision);
        let none = CachedRevision::default().to_revision();
        assert_eq!(none.data, None);
    }
}
