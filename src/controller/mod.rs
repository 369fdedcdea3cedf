//! Reconcile loops (kube-rs runtime). They treat absent fields exactly as their defaults
//! (`crate::api` accessors), refuse to roll objects that fail `crate::api::validation`, and
//! keep expectations so a lagging view never causes duplicate children (SPEC §5.1).

pub mod podset;
pub mod render;
pub mod revision;
pub mod roleset;
pub mod stormservice;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::{finalizer, watcher};
use kube::{Client, ResourceExt};

use crate::api::keys::{
    FIELD_MANAGER, LABEL_PODSET_NAME, LABEL_ROLESET_NAME, LABEL_STORM_SERVICE_NAME,
};
use crate::api::{Condition, PodSet, RoleSet, StormService};
use crate::metrics::Metrics;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// How long an unobserved create or delete is waited for before it is assumed lost.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(300);

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
    Revision(#[from] revision::RevisionError),
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

/// The message of an API error that refuses a create for good until something changes
/// (quota, admission, validation) — a conflict or a transport error is not one.
pub fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status) if status.code != 409 && status.code < 500 => {
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
    /// Created from the stable template (SPEC §5.2) rather than the target one.
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

/// Shared state of the controllers.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Metrics (API writes are counted).
    pub metrics: Arc<Metrics>,
    events: Recorder,
    expectations: Mutex<HashMap<(String, String), Expectation>>,
    logged_generations: Mutex<HashSet<(String, &'static str, i64)>>,
    /// Failed reconciles in a row, by (kind, UID).
    failures: Mutex<HashMap<(String, String), u32>>,
}

impl Context {
    /// A context for `client`.
    pub fn new(client: Client, metrics: Arc<Metrics>) -> Self {
        Self {
            events: Recorder::new(client.clone(), FIELD_MANAGER.into()),
            client,
            metrics,
            expectations: Mutex::default(),
            logged_generations: Mutex::default(),
            failures: Mutex::default(),
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

    /// Records a delete.
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
            .retain(|(o, _, _)| *o != key);
        self.failures
            .lock()
            .expect("failures lock")
            .retain(|(_, o), _| *o != key);
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
        match self.events.publish(&event, &object.object_ref(&())).await {
            Ok(()) => self.metrics.api_write(controller, "create", "events"),
            Err(error) => tracing::warn!(%error, reason, "publishing an event failed"),
        }
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
            .insert((Self::key(owner), what, generation))
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
    let result = reconcile.await;
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

/// The children of kind `K` of `owner`: listed in the owner's namespace by the label
/// `label=<owner name>` and kept only when controlled by the owner's UID — never a
/// cluster-wide selector list (SPEC §5.1).
pub async fn owned_children<K, O>(client: &Client, owner: &O, label: &str) -> Result<Vec<K>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    O: kube::Resource,
{
    let api: Api<K> = Api::namespaced(
        client.clone(),
        &owner.meta().namespace.clone().unwrap_or_default(),
    );
    let selector = format!("{label}={}", owner.meta().name.clone().unwrap_or_default());
    let uid = owner.meta().uid.clone().unwrap_or_default();
    Ok(api
        .list(&kube::api::ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|child| {
            child
                .meta()
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect())
}

/// A condition stamped now for `generation`.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
        reason: Some(reason.into()),
        message: Some(message),
        observed_generation: generation,
        ..Condition::default()
    }
}

/// Keeps `lastTransitionTime` of conditions whose status did not change since `old`
/// (Kubernetes conventions).
pub fn keep_transition_times(conditions: &mut [Condition], old: &[Condition]) {
    for c in conditions {
        if let Some(previous) = old
            .iter()
            .find(|p| p.type_ == c.type_ && p.status == c.status)
        {
            c.last_transition_time = previous.last_transition_time.clone();
        }
    }
}

/// Whether a pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes a child (already gone is fine), counting the write.
pub async fn delete_child<K>(
    api: &Api<K>,
    name: &str,
    ctx: &Context,
    controller: &str,
    resource: &str,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api
        .delete(name, &kube::api::DeleteParams::background())
        .await
    {
        Ok(_) => {
            ctx.metrics.api_write(controller, "delete", resource);
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Runs the StormService, RoleSet and PodSet controllers until `shutdown` resolves: over every
/// namespace when `namespaces` is empty, else one set per listed namespace (so a namespaced
/// install needs only Roles in those namespaces).
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    namespaces: &[String],
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let ctx = Arc::new(Context::new(client.clone(), metrics));
    let shutdown = futures::FutureExt::shared(shutdown);
    let scopes: Vec<Option<&str>> = if namespaces.is_empty() {
        vec![None]
    } else {
        namespaces.iter().map(|ns| Some(ns.as_str())).collect()
    };
    futures::future::join_all(
        scopes
            .into_iter()
            .map(|namespace| run_scope(&client, namespace, ctx.clone(), shutdown.clone())),
    )
    .await;
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

async fn run_scope(
    client: &Client,
    namespace: Option<&str>,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Clone + Send + Sync + 'static,
) {
    let by_roleset = || watcher::Config::default().labels(LABEL_ROLESET_NAME);
    let rolesets = Controller::new(
        scoped::<RoleSet>(client, namespace),
        watcher::Config::default(),
    )
    .owns(scoped::<Pod>(client, namespace), by_roleset())
    .owns(scoped::<PodSet>(client, namespace), by_roleset())
    .graceful_shutdown_on(shutdown.clone())
    .run(
        |roleset, ctx| {
            measured(
                "roleset",
                roleset.clone(),
                ctx.clone(),
                roleset::reconcile(roleset, ctx),
            )
        },
        error_policy,
        ctx.clone(),
    )
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "roleset controller event");
        }
    });
    let podsets = Controller::new(
        scoped::<PodSet>(client, namespace),
        watcher::Config::default(),
    )
    .owns(
        scoped::<Pod>(client, namespace),
        watcher::Config::default().labels(LABEL_PODSET_NAME),
    )
    .graceful_shutdown_on(shutdown.clone())
    .run(
        |podset, ctx| {
            measured(
                "podset",
                podset.clone(),
                ctx.clone(),
                podset::reconcile(podset, ctx),
            )
        },
        error_policy,
        ctx.clone(),
    )
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "podset controller event");
        }
    });
    let stormservices = Controller::new(
        scoped::<StormService>(client, namespace),
        watcher::Config::default(),
    )
    .owns(
        scoped::<RoleSet>(client, namespace),
        watcher::Config::default().labels(LABEL_STORM_SERVICE_NAME),
    )
    .graceful_shutdown_on(shutdown)
    .run(
        |service, ctx| {
            measured(
                "stormservice",
                service.clone(),
                ctx.clone(),
                stormservice::reconcile(service, ctx),
            )
        },
        error_policy,
        ctx,
    )
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "stormservice controller event");
        }
    });
    futures::join!(stormservices, rolesets, podsets);
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn retries_double_from_one_second_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=11).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
        assert_eq!(retry_delay(0), Duration::from_secs(1));
    }

    #[tokio::test]
    async fn a_success_ends_the_run_of_failures_of_that_object_only() {
        let ctx = Context::new(
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .unwrap(),
            Arc::new(Metrics::default()),
        );
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
    }
}
