//! The shared caches of one scope: one watch per kind, read by every controller.

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::sync::watch;

use super::podgroups;
use super::{Cache, Cached, DecodeWarning, Driver, decoded};
use crate::api::cached::pod::CachedPod;
use crate::api::cached::revision::CachedRevision;
use crate::api::cached::service::CachedService;
use crate::api::keys::{FIELD_MANAGER, LABEL_REVISION_OWNER, LABEL_STORM_SERVICE_NAME};
use crate::api::podgroup::PodGroupCrds;
use crate::api::{PodSet, RoleSet, StormService};
use crate::controller::events::publish_event;
use crate::metrics::Metrics;

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
    pub revisions: Arc<Cache<CachedRevision>>,
    /// Headless Services controlled by a StormService.
    pub services: Arc<Cache<CachedService>>,
    /// The gang schedulers' PodGroups, each cache started once its CRD is found.
    pub podgroups: Arc<podgroups::PodGroupCaches>,
}

/// The drivers that fill one scope's caches, by kind: run by [`Caches::new`], or fed by the
/// cache-scale bench (`benches/cache.rs`).
pub struct Drivers {
    /// Fills [`Caches::pods`].
    pub pods: Driver<CachedPod>,
    /// Fills [`Caches::podsets`].
    pub podsets: Driver<PodSet>,
    /// Fills [`Caches::rolesets`].
    pub rolesets: Driver<RoleSet>,
    /// Fills [`Caches::stormservices`].
    pub stormservices: Driver<StormService>,
    /// Fills [`Caches::revisions`].
    pub revisions: Driver<CachedRevision>,
    /// Fills [`Caches::services`].
    pub services: Driver<CachedService>,
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
        let (caches, drivers) = Self::unfilled(client, namespace, metrics);
        let (warnings, warned) = tokio::sync::mpsc::channel(DECODE_WARNINGS_QUEUED);
        let Drivers {
            pods,
            podsets,
            rolesets,
            stormservices,
            revisions,
            services,
        } = drivers;
        let drivers: Vec<BoxFuture<'static, ()>> = vec![
            Box::pin(publish_decode_warnings(
                warned,
                client.clone(),
                metrics.clone(),
            )),
            Box::pin(pods.warning_to(warnings.clone()).run()),
            Box::pin(podsets.warning_to(warnings.clone()).run()),
            Box::pin(rolesets.warning_to(warnings.clone()).run()),
            Box::pin(stormservices.warning_to(warnings.clone()).run()),
            Box::pin(revisions.warning_to(warnings.clone()).run()),
            Box::pin(services.warning_to(warnings).run()),
            Box::pin(caches.podgroups.clone().run(
                podgroup_crds,
                client.clone(),
                namespace.map(String::from),
                metrics.clone(),
            )),
        ];
        (caches, drivers)
    }

    /// The caches of `namespace` and their drivers, not yet started (the PodGroup caches
    /// start with [`Caches::new`]'s drivers).
    pub fn unfilled(
        client: &Client,
        namespace: Option<&str>,
        metrics: &Arc<Metrics>,
    ) -> (Arc<Self>, Drivers) {
        // Only the controllers' primaries are kept in a reflector store too.
        macro_rules! cache {
            ($kind:ty, $config:expr, $keep:expr) => {
                cache!(new, $kind, $config, $keep)
            };
            ($make:ident, $kind:ty, $config:expr, $keep:expr) => {
                Cache::<$kind>::$make(
                    scoped::<decoded::Decoded<<$kind as Cached>::Watched>>(client, namespace),
                    $config,
                    $keep,
                    metrics.clone(),
                )
            };
        }
        let all = watcher::Config::default;
        let (pods, pods_driver) = cache!(CachedPod, all(), |p: &CachedPod| {
            p.metadata.controlled_by_kind(&RoleSet::kind(&()))
                || p.metadata.controlled_by_kind(&PodSet::kind(&()))
        });
        let (podsets, podsets_driver) = cache!(with_store, PodSet, all(), |_: &PodSet| true);
        let (rolesets, rolesets_driver) = cache!(with_store, RoleSet, all(), |_: &RoleSet| true);
        let (stormservices, stormservices_driver) =
            cache!(with_store, StormService, all(), |_: &StormService| true);
        let (revisions, revisions_driver) = cache!(
            CachedRevision,
            all().labels(LABEL_REVISION_OWNER),
            |r: &CachedRevision| r.metadata.controlled_by_kind(&StormService::kind(&()))
        );
        let (services, services_driver) = cache!(
            CachedService,
            all().labels(LABEL_STORM_SERVICE_NAME),
            |s: &CachedService| s.metadata.controlled_by_kind(&StormService::kind(&()))
        );
        let caches = Self {
            pods,
            podsets,
            rolesets,
            stormservices,
            revisions,
            services,
            podgroups: Arc::default(),
        };
        let drivers = Drivers {
            pods: pods_driver.sharing(super::share_pod_spec),
            podsets: podsets_driver,
            rolesets: rolesets_driver.sharing(super::share_roleset_templates),
            stormservices: stormservices_driver.sharing(super::share_stormservice_templates),
            revisions: revisions_driver.sharing(super::share_revision_data),
            services: services_driver,
        };
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

/// Warning events about undecodable objects waiting to be published; past it, one is only
/// logged: a tenant rewriting a bad object as fast as it can gets no more events than the
/// API server answers, and the watches never wait for one.
const DECODE_WARNINGS_QUEUED: usize = 64;

/// Publishes a Warning event about each object the caches report as not decoding (in its own
/// namespace, where its owner looks), one at a time, until the caches stop.
async fn publish_decode_warnings(
    mut warned: tokio::sync::mpsc::Receiver<DecodeWarning>,
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
