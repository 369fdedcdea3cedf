//! Records every observed state of the objects of one kind in a namespace, in order, so
//! tests can assert the order of transitions and check budgets at every observed state.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

/// One observation of one object.
#[derive(Clone, Debug)]
pub enum Observed<K> {
    /// The object as it was at this point of the watch (created or changed).
    Applied(K),
    /// The object was deleted.
    Deleted(K),
    /// The watch re-listed (after an API server restart or an expired watch): these are all
    /// the objects now; any other object was deleted while the watch was down.
    Relisted(Vec<K>),
}

impl<K: ResourceExt + Clone> Observed<K> {
    /// Applies this observation to `state` (objects by name).
    pub fn apply_to(&self, state: &mut std::collections::BTreeMap<String, K>) {
        match self {
            Observed::Applied(o) => {
                state.insert(o.name_any(), o.clone());
            }
            Observed::Deleted(o) => {
                state.remove(&o.name_any());
            }
            Observed::Relisted(all) => {
                *state = all.iter().map(|o| (o.name_any(), o.clone())).collect();
            }
        }
    }

    /// The objects this observation shows as they are (none for a deletion).
    pub fn applied(&self) -> Vec<&K> {
        match self {
            Observed::Applied(o) => vec![o],
            Observed::Deleted(_) => Vec::new(),
            Observed::Relisted(all) => all.iter().collect(),
        }
    }
}

/// An observation and the test's monotonic time of its arrival.
pub type TimedObservation<K> = (Instant, Observed<K>);

/// Watches a kind in a namespace from creation until dropped, keeping every event with the
/// test's monotonic time of its arrival.
pub struct Recorder<K> {
    events: Arc<Mutex<Vec<TimedObservation<K>>>>,
    /// Counts recorded events, so waiters wake on each new one.
    recorded: tokio::sync::watch::Receiver<usize>,
    task: JoinHandle<()>,
}

impl<K> Recorder<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// Starts recording; returns once the initial list has been observed, so nothing created
    /// afterwards is missed.
    pub async fn start(api: Api<K>) -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let (count_tx, recorded) = tokio::sync::watch::channel(0usize);
        let sink = events.clone();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            // Objects of a re-list in progress (None outside one, and during the first list,
            // which is recorded object by object).
            let mut relisting: Option<Vec<K>> = None;
            // With backoff, the recording outlives an API server restart: the watch re-lists
            // and goes on (the re-list is recorded as states like any other).
            let mut stream =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let observed = match event {
                    watcher::Event::InitApply(o) if relisting.is_some() => {
                        relisting.as_mut().expect("re-listing").push(o);
                        continue;
                    }
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => Observed::Applied(o),
                    watcher::Event::Delete(o) => Observed::Deleted(o),
                    watcher::Event::InitDone => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                            continue;
                        }
                        match relisting.take() {
                            Some(all) => Observed::Relisted(all),
                            None => continue,
                        }
                    }
                    watcher::Event::Init => {
                        if synced.is_none() {
                            relisting = Some(Vec::new());
                        }
                        continue;
                    }
                };
                let count = {
                    let mut events = sink.lock().expect("recorder lock");
                    events.push((Instant::now(), observed));
                    events.len()
                };
                count_tx.send_replace(count);
            }
        });
        synced_rx.await.expect("recorder watch synced");
        Self {
            events,
            recorded,
            task,
        }
    }

    /// Waits until the recorder has observed every object `api` lists now, at its listed
    /// `resourceVersion`: another watch (or a wait) may have seen a change first, and
    /// assertions over the recording must not run on a stale tail.
    pub async fn catch_up(&self, api: &Api<K>) {
        let listed = api
            .list(&Default::default())
            .await
            .expect("list for the recorder");
        let wanted: Vec<(String, Option<String>)> = listed
            .items
            .iter()
            .map(|o| (o.name_any(), o.resource_version()))
            .collect();
        let mut recorded = self.recorded.clone();
        let caught_up = async {
            loop {
                let events = self.events();
                let missing = wanted.iter().any(|(name, version)| {
                    !events.iter().any(|e| {
                        e.applied()
                            .iter()
                            .any(|o| o.name_any() == *name && o.resource_version() == *version)
                    })
                });
                if !missing {
                    return;
                }
                if recorded.changed().await.is_err() {
                    panic!("the recorder's watch ended");
                }
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), caught_up)
            .await
            .expect("the recorder observed the listed state within 30 s");
    }

    /// Waits until at least `count` events are recorded (`timeout` at most).
    pub async fn wait_for_count(&self, count: usize, timeout: std::time::Duration) {
        let mut recorded = self.recorded.clone();
        tokio::time::timeout(timeout, recorded.wait_for(|n| *n >= count))
            .await
            .unwrap_or_else(|_| panic!("fewer than {count} recorded events after {timeout:?}"))
            .expect("the recorder's watch ended");
    }

    /// Everything observed so far, in order.
    pub fn events(&self) -> Vec<Observed<K>> {
        self.timed_events().into_iter().map(|(_, e)| e).collect()
    }

    /// Everything observed so far, in order, with when it arrived (for durations measured
    /// on the test's monotonic clock).
    pub fn timed_events(&self) -> Vec<TimedObservation<K>> {
        self.events.lock().expect("recorder lock").clone()
    }

    /// The observed states of one object, in order.
    pub fn states_of(&self, name: &str) -> Vec<K> {
        self.events()
            .iter()
            .flat_map(Observed::applied)
            .filter(|o| o.name_any() == name)
            .cloned()
            .collect()
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
