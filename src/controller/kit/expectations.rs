//! Creates and deletes issued and not yet observed, per owner and role, and pairing
//! conditions and drain starts written and not yet observed, per owner: a lagging cache never
//! makes a pass create or delete a child twice, write a pod's gate twice or drain another
//! (docs/architecture.md#one-reconcile). And per owner, what ordered deletion needs to take
//! an empty cache at its word ([`Expectations::settled`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// How long an unobserved create or delete is waited for before it is assumed lost.
pub const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(300);

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

/// Pairing conditions written for one owner: pod name → the status written, and when.
type WrittenGates = BTreeMap<String, (bool, Instant)>;

/// The expectations of one controller: children by (owner UID, role), and pairing
/// conditions by owner UID.
#[derive(Debug, Default)]
pub struct Expectations {
    children: Mutex<HashMap<(String, String), Expectation>>,
    gates: Mutex<HashMap<String, WrittenGates>>,
    drains: Mutex<HashMap<String, WrittenDrains>>,
    deletions: Mutex<HashMap<String, Deletion>>,
}

/// What this process did to one owner's children, by resource (`pods`, `podsets`, ...).
#[derive(Debug, Default)]
struct Deletion {
    /// Kinds of child it sent a create of (sent: an answer lost on the way still counts).
    created: BTreeSet<String>,
    /// Per kind, the highest resource version of a child deletion the API server answered
    /// while the owner was being deleted.
    deleted: BTreeMap<String, u64>,
}

/// Whether a cache that shows none of an owner's children of one kind can be taken at its
/// word, or the API server must be asked (docs/architecture.md#ordered-deletion). A cache
/// misses a child only if the child was created after the cache's first list and its event
/// has not arrived: so either this process never sent a create of that kind for the owner
/// (whatever existed before the process was listed), or the cache has seen a version at or
/// past the deletion of a child this process asked for once the owner was going — every
/// child committed before that deletion has a lower version of the same kind.
pub fn cache_settles(
    cache_ready: bool,
    cache_seen: Option<u64>,
    created_here: bool,
    deleted_at: Option<u64>,
) -> bool {
    cache_ready
        && (!created_here
            || matches!((cache_seen, deleted_at), (Some(seen), Some(at)) if seen >= at))
}

/// Drain starts written for one owner: child name → the start written, and when.
type WrittenDrains = BTreeMap<String, (i64, Instant)>;

impl Expectations {
    /// Settles expectations against the children observed now (name, terminating) and
    /// returns what is still pending for `role` of `owner`.
    pub fn observe(
        &self,
        owner: &str,
        role: &str,
        seen: impl IntoIterator<Item = (String, bool)>,
    ) -> Expectation {
        let mut all = self.children.lock().expect("expectations lock");
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
        let mut all = self.children.lock().expect("expectations lock");
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

    /// Records a pairing condition (`servable`) the API server accepted on `pod`.
    pub fn expect_gate(&self, owner: &str, pod: &str, servable: bool) {
        self.gates
            .lock()
            .expect("expectations lock")
            .entry(owner.to_string())
            .or_default()
            .insert(pod.to_string(), (servable, Instant::now()));
    }

    /// Settles the pairing conditions written for `owner` against the ones observed now
    /// (`seen`: a pod's condition, None for a pod no longer seen) and returns those still
    /// unobserved: the pass plans as if the cache showed them.
    pub fn observe_gates(
        &self,
        owner: &str,
        seen: impl Fn(&str) -> Option<Option<bool>>,
    ) -> BTreeMap<String, bool> {
        let mut all = self.gates.lock().expect("expectations lock");
        let Some(written) = all.get_mut(owner) else {
            return BTreeMap::new();
        };
        written.retain(|pod, (servable, at)| {
            seen(pod).is_some_and(|now| now != Some(*servable))
                && at.elapsed() <= EXPECTATION_TIMEOUT
        });
        let pending = written
            .iter()
            .map(|(pod, (servable, _))| (pod.clone(), *servable))
            .collect();
        if written.is_empty() {
            all.remove(owner);
        }
        pending
    }

    /// Records a drain start (Unix seconds) the API server accepted on child `name`
    /// (docs/rollouts.md#drain-before-delete).
    pub fn expect_drain(&self, owner: &str, name: &str, started: i64) {
        self.drains
            .lock()
            .expect("expectations lock")
            .entry(owner.to_string())
            .or_default()
            .insert(name.to_string(), (started, Instant::now()));
    }

    /// Settles the drain starts written for `owner` against the children observed now
    /// (`seen`: whether a child shows its start, None for a child no longer seen) and returns
    /// those still unobserved: the pass plans as if the cache showed them, so a lagging cache
    /// never starts a second drain in place of the first.
    pub fn observe_drains(
        &self,
        owner: &str,
        seen: impl Fn(&str) -> Option<bool>,
    ) -> BTreeMap<String, i64> {
        let mut all = self.drains.lock().expect("expectations lock");
        let Some(written) = all.get_mut(owner) else {
            return BTreeMap::new();
        };
        written.retain(|name, (_, at)| {
            seen(name) == Some(false) && at.elapsed() <= EXPECTATION_TIMEOUT
        });
        let pending = written
            .iter()
            .map(|(name, (started, _))| (name.clone(), *started))
            .collect();
        if written.is_empty() {
            all.remove(owner);
        }
        pending
    }

    /// Records a create of a `resource` child of `owner`, before it is sent.
    pub fn creating(&self, owner: &str, resource: &str) {
        let mut all = self.deletions.lock().expect("expectations lock");
        let created = &mut all.entry(owner.to_string()).or_default().created;
        if !created.contains(resource) {
            created.insert(resource.to_string());
        }
    }

    /// Records the resource version the API server answered a deletion of a `resource`
    /// child of `owner` with, the owner being deleted.
    pub fn deleted_while_going(&self, owner: &str, resource: &str, version: u64) {
        let mut all = self.deletions.lock().expect("expectations lock");
        let deleted = &mut all.entry(owner.to_string()).or_default().deleted;
        let at = deleted.entry(resource.to_string()).or_default();
        *at = (*at).max(version);
    }

    /// Whether this process sent a create of a `resource` child of `owner`, and the highest
    /// version of such a child's deletion answered while the owner was going.
    pub fn deletion_evidence(&self, owner: &str, resource: &str) -> (bool, Option<u64>) {
        let all = self.deletions.lock().expect("expectations lock");
        all.get(owner).map_or((false, None), |d| {
            (
                d.created.contains(resource),
                d.deleted.get(resource).copied(),
            )
        })
    }

    /// Drops everything recorded for the owner with UID `owner`.
    pub fn forget(&self, owner: &str) {
        self.deletions
            .lock()
            .expect("expectations lock")
            .remove(owner);
        self.children
            .lock()
            .expect("expectations lock")
            .retain(|(o, _), _| o != owner);
        self.gates.lock().expect("expectations lock").remove(owner);
        self.drains.lock().expect("expectations lock").remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_cache_is_believed_only_past_what_this_process_may_have_made_it_miss() {
        let expectations = Expectations::default();
        let settles = |ready: bool, seen: Option<u64>| {
            let (created, deleted) = expectations.deletion_evidence("rs", "pods");
            cache_settles(ready, seen, created, deleted)
        };
        assert!(
            !settles(false, Some(9)),
            "a cache not yet listed shows nothing"
        );
        assert!(
            settles(true, None),
            "nothing created here: the first list holds it all"
        );
        expectations.creating("rs", "podsets");
        assert!(
            settles(true, None),
            "a create of another kind says nothing of pods"
        );
        expectations.creating("rs", "pods");
        assert!(
            !settles(true, Some(100)),
            "a pod created here may be one the cache has not seen"
        );
        expectations.deleted_while_going("rs", "pods", 120);
        expectations.deleted_while_going("rs", "pods", 110);
        assert!(
            !settles(true, Some(119)),
            "the cache is behind the last deletion"
        );
        assert!(
            settles(true, Some(120)),
            "the cache saw the deletion: all before it too"
        );
        assert!(!settles(false, Some(120)));
        expectations.forget("rs");
        assert_eq!(expectations.deletion_evidence("rs", "pods"), (false, None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_written_gate_is_pending_until_observed_its_pod_is_gone_or_it_times_out() {
        let expectations = Expectations::default();
        expectations.expect_gate("owner", "a", true);
        expectations.expect_gate("owner", "b", false);
        expectations.expect_gate("owner", "c", true);
        let cache = |pod: &str| match pod {
            "a" => Some(None),
            "b" => Some(Some(false)),
            _ => None,
        };
        assert_eq!(
            expectations.observe_gates("owner", cache),
            BTreeMap::from([("a".to_string(), true)]),
            "b is observed and c is gone"
        );
        assert!(expectations.observe_gates("other", cache).is_empty());
        tokio::time::advance(EXPECTATION_TIMEOUT + Duration::from_secs(1)).await;
        assert!(expectations.observe_gates("owner", cache).is_empty());
        expectations.expect_gate("owner", "a", true);
        expectations.forget("owner");
        assert!(expectations.observe_gates("owner", cache).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_written_drain_is_pending_until_observed_its_child_is_gone_or_it_times_out() {
        let expectations = Expectations::default();
        for (name, started) in [("a", 10), ("b", 11), ("c", 12)] {
            expectations.expect_drain("owner", name, started);
        }
        let cache = |name: &str| match name {
            "a" => Some(false),
            "b" => Some(true),
            _ => None,
        };
        assert_eq!(
            expectations.observe_drains("owner", cache),
            BTreeMap::from([("a".to_string(), 10)]),
            "b is observed and c is gone"
        );
        tokio::time::advance(EXPECTATION_TIMEOUT + Duration::from_secs(1)).await;
        assert!(expectations.observe_drains("owner", cache).is_empty());
        expectations.expect_drain("owner", "a", 20);
        expectations.forget("owner");
        assert!(expectations.observe_drains("owner", cache).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn issued_changes_are_pending_until_observed_or_until_they_time_out() {
        let expectations = Expectations::default();
        let create = PendingCreate {
            slot: Some(2),
            stable: false,
        };
        expectations.expect_create("owner", "decode", "pod-a", create);
        expectations.expect_delete("owner", "decode", "pod-b");
        let pending = expectations.observe("owner", "decode", [("pod-b".into(), false)]);
        assert_eq!(pending.pending_creates(false), 1);
        assert_eq!(pending.pending_slots(), BTreeSet::from([2]));
        assert!(
            pending.deletes.contains("pod-b"),
            "still seen, not terminating"
        );
        // Observed: the create is there, the delete is under way.
        let pending = expectations.observe(
            "owner",
            "decode",
            [("pod-a".into(), false), ("pod-b".into(), true)],
        );
        assert!(pending.creates.is_empty() && pending.deletes.is_empty());

        // A create never observed is given up after the timeout, not before.
        expectations.expect_create("owner", "decode", "pod-c", create);
        tokio::time::advance(EXPECTATION_TIMEOUT).await;
        let seen: [(String, bool); 0] = [];
        assert_eq!(
            expectations
                .observe("owner", "decode", seen.clone())
                .creates
                .len(),
            1
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(
            expectations
                .observe("owner", "decode", seen)
                .creates
                .is_empty(),
            "re-planned once the timeout passed"
        );

        expectations.expect_delete("owner", "prefill", "pod-d");
        expectations.expect_delete("other", "prefill", "pod-e");
        expectations.forget("owner");
        let seen = [("pod-d".to_string(), false), ("pod-e".to_string(), false)];
        assert!(
            expectations
                .observe("owner", "prefill", seen.clone())
                .deletes
                .is_empty()
        );
        assert_eq!(
            expectations.observe("other", "prefill", seen).deletes.len(),
            1
        );
    }
}
