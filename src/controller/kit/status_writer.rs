//! The status writer: one conditional `/status` patch when the derived status differs, a
//! count-only change held back to coalesce, and the memory of what our last write replaced so
//! a reconcile never decides from the version it overwrote.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use tokio::time::Instant;

use super::error::Error;
use super::expectations::EXPECTATION_TIMEOUT;
use crate::metrics::Metrics;
use crate::planner::status::{coalesce_window, only_informational_differ};

/// One controller's status writer, with what it remembers of its writes.
pub struct StatusWriter {
    /// The controller whose writes these are (they are counted under it).
    controller: &'static str,
    client: Client,
    metrics: Arc<Metrics>,
    /// By UID: the `resourceVersion` our last write replaced (a status, or the finalizer's
    /// removal) and when, until the cache shows a newer one: deciding from the older would
    /// undo or repeat what was just written. An object deleted meanwhile never shows a newer
    /// one; its entry expires after [`EXPECTATION_TIMEOUT`].
    overwritten: Mutex<HashMap<String, (String, Instant)>>,
    /// By UID: since when a status write has been held back (only pod counters changed).
    held_since: Mutex<HashMap<String, Instant>>,
}

/// The key an object is remembered by: its UID.
fn key(object: &impl kube::Resource) -> String {
    object.meta().uid.clone().unwrap_or_default()
}

impl StatusWriter {
    /// The status writer of `controller`, sending with `client`.
    pub fn new(controller: &'static str, client: Client, metrics: Arc<Metrics>) -> Self {
        Self {
            controller,
            client,
            metrics,
            overwritten: Mutex::default(),
            held_since: Mutex::default(),
        }
    }

    /// Drops what is remembered of the object with UID `key`.
    pub fn forget(&self, key: &str) {
        self.overwritten
            .lock()
            .expect("overwritten lock")
            .remove(key);
        self.held_since.lock().expect("held lock").remove(key);
    }

    /// Whether the cached `object` is older than this controller's last status write to it.
    pub fn behind(&self, object: &impl kube::Resource) -> bool {
        let mut overwritten = self.overwritten.lock().expect("overwritten lock");
        let key = key(object);
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
    /// [`StatusWriter::behind`]), and drops the records that expired: they are as many as the
    /// writes of the last [`EXPECTATION_TIMEOUT`] at most.
    pub fn replaced(&self, object: &impl kube::Resource) {
        let Some(old) = object.meta().resource_version.clone() else {
            return;
        };
        let mut overwritten = self.overwritten.lock().expect("overwritten lock");
        overwritten.retain(|_, (_, at)| at.elapsed() <= EXPECTATION_TIMEOUT);
        overwritten.insert(key(object), (old, Instant::now()));
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
    pub async fn write<K, S>(
        &self,
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
        let key = key(object);
        if stored == Some(status) {
            self.held_since.lock().expect("held lock").remove(&key);
            return Ok(None);
        }
        if let Some(counters) = counters
            && let Some(baseline) = stored.or(unwritten)
            && only_informational_differ(baseline, status, counters)
        {
            let mut held = self.held_since.lock().expect("held lock");
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
        self.held_since.lock().expect("held lock").remove(&key);
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
                self.metrics.api_write(
                    self.controller,
                    "patch",
                    &format!("{}/status", K::plural(&())),
                );
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RoleSet, RoleSetStatus, RoleStatus};
    use crate::controller::kit::context::unreachable_context;
    use crate::planner::roleset::status::ROLESET_COUNTERS;
    use crate::planner::status::{COALESCE, COALESCE_MAX};

    fn object(uid: &str, version: &str) -> RoleSet {
        let mut rs = RoleSet::new("rs", Default::default());
        rs.metadata.uid = Some(uid.into());
        rs.metadata.namespace = Some("ns".into());
        rs.metadata.resource_version = Some(version.into());
        rs
    }

    #[tokio::test(start_paused = true)]
    async fn a_reconcile_waits_for_the_version_after_our_write_until_it_expires() {
        let ctx = unreachable_context();
        // After a status write over version 7, the cache's version 7 is behind; 8 is not.
        let at = object("a", "7");
        assert!(!ctx.status.behind(&at));
        ctx.status.replaced(&at);
        assert!(
            ctx.status.behind(&at),
            "decided from what the write replaced"
        );
        assert!(!ctx.status.behind(&object("a", "8")));
        assert!(
            !ctx.status.behind(&at),
            "forgotten once a newer version was seen"
        );

        // A record whose newer version never shows (the object was deleted) expires.
        ctx.status.replaced(&at);
        tokio::time::advance(EXPECTATION_TIMEOUT).await;
        assert!(ctx.status.behind(&at), "held for the whole timeout");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            !ctx.status.behind(&at),
            "an expired record no longer holds reconciles back"
        );
        ctx.status.replaced(&at);
        tokio::time::advance(EXPECTATION_TIMEOUT + Duration::from_secs(1)).await;
        ctx.status.replaced(&object("c", "3"));
        assert!(
            !ctx.status.overwritten.lock().unwrap().contains_key("a"),
            "expired records are dropped when another is made"
        );
    }

    fn counted(ready: i32) -> RoleSetStatus {
        RoleSetStatus {
            observed_generation: Some(1),
            roles: Some(vec![RoleStatus {
                name: "decode".into(),
                replicas: 3,
                ready_replicas: ready,
                ..RoleStatus::default()
            }]),
            conditions: Some(Vec::new()),
            pairing: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_count_only_change_waits_its_window_then_is_written() {
        let ctx = unreachable_context();
        let rs = object("a", "7");
        let (stored, desired) = (counted(1), counted(2));
        let write = || {
            ctx.status
                .write(&rs, Some(&stored), None, &desired, Some(ROLESET_COUNTERS))
        };
        assert_eq!(write().await.unwrap(), Some(COALESCE), "held back");
        tokio::time::advance(COALESCE - Duration::from_secs(1)).await;
        assert_eq!(
            write().await.unwrap(),
            Some(Duration::from_secs(1)),
            "the window is kept from when it was first held"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            write().await.is_err(),
            "past its window the write is sent (and fails here, the API server is away)"
        );
        // The same change with nothing to hold it back is sent at once.
        assert!(
            ctx.status
                .write(&rs, Some(&stored), None, &desired, None)
                .await
                .is_err()
        );
        // A first status that says nothing new waits the longest window.
        assert_eq!(
            ctx.status
                .write(
                    &object("b", "1"),
                    None,
                    Some(&stored),
                    &desired,
                    Some(ROLESET_COUNTERS)
                )
                .await
                .unwrap(),
            Some(COALESCE_MAX)
        );
        // Nothing changed: nothing to write, nothing held.
        assert_eq!(
            ctx.status
                .write(&rs, Some(&desired), None, &desired, Some(ROLESET_COUNTERS))
                .await
                .unwrap(),
            None
        );
    }
}
