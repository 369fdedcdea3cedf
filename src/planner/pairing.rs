//! Pairing (docs/rollouts.md#pairing): which pods of a RoleSet's pairing groups may serve —
//! the readiness gate squall sets on them — and the lock-step batches a group's roles roll
//! out in.
//!
//! Pure: the RoleSet planner calls [`pass`] with the pods it observed and the removals it
//! chose, [`lockstep_caps`] with its roles' progress, and [`report`] for the status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;

use super::serving::{Gangs, gate, up};
use crate::api::cached::meta::Labelled;
use crate::api::cached::pod::CachedPod;
use crate::api::keys::{CONDITION_PAIRING_SERVABLE, LABEL_PAIRING_KEY, LABEL_ROLE_NAME};
use crate::api::limits::MAX_PAIRING_KEYS_REPORTED;
use crate::api::{PairedRoleStatus, PairingGroup, PairingKeyStatus, PodSet, RoleSpec};

/// The pairing groups as indexes into `roles` (spec order), each role once; roles a group
/// names that the RoleSet lacks are left out (admission refuses them).
pub fn group_indexes(groups: &[PairingGroup], roles: &[&RoleSpec]) -> Vec<Vec<usize>> {
    groups
        .iter()
        .map(|group| {
            (0..roles.len())
                .filter(|&i| group.roles.iter().any(|r| *r == roles[i].name))
                .collect::<Vec<usize>>()
        })
        .filter(|group| group.len() > 1)
        .collect()
}

/// What pairing reads of the RoleSet's live pods of paired roles, and of its multi-node
/// roles' live PodSets: a gang is one unit (named after its PodSet), up when each of its
/// `podGroupSize` pods is, Ready when each is, its gate the same on all of them.
/// `written` are the pairing conditions written that the cache does not show yet (a False
/// one with its Ready False). Only a pod that has no pairing condition yet has its spec read
/// (for the gate): squall writes the condition only on gated pods.
pub fn paired_pods<'a>(
    groups: &[PairingGroup],
    pods: &'a [Arc<CachedPod>],
    podsets: &'a [Arc<PodSet>],
    gangs: &Gangs<'a>,
    written: &BTreeMap<String, bool>,
) -> Vec<PairedPod<'a>> {
    let servable = |pod: &CachedPod| gate(pod, written);
    let ready = |pod: &CachedPod| pod.ready() && gate(pod, written) != Some(false);
    let paired_role = |child: &'a dyn Labelled| {
        let role = child.label(LABEL_ROLE_NAME)?;
        groups
            .iter()
            .any(|g| g.roles.iter().any(|r| r == role))
            .then_some(role)
    };
    let single = pods.iter().filter_map(|pod| {
        // A terminating pod serves no more (its endpoint says so): nothing to decide or
        // write for it.
        if pod.is_deleting() {
            return None;
        }
        let role = paired_role(&**pod)?;
        let servable = servable(pod);
        Some(PairedPod {
            name: pod.name(),
            role,
            key: pod.labels().get(LABEL_PAIRING_KEY),
            up: up(pod),
            ready: ready(pod),
            gated: servable.is_some() || pod.has_readiness_gate(CONDITION_PAIRING_SERVABLE),
            servable,
            split: false,
            stuck: stuck(pod),
        })
    });
    let multi_node = podsets.iter().filter_map(|podset| {
        if podset.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let role = paired_role(&**podset)?;
        let name = podset.metadata.name.as_deref()?;
        let gang = gangs.members(name).unwrap_or_default();
        let whole = gang.len() == usize::try_from(podset.spec.pod_group_size).unwrap_or(0);
        let gates: BTreeSet<Option<bool>> = gang.iter().map(|p| servable(p)).collect();
        Some(PairedPod {
            name,
            role,
            key: podset.labels().get(LABEL_PAIRING_KEY).map(String::as_str),
            up: whole && gang.iter().all(|p| up(p)),
            ready: whole && gang.iter().all(|p| ready(p)),
            gated: gang
                .iter()
                .any(|p| servable(p).is_some() || p.has_readiness_gate(CONDITION_PAIRING_SERVABLE)),
            servable: gates.iter().next().copied().flatten(),
            split: gates.len() > 1,
            stuck: gang.iter().any(|p| stuck(p)),
        })
    });
    single.chain(multi_node).collect()
}

/// It cannot start as it is: the scheduler found no node, it failed, or a container restarts
/// without turning ready.
fn stuck(pod: &CachedPod) -> bool {
    pod.condition("PodScheduled") == Some("False")
        || pod.phase() == Some("Failed")
        || pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| c.iter().any(|c| !c.ready && c.restart_count > 0))
}

/// One role's progress in its group's lock-step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Ready pods (slots) on the target template.
    pub moved: u32,
    /// Pods (slots) the role moves in the whole rollout.
    pub share: u32,
    /// Most pods it moves in one batch (`max(1, maxSurge + maxUnavailable)`).
    pub batch: u32,
}

/// Each role's cap of pods on the target template for the batch its group is in.
///
/// The group rolls out in `n` batches, as many as its slowest role needs at its batch size
/// and at least two when a role moves two pods or more (so that role keeps an old pod for the
/// old key while its first new one starts); batch `k < n` caps a role of share `s` at `max(1, ⌊k·s/n⌋)` — every role moves a pod in the
/// first batch, so the new key serves from it, and keeps an old pod until the last one when
/// it has two or more, so the old key serves until then — and the last batch at `s`. The
/// group is in the first batch some role has not completed (counting Ready pods only: a
/// partner that cannot start holds the group). O(roles): nothing here walks the batches.
pub fn lockstep_caps(progress: &[Progress]) -> Vec<u32> {
    let batches = progress
        .iter()
        .map(|p| u64::from(p.share.div_ceil(p.batch.max(1))))
        .max()
        .unwrap_or(1)
        .max(if progress.iter().any(|p| p.share > 1) {
            2
        } else {
            1
        });
    let current = progress
        .iter()
        .map(|p| completed(p, batches))
        .min()
        .map_or(batches, |done| (done + 1).min(batches));
    progress
        .iter()
        .map(|p| share_at(p.share, current, batches))
        .collect()
}

/// A role's cap in batch `k` of `n`.
fn share_at(share: u32, k: u64, n: u64) -> u32 {
    if share == 0 || k >= n {
        return share;
    }
    let floor = k * u64::from(share) / n;
    u32::try_from(floor).map_or(share, |f| f.max(1))
}

/// The last batch a role has completed: the largest `k` with `share_at(k) ≤ moved`.
fn completed(p: &Progress, n: u64) -> u64 {
    let (moved, share) = (u64::from(p.moved), u64::from(p.share));
    if moved >= share {
        n
    } else if moved == 0 {
        0
    } else {
        // ⌊k·s/n⌋ ≤ m  ⟺  k < (m + 1)·n / s.
        ((moved + 1) * n)
            .div_ceil(share)
            .saturating_sub(1)
            .min(n - 1)
    }
}

/// What pairing reads of one pod of a paired role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairedPod<'a> {
    /// Pod name.
    pub name: &'a str,
    /// Its role.
    pub role: &'a str,
    /// Its pairing key label.
    pub key: Option<&'a str>,
    /// Its containers are ready, it is not terminating and no in-place move runs on it.
    pub up: bool,
    /// It is Ready (serving) and not terminating.
    pub ready: bool,
    /// It declares the pairing readiness gate (pods created before their role was paired
    /// do not, and serve as they did).
    pub gated: bool,
    /// The status of its pairing condition; None while absent (a gang's: any of its pods').
    pub servable: Option<bool>,
    /// A gang whose pods' conditions disagree: written whatever it should say.
    pub split: bool,
    /// It cannot start as it is: unschedulable, failed, or a container restarting while not
    /// ready (a gang: any of its pods).
    pub stuck: bool,
}

/// Which pods of a routing domain serve once the pods in `going` are gone: a gated pod is
/// servable while it is up, stays, and every role of its group has an up pod of its key that
/// stays.
struct Servability<'g> {
    groups: &'g [PairingGroup],
    /// Group and key → roles with an up pod of that key that stays.
    present: BTreeMap<(usize, String), BTreeSet<String>>,
}

impl<'g> Servability<'g> {
    fn new(groups: &'g [PairingGroup], pods: &[PairedPod<'_>], going: &BTreeSet<String>) -> Self {
        let mut present: BTreeMap<(usize, String), BTreeSet<String>> = BTreeMap::new();
        for pod in pods.iter().filter(|p| stays(p, going)) {
            if let (Some(group), Some(key)) = (group_of(groups, pod.role), pod.key) {
                present
                    .entry((group, key.to_string()))
                    .or_default()
                    .insert(pod.role.to_string());
            }
        }
        Self { groups, present }
    }

    fn servable(&self, pod: &PairedPod<'_>, going: &BTreeSet<String>) -> bool {
        stays(pod, going) && self.key_complete(pod)
    }

    /// Every role of `pod`'s group has an up pod of its key that stays.
    fn key_complete(&self, pod: &PairedPod<'_>) -> bool {
        let (Some(group), Some(key)) = (group_of(self.groups, pod.role), pod.key) else {
            return false;
        };
        let roles = self.present.get(&(group, key.to_string()));
        self.groups[group]
            .roles
            .iter()
            .all(|r| roles.is_some_and(|roles| roles.contains(r)))
    }

    /// `role`'s pods that serve: Ready ones that stay and, when gated, are servable.
    fn serving(&self, pods: &[PairedPod<'_>], role: &str, going: &BTreeSet<String>) -> u32 {
        pods.iter()
            .filter(|p| p.role == role && p.ready && !going.contains(p.name))
            .filter(|p| !p.gated || self.servable(p, going))
            .count() as u32
    }
}

fn group_of(groups: &[PairingGroup], role: &str) -> Option<usize> {
    groups
        .iter()
        .position(|g| g.roles.iter().any(|r| r == role))
}

fn stays(pod: &PairedPod<'_>, going: &BTreeSet<String>) -> bool {
    pod.up && !going.contains(pod.name)
}

/// What pairing makes of a pass's removals.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PairingPass {
    /// Removals held back this pass: they would end a key, leaving a partner role serving
    /// fewer pods than its floor.
    pub withheld: BTreeSet<String>,
    /// Gated pods whose pairing condition changes, with its new status.
    pub gates: Vec<(String, bool)>,
}

/// Pairing's part of a RoleSet's pass (its pods are one routing domain), given the removals
/// the roles chose — `deletes` and moves in place (`moves`) — and each paired role's floor of
/// serving pods (`desired − maxUnavailable`). A pod deleted now gets a gate write only when
/// its key stops serving with it.
///
/// Budgets count serving pods: the key's last pod of a role takes its partners out of
/// service, so the removals that would end a key wait (all of them: the key is kept whole)
/// while that would leave a partner role below its floor (or below what its own removals
/// leave) — unless a role of them has no pod of another key and creates none (`creating`
/// names the roles that do), when waiting could never end (a one-pod role without surge;
/// docs/rollouts.md#pairing). Then the gates:
/// written before anything is removed, a False gate with Ready False, so the API server's
/// order keeps the endpoints from listing a pod whose last partner is already gone.
pub fn pass(
    groups: &[PairingGroup],
    pods: &[PairedPod<'_>],
    deletes: &[String],
    moves: &[String],
    creating: &BTreeSet<String>,
    floors: &BTreeMap<String, u32>,
) -> PairingPass {
    let mut going: BTreeSet<String> = deletes.iter().chain(moves).cloned().collect();
    let mut withheld = BTreeSet::new();
    let floor = |role: &str| {
        let own: BTreeSet<String> = pods
            .iter()
            .filter(|p| p.role == role && going.contains(p.name))
            .map(|p| p.name.to_string())
            .collect();
        let left = Servability::new(groups, pods, &own).serving(pods, role, &own);
        floors.get(role).copied().unwrap_or(0).min(left)
    };
    let floors: BTreeMap<&str, u32> = floors.keys().map(|r| (r.as_str(), floor(r))).collect();
    let deficit = |going: &BTreeSet<String>| -> u32 {
        let servability = Servability::new(groups, pods, going);
        floors
            .iter()
            .map(|(role, floor)| floor.saturating_sub(servability.serving(pods, role, going)))
            .sum()
    };
    let mut short = deficit(&going);
    // The keys the removals take out of service, each revived whole (one pod of each role
    // that would lose its last one) when that lifts a partner role back toward its floor.
    let keys: BTreeSet<(usize, &str)> = pods
        .iter()
        .filter(|p| going.contains(p.name))
        .filter_map(|p| Some((group_of(groups, p.role)?, p.key?)))
        .collect();
    for (group, key) in keys {
        if short == 0 {
            break;
        }
        let of_key =
            |p: &&PairedPod<'_>| p.key == Some(key) && group_of(groups, p.role) == Some(group);
        let mut revive: BTreeMap<&str, &PairedPod<'_>> = BTreeMap::new();
        for pod in pods
            .iter()
            .filter(of_key)
            .filter(|p| p.up && going.contains(p.name))
        {
            let keeps_one = pods
                .iter()
                .filter(of_key)
                .any(|p| p.role == pod.role && stays(p, &going));
            if !keeps_one {
                revive.insert(pod.role, pod);
            }
        }
        // Waiting ends once the role's pod of another key is up: it needs one, present or
        // created now (a one-pod role without surge has neither, and goes).
        let endless = revive.values().any(|pod| {
            !creating.contains(pod.role)
                && !pods
                    .iter()
                    .any(|p| p.role == pod.role && p.key != pod.key && !going.contains(p.name))
        });
        if revive.is_empty() || endless {
            continue;
        }
        let mut trial = going.clone();
        for pod in revive.values() {
            trial.remove(pod.name);
        }
        let now = deficit(&trial);
        if now < short {
            short = now;
            going = trial;
            withheld.extend(revive.values().map(|p| p.name.to_string()));
        }
    }
    let servability = Servability::new(groups, pods, &going);
    let mut gates: Vec<(usize, String, bool)> = pods
        .iter()
        .filter(|p| p.gated)
        .filter_map(|pod| {
            let group = group_of(groups, pod.role)?;
            let position = groups[group].roles.iter().position(|r| r == pod.role)?;
            let deleted = going.contains(pod.name) && deletes.iter().any(|d| d == pod.name);
            // A pod deleted now keeps serving until the API server sees the delete: it needs
            // its False first only when its key stops serving with it.
            if deleted && servability.key_complete(pod) {
                return None;
            }
            // A role opens once the next role of the group serves the key: a key's pods
            // start serving from the group's last role to its first.
            let next_serves = groups[group].roles.get(position + 1).is_none_or(|next| {
                pods.iter()
                    .any(|q| q.role == next && q.key == pod.key && q.ready && stays(q, &going))
            });
            let wanted = servability.servable(pod, &going) && next_serves;
            // A gate without its condition holds the pod out of Ready already (as a kubelet
            // reads it): a new pod gets its first write when it may serve.
            (pod.split || pod.servable.unwrap_or(false) != wanted)
                .then(|| (position, pod.name.to_string(), wanted))
        })
        .collect();
    // ...and stop from its first to its last: the controller writes in this order, and the
    // API server keeps it, so a pod of a role never serves without the later roles' pods.
    gates.sort_by_key(|(position, _, wanted)| (*wanted, *position));
    let gates = gates
        .into_iter()
        .map(|(_, name, wanted)| (name, wanted))
        .collect();
    PairingPass { withheld, gates }
}

/// What a routing domain's keys serve, for its status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PairingReport {
    /// Per key (sorted, at most [`MAX_PAIRING_KEYS_REPORTED`]): its pods and serving pods by
    /// role of its group, and its skew.
    pub keys: Vec<PairingKeyStatus>,
    /// Keys with a pod up that wait for a role none of whose pods is up and some of which
    /// cannot start: what they wait for.
    pub waiting: Vec<String>,
}

/// One role's pods of a key.
#[derive(Clone, Copy, Debug, Default)]
struct RoleCount {
    live: u32,
    up: u32,
    serving: u32,
    stuck: u32,
}

/// What each key serves in a routing domain, and which keys wait for a role, from the pods
/// observed (a pod serves when Ready) and each role's `desired` replicas (the spec's ratio).
pub fn report(
    groups: &[PairingGroup],
    pods: &[PairedPod<'_>],
    desired: &BTreeMap<String, u32>,
) -> PairingReport {
    let mut counts: BTreeMap<(&str, usize), Vec<RoleCount>> = BTreeMap::new();
    for pod in pods {
        let (Some(group), Some(key)) = (group_of(groups, pod.role), pod.key) else {
            continue;
        };
        let roles = &groups[group].roles;
        let Some(position) = roles.iter().position(|r| r == pod.role) else {
            continue;
        };
        let entry = &mut counts
            .entry((key, group))
            .or_insert_with(|| vec![RoleCount::default(); roles.len()])[position];
        entry.live += 1;
        entry.up += u32::from(pod.up);
        entry.serving += u32::from(pod.ready);
        entry.stuck += u32::from(pod.stuck);
    }
    let mut report = PairingReport::default();
    for ((key, group), roles) in counts {
        let names = &groups[group].roles;
        // A key being rolled to waits for a role none of whose pods of it is up and some of
        // which cannot start — a partner starting as usual is no news (nor a status write),
        // and a key whose last pods of a role are gone is an old one winding down.
        if roles.iter().any(|r| r.up > 0) {
            for (name, role) in names.iter().zip(&roles) {
                if role.up == 0 && role.stuck > 0 {
                    report.waiting.push(format!(
                        "key {key} waits for role {name}: none of its {} pods up, {} cannot \
                         start (unschedulable, failed or restarting)",
                        role.live, role.stuck
                    ));
                }
            }
        }
        if report.keys.len() < MAX_PAIRING_KEYS_REPORTED {
            let wanted: Vec<u32> = names
                .iter()
                .map(|name| desired.get(name).copied().unwrap_or(0))
                .collect();
            let serving: Vec<u32> = roles.iter().map(|r| r.serving).collect();
            report.keys.push(PairingKeyStatus {
                key: key.to_string(),
                roles: names
                    .iter()
                    .zip(&roles)
                    .map(|(name, role)| PairedRoleStatus {
                        name: name.clone(),
                        pods: count(role.live),
                        serving: count(role.serving),
                    })
                    .collect(),
                skew: count(skew(&serving, &wanted)),
            });
        }
    }
    report
}

/// The pods the slowest role is short of the most advanced role's share: with `serving[r]`
/// of `desired[r]`, the leader is the role of the largest `serving / desired`, and a role is
/// short of `⌈leader's share · desired[r]⌉ − serving[r]` (roles scaled to zero left out).
pub fn skew(serving: &[u32], desired: &[u32]) -> u32 {
    let roles = || serving.iter().zip(desired).filter(|(_, d)| **d > 0);
    let Some((lead_serving, lead_desired)) = roles()
        .map(|(s, d)| (u64::from(*s), u64::from(*d)))
        .max_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)))
    else {
        return 0;
    };
    roles()
        .map(|(s, d)| {
            let share = (lead_serving * u64::from(*d)).div_ceil(lead_desired);
            share.saturating_sub(u64::from(*s))
        })
        .max()
        .map_or(0, |short| u32::try_from(short).unwrap_or(u32::MAX))
}

/// A status count (pods are far below `i32::MAX`).
fn count(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys::LABEL_PODSET_NAME;
    use crate::planner::serving::gate_writes;
    use proptest::prelude::*;

    fn group(roles: &[&str]) -> PairingGroup {
        PairingGroup {
            roles: roles.iter().map(|r| r.to_string()).collect(),
            protocol: None,
        }
    }

    fn pod<'a>(name: &'a str, role: &'a str, key: &'a str, up: bool) -> PairedPod<'a> {
        PairedPod {
            name,
            role,
            key: Some(key),
            up,
            ready: up,
            gated: true,
            servable: Some(up),
            split: false,
            stuck: false,
        }
    }

    fn going(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// The gates with `moving` pods moved in place and no floors (nothing withheld).
    fn gates(
        groups: &[PairingGroup],
        pods: &[PairedPod<'_>],
        moving: &[String],
    ) -> Vec<(String, bool)> {
        pass(
            groups,
            pods,
            &[],
            moving,
            &BTreeSet::new(),
            &BTreeMap::new(),
        )
        .gates
    }

    #[test]
    fn a_pod_is_servable_only_with_an_up_partner_of_its_key() {
        let groups = [group(&["prefill", "decode"])];
        let mut lone = pod("p-new", "prefill", "new", true);
        lone.servable = None;
        let pods = [
            pod("p-old", "prefill", "old", true),
            pod("d-old", "decode", "old", true),
            lone,
            pod("d-new", "decode", "new", false),
        ];
        // The old pair serves on; the new prefill waits for its decode without a write (its
        // missing condition holds it out already); the starting decode is not written again.
        assert!(gates(&groups, &pods, &[]).is_empty());
        let mut serving = pods.clone();
        serving[2].servable = Some(true);
        assert_eq!(
            gates(&groups, &serving, &[]),
            [("p-new".to_string(), false)]
        );
    }

    #[test]
    fn the_partners_of_a_keys_last_pod_stop_serving_as_it_goes() {
        let groups = [group(&["prefill", "decode"])];
        let pods = [
            pod("p-old", "prefill", "old", true),
            pod("d-old-1", "decode", "old", true),
            pod("d-old-2", "decode", "old", true),
        ];
        assert_eq!(
            gates(&groups, &pods, &going(&["p-old"])),
            [
                ("p-old".to_string(), false),
                ("d-old-1".to_string(), false),
                ("d-old-2".to_string(), false),
            ]
        );
        // A removal that leaves a pod of the key in its role touches only the pod.
        let pods = [
            pod("p-1", "prefill", "k", true),
            pod("p-2", "prefill", "k", true),
            pod("d-1", "decode", "k", true),
        ];
        assert_eq!(
            gates(&groups, &pods, &going(&["p-1"])),
            [("p-1".to_string(), false)]
        );
    }

    #[test]
    fn ungated_pods_are_partners_but_never_written() {
        let groups = [group(&["prefill", "decode"])];
        let mut legacy = pod("d-legacy", "decode", "k", true);
        legacy.gated = false;
        legacy.servable = None;
        let mut new = pod("p-1", "prefill", "k", true);
        new.servable = None;
        assert_eq!(
            gates(&groups, &[new, legacy], &[]),
            [("p-1".to_string(), true)]
        );
    }

    #[test]
    fn the_same_protocol_pairs_across_templates_and_roles_outside_the_group_are_ignored() {
        let groups = [group(&["prefill", "decode"])];
        let pods = [
            pod("p", "prefill", "kv-v2", true),
            pod("d", "decode", "kv-v2", true),
            pod("r", "router", "x", true),
        ];
        assert!(gates(&groups, &pods, &[]).is_empty());
    }

    /// A cached pod of `role` with key `k`, its containers ready or not, its pairing
    /// condition as given, in `podset`'s gang when it has one.
    fn cached(
        name: &str,
        role: &str,
        podset: Option<&str>,
        containers_ready: bool,
        gate: Option<&str>,
    ) -> Arc<CachedPod> {
        let mut labels = serde_json::json!({LABEL_ROLE_NAME: role, LABEL_PAIRING_KEY: "k"});
        if let Some(podset) = podset {
            labels[LABEL_PODSET_NAME] = podset.into();
        }
        let flag = |b: bool| if b { "True" } else { "False" };
        let mut conditions = vec![serde_json::json!({"type": "ContainersReady",
            "status": flag(containers_ready)})];
        conditions.push(serde_json::json!({"type": "Ready",
            "status": flag(containers_ready && gate == Some("True"))}));
        if let Some(gate) = gate {
            conditions
                .push(serde_json::json!({"type": CONDITION_PAIRING_SERVABLE, "status": gate}));
        }
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [], "readinessGates": [{"conditionType": CONDITION_PAIRING_SERVABLE}]},
            "status": {"phase": "Running", "conditions": conditions},
        }))
        .unwrap();
        Arc::new(CachedPod::from_pod(&pod))
    }

    #[test]
    fn a_gang_is_one_unit_up_when_all_its_pods_are_and_its_gate_is_written_on_each() {
        let groups = [group(&["prefill", "decode"])];
        let podsets: Vec<Arc<PodSet>> = vec![Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "d-0", "labels": {LABEL_ROLE_NAME: "decode", LABEL_PAIRING_KEY: "k"}},
                "spec": {"podGroupSize": 2, "template": {}},
            }))
            .unwrap(),
        )];
        let prefill = [cached("p", "prefill", None, true, Some("False"))];
        let decide = |gang: &[Arc<CachedPod>]| -> Vec<(String, bool)> {
            let gangs = Gangs::new(&podsets, gang);
            let paired = paired_pods(&groups, &prefill, &podsets, &gangs, &BTreeMap::new());
            let decided = pass(
                &groups,
                &paired,
                &[],
                &[],
                &BTreeSet::new(),
                &BTreeMap::new(),
            );
            decided
                .gates
                .iter()
                .flat_map(|(unit, servable)| {
                    gate_writes(unit, *servable, &gangs, &BTreeMap::new())
                        .into_iter()
                        .map(|pod| (pod, *servable))
                })
                .collect()
        };
        // One member's containers are not ready: the gang is not up, nothing opens.
        let starting = [
            cached("d-0-0", "decode", Some("d-0"), true, None),
            cached("d-0-1", "decode", Some("d-0"), false, None),
        ];
        assert!(decide(&starting).is_empty());
        // Both are: the gang (decode, the last role) opens on each of its pods.
        let up = [
            cached("d-0-0", "decode", Some("d-0"), true, None),
            cached("d-0-1", "decode", Some("d-0"), true, None),
        ];
        assert_eq!(
            decide(&up),
            [("d-0-0".to_string(), true), ("d-0-1".to_string(), true)]
        );
        // Half written (a pass cut short): only the other pod is written.
        let half = [
            cached("d-0-0", "decode", Some("d-0"), true, Some("True")),
            cached("d-0-1", "decode", Some("d-0"), true, None),
        ];
        assert_eq!(decide(&half), [("d-0-1".to_string(), true)]);
        // A member going down takes the gang out: the pod that serves closes.
        let down = [
            cached("d-0-0", "decode", Some("d-0"), true, Some("True")),
            cached("d-0-1", "decode", Some("d-0"), false, Some("True")),
        ];
        assert_eq!(
            decide(&down),
            [("d-0-0".to_string(), false), ("d-0-1".to_string(), false)]
        );
    }

    #[test]
    fn a_key_opens_from_the_groups_last_role_and_closes_from_its_first() {
        let groups = [group(&["prefill", "decode"])];
        let starting = |name, role| PairedPod {
            ready: false,
            servable: Some(false),
            ..pod(name, role, "new", true)
        };
        // Both new pods are up: decode opens; prefill waits until decode serves.
        let pods = [starting("p", "prefill"), starting("d", "decode")];
        assert_eq!(gates(&groups, &pods, &[]), [("d".to_string(), true)]);
        let pods = [
            starting("p", "prefill"),
            PairedPod {
                ready: true,
                servable: Some(true),
                ..starting("d", "decode")
            },
        ];
        assert_eq!(gates(&groups, &pods, &[]), [("p".to_string(), true)]);
        // The key ends (both move in place): prefill closes first, whatever the pods' order.
        let pods = [
            pod("d", "decode", "old", true),
            pod("p", "prefill", "old", true),
        ];
        assert_eq!(
            gates(&groups, &pods, &going(&["d", "p"])),
            [("p".to_string(), false), ("d".to_string(), false)]
        );
    }

    #[test]
    fn removals_that_end_a_key_wait_together_while_a_partner_needs_its_pods() {
        let groups = [group(&["prefill", "decode", "router"])];
        let pods = [
            pod("p-old", "prefill", "old", true),
            pod("p-new", "prefill", "new", true),
            pod("d-old-1", "decode", "old", true),
            pod("d-old-2", "decode", "old", true),
            pod("d-new-1", "decode", "new", true),
            pod("d-new-2", "decode", "new", true),
            pod("r-old", "router", "old", true),
            pod("r-new", "router", "new", true),
        ];
        let floors: BTreeMap<String, u32> = [("prefill", 1), ("decode", 3), ("router", 1)]
            .into_iter()
            .map(|(r, f)| (r.to_string(), f))
            .collect();
        // The last batch: each role's old pods go, but decode keeps an old one until its third
        // new pod serves — and neither the old prefill nor the old router alone keeps it
        // serving: both wait.
        let decided = pass(
            &groups,
            &pods,
            &going(&["p-old", "d-old-1", "r-old"]),
            &[],
            &BTreeSet::new(),
            &floors,
        );
        assert_eq!(
            decided.withheld,
            BTreeSet::from(["p-old".to_string(), "r-old".to_string()])
        );
        assert!(decided.gates.is_empty(), "{:?}", decided.gates);
        // A one-pod role with nothing of the other key, creating nothing, goes: waiting could
        // not end.
        let lone = [
            pod("p-old", "prefill", "old", true),
            pod("d-old", "decode", "old", true),
            pod("d-new", "decode", "new", true),
        ];
        let floors = BTreeMap::from([("decode".to_string(), 1)]);
        let pair = [group(&["prefill", "decode"])];
        let decided = pass(
            &pair,
            &lone,
            &going(&["p-old"]),
            &[],
            &BTreeSet::new(),
            &floors,
        );
        assert!(decided.withheld.is_empty());
        // The same role creating its new pod this pass waits for it instead.
        let creating = BTreeSet::from(["prefill".to_string()]);
        let decided = pass(&pair, &lone, &going(&["p-old"]), &[], &creating, &floors);
        assert_eq!(decided.withheld, BTreeSet::from(["p-old".to_string()]));
    }

    #[test]
    fn lockstep_moves_every_role_in_the_first_batch_and_the_last_old_pods_in_the_last() {
        let p = |moved, share| Progress {
            moved,
            share,
            batch: 1,
        };
        // Prefill 2, decode 8: eight batches; prefill keeps an old pod until the eighth.
        assert_eq!(lockstep_caps(&[p(0, 2), p(0, 8)]), [1, 1]);
        assert_eq!(lockstep_caps(&[p(1, 2), p(1, 8)]), [1, 2]);
        assert_eq!(lockstep_caps(&[p(1, 2), p(7, 8)]), [2, 8]);
        // A role that has not caught up holds the other.
        assert_eq!(lockstep_caps(&[p(0, 2), p(5, 8)]), [1, 1]);
        assert_eq!(lockstep_caps(&[p(2, 2), p(8, 8)]), [2, 8]);
    }

    #[test]
    fn the_report_counts_each_keys_serving_pods_by_role_and_names_the_role_a_key_waits_for() {
        let groups = [group(&["prefill", "decode"])];
        let starting = |name, role| PairedPod {
            ready: false,
            servable: None,
            ..pod(name, role, "new", true)
        };
        let stuck = PairedPod {
            up: false,
            stuck: true,
            ..starting("d-new", "decode")
        };
        let pods = [
            pod("p-old-1", "prefill", "old", true),
            pod("p-old-2", "prefill", "old", true),
            pod("d-old-1", "decode", "old", true),
            pod("d-old-2", "decode", "old", false),
            starting("p-new", "prefill"),
            stuck,
            pod("r", "router", "x", true),
        ];
        let desired = BTreeMap::from([("prefill".to_string(), 2), ("decode".to_string(), 2)]);
        let reported = report(&groups, &pods, &desired);
        let serving = |key: &PairingKeyStatus| -> Vec<(String, i32, i32)> {
            key.roles
                .iter()
                .map(|r| (r.name.clone(), r.pods, r.serving))
                .collect()
        };
        assert_eq!(
            reported
                .keys
                .iter()
                .map(|k| k.key.as_str())
                .collect::<Vec<_>>(),
            ["new", "old"]
        );
        assert_eq!(
            serving(&reported.keys[0]),
            [("prefill".into(), 1, 0), ("decode".into(), 1, 0)]
        );
        assert_eq!(
            serving(&reported.keys[1]),
            [("prefill".into(), 2, 2), ("decode".into(), 2, 1)]
        );
        assert_eq!((reported.keys[0].skew, reported.keys[1].skew), (0, 1));
        assert_eq!(
            reported.waiting,
            [
                "key new waits for role decode: none of its 1 pods up, 1 cannot start \
              (unschedulable, failed or restarting)"
            ]
        );
        // A decode starting as usual is no news.
        let mut pods = pods;
        pods[5].stuck = false;
        assert!(report(&groups, &pods, &desired).waiting.is_empty());
        // Once the decode is up, nothing waits; nor does an old key whose last decode is gone.
        pods[5].up = true;
        assert!(report(&groups, &pods, &desired).waiting.is_empty());
        let winding_down = [pods[0].clone(), pods[4].clone(), pods[5].clone()];
        assert!(report(&groups, &winding_down, &desired).waiting.is_empty());
    }

    #[test]
    fn the_skew_is_what_the_slowest_role_lacks_of_the_leaders_share() {
        // 1 : 3 ratio; prefill serves half its replicas, decode one of six: decode lacks 2.
        assert_eq!(skew(&[1, 1], &[2, 6]), 2);
        assert_eq!(skew(&[1, 3], &[2, 6]), 0);
        assert_eq!(skew(&[2, 1], &[3, 3]), 1);
        // A role scaled to zero is out of the ratio; nothing serving is no skew.
        assert_eq!(skew(&[2, 0], &[2, 0]), 0);
        assert_eq!(skew(&[0, 0], &[3, 3]), 0);
    }

    proptest! {
        /// The skew is zero at the spec's exact ratio, and a role that stops serving is
        /// short of its whole share, never more than its replicas.
        #[test]
        fn the_skew_is_zero_at_the_ratio_and_counts_a_roles_missing_share(
            unit in proptest::collection::vec(1u32..8, 2..5),
            batches in 1u32..=3,
            done in 0u32..=3,
        ) {
            let done = done.min(batches);
            let desired: Vec<u32> = unit.iter().map(|u| u * batches).collect();
            let serving: Vec<u32> = unit.iter().map(|u| u * done).collect();
            prop_assert_eq!(skew(&serving, &desired), 0);
            let mut behind = serving.clone();
            behind[0] = 0;
            let lacks = skew(&behind, &desired);
            prop_assert!(lacks >= serving[0] && lacks <= desired[0], "{} of {:?}", lacks, desired);
        }
    }

    /// A RoleSet's paired roles rolled out pass by pass against a model kubelet: Ready is
    /// `ContainersReady` and every gate, containers start in an order the test draws.
    mod rollout {
        use super::*;
        use crate::api::RoleSetUpdateStrategy;
        use crate::api::budget::{Budget, resolve_fenceposts};
        use crate::planner::roleset::in_place::PendingReason;
        use crate::planner::roleset::roles::{PodView, RoleInput, plan, upgrade_sequence};

        #[derive(Clone, Debug)]
        struct Pod {
            name: String,
            role: usize,
            hash: &'static str,
            containers_ready: bool,
            servable: Option<bool>,
            ready: bool,
            moving: bool,
            created: i64,
        }

        #[derive(Clone, Debug)]
        struct Role {
            desired: u32,
            surge: u32,
            unavailable: u32,
            in_place: bool,
        }

        /// A role's pods a pooled canary at `weight` % keeps on the stable template.
        fn partition(role: &Role, weight: u32) -> u32 {
            role.desired - (role.desired * weight).div_ceil(100)
        }

        const ROLES: [&str; 3] = ["prefill", "decode", "router"];

        fn inputs(roles: &[Role], pods: &[Pod], partitions: &[u32]) -> Vec<RoleInput> {
            roles
                .iter()
                .enumerate()
                .map(|(i, role)| RoleInput {
                    name: ROLES[i].into(),
                    desired: role.desired,
                    budgets: resolve_fenceposts(
                        Some(Budget::Count(role.surge)),
                        Some(Budget::Count(role.unavailable)),
                        role.desired,
                    ),
                    target_hash: "new".into(),
                    pods: pods
                        .iter()
                        .filter(|p| p.role == i)
                        .map(|p| PodView {
                            name: p.name.clone(),
                            hash: p.hash.into(),
                            running: true,
                            terminating: false,
                            ready: p.ready,
                            available: p.ready,
                            available_at: None,
                            gated: true,
                            created: p.created,
                            slot: None,
                            in_place_target: p.moving.then(|| "new".into()),
                            in_place_pending: (p.moving && !p.containers_ready)
                                .then_some(PendingReason::ContainerNotReady),
                            draining: None,
                        })
                        .collect(),
                    in_place: role.in_place,
                    partition: partitions[i],
                    stable_hash: (partitions[i] > 0).then(|| "old".into()),
                    ..RoleInput::default()
                })
                .collect()
        }

        fn paired<'a>(pods: &'a [Pod], group: usize) -> Vec<PairedPod<'a>> {
            pods.iter()
                .filter(|p| p.role < group)
                .map(|p| PairedPod {
                    name: &p.name,
                    role: ROLES[p.role],
                    key: Some(p.hash),
                    up: p.containers_ready && !p.moving,
                    ready: p.ready,
                    gated: true,
                    servable: p.servable,
                    split: false,
                    stuck: false,
                })
                .collect()
        }

        /// What the controller observes: the pods as they are, but for the kubelet's last
        /// changes to the `lagging` pods, which its cache has not seen yet (containers that
        /// started, Ready that followed a gate; its own writes it sees at once).
        fn observed(pods: &[Pod], lagging: &BTreeMap<String, (bool, bool)>) -> Vec<Pod> {
            pods.iter()
                .map(|p| match lagging.get(&p.name) {
                    Some(&(containers_ready, ready)) => Pod {
                        containers_ready: p.containers_ready && containers_ready,
                        ready: p.ready && ready,
                        ..p.clone()
                    },
                    None => p.clone(),
                })
                .collect()
        }

        /// Every Ready pod of the group has a Ready pod of its key in every later role of it,
        /// and in every earlier role one that is Ready or up (opening after it: a key's pods
        /// start serving from the group's last role to its first).
        fn partnered(pods: &[Pod], group: usize) -> Result<(), String> {
            for pod in pods.iter().filter(|p| p.ready && p.role < group) {
                for (role, name) in ROLES.iter().enumerate().take(group) {
                    let partner = |q: &Pod| {
                        q.role == role
                            && q.hash == pod.hash
                            && (q.ready || role < pod.role && q.containers_ready && !q.moving)
                    };
                    if role != pod.role && !pods.iter().any(partner) {
                        return Err(format!("{} serves {} without a {name}", pod.name, pod.hash));
                    }
                }
            }
            Ok(())
        }

        fn arb_role() -> impl Strategy<Value = Role> {
            // An in-place role moves Ready pods within maxUnavailable only (surge adds none).
            (1u32..6, 0u32..3, 0u32..3, any::<bool>()).prop_map(
                |(desired, surge, unavailable, in_place)| Role {
                    desired,
                    surge,
                    unavailable: if in_place {
                        unavailable.max(1)
                    } else {
                        unavailable
                    },
                    in_place,
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(200))]
            /// docs/rollouts.md#pairing: whatever the group's sizes, ratios, budgets,
            /// strategy and canary weight, whichever containers start first and whichever of
            /// the kubelet's changes the controller has not observed yet, no pod serves
            /// without a partner of its key, no role exceeds `desired + maxSurge`, gate writes
            /// are idempotent, and the rollout completes (to the weight).
            #[test]
            fn a_paired_rollout_never_serves_unpartnered_and_completes(
                roles in prop::collection::vec(arb_role(), 2..4),
                group in 2usize..4,
                strategy in prop::sample::select(vec![
                    RoleSetUpdateStrategy::Sequential,
                    RoleSetUpdateStrategy::Parallel,
                    RoleSetUpdateStrategy::Interleave,
                ]),
                starts in prop::collection::vec(any::<u16>(), 64),
                stale in prop::collection::vec(any::<u16>(), 64),
                weight in prop::sample::select(vec![100u32, 100, 25, 50, 75, 10]),
            ) {
                let group = group.min(roles.len());
                let groups = [PairingGroup {
                    roles: ROLES[..group].iter().map(|r| r.to_string()).collect(),
                    protocol: None,
                }];
                let indexes = [(0..group).collect::<Vec<usize>>()];
                let sequence = upgrade_sequence(&vec![0; roles.len()]);
                let mut pods: Vec<Pod> = Vec::new();
                let mut serial = 0;
                for (i, role) in roles.iter().enumerate() {
                    for _ in 0..role.desired {
                        serial += 1;
                        pods.push(Pod { name: format!("{}-{serial}", ROLES[i]), role: i, hash: "old",
                            containers_ready: true, servable: Some(true), ready: true, moving: false,
                            created: 0 });
                    }
                }
                // A weight that moves a group role whole while a partner keeps stable pods
                // moves the group whole (the StormService's pooled spec does so).
                let kept: Vec<u32> = roles[..group].iter().map(|r| partition(r, weight)).collect();
                let key_split = kept.contains(&0) && kept.iter().any(|&k| k > 0);
                let partitions: Vec<u32> = roles.iter().enumerate()
                    .map(|(i, r)| if i < group && key_split { 0 } else { partition(r, weight) })
                    .collect();
                let unavoidable = roles[..group].iter()
                    .any(|r| r.desired == 1 && (r.surge == 0 || r.in_place));
                let mut done = false;
                let mut lagging: BTreeMap<String, (bool, bool)> = BTreeMap::new();
                for pass in 0..400usize {
                    let view = observed(&pods, &lagging);
                    let inputs = inputs(&roles, &view, &partitions);
                    let mut actions = plan(strategy, &inputs, &sequence, &indexes);
                    let floors: BTreeMap<String, u32> = inputs[..group].iter()
                        .map(|r| (r.name.clone(), r.desired.saturating_sub(r.budgets.max_unavailable)))
                        .collect();
                    let deletes: Vec<String> = actions.iter().flat_map(|a| a.delete.clone()).collect();
                    let moves: Vec<String> = actions.iter().flat_map(|a| a.in_place_start.clone()).collect();
                    let creating: BTreeSet<String> = actions.iter().zip(&inputs)
                        .filter(|(a, _)| a.creates() > 0).map(|(_, r)| r.name.clone()).collect();
                    let decided = super::pass(&groups, &paired(&view, group), &deletes, &moves, &creating, &floors);
                    for action in &mut actions {
                        action.delete.retain(|n| !decided.withheld.contains(n));
                        action.in_place_start.retain(|n| !decided.withheld.contains(n));
                    }
                    for (name, servable) in &decided.gates {
                        let pod = pods.iter_mut().find(|p| &p.name == name).unwrap();
                        pod.servable = Some(*servable);
                        pod.ready &= *servable;
                    }
                    let deletes: Vec<String> = actions.iter().flat_map(|a| a.delete.clone()).collect();
                    let moves: Vec<String> = actions.iter().flat_map(|a| a.in_place_start.clone()).collect();
                    let view = observed(&pods, &lagging);
                    prop_assert!(super::pass(&groups, &paired(&view, group), &deletes, &moves, &creating, &floors).gates.is_empty(),
                        "gate writes are not idempotent");
                    partnered(&pods, group).map_err(|e| TestCaseError::fail(format!("pass {pass}, gates: {e}")))?;
                    for (i, action) in actions.iter().enumerate() {
                        pods.retain(|p| !action.delete.contains(&p.name));
                        for name in &action.in_place_start {
                            let pod = pods.iter_mut().find(|p| &p.name == name).unwrap();
                            pod.moving = true;
                            pod.containers_ready = false;
                            pod.ready = false;
                        }
                        for name in &action.in_place_complete {
                            let pod = pods.iter_mut().find(|p| &p.name == name).unwrap();
                            pod.moving = false;
                            pod.hash = "new";
                        }
                        let hashes = std::iter::repeat_n("new", action.create as usize)
                            .chain(std::iter::repeat_n("old", action.create_stable as usize));
                        for hash in hashes {
                            serial += 1;
                            pods.push(Pod { name: format!("{}-{serial}", ROLES[i]), role: i, hash,
                                containers_ready: false, servable: None, ready: false, moving: false,
                                created: pass as i64 + 1 });
                        }
                        let present = pods.iter().filter(|p| p.role == i).count() as u32;
                        prop_assert!(present <= roles[i].desired + roles[i].surge,
                            "role {} has {present} pods", ROLES[i]);
                    }
                    partnered(&pods, group).map_err(|e| TestCaseError::fail(format!("pass {pass}, writes: {e}")))?;
                    // Budgets count serving pods — but a one-pod role without surge cannot move
                    // without taking its partners out of service for a while.
                    if !unavoidable {
                        for (i, input) in inputs[..group].iter().enumerate() {
                            let floor = &floors[&input.name];
                            let serving = pods.iter().filter(|p| p.role == i && p.ready).count() as u32;
                            prop_assert!(serving >= *floor,
                                "pass {pass}: {} serves {serving} pods, its floor is {floor}: {pods:?}", input.name);
                        }
                    }
                    // The kubelet: some containers start, and Ready follows the gates; the
                    // controller's cache misses some of it until the next pass.
                    let draw = starts[pass % starts.len()];
                    let lag = stale[pass % stale.len()];
                    lagging = pods.iter().enumerate()
                        .filter(|(n, _)| (lag >> (n % 16)) & 1 == 1)
                        .map(|(_, p)| (p.name.clone(), (p.containers_ready, p.ready)))
                        .collect();
                    for (n, pod) in pods.iter_mut().enumerate() {
                        if !pod.containers_ready && (draw >> (n % 16)) & 1 == 1 || pass % 7 == 6 {
                            pod.containers_ready = true;
                        }
                        let gated = pod.role < group;
                        pod.ready = pod.containers_ready && !pod.moving
                            && (!gated || pod.servable == Some(true));
                    }
                    partnered(&pods, group).map_err(|e| TestCaseError::fail(format!("pass {pass}, kubelet: {e}")))?;
                    // Done at the weight: each role's share on the new template and the rest on
                    // the stable one, every pod serving whose key is whole.
                    let finished = roles.iter().enumerate().all(|(i, role)| {
                        let of: Vec<&Pod> = pods.iter().filter(|p| p.role == i).collect();
                        let stable = of.iter().filter(|p| p.hash == "old").count() as u32;
                        of.len() as u32 == role.desired
                            && stable == partitions[i]
                            && of.iter().all(|p| p.ready)
                    });
                    if finished {
                        done = true;
                        break;
                    }
                }
                prop_assert!(done, "the rollout did not complete: {pods:?}");
            }
        }
    }

    proptest! {
        /// Caps never exceed a share, never shrink as roles progress, move no role by more
        /// than its batch, give every role a pod in the first batch, and reach every share
        /// once every role is done.
        #[test]
        fn lockstep_caps_are_monotone_and_complete(
            shares in prop::collection::vec((1u32..40, 1u32..5), 2..4),
            fraction in 0u32..=100,
        ) {
            let progress = |f: u32| -> Vec<Progress> {
                shares.iter().map(|&(share, batch)| Progress {
                    moved: share * f / 100,
                    share,
                    batch,
                }).collect()
            };
            let caps = lockstep_caps(&progress(fraction));
            let later = lockstep_caps(&progress((fraction + 10).min(100)));
            for ((cap, later), &(share, batch)) in caps.iter().zip(&later).zip(&shares) {
                prop_assert!(*cap <= share && *cap >= 1);
                prop_assert!(later >= cap, "caps shrank: {caps:?} then {later:?}");
                let moved = share * fraction / 100;
                prop_assert!(cap.saturating_sub(moved) <= batch,
                    "a batch moves {} of share {share}, batch {batch}", cap - moved);
            }
            prop_assert_eq!(lockstep_caps(&progress(100)),
                shares.iter().map(|s| s.0).collect::<Vec<_>>());
            prop_assert!(lockstep_caps(&progress(0)).iter().all(|&c| c >= 1));
        }
    }
}
