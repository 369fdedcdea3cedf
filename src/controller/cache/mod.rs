//! Shared caches: one watch per kind for the whole process (per namespace scope), read by
//! all three controllers, so a reconcile reads its children from memory instead of LISTing
//! them from the API server — the informer design of Kubernetes' own controllers.
//!
//! Each [`Cache`] keeps a kube reflector [`Store`] (what the controllers' queues read their
//! primaries from) and an index of the same objects by their controlling owner (what
//! reconciles read children from). Objects are decoded one at a time ([`Decoded`]), made lean
//! before they are stored, and every change — deletions included — is fanned out to the
//! controllers that subscribed, after the store and the index hold it, so a reconcile it
//! triggers sees it.
//!
//! Ownership is namespaced, as the garbage collector's is: a child counts for an owner only
//! in the owner's own namespace. The index is keyed by (owner UID, namespace) and children by
//! name within it, so a tenant's pod in namespace A that names a RoleSet of namespace B as its
//! controller (its UID, one of B's pod names) is never one of B's children; it is reported
//! once and counted (`squall_foreign_owner_claims`).

pub mod decoded;
pub mod podgroups;
pub mod scope;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::bounded_status::CheckedStatus;
use crate::api::cached::meta::Atom;
use crate::api::cached::packed::Dictionaries;
use crate::api::cached::pod::{CachedPod, WatchedPod};
use crate::api::cached::revision::{CachedRevision, WatchedRevision};
use crate::api::cached::service::CachedService;
use crate::api::cached::shared::{Interner, Shared};
use crate::api::keys::LABEL_ROLE_TEMPLATE_HASH;
use crate::api::{RoleSet, RoleSpec, StormService, controller_uid};
use crate::metrics::Metrics;
use decoded::Decoded;
use k8s_openapi::api::core::v1::PodTemplateSpec;

/// Changes waiting for one subscribed controller. Bounded: a controller that stops taking
/// them slows its watch down (backpressure) instead of growing memory.
const TRIGGER_BUFFER: usize = 1024;

/// The annotation `kubectl apply` stores a whole copy of the object in; nothing reads it.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A stored object a cache could not use whole, for a Warning event about it (sent where
/// the tenant who wrote it looks: its own namespace).
#[derive(Clone, Debug)]
pub struct DecodeWarning {
    /// The object, at the version that did not decode.
    pub regarding: ObjectReference,
    /// Only its status was set aside (the controller derives it afresh).
    pub status_only: bool,
    /// The field and what is wrong with it, bounded; never the value.
    pub reason: String,
}

/// Which watched objects a cache keeps (the others are dropped as if deleted).
pub type Keep<K> = fn(&K) -> bool;

/// Shapes an object before it is stored: points what it holds in common with others at one
/// copy ([`crate::api::cached::shared`], [`crate::api::cached::packed`]), or drops what no
/// decision reads of its kind.
pub type Share<K> = fn(&mut K);

/// The pod templates the RoleSets and StormServices of every cache hold: one copy of each.
static POD_TEMPLATES: std::sync::LazyLock<Interner<PodTemplateSpec>> =
    std::sync::LazyLock::new(Interner::default);

/// The role lists of the same: every RoleSet of a revision carries its StormService's.
static ROLE_LISTS: std::sync::LazyLock<Interner<Vec<RoleSpec>>> =
    std::sync::LazyLock::new(Interner::default);

/// The dictionaries pods' specs are packed against: one per namespace and role template.
static POD_SPECS: std::sync::LazyLock<Dictionaries> =
    std::sync::LazyLock::new(Dictionaries::default);

/// A pod's spec, packed against its siblings' (the pods of its namespace with its role
/// template hash, or of its owner when it has none): a kilobyte and a half becomes a few
/// dozen bytes.
pub fn share_pod_spec(pod: &mut CachedPod) {
    let Some(spec) = pod.spec.take() else {
        return;
    };
    let meta = &pod.metadata;
    let siblings = meta
        .labels
        .get(LABEL_ROLE_TEMPLATE_HASH)
        .or_else(|| meta.controller_uid())
        .unwrap_or_default();
    let key = format!("{}/{siblings}", meta.namespace());
    pod.spec = Some(POD_SPECS.pack(&key, spec));
}

/// The dictionaries revisions' data are packed against: one per namespace.
static REVISION_DATA: std::sync::LazyLock<Dictionaries> =
    std::sync::LazyLock::new(Dictionaries::default);

/// A revision's data, packed against the first of its namespace's (the revisions of a
/// namespace's StormServices hold templates that differ in a few fields).
pub fn share_revision_data(revision: &mut CachedRevision) {
    if let Some(data) = revision.data.take() {
        let namespace = revision.metadata.namespace();
        revision.data = Some(REVISION_DATA.pack(namespace, data));
    }
}

/// Points a spec's role list, and each role's pod template within it, at the one copy of
/// its content. Templates first: role lists that differ (a pooled canary's partitions) still
/// share their templates.
fn share_roles(roles: &mut Option<Shared<Vec<RoleSpec>>>) {
    let Some(mut list) = roles.take() else {
        return;
    };
    for role in &mut list {
        if let Some(template) = role.template.take() {
            role.template = Some(POD_TEMPLATES.share(template));
        }
    }
    *roles = Some(ROLE_LISTS.share(list));
}

/// A RoleSet's roles and pod templates, shared.
pub fn share_roleset_templates(roleset: &mut RoleSet) {
    share_roles(&mut roleset.spec.roles);
}

/// A StormService's roles and pod templates, shared.
pub fn share_stormservice_templates(service: &mut StormService) {
    if let Some(spec) = service.spec.template.spec.as_mut() {
        share_roles(&mut spec.roles);
    }
}

/// A kind as its cache keeps it: read from the watch as [`Cached::Watched`] (what the
/// watcher decodes: a `Resource` with the API's `ObjectMeta`), and stored as `Self`, which
/// may be leaner (a pod's metadata: [`CachedPod`]).
pub trait Cached:
    kube::runtime::reflector::Lookup<DynamicType = ()>
    + Clone
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The form the watch decodes each object in.
    type Watched: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + CheckedStatus
        + Send
        + Sync
        + 'static;

    /// The object as the cache stores it.
    fn stored(watched: Self::Watched) -> Self;

    /// The UID of its controlling owner.
    fn controller_uid(&self) -> Option<&str>;

    /// Whether it is being deleted.
    fn is_deleting(&self) -> bool;
}

/// Kinds stored as they are watched.
macro_rules! stored_as_watched {
    ($($kind:ty),* $(,)?) => {$(
        impl Cached for $kind {
            type Watched = Self;

            fn stored(watched: Self) -> Self {
                watched
            }

            fn controller_uid(&self) -> Option<&str> {
                controller_uid(self.meta())
            }

            fn is_deleting(&self) -> bool {
                self.meta().deletion_timestamp.is_some()
            }
        }
    )*};
}

stored_as_watched!(
    RoleSet,
    StormService,
    crate::api::PodSet,
    k8s_openapi::api::core::v1::Pod,
);

impl<S: crate::api::podgroup::SchedulerKind> Cached for crate::api::podgroup::PodGroup<S> {
    type Watched = Self;

    fn stored(watched: Self) -> Self {
        watched
    }

    fn controller_uid(&self) -> Option<&str> {
        controller_uid(self.meta())
    }

    fn is_deleting(&self) -> bool {
        self.meta().deletion_timestamp.is_some()
    }
}

impl Cached for CachedService {
    type Watched = Service;

    fn stored(watched: Service) -> Self {
        CachedService::from(&watched)
    }

    fn controller_uid(&self) -> Option<&str> {
        self.metadata.controller_uid()
    }

    fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

impl Cached for CachedRevision {
    type Watched = WatchedRevision;

    fn stored(watched: WatchedRevision) -> Self {
        watched.into()
    }

    fn controller_uid(&self) -> Option<&str> {
        self.metadata.controller_uid()
    }

    fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

impl Cached for CachedPod {
    type Watched = WatchedPod;

    fn stored(watched: WatchedPod) -> Self {
        watched.into()
    }

    fn controller_uid(&self) -> Option<&str> {
        self.metadata.controller_uid()
    }

    fn is_deleting(&self) -> bool {
        CachedPod::is_deleting(self)
    }
}

/// One kind's cache: the objects, by key and by controlling owner.
pub struct Cache<K: Cached> {
    /// The same objects as a reflector store, for the kinds controllers queue as primaries
    /// (`Controller::for_shared_stream` reads one); the other kinds' are read from the index
    /// alone, without the store's second map and keys.
    store: Option<Store<K>>,
    /// Whether the first list is in.
    listed: tokio::sync::watch::Receiver<bool>,
    index: Mutex<Index<K>>,
    subscribers: Mutex<Vec<mpsc::Sender<Arc<K>>>>,
    keep: Keep<K>,
    metrics: Arc<Metrics>,
}

/// What the index remembers about one stored object.
struct Entry<K> {
    /// The object as stored (a deletion during a relist still names its owner).
    object: Arc<K>,
    /// Its name, held once for this map and [`ByOwner`].
    name: Arc<str>,
    owner: Option<Atom>,
    bytes: u32,
}

/// Stored objects by namespace, then name.
type Entries<K> = HashMap<Atom, HashMap<Arc<str>, Entry<K>>>;

/// Children by their controlling owner's UID, then their own namespace, then name: one
/// ordered map, so an owner with one child costs one entry (not a map of its own), and the
/// children of one owner are one range.
type ByOwner<K> = BTreeMap<(Atom, Atom, Arc<str>), Arc<K>>;

struct Index<K: Cached> {
    entries: Entries<K>,
    /// How many objects `entries` holds.
    len: usize,
    by_owner: ByOwner<K>,
    bytes: usize,
    /// Children already reported for claiming an owner in another namespace, by namespace
    /// and name (each is reported once while it is stored).
    foreign: HashSet<(Atom, Arc<str>)>,
    /// The highest resource version of the watch this index holds (see [`Cache::seen_version`]).
    seen_version: Option<u64>,
}

impl<K: Cached> Default for Index<K> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            len: 0,
            by_owner: BTreeMap::new(),
            bytes: 0,
            foreign: HashSet::new(),
            seen_version: None,
        }
    }
}

/// What a cache knows of the watched objects that do not decode whole, by key: the version
/// last reported, and why.
type Problems<K> = HashMap<ObjectRef<K>, (Option<String>, String)>;

/// Drops what no controller reads before an object is stored: the managed-fields record and
/// the last-applied copy (together often larger than the object itself).
fn make_lean<K: Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

impl<K: Cached> Cache<K> {
    /// A cache of the objects `api` lists under `config`, keeping those `keep` accepts; run
    /// the returned driver to fill it.
    pub fn new(
        api: Api<Decoded<K::Watched>>,
        config: watcher::Config,
        keep: Keep<K>,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, Driver<K>) {
        Self::build(api, config, keep, metrics, None)
    }

    /// The same, with a reflector store of its objects ([`Cache::reader`]).
    pub fn with_store(
        api: Api<Decoded<K::Watched>>,
        config: watcher::Config,
        keep: Keep<K>,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, Driver<K>) {
        Self::build(api, config, keep, metrics, Some(Writer::default()))
    }

    fn build(
        api: Api<Decoded<K::Watched>>,
        config: watcher::Config,
        keep: Keep<K>,
        metrics: Arc<Metrics>,
        writer: Option<Writer<K>>,
    ) -> (Arc<Self>, Driver<K>) {
        let (listed, listed_reader) = tokio::sync::watch::channel(false);
        let cache = Arc::new(Self {
            store: writer.as_ref().map(Writer::as_reader),
            listed: listed_reader,
            index: Mutex::default(),
            subscribers: Mutex::default(),
            keep,
            metrics,
        });
        let driver = Driver {
            cache: cache.clone(),
            writer,
            listed,
            relisted: Vec::new(),
            api,
            config,
            problems: Problems::default(),
            relisted_problems: Problems::default(),
            relisted_version: None,
            warnings: None,
            share: None,
        };
        (cache, driver)
    }

    /// The store the controllers' queues read primaries from (of a cache made
    /// [`Cache::with_store`]).
    pub fn reader(&self) -> Store<K> {
        self.store
            .clone()
            .expect("a cache of primaries is made with a store")
    }

    /// Every change from now on (applied and deleted objects). Subscribe before the driver
    /// runs: a subscriber that stops reading holds the watch back.
    pub fn subscribe(&self) -> impl Stream<Item = Arc<K>> + Send + 'static {
        let (sender, receiver) = mpsc::channel(TRIGGER_BUFFER);
        self.subscribers
            .lock()
            .expect("subscribers lock")
            .push(sender);
        receiver
    }

    /// Whether the first list is in.
    pub fn is_ready(&self) -> bool {
        *self.listed.borrow()
    }

    /// Resolves once the first list is in (reconciling before would miss children).
    pub async fn ready(&self) {
        // The sender lives as long as the driver; a dropped one means shutdown.
        let _ = self.listed.clone().wait_for(|listed| *listed).await;
    }

    /// The stored objects in `namespace` whose controlling owner has `uid`, by name. Objects
    /// elsewhere that claim the same owner are not its children: each is reported once.
    pub fn owned_by(&self, namespace: &str, uid: &str) -> Vec<Arc<K>> {
        // A UID no stored object names is not held as an atom: nothing claims it.
        let Some(owner) = Atom::existing(uid) else {
            return Vec::new();
        };
        let mut index = self.index.lock().expect("index lock");
        let Index {
            by_owner, foreign, ..
        } = &mut *index;
        let first = (owner.clone(), Atom::new(""), Arc::<str>::from(""));
        let mut children = Vec::new();
        for ((_, elsewhere, name), child) in by_owner
            .range(first..)
            .take_while(|((claimed, _, _), _)| *claimed == owner)
        {
            if elsewhere.as_str() == namespace {
                children.push(child.clone());
            } else if foreign.insert((elsewhere.clone(), name.clone())) {
                self.metrics.foreign_owner_claim(&K::plural(&()));
                tracing::warn!(resource = %K::plural(&()), namespace = %elsewhere, %name,
                    owner_namespace = %namespace, owner_uid = %uid,
                    "ignored: its controller ownerReference names an owner in another namespace");
            }
        }
        children
    }

    /// The highest resource version among the watch events the cache holds (kept or not):
    /// every change of this kind the API server committed at or below it is in the cache.
    /// Resource versions of one kind are comparable (KEP-5504, GA in Kubernetes 1.35); one
    /// that is not a number is not counted.
    pub fn seen_version(&self) -> Option<u64> {
        self.index.lock().expect("index lock").seen_version
    }

    /// How many objects it holds.
    pub fn count(&self) -> usize {
        self.index.lock().expect("index lock").len
    }

    /// The stored object `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        let index = self.index.lock().expect("index lock");
        Some(index.entries.get(namespace)?.get(name)?.object.clone())
    }

    /// Forgets the object `name` in `namespace`; returns it, if it was indexed.
    fn unindex(index: &mut Index<K>, namespace: &str, name: &str) -> Option<Arc<K>> {
        let in_namespace = index.entries.get_mut(namespace)?;
        let entry = in_namespace.remove(name)?;
        let namespace = index
            .entries
            .get_key_value(namespace)
            .map(|(held, _)| held.clone())
            .expect("the namespace of an entry just removed");
        if index.entries[&namespace].is_empty() {
            index.entries.remove(&namespace);
        }
        index.len -= 1;
        index.bytes -= entry.bytes as usize;
        let key = (namespace, entry.name);
        index.foreign.remove(&key);
        if let Some(owner) = entry.owner {
            index.by_owner.remove(&(owner, key.0, key.1));
        }
        Some(entry.object)
    }

    fn index(index: &mut Index<K>, object: Arc<K>) {
        let (namespace, name) = name_of(&*object);
        Self::unindex(index, &namespace, &name);
        let bytes = u32::try_from(json_len(&*object)).unwrap_or(u32::MAX);
        let owner = object.controller_uid().map(Atom::new);
        let namespace = Atom::new(&namespace);
        let name: Arc<str> = name.into();
        if let Some(owner) = &owner {
            index.by_owner.insert(
                (owner.clone(), namespace.clone(), name.clone()),
                object.clone(),
            );
        }
        index.len += 1;
        index.bytes += bytes as usize;
        index.entries.entry(namespace).or_default().insert(
            name.clone(),
            Entry {
                object,
                name,
                owner,
                bytes,
            },
        );
    }

    /// Publishes the cache's size.
    fn report(&self, index: &Index<K>) {
        self.metrics
            .cache_size(&K::plural(&()), index.len, index.bytes);
    }
}

/// The key an object is indexed by: its namespace and name. (`ObjectRef::from_obj` also
/// copies its version and UID into the key, which no lookup compares: two strings per object
/// the index would hold for nothing.)
fn key_of<K: Cached>(object: &K) -> ObjectRef<K> {
    let (namespace, name) = name_of(object);
    ObjectRef::new(&name).within(&namespace)
}

/// An object's namespace and name.
fn name_of<K: Cached>(object: &K) -> (std::borrow::Cow<'_, str>, std::borrow::Cow<'_, str>) {
    (
        object.namespace().unwrap_or_default(),
        object.name().unwrap_or_default(),
    )
}

fn key_from<K: Cached>(meta: &kube::api::ObjectMeta) -> ObjectRef<K> {
    ObjectRef::new(meta.name.as_deref().unwrap_or_default())
        .within(meta.namespace.as_deref().unwrap_or_default())
}

/// The length of an object's JSON, counted as it is written, not kept.
fn json_len(object: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    serde_json::to_writer(&mut count, object).map_or(0, |()| count.0)
}

/// An object's resource version as a number (see [`Cache::seen_version`]).
fn version_of<K: Cached>(object: &K) -> Option<u64> {
    kube::runtime::reflector::Lookup::resource_version(object)?
        .parse()
        .ok()
}

/// What a watch event of one object does to the store.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    Apply,
    Relist,
    Delete,
}

/// Fills one [`Cache`] from its watch and fans changes out to the subscribers.
pub struct Driver<K: Cached> {
    cache: Arc<Cache<K>>,
    /// Fills the cache's store, when it has one.
    writer: Option<Writer<K>>,
    /// Says when the first list is in.
    listed: tokio::sync::watch::Sender<bool>,
    /// The objects the (re)list in progress has listed, for a cache without a store (one
    /// with a store reads them from it once the list is complete).
    relisted: Vec<Arc<K>>,
    api: Api<Decoded<K::Watched>>,
    config: watcher::Config,
    /// The stored objects that do not decode whole.
    problems: Problems<K>,
    /// The same, as the (re)list in progress finds them.
    relisted_problems: Problems<K>,
    /// The highest resource version the (re)list in progress has listed: the index holds it
    /// once the list is complete.
    relisted_version: Option<u64>,
    /// Where each newly found problem is sent for an event; full, it is only logged (an
    /// event is informative, and the watch never waits for one).
    warnings: Option<tokio::sync::mpsc::Sender<DecodeWarning>>,
    /// What each object shares with others, pointed at one copy before it is stored.
    share: Option<Share<K>>,
}

impl<K: Cached> Driver<K> {
    /// The same driver, sending a [`DecodeWarning`] for each object version it reports.
    pub fn warning_to(mut self, warnings: tokio::sync::mpsc::Sender<DecodeWarning>) -> Self {
        self.warnings = Some(warnings);
        self
    }

    /// The same driver, storing each object as `share` shaped it.
    pub fn sharing(mut self, share: Share<K>) -> Self {
        self.share = Some(share);
        self
    }

    /// Watches until the process stops (the watcher retries with backoff on errors). Lists
    /// come in pages of the watcher's default 500 objects, each page decoded and taken in
    /// before the next is asked for, so a list never holds more than one page's JSON.
    pub async fn run(mut self) {
        let kind = K::kind(&());
        let mut events =
            std::pin::pin!(watcher(self.api.clone(), self.config.clone()).default_backoff());
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.feed(event).await,
                Err(error) => tracing::warn!(%kind, %error, "watch failed; retrying"),
            }
        }
    }

    /// Takes in one watch event as the watch hands it over: made lean, admitted, stored and
    /// indexed, then fanned out to the subscribers. (The cache-scale bench feeds generated
    /// fleets through here: `benches/cache.rs`.)
    pub async fn feed(&mut self, event: watcher::Event<Decoded<K::Watched>>) {
        let Some(mut event) = self.admit(event.modify(make_lean::<Decoded<K::Watched>>)) else {
            return;
        };
        if let Some(share) = self.share {
            event = event.modify(share);
        }
        let changed = self.apply(event);
        self.fan_out(changed).await;
    }

    /// The event the store applies for one decoded event. An object that does not decode
    /// whole is reported (once per version). One without even a spec changes nothing: the
    /// cache keeps what it last held of it (across a relist too) until it decodes again.
    fn admit(&mut self, event: watcher::Event<Decoded<K::Watched>>) -> Option<watcher::Event<K>> {
        let (decoded, step) = match event {
            watcher::Event::Init => {
                self.relisted_problems.clear();
                return Some(watcher::Event::Init);
            }
            watcher::Event::InitDone => {
                self.problems = std::mem::take(&mut self.relisted_problems);
                self.report_problems();
                return Some(watcher::Event::InitDone);
            }
            watcher::Event::Apply(decoded) => (decoded, Step::Apply),
            watcher::Event::InitApply(decoded) => (decoded, Step::Relist),
            watcher::Event::Delete(decoded) => (decoded, Step::Delete),
        };
        let meta = kube::Resource::meta(&decoded);
        let key: ObjectRef<K> = key_from(meta);
        let version = meta.resource_version.clone();
        let reported =
            |problems: &Problems<K>| problems.get(&key).is_some_and(|(seen, _)| *seen == version);
        let already_reported = reported(&self.problems) || reported(&self.relisted_problems);
        let problems = match step {
            Step::Relist => &mut self.relisted_problems,
            Step::Apply | Step::Delete => &mut self.problems,
        };
        match decoded.problem() {
            Some(reason) if step != Step::Delete => {
                if !already_reported {
                    let status_only = matches!(decoded, Decoded::WithoutStatus(..));
                    let kept = if status_only {
                        "served without its status, which the controller derives afresh"
                    } else {
                        "skipped: the cache keeps what it held of it, if anything"
                    };
                    tracing::warn!(resource = %K::plural(&()), namespace = key.namespace.as_deref().unwrap_or_default(),
                        name = %key.name, %reason, "stored object does not decode or is out of bounds; {kept}");
                    if let Some(warnings) = &self.warnings {
                        let _ = warnings.try_send(DecodeWarning {
                            regarding: ObjectReference {
                                api_version: Some(K::api_version(&()).into()),
                                kind: Some(K::kind(&()).into()),
                                namespace: meta.namespace.clone(),
                                name: meta.name.clone(),
                                uid: meta.uid.clone(),
                                resource_version: version.clone(),
                                ..ObjectReference::default()
                            },
                            status_only,
                            reason: reason.to_string(),
                        });
                    }
                }
                problems.insert(key.clone(), (version, reason.to_string()));
            }
            _ => {
                problems.remove(&key);
            }
        }
        if step != Step::Relist {
            self.report_problems();
        }
        let object = match decoded.into_object() {
            Some(object) => K::stored(object),
            None if step == Step::Apply => return None,
            None => (*self
                .cache
                .get(key.namespace.as_deref().unwrap_or_default(), &key.name)?)
            .clone(),
        };
        Some(match step {
            Step::Apply => watcher::Event::Apply(object),
            Step::Relist => watcher::Event::InitApply(object),
            Step::Delete => watcher::Event::Delete(object),
        })
    }

    fn report_problems(&self) {
        self.cache
            .metrics
            .undecodable_objects(&K::plural(&()), self.problems.len());
    }

    /// Applies one watch event to the store and the index; returns the changed objects.
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<Arc<K>> {
        let cache = &self.cache;
        // How far the watch has come: applied to the index with the event itself, so a
        // reader never sees a version whose change it cannot see yet.
        let mut seen = match &event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => version_of(object),
            watcher::Event::InitApply(object) => {
                self.relisted_version = self.relisted_version.max(version_of(object));
                None
            }
            watcher::Event::Init => {
                self.relisted_version = None;
                None
            }
            watcher::Event::InitDone => self.relisted_version.take(),
        };
        let event = match event {
            // An object the cache does not keep leaves it (it may have been kept before).
            watcher::Event::Apply(object) if !(cache.keep)(&object) => {
                watcher::Event::Delete(object)
            }
            watcher::Event::InitApply(object) if !(cache.keep)(&object) => return Vec::new(),
            event => event,
        };
        if let Some(writer) = &mut self.writer {
            writer.apply_watcher_event(&event);
        }
        let list_done = matches!(event, watcher::Event::InitDone);
        let mut index = cache.index.lock().expect("index lock");
        seen = seen.max(index.seen_version);
        let changed = match event {
            watcher::Event::Apply(object) => {
                // One copy for the store and the index.
                let stored = match &cache.store {
                    Some(store) => store.get(&key_of(&object)),
                    None => Some(Arc::new(object)),
                };
                match stored {
                    Some(stored) => {
                        Cache::index(&mut index, stored.clone());
                        vec![stored]
                    }
                    None => Vec::new(),
                }
            }
            watcher::Event::Delete(object) => {
                let (namespace, name) = name_of(&object);
                if Cache::unindex(&mut index, &namespace, &name).is_none() {
                    index.seen_version = seen;
                    return Vec::new();
                }
                vec![Arc::new(object)]
            }
            watcher::Event::Init => {
                self.relisted.clear();
                Vec::new()
            }
            watcher::Event::InitApply(object) => {
                if cache.store.is_none() {
                    self.relisted.push(Arc::new(object));
                }
                Vec::new()
            }
            // A (re)list is complete: the store swapped it in; the index follows, and every
            // object — plus those that vanished while the watch was down — is a change.
            watcher::Event::InitDone => {
                let stored = match &cache.store {
                    Some(store) => store.state(),
                    None => std::mem::take(&mut self.relisted),
                };
                let mut vanished = std::mem::take(&mut *index);
                index.seen_version = seen;
                for object in &stored {
                    let (namespace, name) = name_of(&**object);
                    Cache::unindex(&mut vanished, &namespace, &name);
                    Cache::index(&mut index, object.clone());
                }
                let mut changed = stored;
                changed.extend(
                    vanished
                        .entries
                        .into_values()
                        .flat_map(HashMap::into_values)
                        .map(|entry| entry.object),
                );
                changed
            }
        };
        index.seen_version = seen;
        cache.report(&index);
        drop(index);
        if list_done {
            self.listed
                .send_if_modified(|listed| !std::mem::replace(listed, true));
        }
        changed
    }

    async fn fan_out(&self, changed: Vec<Arc<K>>) {
        if changed.is_empty() {
            return;
        }
        let mut subscribers = std::mem::take(&mut *self.cache.subscribers.lock().expect("lock"));
        for object in changed {
            for subscriber in &mut subscribers {
                // A controller that stopped (shutdown) no longer listens; that is fine.
                let _ = subscriber.send(object.clone()).await;
            }
        }
        subscribers.retain(|s| !s.is_closed());
        let mut live = self.cache.subscribers.lock().expect("subscribers lock");
        subscribers.append(&mut live);
        *live = subscribers;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cached::packed::PackedJson;
    use crate::api::keys::LABEL_STORM_SERVICE_NAME;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::ResourceExt;

    fn pod(name: &str, owner: Option<&str>, rv: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = Some(name.into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.resource_version = Some(rv.into());
        pod.metadata.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                controller: Some(true),
                uid: uid.into(),
                kind: "RoleSet".into(),
                ..OwnerReference::default()
            }]
        });
        pod.metadata.annotations = Some([(LAST_APPLIED.to_string(), "x".repeat(1000))].into());
        pod
    }

    fn cache() -> (Arc<Cache<Pod>>, Driver<Pod>) {
        cache_made(Cache::new)
    }

    type Make<K> = fn(
        Api<Decoded<<K as Cached>::Watched>>,
        watcher::Config,
        Keep<K>,
        Arc<Metrics>,
    ) -> (Arc<Cache<K>>, Driver<K>);

    fn cache_made(make: Make<Pod>) -> (Arc<Cache<Pod>>, Driver<Pod>) {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:1".parse().expect("a URL"),
        ))
        .expect("a client");
        make(
            Api::all(client),
            watcher::Config::default(),
            |p: &Pod| {
                p.owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.kind == "RoleSet")
            },
            Arc::new(Metrics::default()),
        )
    }

    fn lean(mut p: Pod) -> Pod {
        make_lean(&mut p);
        p
    }

    fn names(objects: &[Arc<Pod>]) -> Vec<String> {
        objects.iter().map(|p| p.name_any()).collect()
    }

    #[tokio::test]
    async fn children_are_found_by_owner_and_follow_changes_and_relists() {
        children_follow_changes_and_relists(Cache::new);
    }

    #[tokio::test]
    async fn a_cache_with_a_store_indexes_the_stores_copies() {
        let cache = children_follow_changes_and_relists(Cache::with_store);
        let store = cache.reader();
        assert_eq!(store.state().len(), 1);
        let stored = store.get(&ObjectRef::new("d").within("ns")).unwrap();
        assert!(
            Arc::ptr_eq(&stored, &cache.get("ns", "d").unwrap()),
            "one copy for the store and the index"
        );
    }

    fn children_follow_changes_and_relists(make: Make<Pod>) -> Arc<Cache<Pod>> {
        let (cache, mut driver) = cache_made(make);
        assert!(!cache.is_ready());
        assert!(driver.apply(watcher::Event::Init).is_empty());
        for p in [
            pod("a", Some("u1"), "1"),
            pod("b", Some("u1"), "1"),
            pod("c", Some("u2"), "1"),
        ] {
            assert!(driver.apply(watcher::Event::InitApply(lean(p))).is_empty());
        }
        // Not controlled by a RoleSet: never stored.
        driver.apply(watcher::Event::InitApply(pod("stray", None, "1")));
        assert!(
            cache.owned_by("ns", "u1").is_empty(),
            "nothing before the list is complete"
        );
        let changed = driver.apply(watcher::Event::InitDone);
        assert!(cache.is_ready());
        assert_eq!(
            names(&changed).len(),
            3,
            "the first list triggers everything"
        );
        assert_eq!(names(&cache.owned_by("ns", "u1")), ["a", "b"]);
        assert!(cache.get("ns", "stray").is_none());

        // Updated, deleted, re-owned.
        let changed = driver.apply(watcher::Event::Apply(lean(pod("a", Some("u1"), "2"))));
        assert_eq!(names(&changed), ["a"]);
        assert_eq!(
            cache.owned_by("ns", "u1")[0].resource_version().as_deref(),
            Some("2")
        );
        let changed = driver.apply(watcher::Event::Delete(lean(pod("b", Some("u1"), "3"))));
        assert_eq!(names(&changed), ["b"], "a deletion triggers its owner too");
        assert_eq!(names(&cache.owned_by("ns", "u1")), ["a"]);
        driver.apply(watcher::Event::Apply(lean(pod("c", Some("u1"), "4"))));
        assert_eq!(names(&cache.owned_by("ns", "u1")), ["a", "c"]);
        assert!(
            cache.owned_by("ns", "u2").is_empty(),
            "a child moves with its owner"
        );
        // Orphaned: leaves the cache.
        driver.apply(watcher::Event::Apply(pod("a", None, "5")));
        assert_eq!(names(&cache.owned_by("ns", "u1")), ["c"]);

        // A relist replaces everything at once.
        driver.apply(watcher::Event::Init);
        driver.apply(watcher::Event::InitApply(lean(pod("d", Some("u3"), "6"))));
        assert_eq!(
            names(&cache.owned_by("ns", "u1")),
            ["c"],
            "the old view holds until InitDone"
        );
        let mut changed = names(&driver.apply(watcher::Event::InitDone));
        changed.sort();
        assert_eq!(
            changed,
            ["c", "d"],
            "what vanished meanwhile is a change too"
        );
        assert!(cache.owned_by("ns", "u1").is_empty());
        assert_eq!(names(&cache.owned_by("ns", "u3")), ["d"]);
        let stored = serde_json::to_vec(&*cache.owned_by("ns", "u3")[0])
            .unwrap()
            .len();
        let index = cache.index.lock().unwrap();
        assert_eq!(index.len, 1);
        assert_eq!(index.bytes, stored, "the size follows what is stored");
        drop(index);
        cache
    }

    #[tokio::test]
    async fn two_rolesets_with_the_same_template_hold_one_copy_of_it() {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:1".parse().expect("a URL"),
        ))
        .expect("a client");
        let (cache, driver) = Cache::<RoleSet>::new(
            Api::all(client),
            watcher::Config::default(),
            |_| true,
            Arc::new(Metrics::default()),
        );
        let mut driver = driver.sharing(share_roleset_templates);
        let roleset = |name: &str, image: &str| {
            let json = serde_json::json!({
                "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "1"},
                "spec": {"roles": [{"name": "decode", "replicas": 2, "template": {"spec":
                    {"containers": [{"name": "engine", "image": image}]}}}]},
            });
            serde_json::from_value::<Decoded<RoleSet>>(json).unwrap()
        };
        driver.feed(watcher::Event::Init).await;
        for (name, image) in [("a", "engine:1"), ("b", "engine:1"), ("c", "engine:2")] {
            driver
                .feed(watcher::Event::InitApply(roleset(name, image)))
                .await;
        }
        driver.feed(watcher::Event::InitDone).await;
        let template = |name: &str| {
            let roleset = cache.get("ns", name).expect("cached");
            roleset.spec.roles.as_ref().unwrap()[0]
                .template
                .clone()
                .expect("a template")
        };
        assert!(
            Shared::same(&template("a"), &template("b")),
            "one copy for both"
        );
        let roles = |name: &str| cache.get("ns", name).unwrap().spec.roles.clone().unwrap();
        assert!(Shared::same(&roles("a"), &roles("b")), "one role list too");
        assert!(!Shared::same(&roles("a"), &roles("c")));
        assert!(!Shared::same(&template("a"), &template("c")));
        // An update decodes a copy of its own; stored, it points at the one copy again.
        driver
            .feed(watcher::Event::Apply(roleset("b", "engine:1")))
            .await;
        assert!(Shared::same(&template("a"), &template("b")));
    }

    fn empty_cache<K: Cached>(share: Share<K>) -> (Arc<Cache<K>>, Driver<K>) {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:1".parse().expect("a URL"),
        ))
        .expect("a client");
        let (cache, driver) = Cache::<K>::new(
            Api::all(client),
            watcher::Config::default(),
            |_| true,
            Arc::new(Metrics::default()),
        );
        (cache, driver.sharing(share))
    }

    #[tokio::test]
    async fn a_roles_pods_specs_are_packed_against_one_sibling_of_their_own_namespace() {
        let (cache, mut driver) = empty_cache(share_pod_spec);
        let pod = |namespace: &str, name: &str, node: &str| {
            let json = serde_json::json!({
                "metadata": {"name": name, "namespace": namespace, "uid": name,
                    "resourceVersion": "1", "labels": {LABEL_ROLE_TEMPLATE_HASH: "6cc4479f85"}},
                "spec": {"nodeName": node, "containers": [{"name": "engine", "image": "engine:1",
                    "volumeMounts": [{"name": format!("kube-api-access-{name}"),
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
                    "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]},
            });
            (
                serde_json::from_value::<Decoded<WatchedPod>>(json.clone()).unwrap(),
                serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(json).unwrap(),
            )
        };
        driver.feed(watcher::Event::Init).await;
        let mut sent = Vec::new();
        for (namespace, name, node) in [("a", "p1", "n1"), ("a", "p2", "n2"), ("b", "p3", "n1")] {
            let (decoded, whole) = pod(namespace, name, node);
            driver.feed(watcher::Event::InitApply(decoded)).await;
            sent.push((namespace, name, whole));
        }
        driver.feed(watcher::Event::InitDone).await;
        for (namespace, name, whole) in &sent {
            let cached = cache.get(namespace, name).expect("cached");
            assert_eq!(
                cached.to_pod().unwrap().spec,
                whole.spec,
                "{name} reads back whole"
            );
            assert!(cached.has_readiness_gate("InPlaceUpdateReady"));
        }
        let spec =
            |namespace: &str, name: &str| cache.get(namespace, name).unwrap().spec.clone().unwrap();
        assert!(
            PackedJson::same_dictionary(&spec("a", "p1"), &spec("a", "p2")),
            "siblings share one"
        );
        assert!(
            !PackedJson::same_dictionary(&spec("a", "p1"), &spec("b", "p3")),
            "never another namespace's"
        );
        let plain = serde_json::to_string(&sent[1].2.spec).unwrap().len();
        assert!(
            spec("a", "p2").own_bytes() * 3 < plain,
            "{} of {plain}",
            spec("a", "p2").own_bytes()
        );
    }

    #[tokio::test]
    async fn a_cached_headless_service_keeps_what_its_repair_reads() {
        let (cache, mut driver) = empty_cache::<CachedService>(|_| {});
        let service = |selector: &str| {
            serde_json::from_value::<Decoded<Service>>(serde_json::json!({
                "metadata": {"name": "llm", "namespace": "ns", "uid": "s", "resourceVersion": "1",
                    "labels": {LABEL_STORM_SERVICE_NAME: "llm"}},
                "spec": {"clusterIP": "None", "ports": [{"port": 8000}], "type": "ClusterIP",
                    "selector": {LABEL_STORM_SERVICE_NAME: selector}, "publishNotReadyAddresses": true},
                "status": {"loadBalancer": {}},
            }))
            .unwrap()
        };
        driver.feed(watcher::Event::Init).await;
        driver.feed(watcher::Event::InitApply(service("llm"))).await;
        driver.feed(watcher::Event::InitDone).await;
        let cached = cache.get("ns", "llm").unwrap();
        assert_eq!(cached.selector.get(LABEL_STORM_SERVICE_NAME), Some("llm"));
        assert_eq!(
            crate::planner::render::headless_service_repair(&cached, "llm"),
            None
        );
        driver.feed(watcher::Event::Apply(service("other"))).await;
        let drifted = cache.get("ns", "llm").unwrap();
        assert!(
            crate::planner::render::headless_service_repair(&drifted, "llm").is_some(),
            "a drifted selector is still seen"
        );
    }

    #[tokio::test]
    async fn the_version_seen_moves_with_what_the_index_holds() {
        let (cache, mut driver) = cache();
        driver.apply(watcher::Event::Init);
        driver.apply(watcher::Event::InitApply(pod("a", Some("u1"), "7")));
        driver.apply(watcher::Event::InitApply(pod("stray", None, "9")));
        assert_eq!(
            cache.seen_version(),
            None,
            "a list counts once it is complete"
        );
        driver.apply(watcher::Event::InitDone);
        assert_eq!(
            cache.seen_version(),
            Some(9),
            "an object not kept counts too"
        );
        driver.apply(watcher::Event::Delete(pod("gone", Some("u1"), "12")));
        assert_eq!(
            cache.seen_version(),
            Some(12),
            "a deletion of an unknown object"
        );
        driver.apply(watcher::Event::Apply(pod("b", Some("u1"), "not-a-number")));
        assert_eq!(cache.seen_version(), Some(12));
        driver.apply(watcher::Event::Init);
        driver.apply(watcher::Event::InitApply(pod("a", Some("u1"), "7")));
        driver.apply(watcher::Event::InitDone);
        assert_eq!(cache.seen_version(), Some(12), "a relist never goes back");
    }

    #[test]
    fn lean_objects_lose_managed_fields_and_the_last_applied_copy_only() {
        let mut p = pod("a", Some("u1"), "1");
        p.metadata.managed_fields = Some(vec![Default::default()]);
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("keep".into(), "me".into());
        make_lean(&mut p);
        assert!(p.metadata.managed_fields.is_none());
        assert_eq!(p.annotations().len(), 1);
        assert_eq!(p.annotations()["keep"], "me");
    }

    fn within(mut p: Pod, namespace: &str) -> Pod {
        p.metadata.namespace = Some(namespace.into());
        p
    }

    #[tokio::test]
    async fn a_child_that_claims_an_owner_in_another_namespace_is_never_its_child() {
        let (cache, mut driver) = cache();
        driver.apply(watcher::Event::Init);
        driver.apply(watcher::Event::InitApply(lean(pod("a", Some("u1"), "1"))));
        driver.apply(watcher::Event::InitDone);
        // The tenant of namespace "other" names the owner's UID and its child's name.
        let shadow = within(pod("a", Some("u1"), "2"), "other");
        driver.apply(watcher::Event::Apply(lean(shadow.clone())));
        let children = cache.owned_by("ns", "u1");
        assert_eq!(names(&children), ["a"]);
        assert_eq!(children[0].namespace().as_deref(), Some("ns"));
        assert_eq!(
            children[0].resource_version().as_deref(),
            Some("1"),
            "the owner's own child is kept, not the shadow"
        );
        cache.owned_by("ns", "u1");
        let claims = cache.metrics.render();
        assert!(
            claims.contains("squall_foreign_owner_claims_total{resource=\"pods\"} 1"),
            "reported once however often the owner reads: {claims}"
        );
        // When the shadow goes, the owner's child is still there.
        driver.apply(watcher::Event::Delete(lean(shadow)));
        assert_eq!(names(&cache.owned_by("ns", "u1")), ["a"]);
        assert!(cache.owned_by("other", "u1").is_empty());
    }

    fn decoded(json: serde_json::Value) -> Decoded<Pod> {
        serde_json::from_value(json).unwrap()
    }

    fn pod_json(rv: &str, status: serde_json::Value, spec: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv,
                "ownerReferences": [{"apiVersion": "orchestration.aibrix.ai/v1alpha1",
                    "kind": "RoleSet", "name": "r", "uid": "u1", "controller": true}]},
            "spec": spec,
            "status": status,
        })
    }

    #[tokio::test]
    async fn an_undecodable_object_is_reported_and_the_last_good_version_is_kept() {
        let (cache, driver) = cache();
        let (warnings, mut warned) = tokio::sync::mpsc::channel(8);
        let mut driver = driver.warning_to(warnings);
        let good = serde_json::json!({"containers": []});
        let bad_spec = serde_json::json!({"containers": 7});
        driver.admit(watcher::Event::Init);
        let event = driver.admit(watcher::Event::InitApply(decoded(pod_json(
            "1",
            serde_json::json!({}),
            good.clone(),
        ))));
        driver.apply(event.expect("a whole object"));
        let done = driver.admit(watcher::Event::InitDone).unwrap();
        driver.apply(done);
        assert!(driver.problems.is_empty());

        // Its spec breaks: nothing changes in the store, and it is reported.
        let event = driver.admit(watcher::Event::Apply(decoded(pod_json(
            "2",
            serde_json::json!({}),
            bad_spec.clone(),
        ))));
        assert!(event.is_none(), "an unreadable update is not applied");
        assert_eq!(
            cache.get("ns", "a").unwrap().resource_version().as_deref(),
            Some("1")
        );
        assert!(
            driver.problems[&ObjectRef::new("a").within("ns")]
                .1
                .starts_with("spec.containers")
        );
        assert!(
            cache
                .metrics
                .render()
                .contains("squall_undecodable_objects{resource=\"pods\"} 1")
        );
        let warning = warned.try_recv().expect("a warning for the event");
        assert_eq!(
            (
                warning.regarding.namespace.as_deref(),
                warning.regarding.name.as_deref(),
                warning.regarding.kind.as_deref(),
                warning.regarding.resource_version.as_deref(),
                warning.status_only,
            ),
            (Some("ns"), Some("a"), Some("Pod"), Some("2"), false)
        );
        assert!(warning.reason.starts_with("spec.containers"), "{warning:?}");

        // A relist that finds it still unreadable keeps the last good version.
        driver.admit(watcher::Event::Init);
        let event = driver.admit(watcher::Event::InitApply(decoded(pod_json(
            "2",
            serde_json::json!({}),
            bad_spec,
        ))));
        driver.apply(event.expect("the version held"));
        let done = driver.admit(watcher::Event::InitDone).unwrap();
        driver.apply(done);
        assert_eq!(
            cache.get("ns", "a").unwrap().resource_version().as_deref(),
            Some("1")
        );
        assert_eq!(driver.problems.len(), 1, "still reported after the relist");
        assert!(warned.try_recv().is_err(), "one warning per version");

        // A bad status alone: served without it.
        let event = driver.admit(watcher::Event::Apply(decoded(pod_json(
            "3",
            serde_json::json!({"phase": 9}),
            good.clone(),
        ))));
        driver.apply(event.expect("served without status"));
        let stored = cache.get("ns", "a").unwrap();
        assert_eq!(stored.resource_version().as_deref(), Some("3"));
        assert!(stored.status.is_none());
        let warning = warned.try_recv().expect("a warning for the status");
        assert!(warning.status_only && warning.reason.starts_with("status.phase"));

        // Fixed: picked up again, no longer reported.
        let event = driver.admit(watcher::Event::Apply(decoded(pod_json(
            "4",
            serde_json::json!({"phase": "Running"}),
            good,
        ))));
        driver.apply(event.unwrap());
        assert!(driver.problems.is_empty());
        assert!(
            cache
                .metrics
                .render()
                .contains("squall_undecodable_objects{resource=\"pods\"} 0")
        );
    }

    #[tokio::test]
    async fn a_full_warning_queue_never_holds_the_watch() {
        let (cache, driver) = cache();
        let (warnings, mut warned) = tokio::sync::mpsc::channel(1);
        let mut driver = driver.warning_to(warnings);
        let bad_spec = serde_json::json!({"containers": 7});
        for version in ["2", "3"] {
            let event = driver.admit(watcher::Event::Apply(decoded(pod_json(
                version,
                serde_json::json!({}),
                bad_spec.clone(),
            ))));
            assert!(event.is_none());
        }
        assert_eq!(driver.problems.len(), 1, "reported however full the queue");
        let queued = warned.try_recv().expect("the first warning");
        assert_eq!(queued.regarding.resource_version.as_deref(), Some("2"));
        assert!(warned.try_recv().is_err(), "the second was only logged");
        assert!(cache.get("ns", "a").is_none());
    }

    #[tokio::test]
    async fn subscribers_hear_every_change_after_it_is_stored() {
        let (cache, mut driver) = cache();
        let mut first = cache.subscribe();
        let mut second = cache.subscribe();
        driver.apply(watcher::Event::Init);
        driver.apply(watcher::Event::InitDone);
        let changed = driver.apply(watcher::Event::Apply(lean(pod("a", Some("u1"), "1"))));
        driver.fan_out(changed).await;
        let changed = driver.apply(watcher::Event::Delete(lean(pod("a", Some("u1"), "2"))));
        driver.fan_out(changed).await;
        for subscriber in [&mut first, &mut second] {
            let heard = subscriber.next().await.unwrap();
            assert_eq!(heard.resource_version().as_deref(), Some("1"));
            let heard = subscriber.next().await.unwrap();
            assert_eq!(heard.resource_version().as_deref(), Some("2"));
        }
    }
}
