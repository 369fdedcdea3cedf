//! The state of one controller: its client, the shared caches, its metrics and events, its
//! runs of failures, and what it said once per generation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Client, ResourceExt};

use super::expectations::Expectations;
use super::status_writer::StatusWriter;
use crate::admission::validation::Report;
use crate::api::keys::FIELD_MANAGER;
use crate::controller::aibrix_guard::{self, AibrixGuard};
use crate::controller::analysis;
use crate::controller::cache::scope::Caches;
use crate::controller::events::publish_event;
use crate::metrics::Metrics;

/// The state of one controller.
pub struct Context {
    /// The controller's name ([`super::owner::Owner::CONTROLLER`]): its writes and events are
    /// counted under it.
    pub controller: &'static str,
    /// API client (its requests are counted under the controller's name).
    pub client: Client,
    /// The shared caches children are read from.
    pub caches: Arc<Caches>,
    /// Metrics (API writes are counted).
    pub metrics: Arc<Metrics>,
    events: Recorder,
    /// Creates and deletes issued and not yet observed.
    pub expectations: Expectations,
    /// The generation each (object, what) was last said for: one entry per object and kind
    /// of message, however often a tenant bumps the generation.
    logged_generations: Mutex<HashMap<(String, &'static str), i64>>,
    /// By UID: the generation whose spec was last validated, and the validator's message
    /// when it refused it. Validation reads the name (immutable) and the spec (whose every
    /// change is a new generation), and serializes the whole object: once per change, not
    /// once per reconcile. One entry per object, dropped with it.
    validated: Mutex<HashMap<String, (i64, Option<String>)>>,
    /// Failed reconciles in a row, by (kind, UID).
    failures: Mutex<HashMap<(String, String), u32>>,
    /// Its status writer.
    pub status: StatusWriter,
    /// While AIBrix's controller-manager holds its Lease, nothing is reconciled.
    guard: Option<Arc<AibrixGuard>>,
    /// Where canary analyses take their measurements.
    pub providers: Arc<analysis::Providers>,
}

impl Context {
    /// The context of `controller`, sending with `client`.
    pub fn new(
        controller: &'static str,
        client: Client,
        caches: Arc<Caches>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            events: Recorder::new(client.clone(), FIELD_MANAGER.into()),
            status: StatusWriter::new(controller, client.clone(), metrics.clone()),
            controller,
            client,
            caches,
            metrics,
            expectations: Expectations::default(),
            logged_generations: Mutex::default(),
            validated: Mutex::default(),
            failures: Mutex::default(),
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
    pub(super) fn aibrix_holder(&self) -> Option<(String, aibrix_guard::Holder)> {
        let guard = self.guard.as_ref()?;
        Some((guard.lease().to_string(), guard.held()?))
    }

    /// The expectations key of an owner.
    pub fn key(owner: &impl kube::Resource) -> String {
        owner.uid().unwrap_or_default()
    }

    /// Drops everything recorded for a deleted owner.
    pub fn forget(&self, owner: &impl kube::Resource) {
        let key = Self::key(owner);
        self.expectations.forget(&key);
        self.logged_generations
            .lock()
            .expect("logged lock")
            .retain(|(o, _), _| *o != key);
        self.failures
            .lock()
            .expect("failures lock")
            .retain(|(_, o), _| *o != key);
        self.validated.lock().expect("validated lock").remove(&key);
        self.status.forget(&key);
    }

    /// The validator's message when it refuses `object`'s spec (None: valid), asking
    /// `validate` only when the generation changed since the last answer.
    pub fn invalid_spec<K: kube::Resource>(
        &self,
        object: &K,
        validate: impl FnOnce(&K) -> Report,
    ) -> Option<String> {
        let verdict = |report: Report| (!report.is_valid()).then(|| report.error_message());
        let Some(generation) = object.meta().generation else {
            return verdict(validate(object));
        };
        let key = Self::key(object);
        if let Some((seen, message)) = self.validated.lock().expect("validated lock").get(&key)
            && *seen == generation
        {
            return message.clone();
        }
        let message = verdict(validate(object));
        self.validated
            .lock()
            .expect("validated lock")
            .insert(key, (generation, message.clone()));
        message
    }

    /// Counts one write (`verb` on `resource`) this controller's API server accepted.
    pub fn wrote(&self, verb: &str, resource: &str) {
        self.metrics.api_write(self.controller, verb, resource);
    }

    /// Publishes an event about `object`, optionally naming a `related` object
    /// (events.k8s.io; repeats of the same reason about the same objects become a series). A
    /// failure is logged, never fails the reconcile: events are informative.
    pub async fn publish<K>(
        &self,
        object: &K,
        related: Option<ObjectReference>,
        reason: &str,
        action: &str,
        note: String,
    ) where
        K: kube::Resource<DynamicType = ()>,
    {
        self.emit(EventType::Normal, object, related, reason, action, note)
            .await;
    }

    /// Publishes a Warning event about `object`, like [`Context::publish`].
    pub async fn warn<K>(&self, object: &K, reason: &str, action: &str, note: String)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        self.emit(EventType::Warning, object, None, reason, action, note)
            .await;
    }

    #[allow(clippy::too_many_arguments)]
    async fn emit<K>(
        &self,
        type_: EventType,
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
            self.controller,
            &event,
            &object.object_ref(&()),
        )
        .await;
    }

    /// Counts one more failed reconcile of `object` in a row; returns the count.
    pub(super) fn failed<K: kube::Resource<DynamicType = ()>>(&self, object: &K) -> u32 {
        let mut failures = self.failures.lock().expect("failures lock");
        let count = failures.entry(Self::failure_key(object)).or_default();
        *count = count.saturating_add(1);
        *count
    }

    /// Ends the run of failures of `object`.
    pub(super) fn succeeded<K: kube::Resource<DynamicType = ()>>(&self, object: &K) {
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

/// A context whose client fails every request at once, as while the API server restarts:
/// for tests of what a controller does before and after its requests.
#[cfg(test)]
pub(crate) fn unreachable_context() -> Context {
    use crate::api::podgroup::PodGroupCrds;
    let service = tower::service_fn(|_: http::Request<kube::client::Body>| async {
        Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("connection refused"))
    });
    let client = Client::new(service, "ns");
    let metrics = Arc::new(Metrics::default());
    let (caches, _never_run) = Caches::new(
        &client,
        Some("ns"),
        &metrics,
        tokio::sync::watch::channel(PodGroupCrds::Unknown).1,
    );
    Context::new("test", client, caches, metrics)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RoleSet;

    fn object(uid: &str) -> RoleSet {
        let mut rs = RoleSet::new("rs", Default::default());
        rs.metadata.uid = Some(uid.into());
        rs
    }

    #[tokio::test]
    async fn a_success_ends_the_run_of_failures_of_that_object_only() {
        let ctx = unreachable_context();
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
    }

    #[tokio::test]
    async fn a_spec_is_validated_once_per_generation() {
        let ctx = unreachable_context();
        let asked = std::cell::Cell::new(0);
        // Two roles of one name: the validator refuses it, naming `spec.roles`.
        let refuse = |_: &RoleSet| {
            asked.set(asked.get() + 1);
            let twice = serde_json::json!({"name": "decode", "replicas": 1, "template": {}});
            let invalid: RoleSet = serde_json::from_value(serde_json::json!({
                "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                "metadata": {"name": "rs"}, "spec": {"roles": [twice, twice]}
            }))
            .unwrap();
            crate::admission::validation::validate_roleset(&invalid, None)
        };
        let mut rs = object("a");
        rs.metadata.generation = Some(1);
        let first = ctx.invalid_spec(&rs, refuse);
        assert!(
            first.as_deref().is_some_and(|m| m.contains("spec.roles")),
            "{first:?}"
        );
        assert_eq!(ctx.invalid_spec(&rs, refuse), first);
        assert_eq!(asked.get(), 1, "the same generation is not validated again");
        rs.metadata.generation = Some(2);
        assert_eq!(ctx.invalid_spec(&rs, |_| Report::default()), None);
        assert_eq!(
            ctx.invalid_spec(&rs, refuse),
            None,
            "generation 2's answer is kept"
        );
        assert_eq!(asked.get(), 1);
        ctx.forget(&rs);
        assert!(
            ctx.invalid_spec(&rs, refuse).is_some(),
            "forgotten with the object"
        );
        assert_eq!(asked.get(), 2);
    }
}
