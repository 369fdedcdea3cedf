//! Starts the controllers: one set per scope (every namespace, or each listed one), each
//! over the scope's shared caches.

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource};
use tokio::sync::watch;

use super::children::{controlling_owner, gated_gang_owner};
use super::context::Context;
use super::owner::{Owner, error_policy, measured, reconcile};
use crate::api::podgroup::PodGroupCrds;
use crate::api::{PodSet, RoleSet, StormService};
use crate::controller::aibrix_guard::{self, AibrixGuard};
use crate::controller::analysis;
use crate::controller::cache::scope::Caches;
use crate::controller::cache::{Cache, Cached};
use crate::metrics::Metrics;

/// Reconciles one controller runs at once. Each sends its writes one after another, so this
/// bounds squall's requests in flight (and the API-server connections and buffers they
/// hold) when a whole fleet changes at once; the API server, not squall, is what a deeper
/// queue would wait on.
const RECONCILES_IN_FLIGHT: u16 = 16;

/// Runs the StormService, RoleSet and PodSet controllers until `shutdown` resolves: over every
/// namespace when `namespaces` is empty, else one set per listed namespace (so a namespaced
/// install needs only Roles in those namespaces). `podgroup_crds` says which gang
/// schedulers' PodGroups can be made ([`crate::controller::cache::podgroups::look_for_crds`]).
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
        stormservice: client(StormService::CONTROLLER)?,
        roleset: client(RoleSet::CONTROLLER)?,
        podset: client(PodSet::CONTROLLER)?,
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

/// Runs one controller until `shutdown`: every reconcile measured, instrumented and retried
/// by [`error_policy`].
async fn drive<O: Owner>(
    controller: Controller<O>,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let name = O::CONTROLLER;
    controller
        .with_config(ControllerConfig::default().concurrency(RECONCILES_IN_FLIGHT))
        .graceful_shutdown_on(shutdown)
        .run(
            move |object, ctx| measured(object.clone(), ctx.clone(), reconcile(object, ctx)),
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

/// The owners `owner` maps each change of `cache` to: how a controller subscribes to the
/// children it owns or watches of a kind the caches keep compact (not as a `Resource`).
fn owners_of<C: Cached, K: Resource<DynamicType = ()> + 'static>(
    cache: &Cache<C>,
    owner: fn(&C) -> Option<ObjectRef<K>>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    cache
        .subscribe()
        .filter_map(move |child| std::future::ready(owner(&child)))
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
    let context = |controller: &'static str, client: &Client| {
        Arc::new(
            Context::new(controller, client.clone(), caches.clone(), metrics.clone())
                .guarded_by(guard.clone())
                .with_providers(providers.clone()),
        )
    };
    // Subscribed before the watches start, so no change is missed.
    let rolesets = drive::<RoleSet>(
        released(
            Controller::for_shared_stream(caches.rolesets.subscribe(), caches.rolesets.reader())
                .reconcile_on(owners_of(&caches.pods, controlling_owner::<RoleSet, _>))
                .owns_shared_stream(caches.podsets.subscribe())
                .reconcile_on(owners_of(&caches.pods, gated_gang_owner))
                .reconcile_on(providers.finished())
                .reconcile_on(caches.podgroups.changed_owners())
                .reconcile_all_on(caches.podgroups.found()),
            guard,
        ),
        context(RoleSet::CONTROLLER, &clients.roleset),
        shutdown.clone(),
    );
    let podsets = drive::<PodSet>(
        released(
            Controller::for_shared_stream(caches.podsets.subscribe(), caches.podsets.reader())
                .reconcile_on(owners_of(&caches.pods, controlling_owner::<PodSet, _>))
                .reconcile_on(caches.podgroups.changed_owners())
                .reconcile_all_on(caches.podgroups.found()),
            guard,
        ),
        context(PodSet::CONTROLLER, &clients.podset),
        shutdown.clone(),
    );
    let stormservices = drive::<StormService>(
        released(
            Controller::for_shared_stream(
                caches.stormservices.subscribe(),
                caches.stormservices.reader(),
            )
            .owns_shared_stream(caches.rolesets.subscribe())
            .reconcile_on(owners_of(
                &caches.revisions,
                controlling_owner::<StormService, _>,
            ))
            .reconcile_on(owners_of(
                &caches.services,
                controlling_owner::<StormService, _>,
            ))
            .reconcile_on(providers.finished()),
            guard,
        ),
        context(StormService::CONTROLLER, &clients.stormservice),
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
