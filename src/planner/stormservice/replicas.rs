//! StormService-level decisions (docs/rollouts.md#replica-and-pooled-mode,
//! docs/rollouts.md#budgets, docs/rollouts.md#invariants, docs/architecture.md#one-reconcile):
//! given the desired RoleSet count, the budgets, the two revisions and the observed RoleSets (with
//! the controller's pending expectations), which RoleSets to create (from which revision, at which
//! `roleset-index`), delete, or update in place.
//!
//! Pure: the controller observes, calls [`plan`], and carries the actions out.

use std::cmp::Reverse;
use std::collections::BTreeSet;

use crate::api::StormServiceUpdateStrategyType as Strategy;
use crate::api::budget::Fenceposts;
use crate::planner::MAX_CREATES_PER_PASS;

/// One observed RoleSet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleSetView {
    /// RoleSet name.
    pub name: String,
    /// Labelled with the update revision.
    pub updated: bool,
    /// Its `roleset-index` (None when absent or unparsable).
    pub index: Option<u32>,
    /// Ready condition True, observed at the RoleSet's current generation.
    pub ready: bool,
    /// `deletionTimestamp` set.
    pub terminating: bool,
}

/// A create issued and not yet observed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PendingRoleSet {
    /// Its `roleset-index`.
    pub index: u32,
    /// From the update revision.
    pub updated: bool,
}

/// What the planner knows about one StormService.
#[derive(Clone, Debug)]
pub struct ServiceInput {
    /// Desired RoleSets (`spec.replicas`).
    pub desired: u32,
    /// StormService-level budgets (zero for `InPlaceUpdate`).
    pub budgets: Fenceposts,
    /// Update strategy.
    pub strategy: Strategy,
    /// `spec.paused`: scaling continues, rollouts stop.
    pub paused: bool,
    /// The current and update revisions differ.
    pub two_revisions: bool,
    /// RoleSets the watch cache shows.
    pub rolesets: Vec<RoleSetView>,
    /// Creates issued and not yet observed.
    pub pending_creates: Vec<PendingRoleSet>,
    /// RoleSets whose deletion was issued and is not yet observed.
    pub pending_deletes: BTreeSet<String>,
    /// A canary's target: at most this many RoleSets on the update revision
    /// (docs/rollouts.md#which-replicas-move).
    pub max_updated: Option<u32>,
    /// `InPlaceUpdate`: RoleSets updated in place but not Ready again may number at most
    /// this (the resolved `maxUnavailable`; the StormService-level budgets are zero then).
    pub in_place_unavailable: u32,
}

/// A RoleSet to create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewRoleSet {
    /// Its `roleset-index`.
    pub index: u32,
    /// From the update revision (else from the current one).
    pub updated: bool,
}

/// What to do this pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServiceAction {
    /// RoleSets to create.
    pub create: Vec<NewRoleSet>,
    /// RoleSets to delete.
    pub delete: Vec<String>,
    /// RoleSets to move to the update revision in place.
    pub update_in_place: Vec<String>,
    /// The pass scaled (creates or deletes toward `desired`); rollouts wait for the next.
    pub scaling: bool,
}

impl ServiceAction {
    /// True when nothing is to be done.
    pub fn is_empty(&self) -> bool {
        self.create.is_empty() && self.delete.is_empty() && self.update_in_place.is_empty()
    }
}

/// AIBrix's `calculateReplicas` (docs/rollouts.md#replica-and-pooled-mode): splits `desired` between current and updated in
/// proportion to `(current, updated)`; the updated side absorbs the rounding.
pub fn proportional_split(desired: u32, current: u32, updated: u32) -> (u32, u32) {
    let total = current + updated;
    if desired == total {
        return (current, updated);
    }
    if total == 0 {
        return (0, desired);
    }
    // Round half away from zero: (2·x·desired + total) / (2·total).
    let round = |x: u32| {
        let num = 2 * u64::from(x) * u64::from(desired) + u64::from(total);
        u32::try_from(num / (2 * u64::from(total))).unwrap_or(u32::MAX)
    };
    let c = round(current).min(desired);
    (c, desired - c)
}

impl ServiceInput {
    /// Active RoleSets: not terminating and not being deleted by us.
    fn active(&self) -> Vec<&RoleSetView> {
        self.rolesets
            .iter()
            .filter(|r| !r.terminating && !self.pending_deletes.contains(&r.name))
            .collect()
    }

    /// Every RoleSet present or coming (terminating ones hold resources).
    fn present(&self) -> u32 {
        (self.rolesets.len() + self.pending_creates.len()) as u32
    }

    fn min_available(&self) -> u32 {
        self.desired.saturating_sub(self.budgets.max_unavailable)
    }

    /// (current, updated) active counts, with creates in flight.
    fn split(&self, active: &[&RoleSetView]) -> (u32, u32) {
        let updated = active.iter().filter(|r| r.updated).count()
            + self.pending_creates.iter().filter(|p| p.updated).count();
        let total = active.len() + self.pending_creates.len();
        ((total - updated) as u32, updated as u32)
    }

    /// Scaling toward `desired` (runs first, also while paused).
    fn scale(&self) -> ServiceAction {
        let active = self.active();
        let (current, updated) = self.split(&active);
        let total = current + updated;
        let mut action = ServiceAction::default();
        let proportional = self.paused && self.two_revisions && self.max_updated.is_none();
        // During a canary the weight rule wins: the updated side gets its target.
        let canary_split = self
            .max_updated
            .map(|t| (self.desired - t.min(self.desired), t.min(self.desired)));
        if total < self.desired {
            let room = (self.desired + self.budgets.max_surge).saturating_sub(self.present());
            let (want_current, want_updated) = if let Some(split) = canary_split {
                split
            } else if proportional {
                proportional_split(self.desired, current, updated)
            } else {
                (current, self.desired - current)
            };
            let mut missing_current = want_current.saturating_sub(current);
            let mut missing_updated = want_updated.saturating_sub(updated);
            let mut room = room.min(self.desired - total).min(MAX_CREATES_PER_PASS);
            let mut indexes = FreeIndexes::new(self, &active);
            while room > 0 && (missing_current > 0 || missing_updated > 0) {
                let from_update = missing_updated > 0;
                if from_update {
                    missing_updated -= 1;
                } else {
                    missing_current -= 1;
                }
                room -= 1;
                let index = indexes.take(from_update);
                action.create.push(NewRoleSet {
                    index,
                    updated: from_update,
                });
            }
        } else if total > self.desired {
            let surplus = total - self.desired;
            // Paused with two revisions, each side keeps its share; otherwise the old revision
            // goes first.
            let (mut excess_current, mut excess_updated) =
                if let Some((_, keep_updated)) = canary_split {
                    // The updated side goes down to its target first; the rest is stable.
                    let from_updated = updated.saturating_sub(keep_updated).min(surplus);
                    ((surplus - from_updated).min(current), from_updated)
                } else if proportional {
                    let (keep_current, keep_updated) =
                        proportional_split(self.desired, current, updated);
                    (
                        current.saturating_sub(keep_current),
                        updated.saturating_sub(keep_updated),
                    )
                } else {
                    let from_current = surplus.min(current);
                    (from_current, surplus - from_current)
                };
            let mut candidates = active.clone();
            // Old revision first, then not Ready, then the highest index (indexes stay dense).
            candidates.sort_by_key(|r| (r.updated, r.ready, Reverse(r.index)));
            let mut ready = active.iter().filter(|r| r.ready).count() as u32;
            for roleset in candidates {
                let excess = if roleset.updated {
                    &mut excess_updated
                } else {
                    &mut excess_current
                };
                if *excess == 0 {
                    continue;
                }
                if roleset.ready {
                    if ready <= self.min_available() {
                        continue;
                    }
                    ready -= 1;
                }
                *excess -= 1;
                action.delete.push(roleset.name.clone());
            }
        }
        action.scaling = !action.is_empty();
        action
    }

    /// `RollingUpdate`: delete outdated RoleSets (not-Ready ones at once, Ready ones while more
    /// than `minAvailable` stay Ready) and create updated ones within `desired + maxSurge`.
    fn rolling_update(&self) -> ServiceAction {
        let active = self.active();
        let (_, updated) = self.split(&active);
        // A canary stops at its target; the rest stays on the current revision.
        let target = self
            .max_updated
            .map_or(self.desired, |t| t.min(self.desired));
        let keep_outdated = self.desired - target;
        let mut outdated: Vec<&&RoleSetView> = active.iter().filter(|r| !r.updated).collect();
        if outdated.len() as u32 <= keep_outdated && updated >= target {
            return ServiceAction::default();
        }
        outdated.sort_by_key(|r| (r.ready, Reverse(r.index)));
        let mut ready = active.iter().filter(|r| r.ready).count() as u32;
        let mut action = ServiceAction::default();
        let mut remaining: Vec<&RoleSetView> = active.clone();
        let mut removable = (outdated.len() as u32).saturating_sub(keep_outdated);
        for roleset in outdated {
            if removable == 0 {
                break;
            }
            if roleset.ready {
                if ready <= self.min_available() {
                    break;
                }
                ready -= 1;
            }
            removable -= 1;
            action.delete.push(roleset.name.clone());
            remaining.retain(|r| r.name != roleset.name);
        }
        let surge = (self.desired + self.budgets.max_surge)
            .saturating_sub(self.present())
            .min(target.saturating_sub(updated))
            .min(MAX_CREATES_PER_PASS);
        let mut indexes = FreeIndexes::new(self, &remaining);
        for _ in 0..surge {
            let index = indexes.take(true);
            action.create.push(NewRoleSet {
                index,
                updated: true,
            });
        }
        action
    }
}

impl ServiceInput {
    /// `InPlaceUpdate`: outdated RoleSets move in place, not-Ready ones first, at most
    /// `in_place_unavailable` not Ready at a time — during a canary, only up to its target.
    fn update_in_place(&self) -> ServiceAction {
        let active = self.active();
        let (_, updated) = self.split(&active);
        let updating = active.iter().filter(|r| r.updated && !r.ready).count() as u32;
        let room = self
            .max_updated
            .map_or(u32::MAX, |t| t.saturating_sub(updated))
            .min(self.in_place_unavailable.saturating_sub(updating)) as usize;
        let mut outdated: Vec<&&RoleSetView> = active.iter().filter(|r| !r.updated).collect();
        outdated.sort_by_key(|r| (r.ready, Reverse(r.index)));
        ServiceAction {
            update_in_place: outdated
                .into_iter()
                .take(room)
                .map(|r| r.name.clone())
                .collect(),
            ..ServiceAction::default()
        }
    }
}

/// The `roleset-index`es new RoleSets take (docs/architecture.md#one-reconcile): the lowest index
/// that no active RoleSet, create in flight or earlier create of this pass holds — so a replacement
/// takes the index of the RoleSet it replaces, and indexes above `desired - 1` are not reused until
/// needed. Once every index below `desired` is held, an updated RoleSet joins the slot of an
/// outdated one (the lowest index no updated RoleSet holds).
///
/// Built once per pass: indexes are only ever added, so the lowest free one never moves
/// down, and `n` creates cost the held indexes plus `n` steps, not `n` set rebuilds.
struct FreeIndexes {
    desired: u32,
    any: LowestFree,
    updated: LowestFree,
}

/// A growing set of held indexes and the lowest index not in it.
struct LowestFree {
    held: BTreeSet<u32>,
    lowest: u32,
}

impl LowestFree {
    fn new(held: BTreeSet<u32>) -> Self {
        let mut free = LowestFree { held, lowest: 0 };
        free.advance();
        free
    }

    fn advance(&mut self) {
        while self.held.contains(&self.lowest) {
            self.lowest += 1;
        }
    }

    fn hold(&mut self, index: u32) {
        self.held.insert(index);
        self.advance();
    }
}

impl FreeIndexes {
    fn new(input: &ServiceInput, active: &[&RoleSetView]) -> Self {
        let held = |updated_only: bool| -> BTreeSet<u32> {
            active
                .iter()
                .filter(|r| !updated_only || r.updated)
                .filter_map(|r| r.index)
                .chain(
                    input
                        .pending_creates
                        .iter()
                        .filter(|p| !updated_only || p.updated)
                        .map(|p| p.index),
                )
                .collect()
        };
        FreeIndexes {
            desired: input.desired,
            any: LowestFree::new(held(false)),
            updated: LowestFree::new(held(true)),
        }
    }

    /// The index of the next create, recorded as held.
    fn take(&mut self, from_update: bool) -> u32 {
        let index = if self.any.lowest < self.desired || !from_update {
            self.any.lowest
        } else {
            self.updated.lowest
        };
        self.any.hold(index);
        if from_update {
            self.updated.hold(index);
        }
        index
    }
}

/// One pass: scale if needed (also while paused); otherwise, unless paused, roll.
pub fn plan(input: &ServiceInput) -> ServiceAction {
    let scale = input.scale();
    if scale.scaling || input.paused {
        return scale;
    }
    match input.strategy {
        Strategy::RollingUpdate => input.rolling_update(),
        Strategy::InPlaceUpdate => input.update_in_place(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::budget::{Budget, resolve_fenceposts};
    use proptest::prelude::{any, prop_assert, prop_assert_eq, proptest};
    use proptest::strategy::Strategy as Generator;

    fn rs(name: &str, updated: bool, index: u32, ready: bool) -> RoleSetView {
        RoleSetView {
            name: name.into(),
            updated,
            index: Some(index),
            ready,
            terminating: false,
        }
    }

    fn service(
        desired: u32,
        surge: u32,
        unavailable: u32,
        rolesets: Vec<RoleSetView>,
    ) -> ServiceInput {
        ServiceInput {
            desired,
            budgets: resolve_fenceposts(
                Some(Budget::Count(surge)),
                Some(Budget::Count(unavailable)),
                desired,
            ),
            strategy: Strategy::RollingUpdate,
            paused: false,
            two_revisions: rolesets.iter().any(|r| !r.updated),
            rolesets,
            pending_creates: Vec::new(),
            pending_deletes: BTreeSet::new(),
            max_updated: None,
            in_place_unavailable: 1,
        }
    }

    #[test]
    fn a_canary_target_caps_the_updated_rolesets_and_never_stalls_at_max_surge_zero() {
        // 4 replicas, weight 25% → 1 updated; maxSurge 0 deletes to make room.
        let mut s = service(
            4,
            0,
            1,
            (0..4)
                .map(|i| rs(&format!("o{i}"), false, i, true))
                .collect(),
        );
        s.max_updated = Some(1);
        let first = plan(&s);
        assert_eq!(first.delete, ["o3"]);
        assert!(
            first.create.is_empty(),
            "no room until the delete is observed"
        );
        s.rolesets.retain(|r| r.name != "o3");
        let second = plan(&s);
        assert_eq!(
            second.create,
            [NewRoleSet {
                index: 3,
                updated: true
            }],
            "the freed slot is refilled on the canary revision"
        );
        s.rolesets.push(rs("n3", true, 3, true));
        assert!(
            plan(&s).is_empty(),
            "the target is reached: nothing more moves"
        );
        // Scaling out mid-canary keeps the updated side at its target.
        s.desired = 6;
        s.budgets = resolve_fenceposts(Some(Budget::Count(0)), Some(Budget::Count(1)), 6);
        s.max_updated = Some(2);
        let out = plan(&s);
        let updated = out.create.iter().filter(|c| c.updated).count();
        assert_eq!((out.create.len() - updated, updated), (1, 1));
    }

    #[test]
    fn the_proportional_split_matches_aibrix() {
        assert_eq!(proportional_split(5, 2, 1), (3, 2));
        assert_eq!(proportional_split(3, 1, 1), (2, 1));
        assert_eq!(proportional_split(2, 0, 0), (0, 2));
        assert_eq!(proportional_split(4, 3, 1), (3, 1));
        assert_eq!(proportional_split(6, 2, 1), (4, 2));
    }

    /// Hostile input (issue: `kubectl scale --replicas=2147483647`): one pass creates at most
    /// `MAX_CREATES_PER_PASS` RoleSets, on the lowest free indexes around the held ones,
    /// however large `desired` is — before, the pass built one set per create and ran out of
    /// memory.
    #[test]
    fn a_huge_scale_out_creates_one_bounded_batch_per_pass() {
        let held: Vec<RoleSetView> = (0..2_000)
            .map(|i| rs(&format!("rs-{i}"), true, 2 * i, true))
            .collect();
        let mut s = service(i32::MAX as u32, 0, 1, held);
        s.pending_creates = vec![PendingRoleSet {
            index: 1,
            updated: true,
        }];
        let action = plan(&s);
        assert_eq!(action.create.len(), MAX_CREATES_PER_PASS as usize);
        let indexes: Vec<u32> = action.create.iter().map(|c| c.index).collect();
        let expected: Vec<u32> = (1..).map(|i| 2 * i + 1).take(indexes.len()).collect();
        assert_eq!(
            indexes, expected,
            "odd indexes above the pending 1, in order"
        );
        // A rolling update at the same size is bounded the same way.
        let mut rolling = service(i32::MAX as u32, i32::MAX as u32, 1, Vec::new());
        rolling.rolesets = vec![rs("old", false, 0, true)];
        rolling.two_revisions = true;
        rolling.desired = 1;
        rolling.budgets.max_surge = i32::MAX as u32;
        assert!(rolling.rolling_update().create.len() <= MAX_CREATES_PER_PASS as usize);
    }

    #[test]
    fn scale_out_fills_the_lowest_free_indexes() {
        let s = service(
            4,
            0,
            1,
            vec![rs("a", true, 0, true), rs("c", true, 2, true)],
        );
        let action = plan(&s);
        assert!(action.scaling);
        assert_eq!(
            action.create,
            [
                NewRoleSet {
                    index: 1,
                    updated: true
                },
                NewRoleSet {
                    index: 3,
                    updated: true
                }
            ]
        );
    }

    #[test]
    fn scale_in_removes_old_not_ready_and_high_indexes_first_within_min_available() {
        let s = service(
            2,
            0,
            1,
            vec![
                rs("a", true, 0, true),
                rs("b", true, 1, true),
                rs("c", true, 2, true),
                rs("d", true, 3, false),
            ],
        );
        assert_eq!(plan(&s).delete, ["d", "c"]);
    }

    #[test]
    fn a_rolling_update_replaces_within_the_budgets_and_reuses_the_index() {
        // replicas 4, maxSurge 1, maxUnavailable 1.
        let s = service(
            4,
            1,
            1,
            (0..4)
                .map(|i| rs(&format!("o{i}"), false, i, true))
                .collect(),
        );
        let action = plan(&s);
        assert_eq!(
            action.delete,
            ["o3"],
            "one unavailable: the highest index goes"
        );
        assert_eq!(
            action.create,
            [NewRoleSet {
                index: 3,
                updated: true
            }],
            "one surge, at the freed index"
        );
    }

    #[test]
    fn paused_scaling_keeps_the_proportional_split() {
        let mut s = service(
            6,
            1,
            1,
            vec![
                rs("o0", false, 0, true),
                rs("o1", false, 1, true),
                rs("n2", true, 2, true),
            ],
        );
        s.paused = true;
        let action = plan(&s);
        let from_update = action.create.iter().filter(|c| c.updated).count();
        assert_eq!((action.create.len() - from_update, from_update), (2, 1));
        s.desired = 2;
        s.budgets = resolve_fenceposts(Some(Budget::Count(1)), Some(Budget::Count(1)), 2);
        let action = plan(&s);
        assert_eq!(action.delete, ["o1"], "3 → 2 splits as (1, 1)");
        assert!(plan(&service(3, 1, 1, vec![])).scaling);
    }

    #[test]
    fn in_place_update_moves_every_outdated_roleset() {
        let mut s = service(1, 0, 0, vec![rs("pool", false, 0, true)]);
        s.strategy = Strategy::InPlaceUpdate;
        s.budgets = Fenceposts::default();
        assert_eq!(plan(&s).update_in_place, ["pool"]);
        s.paused = true;
        assert!(plan(&s).is_empty(), "paused: no rollout");
        // A canary in replica mode with InPlaceUpdate moves only its target.
        let mut replicas = service(
            4,
            0,
            0,
            (0..4)
                .map(|i| rs(&format!("r{i}"), false, i, true))
                .collect(),
        );
        replicas.strategy = Strategy::InPlaceUpdate;
        replicas.max_updated = Some(2);
        replicas.in_place_unavailable = 2;
        assert_eq!(plan(&replicas).update_in_place, ["r3", "r2"]);
        // ... and at most maxUnavailable not Ready at a time.
        replicas.in_place_unavailable = 1;
        assert_eq!(plan(&replicas).update_in_place, ["r3"]);
        replicas.rolesets[3] = rs("r3", true, 3, false);
        assert!(plan(&replicas).is_empty(), "r3 is still coming back");
    }

    fn arb_service() -> impl Generator<Value = ServiceInput> {
        (
            0u32..7,
            0u32..3,
            0u32..3,
            proptest::collection::vec((any::<bool>(), 0u32..8, any::<bool>(), any::<bool>()), 0..9),
            proptest::collection::vec((0u32..8, any::<bool>()), 0..3),
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(0u32..=100),
        )
            .prop_map(
                |(desired, surge, unavailable, rolesets, pending, paused, in_place, canary)| {
                    let rolesets = rolesets
                        .into_iter()
                        .enumerate()
                        .map(|(i, (updated, index, ready, terminating))| RoleSetView {
                            name: format!("r{i}"),
                            updated,
                            index: Some(index),
                            ready: ready && !terminating,
                            terminating,
                        })
                        .collect();
                    let mut s = service(desired, surge, unavailable, rolesets);
                    s.paused = paused;
                    s.pending_creates = pending
                        .into_iter()
                        .map(|(index, updated)| PendingRoleSet { index, updated })
                        .collect();
                    if in_place {
                        s.strategy = Strategy::InPlaceUpdate;
                        s.budgets = Fenceposts::default();
                    }
                    s.max_updated = canary.map(|w| (s.desired * w).div_ceil(100));
                    s.in_place_unavailable = unavailable.max(1);
                    s
                },
            )
    }

    proptest! {
        /// docs/rollouts.md#invariants: creates never exceed `desired + maxSurge` (counting
        /// terminating RoleSets and creates in flight); Ready RoleSets are deleted only above
        /// `minAvailable`; while paused nothing rolls.
        #[test]
        fn actions_respect_the_budgets(s in arb_service()) {
            let action = plan(&s);
            let limit = s.desired + s.budgets.max_surge;
            prop_assert!(action.create.is_empty() || s.present() + action.create.len() as u32 <= limit,
                "{} present + {} creates > {limit}", s.present(), action.create.len());
            let active = s.active();
            let ready = active.iter().filter(|r| r.ready).count() as u32;
            let ready_deleted = action.delete.iter()
                .filter(|n| active.iter().any(|r| &r.name == *n && r.ready))
                .count() as u32;
            prop_assert!(ready_deleted == 0 || ready - ready_deleted >= s.min_available(),
                "deleted {ready_deleted} of {ready} Ready, minAvailable {}", s.min_available());
            if s.paused {
                prop_assert!(action.update_in_place.is_empty());
                prop_assert!(action.scaling || action.is_empty(), "paused: only scaling");
            }
            let deleted: BTreeSet<&String> = action.delete.iter().collect();
            prop_assert_eq!(deleted.len(), action.delete.len(), "no double delete");
            let updating = active.iter().filter(|r| r.updated && !r.ready).count() as u32;
            prop_assert!(action.update_in_place.is_empty()
                || updating + action.update_in_place.len() as u32 <= s.in_place_unavailable,
                "{} moved in place with {updating} not Ready yet", action.update_in_place.len());
            // docs/rollouts.md#invariants: a canary never moves beyond its target by its own
            // creates.
            if let Some(target) = s.max_updated {
                let (_, updated) = s.split(&active);
                let created = action.create.iter().filter(|c| c.updated).count() as u32
                    + action.update_in_place.len() as u32;
                prop_assert!(created == 0 || updated + created <= target,
                    "{updated} updated + {created} created > target {target}");
            }
        }

        /// docs/architecture.md#one-reconcile: a new RoleSet takes an index above `desired - 1`
        /// only when every lower one is held, and one pass never gives an index twice.
        #[test]
        fn indexes_stay_dense(s in arb_service()) {
            let action = plan(&s);
            let deleted: BTreeSet<&String> = action.delete.iter().collect();
            let held: BTreeSet<u32> = s.active().iter()
                .filter(|r| !deleted.contains(&r.name))
                .filter_map(|r| r.index)
                .chain(s.pending_creates.iter().map(|p| p.index))
                .chain(action.create.iter().map(|c| c.index))
                .collect();
            for create in &action.create {
                prop_assert!(create.index < s.desired || (0..s.desired).all(|i| held.contains(&i)),
                    "index {} given while a lower one is free", create.index);
            }
            let indexes: BTreeSet<u32> = action.create.iter().map(|c| c.index).collect();
            prop_assert_eq!(indexes.len(), action.create.len(), "one create per index per pass");
        }
    }
}
