//! A pod as the controllers cache it. A decoded `Pod` takes about four times the memory of
//! its JSON (most of it the spec's fixed-size structs: a `Container` reserves room for every
//! probe, lifecycle hook and security field it may have), and a fleet's pods are most of
//! what the operator holds. Decisions read a pod's metadata and a few status fields on every
//! pass, and its spec only for in-place updates, adoptions and topology warnings: so the
//! metadata is kept compact ([`super::meta`]), the status is projected to what is read, and
//! the spec is kept as the API server's JSON (packed against a sibling's by the cache:
//! [`super::packed`]), decoded where it is needed. A watch reads each pod as a
//! [`WatchedPod`] (the metadata as `ObjectMeta`, what the watcher reads) and the cache keeps
//! it as a [`CachedPod`].

use std::borrow::Cow;

use k8s_openapi::api::core::v1::{
    Affinity, ContainerStatus, ObjectReference, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

use super::meta::{Atom, CachedMeta, Pairs};
use super::packed::PackedJson;

/// A cached pod: metadata, the status fields decisions read, and the spec as JSON.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct CachedPod {
    /// As the API server sent it, compact.
    #[serde(default)]
    pub metadata: CachedMeta,
    /// The spec's JSON, undecoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PackedJson>,
    /// What decisions read of the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedPodStatus>,
}

/// A pod as a watch reads it: a [`CachedPod`] whose metadata is still the API's.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct WatchedPod {
    /// As the API server sent it.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec's JSON, undecoded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PackedJson>,
    /// What decisions read of the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedPodStatus>,
}

/// The status fields decisions read.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Word>,
    /// Conditions, by type and status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<CachedCondition>>,
    /// Main containers' readiness, image and restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<CachedContainerStatus>>,
}

/// A pod condition, by type and status.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct CachedCondition {
    /// `Ready`, `PodScheduled`, ...
    #[serde(rename = "type")]
    pub type_: Word,
    /// `True`, `False` or `Unknown`.
    pub status: Word,
    /// When the status last changed (Ready's starts the `minReadySeconds` clock).
    #[serde(
        default,
        rename = "lastTransitionTime",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition_time: Option<Time>,
}

/// A word of a pod's status: one of the few every pod repeats (a phase, a condition's type
/// or status) held as a constant, anything else as its own text. Ten of them per pod would
/// otherwise be ten small allocations, the same in every pod.
#[derive(Clone, Debug)]
pub enum Word {
    /// A word the Kubernetes API or squall defines.
    Known(&'static str),
    /// Any other.
    Other(Box<str>),
}

/// The words pods repeat: phases, condition types and condition statuses.
const KNOWN_WORDS: [&str; 14] = [
    "Pending",
    "Running",
    "Succeeded",
    "Failed",
    "Unknown",
    "True",
    "False",
    "Ready",
    "ContainersReady",
    "Initialized",
    "PodScheduled",
    "PodReadyToStartContainers",
    crate::api::keys::CONDITION_IN_PLACE_READY,
    crate::api::keys::CONDITION_PAIRING_SERVABLE,
];

impl Word {
    /// The word's text.
    pub fn as_str(&self) -> &str {
        match self {
            Word::Known(word) => word,
            Word::Other(word) => word,
        }
    }
}

/// Words are equal by their text, however they are held.
impl PartialEq for Word {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Word {}

impl Default for Word {
    fn default() -> Self {
        Word::Known("")
    }
}

impl From<&str> for Word {
    fn from(word: &str) -> Self {
        KNOWN_WORDS
            .iter()
            .find(|known| **known == word)
            .map_or_else(|| Word::Other(word.into()), |known| Word::Known(known))
    }
}

impl Serialize for Word {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Word;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<Word, E> {
                Ok(Word::from(word))
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// What decisions read of a container's status (its texts held once: a role's pods share
/// them).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainerStatus {
    /// Container name.
    pub name: Atom,
    /// Passes its readiness probe.
    #[serde(default)]
    pub ready: bool,
    /// The image it runs, by digest (in-place updates wait for it to change).
    #[serde(default, rename = "imageID")]
    pub image_id: Atom,
    /// Restarts so far (gang recovery counts them).
    #[serde(default)]
    pub restart_count: i32,
}

impl From<WatchedPod> for CachedPod {
    fn from(pod: WatchedPod) -> Self {
        Self {
            metadata: CachedMeta::from(&pod.metadata),
            spec: pod.spec,
            status: pod.status,
        }
    }
}

impl kube::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Pod".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "pods".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

super::meta::cached_kind!(CachedPod, "Pod", "", "v1", "pods");

impl CachedPod {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// Its namespace.
    pub fn namespace(&self) -> &str {
        self.metadata.namespace()
    }

    /// Its labels.
    pub fn labels(&self) -> &Pairs {
        &self.metadata.labels
    }

    /// Its annotations.
    pub fn annotations(&self) -> &Pairs {
        &self.metadata.annotations
    }

    /// A reference to it, for an event about it.
    pub fn object_reference(&self) -> ObjectReference {
        let meta = &self.metadata;
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(meta.name.to_string()),
            namespace: meta.namespace.as_ref().map(ToString::to_string),
            uid: meta.uid.as_deref().map(str::to_string),
            resource_version: meta.resource_version.as_deref().map(str::to_string),
            ..ObjectReference::default()
        }
    }

    /// Whether it is being deleted.
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// The cached form of `pod`.
    pub fn from_pod(pod: &Pod) -> Self {
        let json = serde_json::to_string(pod).expect("a Pod serializes");
        serde_json::from_str(&json).expect("a serialized Pod is a cached pod")
    }

    /// The whole pod, the spec decoded: what in-place decisions compare and patch. Fails
    /// only on a spec that is not a pod spec (the API server sent it; it is one).
    pub fn to_pod(&self) -> Result<Pod, serde_json::Error> {
        let spec = self
            .spec_text()
            .map(|text| serde_json::from_str::<PodSpec>(&text))
            .transpose()?;
        Ok(Pod {
            spec,
            ..self.without_spec()
        })
    }

    /// The pod's metadata and status as a `Pod` without its spec (decisions about an
    /// in-place update's progress read nothing else).
    pub fn without_spec(&self) -> Pod {
        let status = self.status.as_ref().map(|s| PodStatus {
            phase: s.phase.as_ref().map(|p| p.as_str().to_string()),
            conditions: s.conditions.as_ref().map(|c| {
                c.iter()
                    .map(|c| PodCondition {
                        type_: c.type_.as_str().to_string(),
                        status: c.status.as_str().to_string(),
                        last_transition_time: c.last_transition_time.clone(),
                        ..PodCondition::default()
                    })
                    .collect()
            }),
            container_statuses: s.container_statuses.as_ref().map(|c| {
                c.iter()
                    .map(|c| ContainerStatus {
                        name: c.name.to_string(),
                        ready: c.ready,
                        image_id: c.image_id.to_string(),
                        restart_count: c.restart_count,
                        ..ContainerStatus::default()
                    })
                    .collect()
            }),
            ..PodStatus::default()
        });
        Pod {
            metadata: self.metadata.to_object_meta(),
            spec: None,
            status,
        }
    }

    /// The spec's affinity alone (topology warnings read nothing else).
    pub fn affinity(&self) -> Option<Affinity> {
        #[derive(Deserialize)]
        struct Only {
            affinity: Option<Affinity>,
        }
        serde_json::from_str::<Only>(&self.spec_text()?)
            .ok()?
            .affinity
    }

    /// The spec's JSON text.
    pub fn spec_text(&self) -> Option<Cow<'_, str>> {
        self.spec.as_ref()?.text()
    }

    /// The pod's phase.
    pub fn phase(&self) -> Option<&str> {
        self.status.as_ref()?.phase.as_ref().map(Word::as_str)
    }

    /// Whether its Ready condition is True.
    pub fn ready(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_.as_str() == "Ready" && c.status.as_str() == "True")
            })
    }

    /// Since when (Unix seconds) its Ready condition has been True; `None` when it is not
    /// Ready, or is without a transition time (a kubelet always sets one).
    pub fn ready_since(&self) -> Option<i64> {
        self.condition_since("Ready", "True")
    }

    /// Since when (Unix seconds) its condition `type_` has had `status`; `None` when it has
    /// not, or is without a transition time.
    pub fn condition_since(&self, type_: &str, status: &str) -> Option<i64> {
        self.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_.as_str() == type_ && c.status.as_str() == status)?
            .last_transition_time
            .as_ref()
            .map(|t| t.0.as_second())
    }

    /// The status of its condition `type_`, when it has one.
    pub fn condition(&self, type_: &str) -> Option<&str> {
        self.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_.as_str() == type_)
            .map(|c| c.status.as_str())
    }

    /// Whether its spec declares the readiness gate `condition_type` (read from the raw
    /// spec: only what it needs is decoded).
    pub fn has_readiness_gate(&self, condition_type: &str) -> bool {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Gate {
            condition_type: String,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Only {
            #[serde(default)]
            readiness_gates: Option<Vec<Gate>>,
        }
        self.spec_text()
            .and_then(|text| serde_json::from_str::<Only>(&text).ok())
            .and_then(|only| only.readiness_gates)
            .is_some_and(|gates| gates.iter().any(|g| g.condition_type == condition_type))
    }

    /// Restarts of its containers, summed.
    pub fn restarts(&self) -> i32 {
        self.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map_or(0, |c| c.iter().map(|c| c.restart_count).sum())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"role-name": "decode"}},
            "spec": {
                "containers": [{"name": "engine", "image": "engine:1"}],
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"a": "b"}}}]}},
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]
            },
            "status": {
                "phase": "Running",
                "hostIP": "10.0.0.1",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Ready", "status": "True", "reason": "r", "message": "m"}],
                "containerStatuses": [{"name": "engine", "image": "engine:1", "imageID": "sha256:1",
                    "ready": true, "restartCount": 2, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_cached_pod_keeps_what_decisions_read() {
        let cached = CachedPod::from_pod(&pod());
        assert!(cached.ready());
        assert_eq!(cached.phase(), Some("Running"));
        assert_eq!(cached.restarts(), 2);
        let affinity = cached.affinity().unwrap();
        assert_eq!(
            affinity
                .pod_affinity
                .unwrap()
                .required_during_scheduling_ignored_during_execution
                .unwrap()[0]
                .topology_key,
            "zone"
        );
        let whole = cached.to_pod().unwrap();
        assert_eq!(whole.spec, pod().spec, "the spec is kept whole");
        let status = whole.status.unwrap();
        let statuses = status.container_statuses.unwrap();
        assert_eq!(
            (statuses[0].ready, statuses[0].image_id.as_str()),
            (true, "sha256:1")
        );
        assert_eq!(status.conditions.unwrap().len(), 2);
        assert_eq!(status.host_ip, None, "what nothing reads is not kept");
    }

    #[test]
    fn what_nothing_reads_is_not_in_the_cached_json() {
        let full = serde_json::to_string(&pod()).unwrap();
        let cached = serde_json::to_string(&CachedPod::from_pod(&pod())).unwrap();
        assert!(
            cached.len() < full.len(),
            "{} vs {}",
            cached.len(),
            full.len()
        );
        assert!(!cached.contains("startedAt") && !cached.contains("hostIP"));
    }

    #[test]
    fn status_words_read_and_write_as_their_text() {
        let words = ["Running", "True", "Ready", "SomethingNew", ""];
        for word in words {
            let read: Word = serde_json::from_str(&serde_json::to_string(word).unwrap()).unwrap();
            assert_eq!(read.as_str(), word);
            assert_eq!(
                serde_json::to_string(&read).unwrap(),
                serde_json::to_string(word).unwrap()
            );
        }
        assert!(
            matches!(Word::from("Running"), Word::Known(_)),
            "a repeated word is a constant"
        );
        assert!(matches!(Word::from("SomethingNew"), Word::Other(_)));
        assert_eq!(
            Word::Other("Ready".into()),
            Word::from("Ready"),
            "equal by text"
        );
    }

    #[test]
    fn a_pod_without_spec_or_status_is_cached() {
        let cached: CachedPod = serde_json::from_value(
            json!({"metadata": {"name": "p"}, "status": {"conditions": null}}),
        )
        .unwrap();
        assert!(!cached.ready());
        assert_eq!(cached.affinity(), None);
        assert_eq!(cached.to_pod().unwrap().spec, None);
    }
}
