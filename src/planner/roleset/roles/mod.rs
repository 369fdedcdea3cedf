//! Role-level decisions of the RoleSet controller (docs/rollouts.md#role-order,
//! docs/rollouts.md#invariants): given each role's spec, its observed pods and the
//! controller's pending expectations, which pods to create and which to delete — for stateless
//! roles and for stateful roles (one pod per slot `0..replicas`) updated by `Recreate`, under
//! `Sequential`, `Parallel` or `Interleave` role ordering, holding back a `partition` of stable
//! pods (docs/rollouts.md#the-pooled-canary-the-role-rollout-block).
//!
//! Pure: the controller observes, calls [`plan`], and carries the actions out.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use super::in_place::PendingReason;
use crate::api::RoleSetUpdateStrategy;
use crate::api::budget::Fenceposts;
use crate::planner::MAX_CREATES_PER_PASS;
use crate::planner::pairing::{Progress, lockstep_caps};

/// One observed pod of a role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    /// Pod name.
    pub name: String,
    /// Its `role-template-hash` label.
    pub hash: String,
    /// Not Succeeded or Failed.
    pub running: bool,
    /// `deletionTimestamp` set.
    pub terminating: bool,
    /// Condition Ready is True (what `readyReplicas` counts).
    pub ready: bool,
    /// Ready for the RoleSet's `minReadySeconds`: what every decision counts
    /// (docs/rollouts.md#minreadyseconds). Equal to `ready` when that is 0.
    pub available: bool,
    /// Ready, not yet available: the Unix second it will be.
    pub available_at: Option<i64>,
    /// It carries the serving gate (docs/rollouts.md#the-serving-gate): it can leave traffic
    /// without being deleted.
    pub gated: bool,
    /// Creation time (Unix seconds), to delete newer pods first.
    pub created: i64,
    /// Slot (`role-replica-index`) of a stateful role's pod; None when absent or unparsable.
    pub slot: Option<u32>,
    /// Hash an in-place update of this pod is heading to.
    pub in_place_target: Option<String>,
    /// Why that update has not completed (None: it has, or none runs).
    pub in_place_pending: Option<PendingReason>,
    /// Its drain (docs/rollouts.md#drain-before-delete), while it drains: it is not available,
    /// and a role that removes a child removes a draining one first.
    pub draining: Option<Draining>,
}

/// A child being drained (docs/rollouts.md#drain-before-delete), as observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Draining {
    /// When its drain started (Unix seconds; its annotation, or written and not yet seen).
    pub started: i64,
    /// Since when it has not been Ready (its Ready condition's transition time), while not
    /// Ready: it left the EndpointSlices then.
    pub out_since: Option<i64>,
    /// Its requests in flight as last noted on it (what `squall status` shows).
    pub noted: Option<u64>,
}

/// What the planner knows about one role.
#[derive(Clone, Debug, Default)]
pub struct RoleInput {
    /// Role name (for logs).
    pub name: String,
    /// Desired pods.
    pub desired: u32,
    /// The role's budgets, resolved against `desired`.
    pub budgets: Fenceposts,
    /// Hash of the role's current pod template.
    pub target_hash: String,
    /// Pods the watch cache shows.
    pub pods: Vec<PodView>,
    /// Stateful role: pods live in slots `0..desired`, one each (two during a surge).
    pub stateful: bool,
    /// Stateless role: creates issued but not yet observed (they become pods on the target
    /// template).
    pub pending_creates: u32,
    /// Stateless role: creates of stable pods issued but not yet observed.
    pub pending_stable_creates: u32,
    /// Pods that stay on the stable template
    /// (docs/rollouts.md#the-pooled-canary-the-role-rollout-block), at most `desired`. Stateful
    /// roles keep slots `< partition` stable; stateless roles keep any `partition` pods.
    pub partition: u32,
    /// Hash of the stable template when it is known (the role's `stableRevision` was read):
    /// stable pods are then exactly the pods on it, and lost ones are recreated from it.
    /// Without it, any existing pod inside the partition stays and replacements use the target.
    pub stable_hash: Option<String>,
    /// Stateful role: slots of creates issued but not yet observed.
    pub pending_slots: BTreeSet<u32>,
    /// Pods whose deletion was issued but is not yet observed.
    pub pending_deletes: BTreeSet<String>,
    /// `InPlaceIfPossible` on a plain-pod role: outdated pods are updated in place when every
    /// one of them can be.
    pub in_place: bool,
    /// Outdated pods that cannot be updated in place, with the reason.
    pub ineligible: BTreeMap<String, String>,
    /// An aborted pooled canary's pods are kept warm now (its `rollout.warmUntil` is ahead
    /// and its partition keeps every pod stable): gated pods on the target template stay,
    /// out of traffic, neither counted nor deleted, but holding room under `maxSurge`.
    pub warm: bool,
}

/// What to do for one role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleAction {
    /// New pods to create on the target template (stateless roles).
    pub create: u32,
    /// New pods to create on the stable template (stateless roles).
    pub create_stable: u32,
    /// Slots to create a pod on the target template for (stateful roles).
    pub create_slots: Vec<u32>,
    /// Pods to delete.
    pub delete: Vec<String>,
    /// Pods whose in-place update starts now.
    pub in_place_start: Vec<String>,
    /// Pods whose in-place update has completed.
    pub in_place_complete: Vec<String>,
    /// Pods whose in-place update is still pending, with the reason.
    pub in_place_pending: Vec<(String, PendingReason)>,
    /// Why an in-place role recreates its pods instead (for the `InPlaceFallback` event).
    pub fallback: Option<String>,
}

impl RoleAction {
    /// True when nothing is to be done.
    pub fn is_empty(&self) -> bool {
        self.create == 0
            && self.create_stable == 0
            && self.create_slots.is_empty()
            && self.delete.is_empty()
            && self.in_place_start.is_empty()
            && self.in_place_complete.is_empty()
    }

    /// Pods this action creates.
    pub fn creates(&self) -> u32 {
        self.create + self.create_stable + self.create_slots.len() as u32
    }
}

/// Counts derived from a role's observations: the one way pods are counted, for decisions
/// and for the role's status alike.
pub(super) struct Counts<'a> {
    /// Running, not terminating, not being deleted by us.
    pub(super) active: Vec<&'a PodView>,
    /// Terminating (or being deleted by us) and not yet gone.
    terminating: u32,
    /// Finished pods still present, to clean up.
    finished: Vec<&'a PodView>,
    /// Active pods off the target template that the partition keeps.
    kept: BTreeSet<&'a str>,
    /// Pods kept warm (see [`RoleInput::warm`]).
    pub(super) warm: Vec<&'a PodView>,
}

impl RoleInput {
    pub(super) fn counts(&self) -> Counts<'_> {
        let mut counts = Counts {
            active: Vec::new(),
            terminating: 0,
            finished: Vec::new(),
            kept: BTreeSet::new(),
            warm: Vec::new(),
        };
        // Stateful slots and gangs take their names back at once: only a stateless role's
        // pods can wait beside their replacements.
        let warm = self.warm && !self.stateful && self.partition >= self.desired;
        for pod in &self.pods {
            if pod.terminating || self.pending_deletes.contains(&pod.name) {
                counts.terminating += 1;
            } else if warm && pod.running && pod.gated && pod.hash == self.target_hash {
                counts.warm.push(pod);
            } else if pod.running {
                counts.active.push(pod);
            } else {
                counts.finished.push(pod);
            }
        }
        counts.kept = self.kept_stable(&counts.active);
        counts
    }

    /// Whether the role keeps its child `name` as it is: active, not outdated, and the role
    /// is not above its replicas (a draining child it keeps serves again).
    pub fn keeps(&self, name: &str) -> bool {
        let counts = self.counts();
        self.active_total(&counts) <= self.desired
            && counts
                .active
                .iter()
                .any(|p| p.name == name && !self.outdated(p, &counts))
    }

    /// The pods kept warm, out of traffic (see [`RoleInput::warm`]).
    pub fn warm_pods(&self) -> Vec<String> {
        self.counts().warm.iter().map(|p| p.name.clone()).collect()
    }

    /// Whether a pod off the target template may stay as a stable pod.
    fn stable_candidate(&self, pod: &PodView) -> bool {
        pod.hash != self.target_hash && self.stable_hash.as_ref().is_none_or(|s| &pod.hash == s)
    }

    /// The stable pods the partition keeps. Stateful: candidates in slots `< partition`.
    /// Stateless: up to `partition` candidates (less the stable creates in flight), Ready and
    /// older first.
    fn kept_stable<'a>(&self, active: &[&'a PodView]) -> BTreeSet<&'a str> {
        let mut candidates: Vec<&PodView> = active
            .iter()
            .copied()
            .filter(|p| self.stable_candidate(p))
            .collect();
        if self.stateful {
            return candidates
                .into_iter()
                .filter(|p| p.slot.is_some_and(|s| s < self.partition))
                .map(|p| p.name.as_str())
                .collect();
        }
        candidates.sort_by_key(|p| (!p.available, p.created, p.name.clone()));
        let room = self.partition.saturating_sub(self.pending_stable_creates) as usize;
        candidates
            .into_iter()
            .take(room)
            .map(|p| p.name.as_str())
            .collect()
    }

    /// A pod to replace: off the target template and not kept by the partition.
    fn outdated(&self, pod: &PodView, counts: &Counts<'_>) -> bool {
        pod.hash != self.target_hash && !counts.kept.contains(pod.name.as_str())
    }

    /// Stable pods wanted (stateless): the partition when the stable template is known, else
    /// only the stable pods that still exist.
    fn want_stable(&self, counts: &Counts<'_>) -> u32 {
        let partition = self.partition.min(self.desired);
        if self.stable_hash.is_some() {
            partition
        } else {
            partition.min(counts.kept.len() as u32 + self.pending_stable_creates)
        }
    }

    /// Which side has more active pods than it wants (true: the target template's, false:
    /// the stable ones the partition keeps), when one does.
    fn over_share(&self, counts: &Counts<'_>) -> Option<bool> {
        let on_target = counts
            .active
            .iter()
            .filter(|p| p.hash == self.target_hash)
            .count() as u32;
        if on_target > self.want_target(counts) {
            Some(true)
        } else if counts.kept.len() as u32 > self.want_stable(counts) {
            Some(false)
        } else {
            None
        }
    }

    /// Pods wanted on the target template (stateless).
    fn want_target(&self, counts: &Counts<'_>) -> u32 {
        self.desired - self.want_stable(counts)
    }

    /// Creates issued and not yet observed.
    fn pending(&self) -> u32 {
        if self.stateful {
            self.pending_slots.len() as u32
        } else {
            self.pending_creates + self.pending_stable_creates
        }
    }

    /// Active pods, counting creates not yet observed.
    fn active_total(&self, counts: &Counts<'_>) -> u32 {
        counts.active.len() as u32 + self.pending()
    }

    fn available(&self, counts: &Counts<'_>) -> u32 {
        counts.active.iter().filter(|p| p.available).count() as u32
    }

    /// Pods on the target template, counting target creates in flight.
    fn updated(&self, counts: &Counts<'_>) -> u32 {
        let pending = if self.stateful {
            self.pending_slots
                .iter()
                .filter(|&&s| s >= self.partition || self.stable_hash.is_none())
                .count() as u32
        } else {
            self.pending_creates
        };
        counts
            .active
            .iter()
            .filter(|p| p.hash == self.target_hash)
            .count() as u32
            + pending
    }

    /// Room under `desired + maxSurge`, counting terminating and warm pods (they still hold
    /// resources), and at most [`MAX_CREATES_PER_PASS`]: a role of thousands fills up over
    /// several passes.
    fn create_room(&self, counts: &Counts<'_>) -> u32 {
        let holding = self.active_total(counts) + counts.terminating + counts.warm.len() as u32;
        (self.desired + self.budgets.max_surge)
            .saturating_sub(holding)
            .min(MAX_CREATES_PER_PASS)
    }

    /// Scale: clean up finished pods, then move the number of active pods toward `desired`
    /// within the budgets.
    pub fn scale(&self) -> RoleAction {
        if self.stateful {
            return self.scale_slots();
        }
        let counts = self.counts();
        let mut action = RoleAction {
            delete: counts.finished.iter().map(|p| p.name.clone()).collect(),
            ..RoleAction::default()
        };
        let active = self.active_total(&counts);
        if active > self.desired {
            let mut surplus = active - self.desired;
            let min_available = self.desired.saturating_sub(self.budgets.max_unavailable);
            let mut ready = self.available(&counts);
            let mut candidates = counts.active.clone();
            // Outdated pods first, then the side over its share (the target's pods of an
            // aborted pooled canary, whoever was created last), not-available ones, the newest.
            let over = self.over_share(&counts);
            candidates.sort_by_key(|p| {
                let side = p.hash == self.target_hash;
                (
                    p.draining.is_none(),
                    !self.outdated(p, &counts),
                    over != Some(side),
                    p.available,
                    Reverse(p.created),
                )
            });
            for pod in candidates {
                if surplus == 0 {
                    break;
                }
                if pod.available {
                    if ready <= min_available {
                        break;
                    }
                    ready -= 1;
                }
                action.delete.push(pod.name.clone());
                surplus -= 1;
            }
        } else if active < self.desired {
            let missing = (self.desired - active).min(self.create_room(&counts));
            let stable = counts.kept.len() as u32 + self.pending_stable_creates;
            action.create_stable = if self.stable_hash.is_some() {
                missing.min(self.want_stable(&counts).saturating_sub(stable))
            } else {
                0
            };
            action.create = missing - action.create_stable;
        }
        action
    }

    /// Whether `action` deletes a pod on another template than the target: a scale that trims
    /// a rollout's surplus of old pods.
    fn trims_outdated(&self, action: &RoleAction) -> bool {
        self.pods
            .iter()
            .any(|p| p.hash != self.target_hash && action.delete.contains(&p.name))
    }

    /// Rollout (`Recreate`): replace pods on an old template, deleting not-Ready ones at
    /// once and Ready ones only while more than `desired - maxUnavailable` stay Ready, and
    /// creating within `desired + maxSurge`.
    pub fn rollout(&self) -> RoleAction {
        if self.in_place {
            match self.rollout_in_place(None) {
                Ok(action) => return action,
                Err(reason) => {
                    let mut action = self.rollout_recreate();
                    action.fallback = Some(reason);
                    return action;
                }
            }
        }
        self.rollout_recreate()
    }

    /// Rollout with at most `cap` pods (slots, for stateful roles) on the target template,
    /// counting in-place moves under way: one role's share of a pairing group's lock-step
    /// batch (docs/rollouts.md#pairing).
    pub fn rollout_capped(&self, cap: u32) -> RoleAction {
        if self.in_place {
            match self.rollout_in_place(Some(cap)) {
                Ok(action) => return action,
                Err(reason) => {
                    let mut action = self.rollout_upto(cap);
                    action.fallback = Some(reason);
                    return action;
                }
            }
        }
        self.rollout_upto(cap)
    }

    /// A role's progress in a pairing group's lock-step: its Ready pods on the target
    /// template, of the share it moves (`want_target`); for stateful roles, slots.
    pub fn progress(&self) -> (u32, u32) {
        let counts = self.counts();
        if self.stateful {
            // Slots count as moved once they hold what they should, stable ones included.
            let (slots, _) = self.slots(&counts);
            return (
                self.slot_progress(&counts, &slots).updated_ready,
                self.desired,
            );
        }
        let updated_ready = counts
            .active
            .iter()
            .filter(|p| p.available && p.hash == self.target_hash)
            .count() as u32;
        (updated_ready, self.want_target(&counts))
    }

    /// `InPlaceIfPossible` (docs/rollouts.md#in-place-image-updates), with the delete budget B of
    /// `Recreate` (`Ready + maxUnavailable - desired`): settle updates started earlier (a pending
    /// one that is Ready holds a unit of B), then start updates of outdated pods — not-Ready ones
    /// at once, Ready ones while B lasts. Err (the reason) when an outdated pod that is not
    /// already being updated cannot be: the role recreates instead.
    fn rollout_in_place(&self, cap: Option<u32>) -> Result<RoleAction, String> {
        let counts = self.counts();
        let mut outdated: Vec<&PodView> = counts
            .active
            .iter()
            .copied()
            .filter(|p| self.outdated(p, &counts))
            .collect();
        outdated.sort_by_key(|p| (p.draining.is_none(), p.available, Reverse(p.created)));
        let (running, candidates): (Vec<&PodView>, Vec<&PodView>) = outdated
            .into_iter()
            .partition(|p| p.in_place_target.as_ref() == Some(&self.target_hash));
        if let Some(pod) = candidates
            .iter()
            .find(|p| self.ineligible.contains_key(&p.name))
        {
            return Err(format!("{}: {}", pod.name, self.ineligible[&pod.name]));
        }
        let mut budget =
            (self.available(&counts) + self.budgets.max_unavailable).saturating_sub(self.desired);
        let on_target = counts
            .active
            .iter()
            .filter(|p| p.hash == self.target_hash)
            .count() as u32;
        let mut room = cap.map_or(u32::MAX, |cap| {
            cap.saturating_sub(on_target + running.len() as u32)
        });
        let mut action = RoleAction::default();
        for pod in running {
            match pod.in_place_pending {
                Some(reason) => {
                    if pod.available {
                        budget = budget.saturating_sub(1);
                    }
                    action.in_place_pending.push((pod.name.clone(), reason));
                }
                None => action.in_place_complete.push(pod.name.clone()),
            }
        }
        for pod in candidates {
            if room == 0 {
                break;
            }
            if pod.available {
                if budget == 0 {
                    break;
                }
                budget -= 1;
            }
            room -= 1;
            action.in_place_start.push(pod.name.clone());
        }
        Ok(action)
    }

    /// `Recreate`: replace outdated pods by deleting and creating them.
    fn rollout_recreate(&self) -> RoleAction {
        if self.stateful {
            return self.rollout_slots();
        }
        let counts = self.counts();
        let ready = self.available(&counts);
        let mut delete_budget = (ready + self.budgets.max_unavailable).saturating_sub(self.desired);
        let mut delete = self.outdated_to_delete(&counts, &mut delete_budget);
        let want_target = self.want_target(&counts);
        delete.extend(self.surplus_target_to_delete(&counts, want_target, delete_budget));
        let mut action = RoleAction {
            delete,
            ..RoleAction::default()
        };
        action.create = self
            .create_room(&counts)
            .min(want_target.saturating_sub(self.updated(&counts)));
        action
    }

    /// Target pods above the target share when the partition grew and the stable template is
    /// known (their places are refilled with stable pods by the next scale): not-Ready first,
    /// then Ready ones while `budget` lasts.
    fn surplus_target_to_delete(
        &self,
        counts: &Counts<'_>,
        want_target: u32,
        mut budget: u32,
    ) -> Vec<String> {
        if self.stable_hash.is_none() {
            return Vec::new();
        }
        let mut target: Vec<&PodView> = counts
            .active
            .iter()
            .copied()
            .filter(|p| p.hash == self.target_hash)
            .collect();
        let surplus = (target.len() as u32 + self.pending_creates).saturating_sub(want_target);
        target.sort_by_key(|p| (p.draining.is_none(), p.available, Reverse(p.created)));
        let mut delete = Vec::new();
        for pod in target.into_iter().take(surplus as usize) {
            if pod.available {
                if budget == 0 {
                    break;
                }
                budget -= 1;
            }
            delete.push(pod.name.clone());
        }
        delete
    }

    /// Pods per Interleave step (and per pairing batch): `max(1, maxSurge + maxUnavailable)`.
    fn step_size(&self) -> u32 {
        (self.budgets.max_surge + self.budgets.max_unavailable).max(1)
    }

    /// Interleave progress of a stateless role (AIBrix's `CheckCurrentStep`,
    /// docs/rollouts.md#role-order): `(all ready, current step)`, steps counted from 1. Kept stable
    /// pods are outside the steps: the role moves `want_target` pods.
    pub fn current_step(&self) -> (bool, u32) {
        if self.stateful {
            return self.current_step_slots();
        }
        let counts = self.counts();
        let size = self.step_size();
        let want_target = self.want_target(&counts);
        let updated_ready = counts
            .active
            .iter()
            .filter(|p| p.available && p.hash == self.target_hash)
            .count() as u32;
        let updated_active = self.updated(&counts);
        let outdated_active = counts
            .active
            .iter()
            .filter(|p| self.outdated(p, &counts))
            .count() as u32;
        let settled = counts.finished.is_empty() && counts.active.iter().all(|p| p.available);
        let mut step = updated_ready.saturating_sub(1) / size + 1;
        if (settled && updated_ready == size * step)
            || updated_active > size * step
            || outdated_active < want_target.saturating_sub(size * step)
        {
            step += 1;
        }
        (
            settled && outdated_active == 0 && updated_ready >= want_target,
            step,
        )
    }

    /// Interleave rollout up to `step` batches of updated pods (slots, for stateful roles).
    pub fn rollout_by_step(&self, step: u32) -> RoleAction {
        self.rollout_upto(self.step_size().saturating_mul(step))
    }

    /// `Recreate` rollout up to `expected` pods (slots) on the target template.
    fn rollout_upto(&self, expected: u32) -> RoleAction {
        if self.stateful {
            return self.rollout_upto_slots(expected);
        }
        let counts = self.counts();
        let want_target = self.want_target(&counts);
        let expected = expected.min(want_target);
        let updated = self.updated(&counts);
        if updated >= expected {
            return RoleAction::default();
        }
        let outdated = counts
            .active
            .iter()
            .filter(|p| self.outdated(p, &counts))
            .count() as u32;
        let ready = self.available(&counts);
        let mut budget = (outdated + expected)
            .saturating_sub(want_target)
            .min((ready + self.budgets.max_unavailable).saturating_sub(self.desired));
        let mut action = RoleAction {
            delete: self.outdated_to_delete(&counts, &mut budget),
            ..RoleAction::default()
        };
        action.create = self.create_room(&counts).min(expected - updated);
        action
    }

    /// Outdated pods to delete: every not-Ready one, and Ready ones (not-Ready first, then
    /// newest first) while `budget` lasts (what is left of it stays in `budget`).
    fn outdated_to_delete(&self, counts: &Counts<'_>, budget: &mut u32) -> Vec<String> {
        let mut outdated: Vec<&PodView> = counts
            .active
            .iter()
            .copied()
            .filter(|p| self.outdated(p, counts))
            .collect();
        outdated.sort_by_key(|p| (p.draining.is_none(), p.available, Reverse(p.created)));
        let mut delete = Vec::new();
        for pod in outdated {
            if pod.available {
                if *budget == 0 {
                    break;
                }
                *budget -= 1;
            }
            delete.push(pod.name.clone());
        }
        delete
    }

    /// Every pod is where it belongs — on the target template or kept stable by the partition,
    /// in the wanted shares — active and available, and nothing is pending (and, for stateful
    /// roles, every slot holds exactly one pod).
    pub fn all_available(&self) -> bool {
        let counts = self.counts();
        let one_per_slot = !self.stateful || {
            let slots: BTreeSet<Option<u32>> = counts.active.iter().map(|p| p.slot).collect();
            slots.len() == counts.active.len()
                && slots.iter().all(|s| s.is_some_and(|s| s < self.desired))
        };
        let shares = self.stateful
            || self.stable_hash.is_none()
            || counts.kept.len() as u32 == self.want_stable(&counts);
        one_per_slot
            && shares
            && self.pending() == 0
            && counts.terminating == 0
            && counts.finished.is_empty()
            && counts.active.len() as u32 == self.desired
            && counts
                .active
                .iter()
                .all(|p| p.available && self.slot_accepts(p, &counts))
    }

    /// Whether a pod may stay where it is: kept by the partition, or on the target template —
    /// except, for a stateful role with a known stable template, inside the partition.
    fn slot_accepts(&self, pod: &PodView, counts: &Counts<'_>) -> bool {
        if counts.kept.contains(pod.name.as_str()) {
            return true;
        }
        pod.hash == self.target_hash && !(self.stateful && self.stable_slot(pod.slot))
    }

    /// Target pods beyond the target share while the stable template is known: the
    /// partition grew (an abort sends the role back to stable).
    pub fn returning_to_stable(&self) -> bool {
        if self.stable_hash.is_none() || self.partition == 0 {
            return false;
        }
        let counts = self.counts();
        let target = counts
            .active
            .iter()
            .filter(|p| p.hash == self.target_hash)
            .count() as u32;
        target
            > self
                .desired
                .saturating_sub(self.partition.min(self.desired))
    }

    /// A stateful slot whose pod is created from the stable template.
    pub fn stable_slot(&self, slot: Option<u32>) -> bool {
        self.stable_hash.is_some() && slot.is_some_and(|s| s < self.partition)
    }
}

impl RoleInput {
    /// Active pods by occupied slot (only slots that hold a pod: nothing here grows with
    /// `desired`); pods without a valid slot are returned separately.
    fn slots<'a>(&self, counts: &Counts<'a>) -> (Slots<'a>, Vec<&'a PodView>) {
        let mut slots = Slots::new();
        let mut invalid = Vec::new();
        for pod in &counts.active {
            match pod.slot.filter(|s| *s < self.desired) {
                Some(slot) => slots.entry(slot).or_default().push(*pod),
                None => invalid.push(*pod),
            }
        }
        (slots, invalid)
    }

    /// Up to `n` slots in `0..desired` with no pod and no create in flight, lowest first.
    /// The walk stops at the last empty slot, so it visits at most the occupied and pending
    /// slots plus `n`.
    fn empty_slots(&self, slots: &Slots<'_>, n: u32) -> Vec<u32> {
        let pending_empty = self
            .pending_slots
            .iter()
            .filter(|s| **s < self.desired && !slots.contains_key(s))
            .count() as u32;
        let empty = self.desired - slots.len() as u32 - pending_empty;
        (0..self.desired)
            .filter(|s| !slots.contains_key(s) && !self.pending_slots.contains(s))
            .take(n.min(empty) as usize)
            .collect()
    }

    /// Stateful scale (docs/rollouts.md#role-order): remove finished pods and pods outside the
    /// slots (Ready ones only while more than `desired - maxUnavailable` stay Ready), fill
    /// empty slots within `desired + maxSurge`, and settle slots holding two pods (a finished
    /// surge keeps the updated Ready pod).
    fn scale_slots(&self) -> RoleAction {
        let counts = self.counts();
        let (slots, mut invalid) = self.slots(&counts);
        let mut action = RoleAction::default();
        action
            .delete
            .extend(counts.finished.iter().map(|p| p.name.clone()));
        // Availability of a stateful role counts slots: a second pod in a slot adds none.
        let mut ready = slots
            .values()
            .filter(|pods| pods.iter().any(|p| p.available))
            .count() as u32
            + invalid.iter().filter(|p| p.available).count() as u32;
        let min_available = self.desired.saturating_sub(self.budgets.max_unavailable);
        invalid.sort_by_key(|p| (p.draining.is_none(), p.available, Reverse(p.created)));
        for pod in invalid {
            if pod.available {
                if ready <= min_available {
                    break;
                }
                ready -= 1;
            }
            action.delete.push(pod.name.clone());
        }
        action.create_slots = self.empty_slots(&slots, self.create_room(&counts));
        for pods in slots.values() {
            if pods.len() < 2 {
                continue;
            }
            let updated = |p: &&&PodView| self.slot_accepts(p, &counts);
            let keep_updated_ready = pods
                .iter()
                .filter(|p| updated(p) && p.available)
                .min_by_key(|p| p.name.clone());
            for pod in pods {
                let remove = match keep_updated_ready {
                    Some(keep) => pod.name != keep.name,
                    None => !pod.available && !updated(&pod),
                };
                if remove {
                    action.delete.push(pod.name.clone());
                }
            }
        }
        action
    }

    /// Stateful `Recreate` rollout: a slot whose only pod is outdated is replaced — deleted
    /// when not Ready or within the unavailability budget (the slot is refilled by the next
    /// scale), or else surged with a second pod for the same slot within `maxSurge`.
    fn rollout_slots(&self) -> RoleAction {
        let counts = self.counts();
        let (slots, _) = self.slots(&counts);
        let progress = self.slot_progress(&counts, &slots);
        let delete_budget =
            (progress.ready + self.budgets.max_unavailable).saturating_sub(self.desired);
        self.replace_slots(&counts, &slots, delete_budget, self.create_room(&counts))
    }

    fn replace_slots(
        &self,
        counts: &Counts<'_>,
        slots: &Slots<'_>,
        mut delete_budget: u32,
        mut create_budget: u32,
    ) -> RoleAction {
        let mut action = RoleAction::default();
        for (&slot, pods) in slots {
            let [pod] = pods.as_slice() else { continue };
            if self.slot_accepts(pod, counts) || self.pending_slots.contains(&slot) {
                continue;
            }
            if !pod.available {
                action.delete.push(pod.name.clone());
            } else if delete_budget > 0 {
                delete_budget -= 1;
                action.delete.push(pod.name.clone());
            } else if create_budget > 0 {
                create_budget -= 1;
                action.create_slots.push(slot);
            }
        }
        action
    }

    /// Slot counts of a stateful role (docs/rollouts.md#role-order).
    fn slot_progress(&self, counts: &Counts<'_>, slots: &Slots<'_>) -> SlotProgress {
        let accepted = |p: &&PodView| self.slot_accepts(p, counts);
        let mut progress = SlotProgress::default();
        // An empty slot with a create in flight counts as updated.
        progress.updated += self
            .pending_slots
            .iter()
            .filter(|s| **s < self.desired && !slots.contains_key(s))
            .count() as u32;
        for (slot, pods) in slots {
            let pending = self.pending_slots.contains(slot);
            progress.ready += u32::from(pods.iter().any(|p| p.available));
            if pods.iter().any(accepted) || pending {
                progress.updated += 1;
            } else if !pods.is_empty() {
                progress.outdated += 1;
            }
            if let [pod] = pods.as_slice() {
                progress.updated_ready += u32::from(pod.available && accepted(pod));
            }
        }
        progress
    }

    /// Interleave progress of a stateful role: the stateless formula over slots.
    fn current_step_slots(&self) -> (bool, u32) {
        let counts = self.counts();
        let (slots, invalid) = self.slots(&counts);
        let progress = self.slot_progress(&counts, &slots);
        let size = self.step_size();
        let settled = invalid.is_empty()
            && counts.finished.is_empty()
            && counts.active.iter().all(|p| p.available);
        let mut step = progress.updated_ready.saturating_sub(1) / size + 1;
        if (settled && progress.updated_ready == size * step)
            || progress.updated > size * step
            || progress.outdated < self.desired.saturating_sub(size * step)
        {
            step += 1;
        }
        (self.all_available(), step)
    }

    /// `Recreate` rollout of a stateful role up to `expected` updated slots.
    fn rollout_upto_slots(&self, expected: u32) -> RoleAction {
        let counts = self.counts();
        let (slots, _) = self.slots(&counts);
        let progress = self.slot_progress(&counts, &slots);
        let expected = expected.min(self.desired);
        let create_budget = self
            .create_room(&counts)
            .min(expected.saturating_sub(progress.updated));
        let delete_budget = (progress.ready + self.budgets.max_unavailable)
            .saturating_sub(self.desired)
            .min((progress.outdated + expected).saturating_sub(self.desired));
        if progress.updated >= expected {
            return RoleAction::default();
        }
        self.replace_slots(&counts, &slots, delete_budget, create_budget)
    }
}

/// Occupied slots of a stateful role and their active pods (two during a surge).
type Slots<'a> = BTreeMap<u32, Vec<&'a PodView>>;

/// Slot counts of a stateful role.
#[derive(Default)]
struct SlotProgress {
    /// Slots with a Ready pod.
    ready: u32,
    /// Slots with a pod where it belongs (or a create in flight).
    updated: u32,
    /// Slots holding exactly one pod, Ready and where it belongs.
    updated_ready: u32,
    /// Non-empty slots with no pod where it belongs.
    outdated: u32,
}

/// Children of a role that is no longer in the spec (or carry no role at all): every one
/// not already going is deleted. They belong to nothing the spec asks for — left running they
/// would hold their GPUs, unseen in the status.
pub fn retire(children: &[PodView]) -> Vec<String> {
    children
        .iter()
        .filter(|c| !c.terminating)
        .map(|c| c.name.clone())
        .collect()
}

/// Roles in upgrade order (docs/admission.md#defaults): ascending `upgradeOrder` (absent = 0), ties
/// in spec order. Returns indexes into `orders`.
pub fn upgrade_sequence(orders: &[i32]) -> Vec<usize> {
    let mut sequence: Vec<usize> = (0..orders.len()).collect();
    sequence.sort_by_key(|&i| orders[i]); // stable
    sequence
}

/// One pass over every role: actions aligned with `roles` (spec order).
///
/// Scaling comes first: if any role scales, only scaling happens this pass. Then
/// `Sequential` rolls the first unfinished role in `sequence` (and touches no other);
/// `Parallel` rolls every role; `Interleave` moves roles in lock-step batches of
/// `max(1, maxSurge + maxUnavailable)` pods (slots, for stateful roles), no role running
/// ahead of the slowest one. The roles of a pairing group (`groups`, indexes into `roles`)
/// move as one, in lock-step batches of the same share of each (docs/rollouts.md#pairing),
/// whatever the strategy says: under `Sequential` the group takes the place of its first role.
pub fn plan(
    strategy: RoleSetUpdateStrategy,
    roles: &[RoleInput],
    sequence: &[usize],
    groups: &[Vec<usize>],
) -> Vec<RoleAction> {
    let mut scale: Vec<RoleAction> = roles.iter().map(RoleInput::scale).collect();
    if scale.iter().any(|a| !a.is_empty()) {
        // A paired role's surplus of old pods may wait for its partners' old pods (pairing
        // keeps a key's last pod while a partner role needs it to serve): the group's other
        // roles keep moving meanwhile, or neither would ever go.
        for group in groups {
            if group.iter().any(|&i| roles[i].trims_outdated(&scale[i])) {
                for (&i, action) in group.iter().zip(lockstep(roles, group)) {
                    if scale[i].is_empty() {
                        scale[i] = action;
                    }
                }
            }
        }
        return scale;
    }
    let group_of = |i: usize| groups.iter().find(|g| g.contains(&i));
    let mut actions = vec![RoleAction::default(); roles.len()];
    match strategy {
        RoleSetUpdateStrategy::Sequential => {
            // Roles returning to their stable template (a pooled canary's abort) go back in
            // reverse upgrade order (docs/rollouts.md#state--event-table).
            let returning = roles.iter().any(RoleInput::returning_to_stable);
            let order: Vec<usize> = if returning {
                sequence.iter().rev().copied().collect()
            } else {
                sequence.to_vec()
            };
            let mut done = BTreeSet::new();
            for i in order {
                let unit: Vec<usize> = match group_of(i) {
                    Some(group) => group.clone(),
                    None => vec![i],
                };
                if !done.insert(unit[0]) {
                    continue;
                }
                let unit_actions = lockstep(roles, &unit);
                let moving = unit_actions.iter().any(|a| !a.is_empty());
                for (&i, action) in unit.iter().zip(unit_actions) {
                    actions[i] = action;
                }
                if moving || unit.iter().any(|&i| !roles[i].all_available()) {
                    break;
                }
            }
        }
        RoleSetUpdateStrategy::Parallel => {
            for (i, role) in roles.iter().enumerate() {
                if group_of(i).is_none() {
                    actions[i] = role.rollout();
                }
            }
        }
        RoleSetUpdateStrategy::Interleave => {
            // Roles advance in lock-step batches (of pods, or of slots for stateful and
            // multi-node roles); in-place roles roll as under Parallel.
            let steps: Vec<Option<(bool, u32)>> = roles
                .iter()
                .enumerate()
                .map(|(i, r)| (!r.in_place && group_of(i).is_none()).then(|| r.current_step()))
                .collect();
            let global = steps
                .iter()
                .flatten()
                .filter(|(ready, _)| !ready)
                .map(|(_, step)| *step)
                .min();
            for (i, role) in roles.iter().enumerate() {
                if group_of(i).is_some() {
                    continue;
                }
                actions[i] = match (steps[i], global) {
                    (None, _) => role.rollout(),
                    (Some((false, step)), Some(g)) if step <= g => role.rollout_by_step(g),
                    _ => RoleAction::default(),
                };
            }
        }
    }
    if strategy != RoleSetUpdateStrategy::Sequential {
        for group in groups {
            for (&i, action) in group.iter().zip(lockstep(roles, group)) {
                actions[i] = action;
            }
        }
    }
    actions
}

/// The actions of the roles `unit` names: one role's rollout, or a pairing group's lock-step
/// batch — each role capped at its share of the batch the slowest role is in. A group
/// returning to its stable template (an abort) goes back without caps: the stable key's pods
/// are what the partition keeps.
fn lockstep(roles: &[RoleInput], unit: &[usize]) -> Vec<RoleAction> {
    if let [i] = unit {
        return vec![roles[*i].rollout()];
    }
    if unit.iter().any(|&i| roles[i].returning_to_stable()) {
        return unit.iter().map(|&i| roles[i].rollout()).collect();
    }
    let progress: Vec<Progress> = unit
        .iter()
        .map(|&i| {
            let (moved, share) = roles[i].progress();
            Progress {
                moved,
                share,
                batch: roles[i].step_size(),
            }
        })
        .collect();
    lockstep_caps(&progress)
        .into_iter()
        .zip(unit)
        .map(|(cap, &i)| roles[i].rollout_capped(cap))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::budget::{Budget, resolve_fenceposts};
    use proptest::prelude::*;

    fn pod(name: &str, hash: &str, ready: bool) -> PodView {
        PodView {
            name: name.into(),
            hash: hash.into(),
            running: true,
            terminating: false,
            ready,
            available: ready,
            available_at: None,
            gated: false,
            created: 0,
            slot: None,
            in_place_target: None,
            in_place_pending: None,
            draining: None,
        }
    }

    fn role(desired: u32, surge: u32, unavailable: u32, pods: Vec<PodView>) -> RoleInput {
        RoleInput {
            name: "r".into(),
            desired,
            budgets: resolve_fenceposts(
                Some(Budget::Count(surge)),
                Some(Budget::Count(unavailable)),
                desired,
            ),
            target_hash: "new".into(),
            pods,
            stateful: false,
            pending_creates: 0,
            pending_stable_creates: 0,
            partition: 0,
            stable_hash: None,
            pending_slots: BTreeSet::new(),
            pending_deletes: BTreeSet::new(),
            in_place: false,
            ineligible: BTreeMap::new(),
            warm: false,
        }
    }

    /// Hostile input (a stateful role or PodSet role patched to 2^31 - 1 replicas): a pass
    /// creates at most `MAX_CREATES_PER_PASS` slots, the lowest empty ones, and allocates
    /// nothing per desired slot — before, planning allocated a vector of `desired` slots and
    /// the process aborted.
    #[test]
    fn a_huge_role_is_planned_in_bounded_batches() {
        let huge = i32::MAX as u32;
        let mut stateful = role(huge, 0, 1, vec![slot_pod("s1", "new", true, 1)]);
        stateful.stateful = true;
        stateful.pending_slots = BTreeSet::from([0, 3]);
        let action = stateful.scale();
        assert_eq!(action.create_slots.len(), MAX_CREATES_PER_PASS as usize);
        assert_eq!(action.create_slots[..3], [2, 4, 5]);
        assert!(!stateful.all_available());
        assert!(stateful.rollout().creates() <= MAX_CREATES_PER_PASS);
        assert!(stateful.rollout_by_step(3).creates() <= MAX_CREATES_PER_PASS);
        let _ = stateful.current_step();

        let stateless = role(huge, 0, 1, vec![pod("a", "new", true)]);
        assert_eq!(stateless.scale().creates(), MAX_CREATES_PER_PASS);
        let mut surging = role(1, huge, 1, vec![pod("a", "old", true)]);
        surging.budgets.max_surge = huge;
        assert!(surging.rollout().creates() <= MAX_CREATES_PER_PASS);
    }

    /// A full stateful role finds no empty slot without walking past its pods.
    #[test]
    fn a_full_stateful_role_creates_nothing() {
        let pods: Vec<PodView> = (0..4)
            .map(|i| slot_pod(&format!("s{i}"), "new", true, i))
            .collect();
        let mut r = role(4, 2, 1, pods);
        r.stateful = true;
        assert!(r.scale().is_empty());
        assert!(r.all_available());
    }

    #[test]
    fn scales_up_within_surge_and_down_keeping_availability() {
        assert_eq!(role(3, 0, 1, vec![]).scale().create, 3);
        let mut r = role(3, 0, 1, vec![pod("a", "new", true)]);
        r.pending_creates = 2;
        assert!(r.scale().is_empty(), "pending creates count: no duplicates");
        let down = role(
            1,
            0,
            1,
            vec![
                pod("a", "new", true),
                pod("b", "new", false),
                pod("c", "new", true),
            ],
        );
        assert_eq!(
            down.scale().delete,
            ["b", "a"],
            "not-Ready first, then Ready while above minAvailable"
        );
    }

    #[test]
    fn recreate_rollout_replaces_one_at_a_time_with_default_budgets() {
        let r = role(2, 0, 1, vec![pod("a", "old", true), pod("b", "old", true)]);
        let action = r.rollout();
        assert_eq!(action.delete.len(), 1);
        assert_eq!(action.create, 0, "maxSurge 0: make room first");
        // Next pass after the delete was observed: scale creates the replacement.
        let r = role(2, 0, 1, vec![pod("b", "old", true)]);
        assert_eq!(r.scale().create, 1);
    }

    #[test]
    fn not_ready_outdated_pods_go_at_once() {
        let r = role(
            3,
            0,
            1,
            vec![
                pod("a", "old", false),
                pod("b", "old", false),
                pod("c", "old", true),
            ],
        );
        assert_eq!(r.rollout().delete, ["a", "b"]);
    }

    #[test]
    fn sequential_touches_only_the_first_unfinished_role() {
        let roles = vec![
            role(1, 0, 1, vec![pod("r1", "old", true)]),
            role(1, 0, 1, vec![pod("p1", "old", true)]),
        ];
        // upgradeOrder: role 1 first.
        let sequence = upgrade_sequence(&[2, 1]);
        assert_eq!(sequence, [1, 0]);
        let actions = plan(RoleSetUpdateStrategy::Sequential, &roles, &sequence, &[]);
        assert!(actions[0].is_empty());
        assert_eq!(actions[1].delete, ["p1"]);
        let parallel = plan(RoleSetUpdateStrategy::Parallel, &roles, &sequence, &[]);
        assert!(!parallel[0].is_empty() && !parallel[1].is_empty());
    }

    fn slot_pod(name: &str, hash: &str, ready: bool, slot: u32) -> PodView {
        PodView {
            slot: Some(slot),
            ..pod(name, hash, ready)
        }
    }

    #[test]
    fn stateful_roles_fill_missing_slots_and_drop_strays() {
        let mut r = role(
            3,
            0,
            1,
            vec![slot_pod("a", "new", true, 0), slot_pod("x", "new", true, 7)],
        );
        r.stateful = true;
        let action = r.scale();
        assert!(
            action.delete.is_empty(),
            "the Ready stray stays while it keeps the role at minAvailable"
        );
        assert_eq!(
            action.create_slots,
            [1],
            "the stray still holds room until it is gone"
        );
        r.pods.push(slot_pod("b", "new", true, 1));
        let action = r.scale();
        assert_eq!(action.delete, ["x"], "a pod outside the slots goes");
        assert!(action.create_slots.is_empty(), "no room beyond desired");
        r.pods.retain(|p| p.name != "x" && p.name != "b");
        r.pending_slots = [1].into();
        assert_eq!(
            r.scale().create_slots,
            [2],
            "a pending slot is not created twice"
        );
    }

    #[test]
    fn stateful_rollout_surges_into_the_same_slot_when_it_cannot_delete() {
        let mut r = role(
            2,
            1,
            0,
            vec![
                slot_pod("a0", "old", true, 0),
                slot_pod("a1", "old", true, 1),
            ],
        );
        r.budgets = Fenceposts {
            max_surge: 1,
            max_unavailable: 0,
            raised_to_one: false,
        };
        r.stateful = true;
        let action = r.rollout();
        assert!(action.delete.is_empty(), "no unavailability allowed");
        assert_eq!(action.create_slots, [0], "one surge pod for slot 0");
        // The surge pod became Ready: scale keeps it and removes the outdated one.
        let r2 = RoleInput {
            pods: vec![
                slot_pod("a0", "old", true, 0),
                slot_pod("b0", "new", true, 0),
                slot_pod("a1", "old", true, 1),
            ],
            ..r
        };
        assert_eq!(r2.scale().delete, ["a0"]);
    }

    #[test]
    fn a_stateless_partition_keeps_stable_pods_and_recreates_lost_ones_from_the_stable_template() {
        let mut r = role(
            3,
            0,
            1,
            vec![
                pod("a", "stable", true),
                pod("b", "stable", true),
                pod("c", "stable", true),
            ],
        );
        r.partition = 2;
        r.stable_hash = Some("stable".into());
        let first = r.rollout();
        assert_eq!(
            first.delete.len(),
            1,
            "only the pod above the partition moves"
        );
        // Its replacement is on the target; the role is done with two stable pods.
        r.pods.retain(|p| p.name != first.delete[0]);
        r.pods.push(pod("n", "new", true));
        assert!(r.rollout().is_empty());
        assert!(r.all_available(), "done at the partition");
        // A stable pod dies: it comes back from the stable template.
        r.pods.retain(|p| p.name != "a");
        let refill = r.scale();
        assert_eq!((refill.create_stable, refill.create), (1, 0));
        r.pending_stable_creates = 1;
        assert!(
            r.scale().is_empty(),
            "the stable create in flight is counted"
        );
        // Without a known stable template, the replacement uses the target template.
        r.pending_stable_creates = 0;
        r.stable_hash = None;
        let refill = r.scale();
        assert_eq!((refill.create_stable, refill.create), (0, 1));
    }

    #[test]
    fn a_grown_partition_gives_target_pods_back_to_the_stable_template() {
        let mut r = role(
            2,
            0,
            1,
            vec![pod("a", "stable", true), pod("b", "new", true)],
        );
        r.partition = 2;
        r.stable_hash = Some("stable".into());
        assert!(!r.all_available());
        assert_eq!(r.rollout().delete, ["b"]);
        r.stable_hash = None;
        assert!(
            r.rollout().is_empty(),
            "without the stable template nothing moves"
        );
        assert!(r.all_available());
    }

    #[test]
    fn a_stateful_partition_keeps_the_low_slots_stable() {
        let mut r = role(
            3,
            0,
            1,
            vec![
                slot_pod("s0", "stable", true, 0),
                slot_pod("s1", "new", true, 1),
                slot_pod("s2", "stable", true, 2),
            ],
        );
        r.stateful = true;
        r.partition = 2;
        r.stable_hash = Some("stable".into());
        // Slot 1 goes back to stable and slot 2 to the target; one unavailable at a time.
        assert_eq!(r.rollout().delete, ["s1"]);
        r.pods[1] = slot_pod("s1", "stable", true, 1);
        assert_eq!(r.rollout().delete, ["s2"]);
        r.pods[2] = slot_pod("s2", "new", true, 2);
        assert!(r.rollout().is_empty() && r.all_available());
        assert!(r.stable_slot(Some(1)) && !r.stable_slot(Some(2)));
    }

    #[test]
    fn interleave_keeps_roles_in_lock_step() {
        // Role 0 already has one updated Ready pod (step 2 reached); role 1 has none.
        let roles = vec![
            role(
                3,
                0,
                1,
                vec![
                    pod("a1", "new", true),
                    pod("a2", "old", true),
                    pod("a3", "old", true),
                ],
            ),
            role(
                3,
                0,
                1,
                vec![
                    pod("b1", "old", true),
                    pod("b2", "old", true),
                    pod("b3", "old", true),
                ],
            ),
        ];
        assert_eq!(roles[0].current_step(), (false, 2));
        assert_eq!(roles[1].current_step(), (false, 1));
        let actions = plan(RoleSetUpdateStrategy::Interleave, &roles, &[0, 1], &[]);
        assert!(actions[0].is_empty(), "the faster role waits");
        assert_eq!(
            actions[1].delete.len(),
            1,
            "the slower role moves one batch"
        );
        let done = role(1, 0, 1, vec![pod("c", "new", true)]);
        assert!(done.current_step().0);
    }

    #[test]
    fn interleave_steps_stateful_roles_by_slots() {
        let stateful = |pods: Vec<PodView>| {
            let mut r = role(3, 0, 1, pods);
            r.stateful = true;
            r
        };
        let roles = vec![
            stateful(vec![
                slot_pod("a0", "new", true, 0),
                slot_pod("a1", "old", true, 1),
                slot_pod("a2", "old", true, 2),
            ]),
            stateful(vec![
                slot_pod("b0", "old", true, 0),
                slot_pod("b1", "old", true, 1),
                slot_pod("b2", "old", true, 2),
            ]),
        ];
        assert_eq!(roles[0].current_step(), (false, 2));
        assert_eq!(roles[1].current_step(), (false, 1));
        let actions = plan(RoleSetUpdateStrategy::Interleave, &roles, &[0, 1], &[]);
        assert!(actions[0].is_empty(), "the faster role waits");
        assert_eq!(actions[1].delete, ["b0"], "the slower role moves one slot");
        assert_eq!(
            roles[0].rollout_by_step(2).delete,
            ["a1"],
            "step 2 allows one more slot"
        );
    }

    #[test]
    fn roles_returning_to_stable_go_in_reverse_upgrade_order() {
        let back = |name: &str| {
            let mut r = role(1, 0, 1, vec![pod(&format!("{name}-0"), "new", true)]);
            r.name = name.into();
            r.partition = 1;
            r.stable_hash = Some("stable".into());
            r
        };
        let roles = vec![back("router"), back("decode")];
        assert!(roles[0].returning_to_stable());
        let actions = plan(RoleSetUpdateStrategy::Sequential, &roles, &[0, 1], &[]);
        assert!(actions[0].is_empty(), "the first in upgrade order waits");
        assert_eq!(
            actions[1].delete,
            ["decode-0"],
            "the last in upgrade order goes first"
        );
    }

    #[test]
    fn ties_and_absent_orders_keep_spec_order() {
        assert_eq!(upgrade_sequence(&[0, 0, 0]), [0, 1, 2]);
        assert_eq!(upgrade_sequence(&[3, 0, 3, 1]), [1, 3, 0, 2]);
    }

    fn arb_pod(i: usize) -> impl Strategy<Value = PodView> {
        (
            prop_oneof![Just("new"), Just("old"), Just("stable")],
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            0i64..5,
            prop_oneof![Just(None), Just(Some("new")), Just(Some("older"))],
            any::<bool>(),
            // Ready but still warming up (`minReadySeconds`): counted Ready, not available.
            any::<bool>(),
            // Out of traffic for its drain: never available.
            any::<bool>(),
        )
            .prop_map(
                move |(
                    hash,
                    running,
                    terminating,
                    ready,
                    created,
                    target,
                    pending,
                    warming,
                    draining,
                )| {
                    let draining = draining && running && !terminating;
                    PodView {
                        name: format!("p{i}"),
                        hash: hash.into(),
                        running,
                        terminating,
                        ready: ready && running && !terminating && !draining,
                        available: ready && running && !terminating && !warming && !draining,
                        available_at: (ready && running && !terminating && warming)
                            .then_some(1_000),
                        // Every other pod can leave traffic without being deleted.
                        gated: i.is_multiple_of(2),
                        created,
                        slot: Some(i as u32 % 4),
                        in_place_target: target.map(String::from),
                        in_place_pending: pending.then_some(PendingReason::ImageIdUnchanged),
                        draining: draining.then_some(Draining {
                            started: 900,
                            out_since: Some(900),
                            noted: None,
                        }),
                    }
                },
            )
    }

    /// Roles of either kind, with stale observations (pending creates and deletes) and a
    /// partition with or without a known stable template.
    fn arb_role() -> impl Strategy<Value = RoleInput> {
        (0u32..6, 0u32..3, 0u32..3, 0usize..9, 0u32..3)
            .prop_flat_map(|(desired, surge, unavailable, n, pending)| {
                let pods: Vec<_> = (0..n).map(arb_pod).collect();
                (
                    Just((desired, surge, unavailable, pending)),
                    pods,
                    proptest::collection::btree_set(0usize..9, 0..3),
                    (
                        any::<bool>(),
                        0..=desired,
                        any::<bool>(),
                        0u32..2,
                        any::<bool>(),
                    ),
                    proptest::collection::btree_set(0..desired.max(1), 0..2),
                    (
                        any::<bool>(),
                        proptest::collection::btree_set(0usize..9, 0..2),
                    ),
                )
            })
            .prop_map(
                |(
                    (desired, surge, unavailable, pending),
                    pods,
                    deleting,
                    partition,
                    slots,
                    in_place,
                )| {
                    let (stateful, partition, stable_known, pending_stable, warm) = partition;
                    let (in_place, ineligible) = in_place;
                    let mut r = role(desired, surge, unavailable, pods);
                    r.stateful = stateful;
                    r.partition = partition;
                    r.warm = warm;
                    r.stable_hash = stable_known.then(|| "stable".into());
                    if stateful {
                        r.pending_slots = slots;
                    } else {
                        r.pending_creates = pending;
                        r.pending_stable_creates = pending_stable.min(partition);
                    }
                    r.pending_deletes = deleting.into_iter().map(|i| format!("p{i}")).collect();
                    r.in_place = in_place;
                    r.ineligible = ineligible
                        .into_iter()
                        .map(|i| (format!("p{i}"), "env changes".to_string()))
                        .collect();
                    r
                },
            )
    }

    /// Applies actions the way the cluster would once observed: deleted pods disappear (as
    /// terminating), created pods appear not Ready on the target template.
    fn observe(role: &RoleInput, action: &RoleAction) -> RoleInput {
        let mut next = role.clone();
        next.pending_creates += action.create;
        next.pending_stable_creates += action.create_stable;
        next.pending_slots
            .extend(action.create_slots.iter().copied());
        next.pending_deletes.extend(action.delete.iter().cloned());
        next
    }

    /// Available replicas once `deleted` are gone: Ready pods, or for a stateful role Ready
    /// slots (plus Ready pods outside the slots).
    fn available(r: &RoleInput, deleted: &[String]) -> u32 {
        let ready: Vec<&PodView> = r
            .pods
            .iter()
            .filter(|p| p.available && !p.terminating && !r.pending_deletes.contains(&p.name))
            .filter(|p| !deleted.contains(&p.name))
            .collect();
        if !r.stateful {
            return ready.len() as u32;
        }
        let slots: BTreeSet<u32> = ready
            .iter()
            .filter_map(|p| p.slot.filter(|s| *s < r.desired))
            .collect();
        slots.len() as u32
            + ready
                .iter()
                .filter(|p| p.slot.is_none_or(|s| s >= r.desired))
                .count() as u32
    }

    proptest! {
        /// docs/rollouts.md#invariants: the controller's own actions never create beyond desired +
        /// maxSurge and never delete a Ready pod while Ready ≤ desired − maxUnavailable.
        #[test]
        fn actions_respect_the_budgets(r in arb_role(), mode in 0u8..3, step in 1u32..5) {
            let counts = r.counts();
            let before = r.active_total(&counts) + counts.terminating + counts.warm.len() as u32;
            let action = match mode {
                0 => r.scale(),
                1 => r.rollout(),
                _ => r.rollout_by_step(step),
            };
            // docs/rollouts.md#warm-abort: a warm pod stays until its time is up.
            let warm = r.warm_pods();
            prop_assert!(action.delete.iter().all(|n| !warm.contains(n)),
                "deleted a warm pod: {:?} of {warm:?}", action.delete);
            prop_assert!(warm.is_empty() || (r.warm && !r.stateful && r.partition >= r.desired));
            let limit = r.desired + r.budgets.max_surge;
            prop_assert!(action.creates() == 0 || before + action.creates() <= limit,
                "created {} with {before} present, limit {limit}", action.creates());
            let ready = available(&r, &[]);
            let after = available(&r, &action.delete);
            let min_available = r.desired.saturating_sub(r.budgets.max_unavailable);
            prop_assert!(after >= ready || after >= min_available,
                "deletes {:?} leave {after} of {ready} available, minAvailable {min_available}", action.delete);
            prop_assert!(action.delete.iter().all(|n| !r.pending_deletes.contains(n)), "no double delete");
            // docs/rollouts.md#drain-before-delete: a stateless scale-down removes every
            // draining pod before any other running one.
            if mode == 0 && !r.stateful {
                let draining_left = counts.active.iter()
                    .any(|p| p.draining.is_some() && !action.delete.contains(&p.name));
                for name in &action.delete {
                    let pod = r.pods.iter().find(|p| &p.name == name).unwrap();
                    prop_assert!(pod.draining.is_some() || !pod.running || !draining_left,
                        "deleted {name} while a draining pod stays");
                }
            }
        }

        /// docs/rollouts.md#warm-abort: a retry takes the warm pods back. Once the role's
        /// partition gives the canary `k` pods again, the pods kept warm count toward them:
        /// no pod is created on the canary template while they cover it.
        #[test]
        fn a_retry_takes_the_warm_pods_back_before_creating_any(
            desired in 1u32..6, stable in 0u32..6, warm in 0u32..4, surge in 0u32..3, k in 1u32..6,
        ) {
            let k = k.min(desired);
            let pod = |name: String, hash: &str| PodView {
                gated: true,
                ..super::tests::pod(&name, hash, true)
            };
            let pods: Vec<PodView> = (0..stable.min(desired))
                .map(|i| pod(format!("s{i}"), "stable"))
                .chain((0..warm).map(|i| pod(format!("w{i}"), "new")))
                .collect();
            let mut r = role(desired, surge, 1, pods);
            r.stable_hash = Some("stable".into());
            r.partition = desired;
            r.warm = true;
            let kept = r.warm_pods();
            prop_assert_eq!(kept.len() as u32, warm, "every gated canary pod is kept");
            prop_assert!(r.scale().delete.is_empty() && r.rollout().delete.is_empty());
            // The retry: the warm time no longer runs, the partition moves.
            r.warm = false;
            r.partition = desired - k;
            let action = r.scale();
            let action = if action.is_empty() { r.rollout() } else { action };
            prop_assert!(action.create == 0 || warm < k,
                "created {} on the canary template with {warm} warm pods for {k}", action.create);
            prop_assert!(action.create <= k.saturating_sub(warm),
                "created {} with {warm} warm pods for {k}", action.create);
        }

        /// In-place updates keep `desired - maxUnavailable` Ready pods out of updates (a Ready
        /// pod under update counts as unavailable), start no pod twice, and fall back to
        /// recreating only for an ineligible outdated pod.
        #[test]
        fn in_place_updates_respect_the_budget(r in arb_role()) {
            let mut r = r;
            r.in_place = true;
            let counts = r.counts();
            let action = r.rollout();
            if let Some(reason) = &action.fallback {
                prop_assert!(r.ineligible.keys().any(|p| reason.contains(p.as_str())));
                return Ok(());
            }
            let updating: BTreeSet<&str> = action.in_place_start.iter()
                .chain(action.in_place_pending.iter().map(|(n, _)| n))
                .map(String::as_str)
                .collect();
            let ready = r.available(&counts);
            let ready_updating = counts.active.iter()
                .filter(|p| p.available && updating.contains(p.name.as_str()))
                .count() as u32;
            let min_available = r.desired.saturating_sub(r.budgets.max_unavailable);
            let started_ready = action.in_place_start.iter()
                .any(|n| counts.active.iter().any(|p| &p.name == n && p.available));
            prop_assert!(!started_ready || ready - ready_updating >= min_available,
                "{ready_updating} of {ready} Ready pods updating, minAvailable {min_available}");
            for name in &action.in_place_start {
                let pod = r.pods.iter().find(|p| &p.name == name).unwrap();
                prop_assert_ne!(pod.in_place_target.as_ref(), Some(&r.target_hash));
                prop_assert!(r.outdated(pod, &counts));
            }
            prop_assert!(action.delete.is_empty() && action.creates() == 0);
        }

        /// docs/rollouts.md#the-pooled-canary-the-role-rollout-block: rollouts never delete a pod
        /// the partition keeps, and never create more target pods than the target share.
        #[test]
        fn rollouts_respect_the_partition(r in arb_role(), step in 1u32..5) {
            let counts = r.counts();
            for action in [r.rollout(), r.rollout_by_step(step)] {
                for name in &action.delete {
                    prop_assert!(!counts.kept.contains(name.as_str()), "deleted kept stable pod {name}");
                }
                if !r.stateful {
                    let want = r.want_target(&counts);
                    prop_assert!(action.create == 0 || r.updated(&counts) + action.create <= want,
                        "created {} target pods with {} updated, share {want}", action.create, r.updated(&counts));
                    prop_assert_eq!(action.create_stable, 0, "stable pods come from scale only");
                }
            }
        }

        /// Idempotence: with the expectations of its own actions recorded, the plan asks for
        /// nothing new until the cluster changes.
        #[test]
        fn the_plan_is_idempotent_under_expectations(r in arb_role()) {
            let scale = r.scale();
            let after = observe(&r, &scale);
            let again = after.scale();
            prop_assert_eq!(again.creates(), 0);
            prop_assert!(again.delete.iter().all(|n| !scale.delete.contains(n)));
            if scale.is_empty() {
                let rollout = r.rollout();
                let after = observe(&r, &rollout);
                let again = after.rollout();
                prop_assert_eq!(again.creates(), 0);
                prop_assert!(again.delete.iter().all(|n| !rollout.delete.contains(n)));
            }
        }
    }

    #[test]
    fn children_of_a_removed_role_are_retired() {
        let mut going = pod("b", "old", true);
        going.terminating = true;
        assert_eq!(
            retire(&[pod("a", "old", true), going, pod("c", "new", false)]),
            ["a", "c"]
        );
    }
}
