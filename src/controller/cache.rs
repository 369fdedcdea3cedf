//! Shared caches: one watch per kind for the whole process (per namespace scope), read by
//! all three controllers, so a reconcile reads its children from memory instead of LISTing
//! them from the API server — the informer design of Kubernetes' own controllers.
//!
//! Each [`Cache`] keeps a kube reflector [`Store`] (what the controllers' queues read their
//! primaries from) and an index of the same objects by the UID of their controlling owner
//! (what reconciles read children from). Objects are made lean before they are stored, and
//! every change — deletions included — is fanned out to the controllers that subscribed, after
//! the store and the index hold it, so a reconcile it triggers sees it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::metrics::Metrics;

/// Changes waiting for one subscribed controller. Bounded: a controller that stops taking
/// them slows its watch down (backpressure) instead of growing memory.
const TRIGGER_BUFFER: usize = 1024;

/// The annotation `kubectl apply` stores a whole copy of the object in; nothing reads it.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Which watched objects a cache keeps (the others are dropped as if deleted).
pub type Keep<K> = fn(&K) -> bool;

/// One kind's cache: the objects, by key and by controlling owner.
pub struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    reader: Store<K>,
    index: Mutex<Index<K>>,
    subscribers: Mutex<Vec<mpsc::Sender<Arc<K>>>>,
    keep: Keep<K>,
    metrics: Arc<Metrics>,
}

/// What the index remembers about one stored object.
struct Entry<K> {
    /// The object as stored (a deletion during a relist still names its owner).
    object: Arc<K>,
    owner: Option<String>,
    bytes: usize,
}

struct Index<K: Resource<DynamicType = ()>> {
    entries: HashMap<ObjectRef<K>, Entry<K>>,
    by_owner: HashMap<String, BTreeMap<String, Arc<K>>>,
    bytes: usize,
}

impl<K: Resource<DynamicType = ()>> Default for Index<K> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            by_owner: HashMap::new(),
            bytes: 0,
        }
    }
}

/// The UID of `object`'s controlling owner.
pub fn controller_uid(meta: &kube::api::ObjectMeta) -> Option<String> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// Whether `object` is controlled by an object of kind `O`.
pub fn controlled_by_kind<O: Resource<DynamicType = ()>>(meta: &kube::api::ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == O::kind(&()))
}

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

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K: Send + Sync + 'static,
{
    /// A cache of the objects `api` lists under `config`, keeping those `keep` accepts; run
    /// the returned driver to fill it.
    pub fn new(
        api: Api<K>,
        config: watcher::Config,
        keep: Keep<K>,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, Driver<K>) {
        let writer = Writer::default();
        let cache = Arc::new(Self {
            reader: writer.as_reader(),
            index: Mutex::default(),
            subscribers: Mutex::default(),
            keep,
            metrics,
        });
        let driver = Driver {
            cache: cache.clone(),
            writer,
            api,
            config,
        };
        (cache, driver)
    }

    /// The store the controllers' queues read primaries from.
    pub fn reader(&self) -> Store<K> {
        self.reader.clone()
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
        use futures::FutureExt;
        self.reader.wait_until_ready().now_or_never().is_some()
    }

    /// Resolves once the first list is in (reconciling before would miss children).
    pub async fn ready(&self) {
        // The writer lives as long as the driver; a dropped one means shutdown.
        let _ = self.reader.wait_until_ready().await;
    }

    /// The stored objects whose controlling owner has `uid`, by name.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<K>> {
        self.index
            .lock()
            .expect("index lock")
            .by_owner
            .get(uid)
            .map(|children| children.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The stored object `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<K>> {
        self.reader.get(&ObjectRef::new(name).within(namespace))
    }

    fn unindex(index: &mut Index<K>, key: &ObjectRef<K>) {
        if let Some(entry) = index.entries.remove(key) {
            index.bytes -= entry.bytes;
            if let Some(owner) = entry.owner
                && let Some(children) = index.by_owner.get_mut(&owner)
            {
                children.remove(&key.name);
                if children.is_empty() {
                    index.by_owner.remove(&owner);
                }
            }
        }
    }

    fn index(index: &mut Index<K>, key: ObjectRef<K>, object: Arc<K>) {
        Self::unindex(index, &key);
        let bytes = serde_json::to_vec(&*object).map_or(0, |b| b.len());
        let owner = controller_uid(object.meta());
        if let Some(owner) = &owner {
            index
                .by_owner
                .entry(owner.clone())
                .or_default()
                .insert(key.name.clone(), object.clone());
        }
        index.bytes += bytes;
        index.entries.insert(
            key,
            Entry {
                object,
                owner,
                bytes,
            },
        );
    }

    /// Publishes the cache's size.
    fn report(&self, index: &Index<K>) {
        self.metrics
            .cache_size(&K::plural(&()), index.entries.len(), index.bytes);
    }
}

/// Fills one [`Cache`] from its watch and fans changes out to the subscribers.
pub struct Driver<K: Resource<DynamicType = ()> + Clone + 'static> {
    cache: Arc<Cache<K>>,
    writer: Writer<K>,
    api: Api<K>,
    config: watcher::Config,
}

impl<K> Driver<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    K: Send + Sync + 'static,
{
    /// Watches until the process stops (the watcher retries with backoff on errors).
    pub async fn run(mut self) {
        let kind = K::kind(&());
        let mut events = std::pin::pin!(
            watcher(self.api.clone(), self.config.clone())
                .default_backoff()
                .modify(make_lean::<K>)
        );
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    let changed = self.apply(event);
                    self.fan_out(changed).await;
                }
                Err(error) => tracing::warn!(%kind, %error, "watch failed; retrying"),
            }
        }
    }

    /// Applies one watch event to the store and the index; returns the changed objects.
    fn apply(&mut self, event: watcher::Event<K>) -> Vec<Arc<K>> {
        let cache = &self.cache;
        let event = match event {
            // An object the cache does not keep leaves it (it may have been kept before).
            watcher::Event::Apply(object) if !(cache.keep)(&object) => {
                watcher::Event::Delete(object)
            }
            watcher::Event::InitApply(object) if !(cache.keep)(&object) => return Vec::new(),
            event => event,
        };
        self.writer.apply_watcher_event(&event);
        let mut index = cache.index.lock().expect("index lock");
        let changed = match event {
            watcher::Event::Apply(object) => {
                let key = ObjectRef::from_obj(&object);
                match cache.reader.get(&key) {
                    Some(stored) => {
                        Cache::index(&mut index, key, stored.clone());
                        vec![stored]
                    }
                    None => Vec::new(),
                }
            }
            watcher::Event::Delete(object) => {
                let key = ObjectRef::from_obj(&object);
                if !index.entries.contains_key(&key) {
                    return Vec::new();
                }
                Cache::unindex(&mut index, &key);
                vec![Arc::new(object)]
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => Vec::new(),
            // A (re)list is complete: the store swapped it in; the index follows, and every
            // object — plus those that vanished while the watch was down — is a change.
            watcher::Event::InitDone => {
                let stored = cache.reader.state();
                let mut vanished = std::mem::take(&mut index.entries);
                *index = Index::default();
                for object in &stored {
                    let key = ObjectRef::from_obj(&**object);
                    vanished.remove(&key);
                    Cache::index(&mut index, key, object.clone());
                }
                let mut changed = stored;
                changed.extend(vanished.into_values().map(|entry| entry.object));
                changed
            }
        };
        cache.report(&index);
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
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:1".parse().expect("a URL"),
        ))
        .expect("a client");
        Cache::new(
            Api::all(client),
            watcher::Config::default(),
            |p: &Pod| controlled_by_kind::<crate::api::RoleSet>(&p.metadata),
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
        let (cache, mut driver) = cache();
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
            cache.owned_by("u1").is_empty(),
            "nothing before the list is complete"
        );
        let changed = driver.apply(watcher::Event::InitDone);
        assert_eq!(
            names(&changed).len(),
            3,
            "the first list triggers everything"
        );
        assert_eq!(names(&cache.owned_by("u1")), ["a", "b"]);
        assert!(cache.get("ns", "stray").is_none());

        // Updated, deleted, re-owned.
        let changed = driver.apply(watcher::Event::Apply(lean(pod("a", Some("u1"), "2"))));
        assert_eq!(names(&changed), ["a"]);
        assert_eq!(
            cache.owned_by("u1")[0].resource_version().as_deref(),
            Some("2")
        );
        let changed = driver.apply(watcher::Event::Delete(lean(pod("b", Some("u1"), "3"))));
        assert_eq!(names(&changed), ["b"], "a deletion triggers its owner too");
        assert_eq!(names(&cache.owned_by("u1")), ["a"]);
        driver.apply(watcher::Event::Apply(lean(pod("c", Some("u1"), "4"))));
        assert_eq!(names(&cache.owned_by("u1")), ["a", "c"]);
        assert!(
            cache.owned_by("u2").is_empty(),
            "a child moves with its owner"
        );
        // Orphaned: leaves the cache.
        driver.apply(watcher::Event::Apply(pod("a", None, "5")));
        assert_eq!(names(&cache.owned_by("u1")), ["c"]);

        // A relist replaces everything at once.
        driver.apply(watcher::Event::Init);
        driver.apply(watcher::Event::InitApply(lean(pod("d", Some("u3"), "6"))));
        assert_eq!(
            names(&cache.owned_by("u1")),
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
        assert!(cache.owned_by("u1").is_empty());
        assert_eq!(names(&cache.owned_by("u3")), ["d"]);
        let stored = serde_json::to_vec(&*cache.owned_by("u3")[0]).unwrap().len();
        let index = cache.index.lock().unwrap();
        assert_eq!(index.entries.len(), 1);
        assert_eq!(index.bytes, stored, "the size follows what is stored");
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
