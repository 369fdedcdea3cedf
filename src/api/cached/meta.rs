//! Object metadata as the caches keep it for the kinds a fleet has thousands of (pods). A
//! decoded `ObjectMeta` costs about two kilobytes for a pod's few hundred bytes of JSON: its
//! labels and annotations are `BTreeMap`s whose first node reserves room for eleven pairs,
//! and every key, value and owner field is a string of its own, though a role's pods repeat
//! the same keys and most of the same values. [`CachedMeta`] keeps each map as one sorted
//! slice and every repeated text once for the whole process ([`Atom`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A text many cached objects repeat (a label key or value, a namespace, an owner's name),
/// held once: the objects point at one copy.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Atom(Arc<str>);

/// The texts held now. Swept of those no object holds whenever the table doubles, so it
/// stays proportional to what the caches hold.
struct Atoms {
    held: HashSet<Arc<str>>,
    sweep_at: usize,
}

/// The table is first swept at this many texts, then at twice what is left.
const FIRST_SWEEP: usize = 1024;

static ATOMS: LazyLock<Mutex<Atoms>> = LazyLock::new(|| {
    Mutex::new(Atoms {
        held: HashSet::new(),
        sweep_at: FIRST_SWEEP,
    })
});

impl Atom {
    /// The one copy of `text`.
    pub fn new(text: &str) -> Self {
        let mut atoms = ATOMS.lock().expect("atoms lock");
        if let Some(held) = atoms.held.get(text) {
            return Self(held.clone());
        }
        let held: Arc<str> = text.into();
        atoms.held.insert(held.clone());
        if atoms.held.len() >= atoms.sweep_at {
            atoms.held.retain(|held| Arc::strong_count(held) > 1);
            atoms.sweep_at = (atoms.held.len() * 2).max(FIRST_SWEEP);
        }
        Self(held)
    }

    /// The one copy of `text`, when some object holds it now.
    pub fn existing(text: &str) -> Option<Self> {
        let atoms = ATOMS.lock().expect("atoms lock");
        atoms
            .held
            .get(text)
            .filter(|held| Arc::strong_count(held) > 1)
            .map(|held| Self(held.clone()))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for Atom {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Atom {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Atom {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        std::borrow::Cow::<str>::deserialize(deserializer).map(|text| Self::new(&text))
    }
}

/// Maps keyed by atoms are looked up by text.
impl std::borrow::Borrow<str> for Atom {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Atom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for Atom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Default for Atom {
    fn default() -> Self {
        Self::new("")
    }
}

/// Labels or annotations: key-value pairs sorted by key, in one allocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs(Box<[(Atom, Atom)]>);

impl Pairs {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|at| self.0[at].1.as_str())
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The pairs, by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As `ObjectMeta` holds them (absent when empty).
    pub fn to_map(&self) -> Option<BTreeMap<String, String>> {
        (!self.is_empty()).then(|| {
            self.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
    }
}

impl From<&BTreeMap<String, String>> for Pairs {
    fn from(map: &BTreeMap<String, String>) -> Self {
        // A BTreeMap iterates by key: the slice is sorted as `get` needs.
        Self(
            map.iter()
                .map(|(k, v)| (Atom::new(k), Atom::new(v)))
                .collect(),
        )
    }
}

/// An ownerReference, its texts held once (a RoleSet's pods name it alike).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CachedOwner {
    /// `apiVersion`.
    pub api_version: Atom,
    /// `kind`.
    pub kind: Atom,
    /// `name`.
    pub name: Atom,
    /// `uid`.
    pub uid: Atom,
    /// `controller`.
    pub controller: Option<bool>,
    /// `blockOwnerDeletion`.
    pub block_owner_deletion: Option<bool>,
}

impl From<&OwnerReference> for CachedOwner {
    fn from(owner: &OwnerReference) -> Self {
        Self {
            api_version: Atom::new(&owner.api_version),
            kind: Atom::new(&owner.kind),
            name: Atom::new(&owner.name),
            uid: Atom::new(&owner.uid),
            controller: owner.controller,
            block_owner_deletion: owner.block_owner_deletion,
        }
    }
}

impl CachedOwner {
    /// As the API has it.
    pub fn to_owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.to_string(),
            uid: self.uid.to_string(),
            controller: self.controller,
            block_owner_deletion: self.block_owner_deletion,
        }
    }
}

/// The metadata decisions read of a cached object: everything `ObjectMeta` has except the
/// managed-fields record and the self link, which nothing reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedMeta {
    /// `name`.
    pub name: Box<str>,
    /// `generateName` (a role's pods share it).
    pub generate_name: Option<Atom>,
    /// `namespace`.
    pub namespace: Option<Atom>,
    /// `uid`.
    pub uid: Option<Box<str>>,
    /// `resourceVersion`.
    pub resource_version: Option<Box<str>>,
    /// `generation`.
    pub generation: Option<i64>,
    /// `creationTimestamp`.
    pub creation_timestamp: Option<Time>,
    /// `deletionTimestamp`.
    pub deletion_timestamp: Option<Time>,
    /// `deletionGracePeriodSeconds`.
    pub deletion_grace_period_seconds: Option<i64>,
    /// `labels`.
    pub labels: Pairs,
    /// `annotations`.
    pub annotations: Pairs,
    /// `ownerReferences`.
    pub owner_references: Box<[CachedOwner]>,
    /// `finalizers`.
    pub finalizers: Box<[Atom]>,
}

impl From<&ObjectMeta> for CachedMeta {
    fn from(meta: &ObjectMeta) -> Self {
        Self {
            name: meta.name.as_deref().unwrap_or_default().into(),
            generate_name: meta.generate_name.as_deref().map(Atom::new),
            namespace: meta.namespace.as_deref().map(Atom::new),
            uid: meta.uid.as_deref().map(Into::into),
            resource_version: meta.resource_version.as_deref().map(Into::into),
            generation: meta.generation,
            creation_timestamp: meta.creation_timestamp.clone(),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            labels: meta.labels.as_ref().map(Pairs::from).unwrap_or_default(),
            annotations: meta
                .annotations
                .as_ref()
                .map(Pairs::from)
                .unwrap_or_default(),
            owner_references: meta
                .owner_references
                .iter()
                .flatten()
                .map(CachedOwner::from)
                .collect(),
            finalizers: meta
                .finalizers
                .iter()
                .flatten()
                .map(|f| Atom::new(f))
                .collect(),
        }
    }
}

impl CachedMeta {
    /// As the API has it.
    pub fn to_object_meta(&self) -> ObjectMeta {
        ObjectMeta {
            name: (!self.name.is_empty()).then(|| self.name.to_string()),
            generate_name: self.generate_name.as_ref().map(Atom::to_string),
            namespace: self.namespace.as_ref().map(Atom::to_string),
            uid: self.uid.as_deref().map(str::to_string),
            resource_version: self.resource_version.as_deref().map(str::to_string),
            generation: self.generation,
            creation_timestamp: self.creation_timestamp.clone(),
            deletion_timestamp: self.deletion_timestamp.clone(),
            deletion_grace_period_seconds: self.deletion_grace_period_seconds,
            labels: self.labels.to_map(),
            annotations: self.annotations.to_map(),
            owner_references: (!self.owner_references.is_empty()).then(|| {
                self.owner_references
                    .iter()
                    .map(CachedOwner::to_owner_reference)
                    .collect()
            }),
            finalizers: (!self.finalizers.is_empty())
                .then(|| self.finalizers.iter().map(Atom::to_string).collect()),
            ..ObjectMeta::default()
        }
    }

    /// The namespace (empty when it has none).
    pub fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }

    /// The controlling owner.
    pub fn controller(&self) -> Option<&CachedOwner> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
    }

    /// The UID of the controlling owner.
    pub fn controller_uid(&self) -> Option<&str> {
        self.controller().map(|o| o.uid.as_str())
    }

    /// Whether `owner` (by UID) is the controlling owner: an owner recreated under the same
    /// name inherits nothing of its predecessor's.
    pub fn controlled_by(&self, owner: &ObjectMeta) -> bool {
        owner.uid.is_some() && self.controller_uid() == owner.uid.as_deref()
    }

    /// Whether the controlling owner is of `kind`.
    pub fn controlled_by_kind(&self, kind: &str) -> bool {
        self.controller().is_some_and(|o| o.kind.as_str() == kind)
    }
}

impl Serialize for CachedMeta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_object_meta().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for CachedMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(deserializer).map(|meta| Self::from(&meta))
    }
}

/// What decisions read by key of an object's labels and annotations, however it is held
/// (a cached pod's compact metadata, any other object's `ObjectMeta`).
pub trait Labelled {
    /// The value of label `key`.
    fn label(&self, key: &str) -> Option<&str>;

    /// The value of annotation `key`.
    fn annotation(&self, key: &str) -> Option<&str>;
}

impl<K: kube::Resource> Labelled for K {
    fn label(&self, key: &str) -> Option<&str> {
        self.meta().labels.as_ref()?.get(key).map(String::as_str)
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.meta()
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }
}

/// A cached kind whose metadata is a [`CachedMeta`].
pub trait WithCachedMeta {
    /// Its metadata.
    fn cached_meta(&self) -> &CachedMeta;
}

/// Implements [`WithCachedMeta`], [`Labelled`] and the reflector's `Lookup` (what a cache's store keys by
/// and controllers reference objects by) for a cached kind with a `metadata: CachedMeta`,
/// given its kind, group, version and plural.
macro_rules! cached_kind {
    ($type:ty, $kind:literal, $group:literal, $version:literal, $plural:literal) => {
        impl $crate::api::cached::meta::WithCachedMeta for $type {
            fn cached_meta(&self) -> &$crate::api::cached::meta::CachedMeta {
                &self.metadata
            }
        }

        impl $crate::api::cached::meta::Labelled for $type {
            fn label(&self, key: &str) -> Option<&str> {
                self.metadata.labels.get(key)
            }

            fn annotation(&self, key: &str) -> Option<&str> {
                self.metadata.annotations.get(key)
            }
        }

        impl kube::runtime::reflector::Lookup for $type {
            type DynamicType = ();

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn name(&self) -> Option<std::borrow::Cow<'_, str>> {
                Some(std::borrow::Cow::Borrowed(&self.metadata.name))
            }
            fn namespace(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.metadata
                    .namespace
                    .as_deref()
                    .map(std::borrow::Cow::Borrowed)
            }
            fn resource_version(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.metadata
                    .resource_version
                    .as_deref()
                    .map(std::borrow::Cow::Borrowed)
            }
            fn uid(&self) -> Option<std::borrow::Cow<'_, str>> {
                self.metadata.uid.as_deref().map(std::borrow::Cow::Borrowed)
            }
            /// Keyed by namespace and name alone: the store's key would otherwise copy the
            /// version and UID too, which no lookup compares.
            fn to_object_ref(&self, dyntype: ()) -> kube::runtime::reflector::ObjectRef<Self> {
                kube::runtime::reflector::ObjectRef::new_with(&self.metadata.name, dyntype)
                    .within(self.metadata.namespace())
            }
        }
    };
}
pub(crate) use cached_kind;

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ObjectMeta {
        serde_json::from_value(serde_json::json!({
            "name": "llm-roleset-abcde-decode-x1", "generateName": "llm-roleset-abcde-decode-",
            "namespace": "team", "uid": "u-1", "resourceVersion": "42", "generation": 1,
            "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:01:00Z",
            "deletionGracePeriodSeconds": 30,
            "labels": {"role-name": "decode", "app": "llm", "zz": ""},
            "annotations": {"stormservice.orchestration.aibrix.ai/roleset-index": "0"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Other", "name": "o", "uid": "o-1"},
                {"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                 "name": "llm-roleset-abcde", "uid": "r-1", "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["a/b"],
        }))
        .unwrap()
    }

    #[test]
    fn cached_metadata_reads_back_as_the_metadata_it_was() {
        let cached = CachedMeta::from(&meta());
        assert_eq!(cached.to_object_meta(), meta());
        assert_eq!(cached.labels.get("app"), Some("llm"));
        assert_eq!(cached.labels.get("zz"), Some(""));
        assert_eq!(cached.labels.get("nope"), None);
        assert_eq!(cached.controller_uid(), Some("r-1"));
        assert!(cached.controlled_by_kind("RoleSet"));
        assert!(!cached.controlled_by_kind("Other"), "not the controller");
        let text = serde_json::to_string(&cached).unwrap();
        let read: CachedMeta = serde_json::from_str(&text).unwrap();
        assert_eq!(read, cached);
        assert_eq!(
            CachedMeta::default().to_object_meta(),
            ObjectMeta::default()
        );
    }

    #[test]
    fn repeated_texts_are_held_once() {
        let a = CachedMeta::from(&meta());
        let b = CachedMeta::from(&meta());
        let (ka, va) = &a.labels.0[0];
        let (kb, vb) = &b.labels.0[0];
        assert!(Arc::ptr_eq(&ka.0, &kb.0) && Arc::ptr_eq(&va.0, &vb.0));
        assert!(Arc::ptr_eq(
            &a.owner_references[1].uid.0,
            &b.owner_references[1].uid.0
        ));
    }

    #[test]
    fn texts_no_object_holds_are_swept_as_the_table_grows() {
        let kept = Atom::new("kept-across-sweeps");
        for n in 0..FIRST_SWEEP * 4 {
            drop(Atom::new(&format!("passing-{n}")));
        }
        let held = ATOMS.lock().unwrap().held.len();
        // Other tests intern concurrently; the passing texts alone would be 4× the first sweep.
        assert!(held < FIRST_SWEEP * 3, "{held} texts held");
        assert!(Arc::ptr_eq(&kept.0, &Atom::new("kept-across-sweeps").0));
    }
}
