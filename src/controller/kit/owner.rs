//! What an owner kind is to the kit ([`Owner`]) and the one way each is reconciled: the
//! wrapper every pass runs in (the AIBrix guard, the wait for our own last write, the span,
//! the outcome metric and the retry policy), the finalizer, and ordered deletion.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, finalizer};

use super::children::{ChildKind, Going};
use super::context::Context;
use super::error::{Error, retry_delay};

/// Runs one reconcile of `object`, recording its outcome and duration; a success ends the
/// object's run of failures (`retry_delay`).
pub(super) async fn measured<K: kube::Resource<DynamicType = ()>>(
    object: Arc<K>,
    ctx: Arc<Context>,
    reconcile: impl std::future::Future<Output = Result<Action, Error>>,
) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let controller = ctx.controller;
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
    if ctx.status.behind(&*object) {
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
        Err(Error::Waiting(_) | Error::Draining(_)) => "waiting",
        Err(_) => "error",
    };
    ctx.metrics
        .reconciled(controller, outcome, started.elapsed());
    result
}

pub(super) fn error_policy<K>(object: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action
where
    K: kube::Resource<DynamicType = ()>,
{
    match error.root() {
        // Not a failure: children are still going away.
        Error::Waiting(_) => return Action::requeue(Duration::from_secs(2)),
        // Not a failure: children drain before they go, and say when to look again.
        Error::Draining(due) => return Action::requeue(*due),
        _ => {}
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
        ctx.status.replaced(&*object);
    }
    result
}

/// A kind squall reconciles and orders the deletion of (StormService, RoleSet, PodSet): what
/// the one reconcile wrapper, ordered deletion and the counted writes need to know of it.
pub trait Owner:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// Its controller's name: its API client, its writes, events, metrics and logs.
    const CONTROLLER: &'static str;
    /// The finalizer its deletion waits behind until its children are gone.
    const FINALIZER: &'static str;
    /// The label every child carries with the owner's name (ordered deletion's last check).
    const CHILD_LABEL: &'static str;
    /// Its child kinds, deleted together.
    const CHILDREN: &'static [ChildKind];

    /// One pass over the live object: observe, decide (the planner), write.
    fn apply(
        &self,
        ctx: &Context,
    ) -> impl std::future::Future<Output = Result<Action, Error>> + Send;

    /// What runs once the object is being deleted, before its children are deleted: an
    /// error (`Error::Draining`, say) holds the deletion back.
    fn before_deletion(
        &self,
        _ctx: &Context,
    ) -> impl std::future::Future<Output = Result<(), Error>> + Send {
        async { Ok(()) }
    }

    /// What goes with the object once it is deleted, beside what the context recorded of it.
    fn forgotten(&self, _ctx: &Context) {}
}

/// Reconciles one object of an owner kind: [`Owner::apply`] while it lives, ordered deletion
/// once it is being deleted.
pub async fn reconcile<O: Owner>(object: Arc<O>, ctx: Arc<Context>) -> Result<Action, Error> {
    finalized(
        object,
        ctx,
        O::FINALIZER,
        |object, ctx| async move { object.apply(&ctx).await },
        |object, ctx| async move {
            object.before_deletion(&ctx).await?;
            ordered_deletion(&*object, &ctx).await
        },
    )
    .await
}

/// Ordered deletion of an owner: every child first; the finalizer goes once none is left —
/// in the caches, confirmed by what they have seen ([`ChildKind::settled`]) or else by the API
/// server ([`super::children::live_children`]). Until then the reconcile waits
/// ([`Error::Waiting`]): deletions are watched, the requeue is a backstop.
pub async fn ordered_deletion<O: Owner>(owner: &O, ctx: &Context) -> Result<Action, Error> {
    let mut children: Vec<Vec<Going>> = O::CHILDREN
        .iter()
        .map(|kind| kind.cached(ctx, owner))
        .collect();
    if children.iter().all(Vec::is_empty) {
        children.clear();
        for kind in O::CHILDREN {
            children.push(if kind.settled(ctx, owner) {
                Vec::new()
            } else {
                kind.live(ctx, owner, O::CHILD_LABEL).await?
            });
        }
        if children.iter().all(Vec::is_empty) {
            ctx.forget(owner);
            owner.forgotten(ctx);
            return Ok(Action::await_change());
        }
    }
    for (kind, going) in O::CHILDREN.iter().zip(&children) {
        kind.delete_remaining(ctx, owner, going).await?;
    }
    let left: Vec<String> = O::CHILDREN
        .iter()
        .zip(&children)
        .map(|(kind, going)| format!("{} {}", going.len(), kind.noun()))
        .collect();
    Err(Error::Waiting(format!(
        "{} still terminating",
        left.join(" and ")
    )))
}
