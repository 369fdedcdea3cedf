//! Records every observed state of the objects of one kind in a namespace, in order, so
//! tests can assert the order of transitions and check budgets at every observed state.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

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
}

impl<K: ResourceExt> Observed<K> {
    /// Name of the observed object.
    pub fn name(&self) -> String {
        match self {
            Observed::Applied(o) | Observed::Deleted(o) => o.name_any(),
        }
    }
}

/// Watches a kind in a namespace from creation until dropped, keeping every event.
pub struct Recorder<K> {
    events: Arc<Mutex<Vec<Observed<K>>>>,
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
            // With backoff, the recording outlives an API server restart: the watch re-lists
            // and goes on (the re-list is recorded as states like any other).
            let mut stream =
                std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(event) = stream.next().await {
                let Ok(event) = event else { continue };
                let observed = match event {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => Observed::Applied(o),
                    watcher::Event::Delete(o) => Observed::Deleted(o),
                    watcher::Event::InitDone => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    watcher::Event::Init => continue,
                };
                let count = {
                    let mut events = sink.lock().expect("recorder lock");
                    events.push(observed);
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
                        matches!(e, Observed::Applied(o) if o.name_any() == *name && o.resource_version() == *version)
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
        self.events.lock().expect("recorder lock").clone()
    }

    /// The observed states of one object, in order.
    pub fn states_of(&self, name: &str) -> Vec<K> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                Observed::Applied(o) if o.name_any() == name => Some(o),
                _ => None,
            })
            .collect()
    }
}

impl<K> Drop for Recorder<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}
