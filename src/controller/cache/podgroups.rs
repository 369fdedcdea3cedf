//! The gang schedulers' PodGroups as the controllers see them: which PodGroup CRDs the
//! cluster serves, and a shared cache per scheduler once its CRD is there. A PodGroup is made
//! only for a scheduler whose CRD exists (as AIBrix does), and a cache starts only then: a
//! watch on a resource that is not served fails for as long as it runs.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::{broadcast, watch};

use super::Cache;
use crate::api::common::{SchedulingStrategy, controller_uid};
use crate::api::podgroup::{
    CoschedulingKind, GodelKind, PodGroup, PodGroupCrds, Scheduler, SchedulerKind, VolcanoKind,
};
use crate::metrics::Metrics;
use crate::planner::podgroup::{self as plan};

/// How often the PodGroup CRDs are looked for (by name: three metadata GETs): a scheduler
/// installed after squall gets its PodGroups — and the webhooks stop warning — within this.
pub const CRD_POLL: Duration = Duration::from_secs(10);

/// Looks for the PodGroup CRDs every [`CRD_POLL`] for as long as the process runs, and
/// publishes what the cluster serves to the webhooks and the controllers. A lookup that
/// fails (refused, or the API server away) keeps what the last one said of that CRD, and
/// nothing is said until every CRD has been looked up once.
pub async fn look_for_crds(client: Client, crds: watch::Sender<PodGroupCrds>) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let mut poll = tokio::time::interval(CRD_POLL);
    let mut failing = false;
    loop {
        poll.tick().await;
        let before = *crds.borrow();
        let mut served = Vec::new();
        let mut answered = true;
        for scheduler in Scheduler::ALL {
            match api.get_metadata_opt(&scheduler.crd_name()).await {
                Ok(Some(_)) => served.push(scheduler),
                Ok(None) => {}
                Err(error) => {
                    if !failing {
                        tracing::warn!(crd = %scheduler.crd_name(), %error, "PodGroup CRD lookup failed");
                    }
                    answered = false;
                    served.extend(before.serves(scheduler).then_some(scheduler));
                }
            }
        }
        failing = !answered;
        let now = if answered || before != PodGroupCrds::Unknown {
            PodGroupCrds::known(served)
        } else {
            PodGroupCrds::Unknown
        };
        crds.send_if_modified(|crds| std::mem::replace(crds, now) != now);
    }
}

/// What the controllers know of one PodGroup.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// The scheduler's CRD is not served: no PodGroup can be made.
    NotServed,
    /// The CRD is served and its cache is filling: ask again shortly.
    Starting,
    /// No such PodGroup.
    Absent,
    /// The PodGroup: its controller's UID, spec and status.
    Found {
        /// The UID of its controller reference.
        controller: Option<String>,
        /// `spec`.
        spec: serde_json::Value,
        /// `status`.
        status: serde_json::Value,
    },
}

/// Changed PodGroups' owners not yet taken by their controllers: past this many (a burst of
/// thousands of PodGroup changes), the oldest are dropped — their owners' own requeues
/// still repair them.
const OWNER_CHANGES: usize = 1024;

/// The PodGroup caches of one scope, started as their CRDs appear.
pub struct PodGroupCaches {
    coscheduling: OnceLock<Arc<Cache<PodGroup<CoschedulingKind>>>>,
    volcano: OnceLock<Arc<Cache<PodGroup<VolcanoKind>>>>,
    godel: OnceLock<Arc<Cache<PodGroup<GodelKind>>>>,
    served: watch::Sender<PodGroupCrds>,
    /// The controlling owner (kind, namespace, name) of every PodGroup that changed.
    owners: broadcast::Sender<(String, String, String)>,
}

impl Default for PodGroupCaches {
    fn default() -> Self {
        Self {
            coscheduling: OnceLock::new(),
            volcano: OnceLock::new(),
            godel: OnceLock::new(),
            served: watch::Sender::default(),
            owners: broadcast::Sender::new(OWNER_CHANGES),
        }
    }
}

impl PodGroupCaches {
    /// The owners of type `K` of PodGroups that changed (edited or deleted by someone
    /// else): their controllers make them what the strategy asks again at once.
    pub fn changed_owners<K>(&self) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        futures::stream::unfold(self.owners.subscribe(), |mut owners| async move {
            loop {
                match owners.recv().await {
                    Ok((kind, namespace, name)) if kind == K::kind(&()) => {
                        return Some((ObjectRef::new(&name).within(&namespace), owners));
                    }
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
    }

    /// Ticks each time a PodGroup CRD is found or goes: every RoleSet and PodSet is
    /// reconciled then (the gangs that were waiting for it, or now running without it).
    pub fn found(&self) -> impl futures::Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.served.subscribe(), |mut served| async move {
            served.changed().await.ok()?;
            served.borrow_and_update();
            Some(((), served))
        })
    }

    /// The scheduler `strategy` names when its PodGroup CRD is not served.
    pub fn unserved(&self, strategy: Option<&SchedulingStrategy>) -> Option<Scheduler> {
        let scheduler = strategy.and_then(plan::requested)?.scheduler;
        (!self.served.borrow().serves(scheduler)).then_some(scheduler)
    }

    /// The PodGroup `name` of `scheduler` in `namespace`.
    pub fn lookup(&self, scheduler: Scheduler, namespace: &str, name: &str) -> Lookup {
        fn of<S: SchedulerKind>(
            cache: &OnceLock<Arc<Cache<PodGroup<S>>>>,
            namespace: &str,
            name: &str,
        ) -> Lookup {
            let Some(cache) = cache.get() else {
                return Lookup::Starting;
            };
            if !cache.is_ready() {
                return Lookup::Starting;
            }
            match cache.get(namespace, name) {
                Some(group) => Lookup::Found {
                    controller: controller_uid(&group.metadata).map(str::to_string),
                    spec: group.spec.clone(),
                    status: group.status.clone(),
                },
                None => Lookup::Absent,
            }
        }
        if !self.served.borrow().serves(scheduler) {
            return Lookup::NotServed;
        }
        match scheduler {
            Scheduler::Coscheduling => of(&self.coscheduling, namespace, name),
            Scheduler::Volcano => of(&self.volcano, namespace, name),
            Scheduler::Godel => of(&self.godel, namespace, name),
        }
    }

    /// Follows what [`look_for_crds`] finds, starting the cache of each served CRD's
    /// PodGroups in `namespace` (all when `None`). Runs until the process stops.
    pub async fn run(
        self: Arc<Self>,
        mut crds: watch::Receiver<PodGroupCrds>,
        client: Client,
        namespace: Option<String>,
        metrics: Arc<Metrics>,
    ) {
        loop {
            let now = *crds.borrow_and_update();
            let before = *self.served.borrow();
            for scheduler in Scheduler::ALL {
                match (before.serves(scheduler), now.serves(scheduler)) {
                    (false, true) => {
                        // Once started, a cache outlives its CRD (its watch retries).
                        self.start(scheduler, &client, namespace.as_deref(), &metrics);
                        tracing::info!(crd = %scheduler.crd_name(), "PodGroup CRD found; PodGroups will be made");
                    }
                    (true, false) => {
                        tracing::warn!(crd = %scheduler.crd_name(), "PodGroup CRD gone; gangs run without it");
                    }
                    _ => {}
                }
            }
            self.served
                .send_if_modified(|served| std::mem::replace(served, now) != now);
            if crds.changed().await.is_err() {
                // The lookup stopped (the process is stopping): what it said last holds.
                std::future::pending::<()>().await;
            }
        }
    }

    fn start(
        &self,
        scheduler: Scheduler,
        client: &Client,
        namespace: Option<&str>,
        metrics: &Arc<Metrics>,
    ) {
        fn start<S: SchedulerKind>(
            slot: &OnceLock<Arc<Cache<PodGroup<S>>>>,
            owners: &broadcast::Sender<(String, String, String)>,
            client: &Client,
            namespace: Option<&str>,
            metrics: &Arc<Metrics>,
        ) {
            if slot.get().is_some() {
                return;
            }
            let api = match namespace {
                Some(namespace) => Api::namespaced(client.clone(), namespace),
                None => Api::all(client.clone()),
            };
            let (cache, driver) =
                Cache::new(api, watcher::Config::default(), |_| true, metrics.clone());
            // Subscribed before the watch starts, so no change is missed.
            let mut changes = cache.subscribe();
            if slot.set(cache).is_ok() {
                let owners = owners.clone();
                tokio::spawn(async move {
                    while let Some(group) = changes.next().await {
                        let namespace = group.metadata.namespace.clone().unwrap_or_default();
                        if let Some(owner) = group
                            .owner_references()
                            .iter()
                            .find(|o| o.controller == Some(true))
                        {
                            // Nobody listening (controllers stopping) is no loss.
                            let _ =
                                owners.send((owner.kind.clone(), namespace, owner.name.clone()));
                        }
                    }
                });
                tokio::spawn(driver.run());
            }
        }
        let owners = &self.owners;
        match scheduler {
            Scheduler::Coscheduling => {
                start(&self.coscheduling, owners, client, namespace, metrics)
            }
            Scheduler::Volcano => start(&self.volcano, owners, client, namespace, metrics),
            Scheduler::Godel => start(&self.godel, owners, client, namespace, metrics),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PodSet, RoleSet};

    #[tokio::test]
    async fn a_changed_podgroup_reaches_its_owners_controller_only() {
        let caches = PodGroupCaches::default();
        let mut rolesets = std::pin::pin!(caches.changed_owners::<RoleSet>());
        let mut podsets = std::pin::pin!(caches.changed_owners::<PodSet>());
        let change =
            |kind: &str, name: &str| (kind.to_string(), "ns".to_string(), name.to_string());
        caches.owners.send(change("PodSet", "ps-0")).unwrap();
        caches.owners.send(change("RoleSet", "rs")).unwrap();
        assert_eq!(
            rolesets.next().await,
            Some(ObjectRef::new("rs").within("ns"))
        );
        assert_eq!(
            podsets.next().await,
            Some(ObjectRef::new("ps-0").within("ns"))
        );
    }

    #[test]
    fn nothing_is_served_before_a_crd_is_found() {
        let caches = PodGroupCaches::default();
        assert_eq!(
            caches.lookup(Scheduler::Volcano, "ns", "g"),
            Lookup::NotServed
        );
        caches
            .served
            .send_replace(PodGroupCrds::known([Scheduler::Volcano]));
        // Served, but no cache started yet: the caller waits rather than create blindly.
        assert_eq!(
            caches.lookup(Scheduler::Volcano, "ns", "g"),
            Lookup::Starting
        );
        assert_eq!(
            caches.lookup(Scheduler::Godel, "ns", "g"),
            Lookup::NotServed
        );
    }
}
