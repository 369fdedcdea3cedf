//! Reconcile loops (kube-rs runtime). They treat absent fields exactly as their defaults
//! (`crate::api` accessors), refuse to roll objects that fail `crate::admission::validation`, and
//! keep expectations so a lagging view never causes duplicate children
//! (docs/architecture.md#one-reconcile).

pub mod aibrix_guard;
pub mod analysis;
pub mod cache;
pub mod decoded;
pub mod podgroups;
pub mod podset;
pub mod revision;
pub mod roleset;
pub mod stormservice;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::api::Api;
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use self::aibrix_guard::AibrixGuard;
use self::cache::{Cache, controlled_by_kind};
use crate::api::keys::{FIELD_MANAGER, LABEL_REVISION_OWNER, LABEL_STORM_SERVICE_NAME};
use crate::api::pod::CachedPod;
use crate::api::podgroup::PodGroupCrds;
use crate::api::{PodSet, RoleSet, StormService, controlled_by};
use crate::metrics::Metrics;
use crate::planner::status::{coalesce_window, only_informational_differ};

/// How long an unobserved create or delete is waited for before it is assumed lost.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(300);

/// Reconciles one controller runs at once. Each sends its writes one after another, so this
/// bounds squall's requests in flight (and the API-server connections and buffers they
/// hold) when a whole fleet changes at once; the API server, not squall, is what a deeper
/// queue would wait on.
const RECONCILES_IN_FLIGHT: u16 = 16;

/// Reconcile errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// Adding or removing a finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
    /// A ControllerRevision could not be used.
    #[error(transparent)]
    Revision(#[from] crate::planner::revision::RevisionError),
    /// Waiting for children to go away (retried soon).
    #[error("waiting: {0}")]
    Waiting(String),
    /// The API server refused to create a child (quota, admission, validation); reported
    /// on the owner as `ReplicaFailure` and retried with backoff.
    #[error("creating a child was refused: {0}")]
    Refused(String),
}

impl Error {
    /// The error of the reconcile itself, out of the finalizer wrapper every reconcile runs
    /// in (so a `Waiting` cleanup is told from a failure).
    pub fn root(&self) -> &Error {
        match self {
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e.root(),
                _ => self,
            },
            _ => self,
        }
    }
}

impl Error {
    /// Whether the error says an object the reconcile acted on is already gone (a child
    /// deleted meanwhile, the object itself after its finalizer went, or its namespace being
    /// deleted): its watch event brings the next reconcile, so this one is done — not a
    /// failure to retry.
    pub fn is_gone(&self) -> bool {
        let api_status = match self {
            Error::Kube(kube::Error::Api(status)) => Some(status),
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::AddFinalizer(kube::Error::Api(status))
                | finalizer::Error::RemoveFinalizer(kube::Error::Api(status)) => Some(status),
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => {
                    return e.is_gone();
                }
                _ => None,
            },
            _ => None,
        };
        api_status.is_some_and(|status| status.code == 404 || namespace_terminating(status))
    }
}

/// Whether the API server refused a write because the namespace is being deleted (it takes
/// every object in it along; nothing is left to reconcile).
fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// The wall clock, read once at the start of a reconcile and handed to everything the pass
/// decides or stamps (status times, pause ends, deadlines, in-place conditions): one pass
/// sees one "now", and this is the only place in the controllers that reads it
/// (`tests/architecture.rs` keeps it so).
pub fn wall_clock() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// The message of an API error that refuses a create for good until something changes
/// (quota, admission, validation) — a conflict or a transport error is not one.
pub fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status)
            if status.code != 409 && status.code < 500 && !namespace_terminating(status) =>
        {
            Some(status.message.clone())
        }
        _ => None,
    }
}

/// A create issued and not yet observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingCreate {
    /// Slot of a stateful role's pod.
    pub slot: Option<u32>,
    /// Created from the stable template (docs/rollouts.md#the-pooled-canary-the-role-rollout-block)
    /// rather than the target one.
    pub stable: bool,
}

/// Creates and deletes issued for one role of one owner and not yet observed.
#[derive(Clone, Debug, Default)]
pub struct Expectation {
    /// Names of created pods not yet seen.
    pub creates: BTreeMap<String, PendingCreate>,
    /// Names of pods whose deletion was issued and which are still seen without a
    /// `deletionTimestamp`.
    pub deletes: BTreeSet<String>,
    since: Option<Instant>,
}

impl Expectation {
    /// Creates from the target (`stable` false) or stable template not yet observed.
    pub fn pending_creates(&self, stable: bool) -> u32 {
        self.creates.values().filter(|c| c.stable == stable).count() as u32
    }

    /// Slots of stateful creates issued and not yet observed.
    pub fn pending_slots(&self) -> BTreeSet<u32> {
        self.creates.values().filter_map(|c| c.slot).collect()
    }
}

/// Warning events about undecodable objects waiting to be published; past it, one is only
/// logged: a tenant rewriting a bad object as fast as it can gets no more events than the
/// API server answers, and the watches never wait for one.
const DECODE_WARNINGS_QUEUED: usize = 64;

/// Publishes a Warning event about each object the caches report as not decoding (in its own
/// namespace, where its owner looks), one at a time, until the caches stop.
async fn publish_decode_warnings(
    mut warned: tokio::sync::mpsc::Receiver<cache::DecodeWarning>,
    client: Client,
    metrics: Arc<Metrics>,
) {
    let events = Recorder::new(client, FIELD_MANAGER.into());
    while let Some(warning) = warned.recv().await {
        let (reason, note) = if warning.status_only {
            (
                "StatusNotDecoded",
                format!(
                    "the stored status is not used: {}; the controller derives it afresh",
                    warning.reason
                ),
            )
        } else {
            (
                "ObjectNotDecoded",
                format!(
                    "not reconciled until it decodes: {}; the last version read, if any, is kept",
                    warning.reason
                ),
            )
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: "Watch".into(),
            secondary: None,
        };
        publish_event(&events, &metrics, "cache", &event, &warning.regarding).await;
    }
}

/// Publishes `event` about `regarding`, counted as `controller`'s write. A failure is logged,
/// never returned: events are informative.
async fn publish_event(
    events: &Recorder,
    metrics: &Metrics,
    controller: &str,
    event: &Event,
    regarding: &ObjectReference,
) {
    match events.publish(event, regarding).await {
        Ok(()) => metrics.api_write(controller, "create", "events"),
        Err(error) => {
            tracing::warn!(%error, reason = %event.reason, "publishing an event failed")
        }
    }
}

/// The shared caches of one scope (a namespace, or all of them): one watch per kind, read by
/// every controller.
pub struct Caches {
    /// Pods controlled by a RoleSet or a PodSet. Their watch has no label selector: a RoleSet's
    /// pods and a PodSet's carry different labels, and selectors cannot be OR'ed.
    pub pods: Arc<Cache<CachedPod>>,
    /// Every PodSet.
    pub podsets: Arc<Cache<PodSet>>,
    /// Every RoleSet.
    pub rolesets: Arc<Cache<RoleSet>>,
    /// Every StormService.
    pub stormservices: Arc<Cache<StormService>>,
    /// ControllerRevisions controlled by a StormService.
    pub revisions: Arc<Cache<ControllerRevision>>,
    /// Headless Services controlled by a StormService.
    pub services: Arc<Cache<Service>>,
    /// The gang schedulers' PodGroups, each cache started once its CRD is found.
    pub podgroups: Arc<podgroups::PodGroupCaches>,
}

impl Caches {
    /// The caches of `namespace` (all namespaces when `None`), with the futures that fill
    /// them (run them before reading).
    pub fn new(
        client: &Client,
        namespace: Option<&str>,
        metrics: &Arc<Metrics>,
        podgroup_crds: watch::Receiver<PodGroupCrds>,
    ) -> (Arc<Self>, Vec<BoxFuture<'static, ()>>) {
        let (warnings, warned) = tokio::sync::mpsc::channel(DECODE_WARNINGS_QUEUED);
        let mut drivers: Vec<BoxFuture<'static, ()>> = vec![Box::pin(publish_decode_warnings(
            warned,
            client.clone(),
            metrics.clone(),
        ))];
        macro_rules! cache {
            ($kind:ty, $config:expr, $keep:expr) => {{
                let (cache, driver) = Cache::<$kind>::new(
                    scoped::<decoded::Decoded<$kind>>(client, namespace),
                    $config,
                    $keep,
                    metrics.clone(),
                );
                drivers.push(Box::pin(driver.warning_to(warnings.clone()).run()));
                cache
            }};
        }
        let all = watcher::Config::default;
        let caches = Self {
            pods: cache!(CachedPod, all(), |p: &CachedPod| {
                controlled_by_kind::<RoleSet>(&p.metadata)
                    || controlled_by_kind::<PodSet>(&p.metadata)
            }),
            podsets: cache!(PodSet, all(), |_: &PodSet| true),
            rolesets: cache!(RoleSet, all(), |_: &RoleSet| true),
            stormservices: cache!(StormService, all(), |_: &StormService| true),
            revisions: cache!(
                ControllerRevision,
                all().labels(LABEL_REVISION_OWNER),
                |r: &ControllerRevision| controlled_by_kind::<StormService>(&r.metadata)
            ),
            services: cache!(
                Service,
                all().labels(LABEL_STORM_SERVICE_NAME),
                |s: &Service| controlled_by_kind::<StormService>(&s.metadata)
            ),
            podgroups: Arc::default(),
        };
        drivers.push(Box::pin(caches.podgroups.clone().run(
            podgroup_crds,
            client.clone(),
            namespace.map(String::from),
            metrics.clone(),
        )));
        (Arc::new(caches), drivers)
    }

    /// Resolves once every cache holds its first list.
    pub async fn ready(&self) {
        futures::join!(
            self.pods.ready(),
            self.podsets.ready(),
            self.rolesets.ready(),
            self.stormservices.ready(),
            self.revisions.ready(),
            self.services.ready(),
        );
    }
}

/// The state of one controller.
pub struct Context {
    /// API client (its requests are counted under the controller's name).
    pub client: Client,
    /// The shared caches children are read from.
    pub caches: Arc<Caches>,
    /// Metrics (API writes are counted).
    pub metrics: Arc<Metrics>,
    events: Recorder,
    expectations: Mutex<HashMap<(String, String), Expectation>>,
    /// The generation each (object, what) was last said for: one entry per object and kind
    /// of message, however often a tenant bumps the generation.
    logged_generations: Mutex<HashMap<(String, &'static str), i64>>,
    /// Failed reconciles in a row, by (kind, UID).
    failures: Mutex<HashMap<(String, String), u32>>,
    /// By UID: the `resourceVersion` our last write replaced (a status, or the finalizer's
    /// removal) and when, until the cache shows a newer one: deciding from the older would
    /// undo or repeat what was just written. An object deleted meanwhile never shows a newer
    /// one; its entry expires after [`EXPECTATION_TIMEOUT`].
    overwritten: Mutex<HashMap<String, (String, Instant)>>,
    /// By UID: since when a status write has been held back (only pod counters changed).
    status_held_since: Mutex<HashMap<String, Instant>>,
    /// While AIBrix's controller-manager holds its Lease, nothing is reconciled.
    guard: Option<Arc<AibrixGuard>>,
    /// Where canary analyses take their measurements.
    pub providers: Arc<analysis::Providers>,
}

impl Context {
    /// A context for `client`.
    pub fn new(client: Client, caches: Arc<Caches>, metrics: Arc<Metrics>) -> Self {
        Self {
            events: Recorder::new(client.clone(), FIELD_MANAGER.into()),
            client,
            caches,
            metrics,
            expectations: Mutex::default(),
            logged_generations: Mutex::default(),
            failures: Mutex::default(),
            overwritten: Mutex::default(),
            status_held_since: Mutex::default(),
            guard: None,
            providers: Arc::default(),
        }
    }

    /// The same context, measuring canary analyses with `providers`.
    pub fn with_providers(mut self, providers: Arc<analysis::Providers>) -> Self {
        self.providers = providers;
        self
    }

    /// The same context, reconciling only while `guard` finds AIBrix's Lease free.
    pub fn guarded_by(mut self, guard: Option<Arc<AibrixGuard>>) -> Self {
        self.guard = guard;
        self
    }

    /// Who holds AIBrix's Lease, when squall must leave everything to AIBrix's controller.
    fn aibrix_holder(&self) -> Option<(String, aibrix_guard::Holder)> {
        let guard = self.guard.as_ref()?;
        Some((guard.lease().to_string(), guard.held()?))
    }

    /// Whether the cached `object` is older than this controller's last status write to it.
    fn behind(&self, object: &impl kube::Resource) -> bool {
        let mut overwritten = self.overwritten.lock().expect("overwritten lock");
        let key = Self::key(object);
        match overwritten.get(&key) {
            Some((old, at))
                if object.meta().resource_version.as_ref() == Some(old)
                    && at.elapsed() <= EXPECTATION_TIMEOUT =>
            {
                true
            }
            Some(_) => {
                overwritten.remove(&key);
                false
            }
            None => false,
        }
    }

    /// Records that our write replaced `object` at the version it has in the cache (see
    /// [`Context::behind`]), and drops the records that expired: they are as many as the
    /// writes of the last [`EXPECTATION_TIMEOUT`] at most.
    fn replaced(&self, object: &impl kube::Resource) {
        let Some(old) = object.meta().resource_version.clone() else {
            return;
        };
        let mut overwritten = self.overwritten.lock().expect("overwritten lock");
        overwritten.retain(|_, (_, at)| at.elapsed() <= EXPECTATION_TIMEOUT);
        overwritten.insert(Self::key(object), (old, Instant::now()));
    }

    /// Writes `status` to `object` (one `/status` patch) unless it is already there,
    /// guarded by the `resourceVersion` it was decided from. Unless `counters` is `None`
    /// (nothing held back), a change confined to those pod counters and condition prose waits
    /// for the next ones, [`coalesce_window`] long (so a burst of pods turning Ready is one
    /// write, and a fleet moving at once spends a bounded rate on counts): the returned
    /// delay says when to reconcile again to write it. With no status stored yet, the change is
    /// measured from `unwritten`, what an absent status means to readers (when the kind has such a
    /// meaning). A conflict means the cache is behind a newer write, whose watch event reconciles
    /// again; an object already deleted has no status to keep: neither is a failure.
    pub async fn write_status<K, S>(
        &self,
        controller: &str,
        object: &K,
        stored: Option<&S>,
        unwritten: Option<&S>,
        status: &S,
        counters: Option<&[&str]>,
    ) -> Result<Option<Duration>, Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        S: serde::Serialize + PartialEq,
    {
        let key = Self::key(object);
        if stored == Some(status) {
            self.status_held_since
                .lock()
                .expect("held lock")
                .remove(&key);
            return Ok(None);
        }
        if let Some(counters) = counters
            && let Some(baseline) = stored.or(unwritten)
            && only_informational_differ(baseline, status, counters)
        {
            let mut held = self.status_held_since.lock().expect("held lock");
            let waiting = held.len();
            // The window is measured against the backlog now, not when this change was
            // first held: a fleet piling up stretches the windows of those already waiting.
            let since = *held.entry(key.clone()).or_insert_with(Instant::now);
            let due = since + coalesce_window(waiting, stored.is_none());
            if let Some(wait) = due
                .checked_duration_since(Instant::now())
                .filter(|w| !w.is_zero())
            {
                return Ok(Some(wait));
            }
        }
        self.status_held_since
            .lock()
            .expect("held lock")
            .remove(&key);
        let api: Api<K> = Api::namespaced(
            self.client.clone(),
            object.meta().namespace.as_deref().unwrap_or_default(),
        );
        let old = object.meta().resource_version.clone();
        // The whole status is replaced (fields that went away go away), and only if nobody
        // wrote since the version it was decided from: a user's promote or abort is never
        // overwritten; its watch event re-plans instead (docs/architecture.md#one-reconcile).
        let patch = serde_json::json!([
            {"op": "add", "path": "/metadata/resourceVersion", "value": old},
            {"op": "add", "path": "/status", "value": status},
        ]);
        let patch: json_patch::Patch =
            serde_json::from_value(patch).expect("a JSON patch always parses");
        let name = object.meta().name.clone().unwrap_or_default();
        let written = api
            .patch_status(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Json::<()>(patch),
            )
            .await;
        match written {
            Ok(written) => {
                self.metrics
                    .api_write(controller, "patch", &format!("{}/status", K::plural(&())));
                // A write the API server found to change nothing (say, a field its schema
                // prunes) keeps the version and sends no event: nothing to wait for then.
                if old.is_some() && written.meta().resource_version != old {
                    self.replaced(object);
                }
                Ok(None)
            }
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                tracing::debug!(%name, code = status.code, "status not written: the cache is behind, or the object is gone");
                Ok(None)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// The expectations key of an owner.
    pub fn key(owner: &impl kube::Resource) -> String {
        owner.uid().unwrap_or_default()
    }

    /// Settles expectations against the children observed now (name, terminating) and
    /// returns what is still pending for `role` of `owner`.
    pub fn observe(
        &self,
        owner: &str,
        role: &str,
        seen: impl IntoIterator<Item = (String, bool)>,
    ) -> Expectation {
        let mut all = self.expectations.lock().expect("expectations lock");
        let entry = all
            .entry((owner.to_string(), role.to_string()))
            .or_default();
        // Name -> terminating, for the children observed now.
        let seen: HashMap<String, bool> = seen.into_iter().collect();
        entry.creates.retain(|name, _| !seen.contains_key(name));
        entry.deletes.retain(|name| seen.get(name) == Some(&false));
        if entry.creates.is_empty() && entry.deletes.is_empty() {
            entry.since = None;
        } else if entry
            .since
            .is_some_and(|t| t.elapsed() > EXPECTATION_TIMEOUT)
        {
            tracing::warn!(
                owner,
                role,
                "expected pod changes were never observed; re-planning"
            );
            *entry = Expectation::default();
        }
        entry.clone()
    }

    fn touch(&self, owner: &str, role: &str, update: impl FnOnce(&mut Expectation)) {
        let mut all = self.expectations.lock().expect("expectations lock");
        let entry = all
            .entry((owner.to_string(), role.to_string()))
            .or_default();
        update(entry);
        entry.since.get_or_insert_with(Instant::now);
    }

    /// Records a create.
    pub fn expect_create(&self, owner: &str, role: &str, name: &str, create: PendingCreate) {
        self.touch(owner, role, |e| {
            e.creates.insert(name.to_string(), create);
        });
    }

    /// Records a delete the API server accepted. Recorded after the request: a delete that
    /// failed (the API server restarting) is sent again by the next pass, not awaited for
    /// [`EXPECTATION_TIMEOUT`].
    pub fn expect_delete(&self, owner: &str, role: &str, name: &str) {
        self.touch(owner, role, |e| {
            e.deletes.insert(name.to_string());
        });
    }

    /// Drops everything recorded for a deleted owner.
    pub fn forget(&self, owner: &impl kube::Resource) {
        let key = Self::key(owner);
        self.expectations
            .lock()
            .expect("expectations lock")
            .retain(|(o, _), _| *o != key);
        self.logged_generations
            .lock()
            .expect("logged lock")
            .retain(|(o, _), _| *o != key);
        self.failures
            .lock()
            .expect("failures lock")
            .retain(|(_, o), _| *o != key);
        self.overwritten
            .lock()
            .expect("overwritten lock")
            .remove(&key);
        self.status_held_since
            .lock()
            .expect("held lock")
            .remove(&key);
    }

    /// Publishes an event about `object`, optionally naming a `related` object
    /// (events.k8s.io; repeats of the same reason about the same objects become a series). A
    /// failure is logged, never fails the reconcile: events are informative.
    pub async fn publish<K>(
        &self,
        controller: &str,
        object: &K,
        related: Option<ObjectReference>,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        self.emit(
            EventType::Normal,
            controller,
            object,
            related,
            reason,
            action,
            note,
        )
        .await;
    }

    /// Publishes a Warning event about `object`, like [`Context::publish`].
    pub async fn warn<K>(
        &self,
        controller: &str,
        object: &K,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        self.emit(
            EventType::Warning,
            controller,
            object,
            None,
            reason,
            action,
            note,
        )
        .await;
    }

    #[allow(clippy::too_many_arguments)]
    async fn emit<K>(
        &self,
        type_: EventType,
        controller: &str,
        object: &K,
        related: Option<ObjectReference>,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related,
        };
        publish_event(
            &self.events,
            &self.metrics,
            controller,
            &event,
            &object.object_ref(&()),
        )
        .await;
    }

    /// Counts one more failed reconcile of `object` in a row; returns the count.
    fn failed<K: kube::Resource<DynamicType = ()>>(&self, object: &K) -> u32 {
        let mut failures = self.failures.lock().expect("failures lock");
        let count = failures.entry(Self::failure_key(object)).or_default();
        *count = count.saturating_add(1);
        *count
    }

    /// Ends the run of failures of `object`.
    fn succeeded<K: kube::Resource<DynamicType = ()>>(&self, object: &K) {
        self.failures
            .lock()
            .expect("failures lock")
            .remove(&Self::failure_key(object));
    }

    fn failure_key<K: kube::Resource<DynamicType = ()>>(object: &K) -> (String, String) {
        (K::kind(&()).into_owned(), Self::key(object))
    }

    /// True the first time `what` is asked for a generation of `owner` (to log or warn once
    /// per rollout or spec change).
    pub fn once_per_generation(&self, owner: &impl kube::Resource, what: &'static str) -> bool {
        let generation = owner.meta().generation.unwrap_or_default();
        self.logged_generations
            .lock()
            .expect("logged lock")
            .insert((Self::key(owner), what), generation)
            != Some(generation)
    }
}

/// Runs one reconcile of `object`, recording its outcome and duration; a success ends the
/// object's run of failures (`retry_delay`).
async fn measured<K: kube::Resource<DynamicType = ()>>(
    controller: &'static str,
    object: Arc<K>,
    ctx: Arc<Context>,
    reconcile: impl std::future::Future<Output = Result<Action, Error>>,
) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    if let Some((lease, holder)) = ctx.aibrix_holder() {
        // Said once per generation on each object a user created (children are the owner's
        // business; a repeat counts in the event's series); reconciled again when the Lease
        // is seen free (`released`).
        let top_level = object
            .meta()
            .owner_references
            .as_ref()
            .is_none_or(Vec::is_empty);
        if top_level && ctx.once_per_generation(&*object, "aibrix") {
            ctx.warn(
                controller,
                &*object,
                "AIBrixControllerActive",
                "Waiting",
                format!(
                    "AIBrix's controller-manager holds its Lease {lease} (holder {}): squall \
                     leaves this object to it until the Lease is released or expires",
                    holder.identity
                ),
            )
            .await;
        }
        ctx.metrics
            .reconciled(controller, "guarded", started.elapsed());
        return Ok(Action::await_change());
    }
    if ctx.behind(&*object) {
        // The watch event of our own last write is on its way and reconciles again.
        ctx.metrics
            .reconciled(controller, "behind", started.elapsed());
        return Ok(Action::await_change());
    }
    // Every log line of the reconcile names what it was about.
    let span = tracing::info_span!(
        "reconcile",
        kind = %K::kind(&()),
        namespace = object.meta().namespace.as_deref().unwrap_or_default(),
        name = object.meta().name.as_deref().unwrap_or_default(),
    );
    let result = match tracing::Instrument::instrument(reconcile, span).await {
        Err(error) if error.is_gone() => {
            tracing::debug!(%error, "an object of this reconcile is gone; its watch event follows");
            Ok(Action::await_change())
        }
        result => result,
    };
    let outcome = match result.as_ref().map_err(Error::root) {
        Ok(_) => {
            ctx.succeeded(&*object);
            "ok"
        }
        Err(Error::Waiting(_)) => "waiting",
        Err(_) => "error",
    };
    ctx.metrics
        .reconciled(controller, outcome, started.elapsed());
    result
}

/// How long to wait before retrying an object whose reconcile failed `failures` times in a
/// row: doubling from 1 s up to 5 minutes, so a persistent error (RBAC, a quota, a webhook
/// that is down) is not hammered, while a one-off failure is retried after a second. A watch
/// event for the object still reconciles it sooner.
pub fn retry_delay(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);
    FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX)
}

fn error_policy<K>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action
where
    K: kube::Resource<DynamicType = ()>,
{
    if let Error::Waiting(_) = error.root() {
        // Not a failure: children are still going away.
        return Action::requeue(Duration::from_secs(2));
    }
    let failures = ctx.failed(&*object);
    let delay = retry_delay(failures);
    tracing::warn!(kind = %K::kind(&()), namespace = %object.namespace().unwrap_or_default(),
        object = %object.name_any(), %error, failures, retry_in = ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

/// One reconcile of a kind whose deletion squall orders (StormService, RoleSet, PodSet):
/// `apply` while the object lives, `cleanup` once it is being deleted — its finalizer stays
/// until `cleanup` succeeds, and the object is never acted on without it.
pub async fn finalized<K, A, C>(
    object: Arc<K>,
    ctx: Arc<Context>,
    finalizer_name: &str,
    apply: impl FnOnce(Arc<K>, Arc<Context>) -> A,
    cleanup: impl FnOnce(Arc<K>, Arc<Context>) -> C,
) -> Result<Action, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    A: std::future::Future<Output = Result<Action, Error>>,
    C: std::future::Future<Output = Result<Action, Error>>,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
    // A successful cleanup ends with the finalizer's removal, and the object goes. Until
    // the cache shows that, a reconcile queued meanwhile would see the finalizer still there
    // and remove it again.
    let removing = object.meta().deletion_timestamp.is_some()
        && object
            .finalizers()
            .iter()
            .any(|name| name == finalizer_name);
    let cleaned = removing.then(|| Arc::clone(&object));
    let result = finalizer(&api, finalizer_name, object, |event| {
        let ctx = Arc::clone(&ctx);
        async move {
            match event {
                finalizer::Event::Apply(object) => apply(object, ctx).await,
                finalizer::Event::Cleanup(object) => cleanup(object, ctx).await,
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    if let (Ok(_), Some(object)) = (&result, cleaned) {
        ctx.replaced(&*object);
    }
    result
}

/// The children `cache` holds of `owner` (controlled by its UID, so a namesake that was
/// deleted and recreated does not inherit them).
pub fn owned_children<K, O>(cache: &Cache<K>, owner: &O) -> Vec<Arc<K>>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync,
    O: kube::Resource,
{
    owner
        .meta()
        .uid
        .as_deref()
        .map(|uid| {
            let namespace = owner.meta().namespace.as_deref().unwrap_or_default();
            cache.owned_by(namespace, uid)
        })
        .unwrap_or_default()
}

/// The UIDs of `children`, by name: every delete names the object it means by UID too.
pub fn uids<'a, K: kube::Resource + 'a>(
    children: impl IntoIterator<Item = &'a K>,
) -> HashMap<String, String> {
    children
        .into_iter()
        .filter_map(|c| Some((c.meta().name.clone()?, c.meta().uid.clone()?)))
        .collect()
}

/// Deletes the child `name` if it is still the object with `uid` (already gone, or replaced
/// by a namesake, is fine: the child meant is gone), counting the write. A child squall has
/// not observed (no UID) is never deleted: the name alone could be anyone's object.
pub async fn delete_child<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<&String>,
    ctx: &Context,
    controller: &str,
    resource: &str,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(uid) = uid else {
        tracing::debug!(%name, resource, "not deleted: not observed as a child");
        return Ok(());
    };
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..kube::api::DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => {
            ctx.metrics.api_write(controller, "delete", resource);
            Ok(())
        }
        // 409: the precondition failed, the name now holds another object.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A child as ordered deletion sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Going {
    /// Its name.
    pub name: String,
    /// Its UID (the delete's precondition).
    pub uid: String,
    /// Whether it is already going away.
    pub terminating: bool,
}

impl Going {
    fn of(meta: &kube::api::ObjectMeta) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            terminating: meta.deletion_timestamp.is_some(),
        }
    }
}

/// What ordered deletion needs of cached children.
pub fn going<K: kube::Resource>(children: &[Arc<K>]) -> Vec<Going> {
    children.iter().map(|c| Going::of(c.meta())).collect()
}

/// The children of kind `K` the API server itself still holds of `owner`: those carrying
/// `label` = the owner's name, controlled by its UID.
///
/// Ordered deletion asks this once the cache shows none left, because the next step — the
/// finalizer's removal — cannot be undone, and a cache can lag: a child created just before
/// its watch re-listed (after an API-server restart) would outlive its owner until the
/// garbage collector found it. One LIST of a label, read from etcd, per deleted owner — the
/// fresh read Kubernetes' controllers make before an adoption they cannot take back.
pub async fn live_children<K>(
    ctx: &Context,
    owner: &impl kube::Resource,
    label: &str,
) -> Result<Vec<Going>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let meta = owner.meta();
    let api: Api<K> = Api::namespaced(
        ctx.client.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
    );
    let selector = format!("{label}={}", meta.name.as_deref().unwrap_or_default());
    let listed = api
        .list_metadata(&kube::api::ListParams::default().labels(&selector))
        .await?;
    Ok(listed
        .items
        .iter()
        .filter(|child| controlled_by(&child.metadata, meta))
        .map(|child| Going::of(&child.metadata))
        .collect())
}

/// A step of ordered deletion: deletes each of `owner`'s `children` (of kind `K`) not yet
/// going away, once — a delete issued and not yet seen by the cache is not sent again (until
/// [`EXPECTATION_TIMEOUT`]), however many events reconcile the owner meanwhile.
pub async fn delete_remaining<K>(
    ctx: &Context,
    owner: &impl kube::Resource,
    children: &[Going],
    controller: &str,
    resource: &str,
) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    if children.is_empty() {
        return Ok(());
    }
    let key = Context::key(owner);
    let role = format!("cleanup/{resource}");
    let pending = ctx.observe(
        &key,
        &role,
        children.iter().map(|c| (c.name.clone(), c.terminating)),
    );
    let api: Api<K> = Api::namespaced(
        ctx.client.clone(),
        owner.meta().namespace.as_deref().unwrap_or_default(),
    );
    for child in children
        .iter()
        .filter(|c| !c.terminating && !pending.deletes.contains(&c.name))
    {
        delete_child(
            &api,
            &child.name,
            Some(&child.uid),
            ctx,
            controller,
            resource,
        )
        .await?;
        ctx.expect_delete(&key, &role, &child.name);
    }
    Ok(())
}

/// Runs the StormService, RoleSet and PodSet controllers until `shutdown` resolves: over every
/// namespace when `namespaces` is empty, else one set per listed namespace (so a namespaced
/// install needs only Roles in those namespaces). `podgroup_crds` says which gang
/// schedulers' PodGroups can be made ([`podgroups::look_for_crds`]).
pub async fn run(
    config: kube::Config,
    metrics: Arc<Metrics>,
    namespaces: &[String],
    aibrix_lease: Option<aibrix_guard::AibrixLease>,
    podgroup_crds: watch::Receiver<PodGroupCrds>,
    providers: Arc<analysis::Providers>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> Result<(), kube::Error> {
    let client = |name| crate::client::counted(config.clone(), metrics.clone(), name);
    let (guard, guard_driver) = match aibrix_lease {
        Some(lease) => {
            let (guard, driver) = AibrixGuard::new(client("guard")?, lease, metrics.clone());
            (Some(guard), Some(driver))
        }
        None => (None, None),
    };
    let clients = Clients {
        cache: client("cache")?,
        stormservice: client("stormservice")?,
        roleset: client("roleset")?,
        podset: client("podset")?,
    };
    let shutdown = futures::FutureExt::shared(shutdown);
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|ns| Some(ns.as_str())).collect()
    };
    let scopes = futures::future::join_all(scopes.into_iter().map(|namespace| {
        run_scope(
            &clients,
            namespace,
            &metrics,
            &guard,
            podgroup_crds.clone(),
            &providers,
            shutdown.clone(),
        )
    }));
    match guard_driver {
        // The guard keeps reading AIBrix's Lease for as long as the controllers run.
        Some(driver) => {
            tokio::select! {
                _ = scopes => {}
                () = driver => {}
            }
        }
        None => {
            scopes.await;
        }
    }
    Ok(())
}

/// One client per controller (and one for the caches' watches), so the API requests metric
/// says who sent what.
struct Clients {
    cache: Client,
    stormservice: Client,
    roleset: Client,
    podset: Client,
}

/// An API over one namespace, or over all of them.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// Runs one controller until `shutdown`: every reconcile measured, instrumented and retried
/// by [`error_policy`].
async fn drive<K, Fut>(
    name: &'static str,
    controller: Controller<K>,
    reconcile: fn(Arc<K>, Arc<Context>) -> Fut,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    Fut: std::future::Future<Output = Result<Action, Error>> + Send + 'static,
{
    controller
        .with_config(ControllerConfig::default().concurrency(RECONCILES_IN_FLIGHT))
        .graceful_shutdown_on(shutdown)
        .run(
            move |object, ctx| measured(name, object.clone(), ctx.clone(), reconcile(object, ctx)),
            error_policy,
            ctx,
        )
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, controller = name, "controller event");
            }
        })
        .await;
}

/// `controller`, reconciling every object once AIBrix's Lease is seen free: what was left to
/// AIBrix's controller meanwhile.
fn released<K>(controller: Controller<K>, guard: &Option<Arc<AibrixGuard>>) -> Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    match guard {
        Some(guard) => controller.reconcile_all_on(guard.released()),
        None => controller,
    }
}

async fn run_scope(
    clients: &Clients,
    namespace: Option<&str>,
    metrics: &Arc<Metrics>,
    guard: &Option<Arc<AibrixGuard>>,
    podgroup_crds: watch::Receiver<PodGroupCrds>,
    providers: &Arc<analysis::Providers>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let (caches, drivers) = Caches::new(&clients.cache, namespace, metrics, podgroup_crds);
    let context = |client: &Client| {
        Arc::new(
            Context::new(client.clone(), caches.clone(), metrics.clone())
                .guarded_by(guard.clone())
                .with_providers(providers.clone()),
        )
    };
    // Subscribed before the watches start, so no change is missed.
    let rolesets = drive(
        "roleset",
        released(
            Controller::for_shared_stream(caches.rolesets.subscribe(), caches.rolesets.reader())
                .owns_shared_stream(caches.pods.subscribe())
                .owns_shared_stream(caches.podsets.subscribe())
                .reconcile_on(caches.podgroups.changed_owners())
                .reconcile_all_on(caches.podgroups.found()),
            guard,
        ),
        roleset::reconcile,
        context(&clients.roleset),
        shutdown.clone(),
    );
    let podsets = drive(
        "podset",
        released(
            Controller::for_shared_stream(caches.podsets.subscribe(), caches.podsets.reader())
                .owns_shared_stream(caches.pods.subscribe())
                .reconcile_on(caches.podgroups.changed_owners())
                .reconcile_all_on(caches.podgroups.found()),
            guard,
        ),
        podset::reconcile,
        context(&clients.podset),
        shutdown.clone(),
    );
    let stormservices = drive(
        "stormservice",
        released(
            Controller::for_shared_stream(
                caches.stormservices.subscribe(),
                caches.stormservices.reader(),
            )
            .owns_shared_stream(caches.rolesets.subscribe())
            .owns_shared_stream(caches.revisions.subscribe())
            .owns_shared_stream(caches.services.subscribe())
            .reconcile_on(providers.finished()),
            guard,
        ),
        stormservice::reconcile,
        context(&clients.stormservice),
        shutdown.clone(),
    );
    let watches = futures::future::join_all(drivers);
    let controllers = async {
        // Reconciling before every cache is filled would see children as missing; a cache
        // that never fills never holds a shutdown up.
        tokio::select! {
            () = caches.ready() => {}
            () = shutdown => return,
        }
        tracing::info!(
            namespace = namespace.unwrap_or("*"),
            "caches filled; reconciling"
        );
        futures::join!(stormservices, rolesets, podsets);
    };
    // The watches run until the controllers stop.
    futures::pin_mut!(watches, controllers);
    futures::future::select(watches, controllers).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose every request fails, as while the API server restarts.
    fn unreachable() -> Client {
        let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other(
                "connection refused",
            ))
        });
        Client::new(service, "ns")
    }

    #[tokio::test]
    async fn a_delete_that_failed_is_sent_again_by_the_next_pass() {
        let metrics = Arc::new(Metrics::default());
        let client = unreachable();
        let (caches, _never_run) = Caches::new(
            &client,
            Some("ns"),
            &metrics,
            watch::channel(PodGroupCrds::Unknown).1,
        );
        let ctx = Context::new(client, caches, metrics);
        let owner: RoleSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid"}, "spec": {}
        }))
        .unwrap();
        let children = vec![Going {
            name: "rs-decode-a".into(),
            uid: "pod-uid".into(),
            terminating: false,
        }];
        let sent = delete_remaining::<k8s_openapi::api::core::v1::Pod>(
            &ctx, &owner, &children, "roleset", "pods",
        )
        .await;
        assert!(sent.is_err(), "the request failed");
        let pending = ctx.observe("rs-uid", "cleanup/pods", [("rs-decode-a".into(), false)]);
        assert!(
            pending.deletes.is_empty(),
            "a failed delete is not awaited: {:?}",
            pending.deletes
        );
    }

    #[test]
    fn a_waiting_cleanup_is_told_apart_inside_the_finalizer_wrapper() {
        let wrapped = Error::Finalizer(Box::new(finalizer::Error::CleanupFailed(Error::Waiting(
            "pods".into(),
        ))));
        assert!(matches!(wrapped.root(), Error::Waiting(_)));
        let refused = Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(Error::Refused(
            "quota".into(),
        ))));
        assert!(matches!(refused.root(), Error::Refused(_)));
    }

    #[test]
    fn a_child_or_owner_already_gone_ends_the_reconcile_instead_of_failing_it() {
        let status = |code| {
            kube::Error::Api(
                kube::core::Status::failure("gone", "NotFound")
                    .with_code(code)
                    .boxed(),
            )
        };
        let removal = Error::Finalizer(Box::new(finalizer::Error::RemoveFinalizer(status(404))));
        assert!(removal.is_gone());
        let inside = Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(Error::Kube(
            status(404),
        ))));
        assert!(inside.is_gone());
        assert!(!Error::Kube(status(409)).is_gone());
        let mut terminating =
            kube::core::Status::failure("being terminated", "Forbidden").with_code(403);
        assert!(!Error::Kube(kube::Error::Api(terminating.clone().boxed())).is_gone());
        terminating.details = Some(
            serde_json::from_value(serde_json::json!({
                "causes": [{"reason": "NamespaceTerminating", "message": "being terminated"}]
            }))
            .unwrap(),
        );
        let terminating = kube::Error::Api(terminating.boxed());
        assert_eq!(refusal(&terminating), None, "not a refusal to report");
        assert!(Error::Kube(terminating).is_gone());
        assert!(!Error::Kube(status(500)).is_gone());
        assert!(!Error::Waiting("pods".into()).is_gone());
    }

    #[test]
    fn retries_double_from_one_second_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=11).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
        assert_eq!(retry_delay(0), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_success_ends_the_run_of_failures_of_that_object_only() {
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .unwrap();
        let metrics = Arc::new(Metrics::default());
        let (caches, _) = Caches::new(
            &client,
            None,
            &metrics,
            watch::channel(PodGroupCrds::Unknown).1,
        );
        let ctx = Context::new(client, caches, metrics);
        let object = |uid: &str| {
            let mut rs = RoleSet::new("rs", Default::default());
            rs.metadata.uid = Some(uid.into());
            rs
        };
        assert_eq!(ctx.failed(&object("a")), 1);
        assert_eq!(ctx.failed(&object("a")), 2);
        assert_eq!(ctx.failed(&object("b")), 1);
        ctx.succeeded(&object("a"));
        assert_eq!(ctx.failed(&object("a")), 1, "a starts over");
        assert_eq!(ctx.failed(&object("b")), 2, "b keeps its count");
        ctx.forget(&object("b"));
        assert_eq!(ctx.failed(&object("b")), 1, "a deleted owner is forgotten");
        assert!(ctx.once_per_generation(&object("a"), "log"));
        assert!(!ctx.once_per_generation(&object("a"), "log"));
        assert!(ctx.once_per_generation(&object("a"), "warn"), "per purpose");
        // A tenant bumping the generation leaves one entry per object and purpose.
        for generation in 1..=1000 {
            let mut bumped = object("c");
            bumped.metadata.generation = Some(generation);
            assert!(ctx.once_per_generation(&bumped, "log"));
            assert!(!ctx.once_per_generation(&bumped, "log"));
        }
        assert_eq!(ctx.logged_generations.lock().unwrap().len(), 3);

        // After a status write over version 7, the cache's version 7 is behind; 8 is not.
        let mut at = object("a");
        at.metadata.resource_version = Some("7".into());
        assert!(!ctx.behind(&at));
        ctx.replaced(&at);
        assert!(ctx.behind(&at), "decided from what the write replaced");
        at.metadata.resource_version = Some("8".into());
        assert!(!ctx.behind(&at));
        at.metadata.resource_version = Some("7".into());
        assert!(!ctx.behind(&at), "forgotten once a newer version was seen");

        // A record whose newer version never shows (the object was deleted) expires.
        ctx.replaced(&at);
        let expired = Instant::now()
            .checked_sub(EXPECTATION_TIMEOUT + Duration::from_secs(1))
            .expect("the clock started long ago");
        ctx.overwritten.lock().unwrap().get_mut("a").unwrap().1 = expired;
        assert!(
            !ctx.behind(&at),
            "an expired record no longer holds reconciles back"
        );
        ctx.replaced(&at);
        ctx.overwritten.lock().unwrap().get_mut("a").unwrap().1 = expired;
        let mut other = object("c");
        other.metadata.resource_version = Some("3".into());
        ctx.replaced(&other);
        assert!(
            !ctx.overwritten.lock().unwrap().contains_key("a"),
            "expired records are dropped when another is made"
        );
    }
}
