//! One RoleSet pass, decided (docs/rollouts.md#role-order, docs/architecture.md#one-reconcile):
//! from the RoleSet, its pods and PodSets as cached, the creates and deletes not yet observed and
//! the stable revisions read, every role's action (with its creates rendered and its in-place
//! patches built), the children to delete because they no longer fit the spec, and what to tell the
//! user. The controller carries the pass out and writes the status; nothing here does I/O or reads
//! the clock.
//!
//! A pass is decided in two halves because the controller needs the first to observe for the
//! second: [`role_children`](children::role_children) says which children each role counts (the controller settles
//! its expectations against them and reads the stable revisions they ask for), then
//! [`decide`] plans.

pub mod adoption;
pub mod children;
pub mod drain;
pub mod in_place;
pub mod roles;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodSpec};

use crate::api::cached::meta::Labelled;
use crate::api::cached::pod::CachedPod;
use kube::ResourceExt;
use serde_json::Value;

use super::render::{
    group_of, has_affinity, pairing_key, podset_for_slot, stateful_pod, stateless_pod,
    template_hash, topology_affinity,
};
use super::revision::{role_template, template_of};
use crate::api::drain::Drain;
use crate::api::keys::{
    ANNOTATION_IN_PLACE_PENDING_REASON, LABEL_PAIRING_KEY, LABEL_ROLE_NAME,
    LABEL_ROLE_TEMPLATE_HASH,
};
use crate::api::{
    PairingGroup, PodSet, RoleSet, RoleSetUpdateStrategy, RoleSpec, RoleUpdateStrategyType,
    ServingGate,
};
use crate::planner::availability::Availability;
use crate::planner::pairing::{self, group_indexes, paired_pods};
use crate::planner::podgroup::Gang;
use crate::planner::serving::{self, Gangs, Gate, gate_writes};
use crate::planner::status::Reason;
use adoption::{adopt, stale_revision_labels};
use children::{
    RoleChildren, desired_pod, in_place_target, of_role, partition, pod_view, podset_view,
};
use drain::{DrainWrites, Reading, Retired, drain_retired, drain_roles};
use in_place::{eligibility, has_readiness_gate, start_patch};
use roles::{Draining, PodView, RoleAction, RoleInput, plan, retire, upgrade_sequence};

/// Creates and deletes of one role issued by earlier passes that the cache does not show yet.
#[derive(Clone, Debug, Default)]
pub struct Pending {
    /// Stateless creates from the target template.
    pub creates: u32,
    /// Stateless creates from the stable template.
    pub stable_creates: u32,
    /// Slots of stateful creates.
    pub slots: BTreeSet<u32>,
    /// Names of children being deleted.
    pub deletes: BTreeSet<String>,
}

/// What one RoleSet pass observed.
pub struct PassInput<'a> {
    /// The RoleSet as cached.
    pub roleset: &'a RoleSet,
    /// Its pods, as cached.
    pub pods: &'a [Arc<CachedPod>],
    /// Its PodSets, as cached.
    pub podsets: &'a [Arc<PodSet>],
    /// The pods of its PodSets, as cached, when roles are paired (a gang's gate is on them).
    pub gang_pods: &'a [Arc<CachedPod>],
    /// Pairing conditions written that the cache does not show yet, by pod.
    pub written_gates: &'a BTreeMap<String, bool>,
    /// [`role_children`](children::role_children) of this RoleSet.
    pub roles: Vec<RoleChildren>,
    /// By role, aligned with `roles`.
    pub pending: Vec<Pending>,
    /// By role, aligned with `roles`: the stable revision asked for, as read, or why it could
    /// not be.
    pub stable: Vec<Option<Result<Arc<ControllerRevision>, String>>>,
    /// Where the RoleSet's gang PodGroup stands (its pods wait while it holds them).
    pub gang: Gang,
    /// `minReadySeconds` now: the clock `roles` were viewed with.
    pub clock: Availability,
    /// Drain starts written that the cache does not show yet, by child: when they started.
    pub written_drains: &'a BTreeMap<String, i64>,
    /// Requests in flight of draining children, by child, as read.
    pub readings: &'a BTreeMap<String, Reading>,
}

/// A child to create, rendered.
#[derive(Clone, Debug)]
pub enum NewChild {
    /// A plain pod.
    Pod(Box<Pod>),
    /// A PodSet (one replica of a multi-node role).
    PodSet(Box<PodSet>),
}

/// A create of one role, with what the expectations record of it.
#[derive(Clone, Debug)]
pub struct Create {
    /// The slot of a stateful role's child.
    pub slot: Option<u32>,
    /// Rendered from the stable template.
    pub stable: bool,
    /// The object to send.
    pub child: NewChild,
}

/// The in-place writes of one role (docs/rollouts.md#in-place-image-updates).
#[derive(Clone, Debug, Default)]
pub struct InPlaceWrites {
    /// Why the role recreates instead (an `InPlaceFallback` event).
    pub fallback: Option<String>,
    /// Pods whose update completed, and whether they declare the in-place readiness gate.
    pub complete: Vec<(String, bool)>,
    /// Pods whose pending reason changed from the one they carry: the new reason.
    pub pending: Vec<(String, &'static str)>,
    /// Pods whose update starts now.
    pub start: Vec<InPlaceStart>,
}

/// An in-place update that starts now.
#[derive(Clone, Debug)]
pub struct InPlaceStart {
    /// The pod.
    pub pod: String,
    /// It declares the in-place readiness gate (set False before the patch).
    pub gated: bool,
    /// The strategic-merge patch.
    pub patch: Value,
}

/// One role's part of the pass.
#[derive(Clone, Debug)]
pub struct RoleWrites {
    /// Role name.
    pub role: String,
    /// Multi-node role: `action` creates and deletes PodSets.
    pub gang: bool,
    /// Hash of the role's current template.
    pub target_hash: String,
    /// What the planner decided.
    pub action: RoleAction,
    /// The creates of `action`, rendered.
    pub creates: Vec<Create>,
    /// The in-place part of `action`.
    pub in_place: InPlaceWrites,
    /// Pods from another template hash that already are what the role would create: they
    /// get `target_hash` by a label patch (counted as updated by this pass).
    pub adopted: Vec<String>,
    /// Pods on `target_hash` whose role-revision labels are not the RoleSet's: relabelled.
    pub relabel: Vec<String>,
}

/// The pass, decided.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// By role, in spec order: what the status is derived from.
    pub inputs: Vec<RoleInput>,
    /// By role, in spec order.
    pub roles: Vec<RoleWrites>,
    /// Pods of roles that now run PodSets (a `podGroupSize` change).
    pub orphan_pods: Vec<String>,
    /// PodSets of roles that now run plain pods.
    pub orphan_podsets: Vec<String>,
    /// Pods of roles removed from the spec (docs/architecture.md#one-reconcile: they go with their
    /// role).
    pub retired_pods: Vec<String>,
    /// PodSets of roles removed from the spec.
    pub retired_podsets: Vec<String>,
    /// Roles whose stable template is unknown, and why (the status reports it).
    pub problems: Vec<String>,
    /// The upgrade order, when a `Sequential` rollout is under way (logged once per
    /// generation).
    pub sequence: Option<String>,
    /// Live pods and PodSets created before the `topologyPolicy` changed, which keep their
    /// old affinity until replaced (told once per generation), when there are any.
    pub topology_pending: Option<(usize, usize)>,
    /// Gated pods whose serving condition changes, with its new status and reason (one
    /// pods/status patch each).
    pub gates: Vec<Gate>,
    /// What the pairing keys serve, when roles are paired (the status reports it).
    pub pairing: Option<pairing::PairingReport>,
    /// The Unix second the pass is due again though no event may come: the next Ready child
    /// becomes available (docs/rollouts.md#minreadyseconds), or a role's warm pods are due
    /// to go (docs/rollouts.md#warm-abort), or a drain's next reading or timeout
    /// (docs/rollouts.md#drain-before-delete).
    pub wake_at: Option<i64>,
    /// The drains of the pass.
    pub drain: DrainWrites,
}

/// The second half: decides the pass.
pub fn decide(input: PassInput<'_>) -> Pass {
    let (roleset, input_pods, input_podsets) = (input.roleset, input.pods, input.podsets);
    let input_gang = input.gang;
    let specs: Vec<&RoleSpec> = roleset.spec.roles.iter().flatten().collect();
    let mut pass = Pass::default();
    let mut stables = Vec::new();
    let mut adoptions = Vec::new();
    for (((role, children), pending), stable) in specs
        .iter()
        .zip(input.roles)
        .zip(input.pending)
        .zip(input.stable)
    {
        let stable = match stable {
            Some(Ok(revision)) => match role_template(&revision, &role.name) {
                Ok(template) => Some(StableTemplate {
                    hash: template_hash(&template),
                    pairing_key: stable_pairing_key(roleset, &revision, &role.name),
                    role: RoleSpec {
                        template: Some(template.into()),
                        ..(*role).clone()
                    },
                }),
                Err(e) => {
                    pass.problems.push(format!("role {}: {e}", role.name));
                    None
                }
            },
            Some(Err(e)) => {
                pass.problems.push(format!("role {}: {e}", role.name));
                None
            }
            None => None,
        };
        // Children of the other kind are left over from a podGroupSize change.
        if children.gang {
            pass.orphan_pods
                .extend(of_role(input_pods, &role.name).map(|p| p.name().to_string()));
        } else {
            pass.orphan_podsets
                .extend(of_role(input_podsets, &role.name).map(|p| p.name_any()));
        }
        let stable_hash = stable.as_ref().map(|stable| stable.hash.clone());
        let mut children = children;
        with_written_drains(&mut children.children, input.written_drains);
        let adopted = adopt(
            roleset,
            role,
            &mut children,
            stable_hash.as_deref(),
            input_pods,
            input_podsets,
        );
        let target_hash = template_hash(&role.template.clone().unwrap_or_default());
        let relabel: Vec<String> = stale_revision_labels(
            roleset,
            role,
            &children,
            &target_hash,
            input_pods,
            input_podsets,
        )
        .into_iter()
        .filter(|name| !adopted.contains(name))
        .collect();
        pass.inputs.push(role_input(
            roleset,
            role,
            children,
            pending,
            stable_hash,
            input_pods,
            input.clock.now,
        ));
        adoptions.push((adopted, relabel));
        stables.push(stable);
    }

    let strategy = roleset.spec.update_strategy.unwrap_or_default();
    let orders: Vec<i32> = specs.iter().map(|r| r.upgrade_order_or_default()).collect();
    let sequence = upgrade_sequence(&orders);
    // A rollout is under way when some live pod is off its role's template.
    let rolling = pass.inputs.iter().any(|role| {
        role.pods
            .iter()
            .any(|p| !p.terminating && p.hash != role.target_hash)
    });
    if strategy == RoleSetUpdateStrategy::Sequential && rolling {
        let order: Vec<String> = sequence
            .iter()
            .map(|&i| format!("{}({})", specs[i].name, orders[i]))
            .collect();
        pass.sequence = Some(order.join(" -> "));
    }
    let pairing = roleset.spec.pairing.as_deref().unwrap_or_default();
    let groups = group_indexes(pairing, &specs);
    let mut actions = plan(strategy, &pass.inputs, &sequence, &groups);
    let observed = Observed {
        pods: input_pods,
        podsets: input_podsets,
        gang_pods: input.gang_pods,
        written_gates: input.written_gates,
    };
    traffic(
        roleset,
        &specs,
        &observed,
        (!groups.is_empty()).then_some(pairing),
        (input.readings, input.clock.now),
        &mut pass,
        &mut actions,
    );
    for ((((role, input), stable), action), adopted) in specs
        .iter()
        .zip(&pass.inputs)
        .zip(&stables)
        .zip(actions)
        .zip(adoptions)
    {
        let mut writes = role_writes(roleset, role, input, stable.as_ref(), action, input_pods);
        // The gang's pods wait while its PodGroup holds them.
        if input_gang.holds_pods() {
            writes.creates.clear();
        }
        let (adopted, relabel) = adopted;
        pass.roles.push(RoleWrites {
            adopted,
            relabel,
            ..writes
        });
    }

    retire_children(
        &specs,
        &observed,
        (input.clock, input.written_drains, input.readings),
        &mut pass,
    );
    pass.topology_pending = topology_pending(roleset, &specs, input_pods, input_podsets);
    pass.wake_at = wake_at(&specs, &pass.inputs, pass.drain.wake_at);
    pass
}

/// Who serves (docs/rollouts.md#the-serving-gate): pairing holds back the removals in
/// `actions` a partner needs, drains withhold the removals of children still draining and
/// start those of serving ones (docs/rollouts.md#drain-before-delete), and the gates follow.
fn traffic(
    roleset: &RoleSet,
    specs: &[&RoleSpec],
    observed: &Observed<'_>,
    pairing: Option<&[PairingGroup]>,
    (readings, now): (&BTreeMap<String, Reading>, i64),
    pass: &mut Pass,
    actions: &mut [RoleAction],
) {
    let mut held_out = held_out(roleset, &pass.inputs);
    held_out.extend(
        pass.inputs
            .iter()
            .flat_map(|r| &r.pods)
            .filter(|p| p.draining.is_some() && !p.terminating)
            .map(|p| (p.name.clone(), Reason::Draining)),
    );
    if let Some(groups) = pairing {
        (pass.gates, pass.pairing) = pair(groups, observed, &pass.inputs, &held_out, actions);
    }
    let gangs: Vec<bool> = specs
        .iter()
        .map(|r| r.pod_group_size_or_default() > 1)
        .collect();
    pass.drain = drain_roles(specs, &pass.inputs, &gangs, actions, readings, now);
    for unit in &pass.drain.cancel {
        held_out.remove(&unit.name);
    }
    for unit in &pass.drain.out {
        held_out.insert(unit.clone(), Reason::Draining);
    }
    // Pairing opens no gate a drain closes.
    let members = Gangs::new(observed.podsets, observed.gang_pods);
    let started: BTreeSet<&str> = pass
        .drain
        .start
        .iter()
        .flat_map(|unit| match members.members(&unit.name) {
            Some(pods) => pods.iter().map(|p| p.name()).collect(),
            None => vec![unit.name.as_str()],
        })
        .collect();
    pass.gates
        .retain(|gate| !started.contains(gate.pod.as_str()));
    let drains = specs.iter().any(|r| r.drain.is_some()) || !held_out.is_empty();
    if roleset.spec.serving_gate.is_some() || drains {
        pass.gates
            .extend(serve(roleset, observed, &pass.inputs, &held_out));
    }
}

/// Marks the children whose drain start was written and is not seen yet as draining.
fn with_written_drains(children: &mut [PodView], written: &BTreeMap<String, i64>) {
    for child in children.iter_mut().filter(|c| c.draining.is_none()) {
        if let Some(&started) = written.get(&child.name) {
            child.draining = Some(Draining {
                started,
                out_since: None,
                noted: None,
            });
            child.available = false;
            child.available_at = None;
        }
    }
}

/// The children of roles removed from the spec to delete now (docs/architecture.md#one-reconcile:
/// they go with their role), each first drained as it was created to
/// (docs/rollouts.md#drain-before-delete), out of traffic meanwhile.
fn retire_children(
    specs: &[&RoleSpec],
    observed: &Observed<'_>,
    (clock, written_drains, readings): (
        Availability,
        &BTreeMap<String, i64>,
        &BTreeMap<String, Reading>,
    ),
    pass: &mut Pass,
) {
    // The role of a child whose role the spec no longer has (or that has none).
    fn removed<'l>(child: &'l impl Labelled, specs: &[&RoleSpec]) -> Option<&'l str> {
        let role = child.label(LABEL_ROLE_NAME).unwrap_or_default();
        (!specs.iter().any(|r| r.name == role)).then_some(role)
    }
    let mut pods: Vec<(PodView, &str, Option<Drain>)> = observed
        .pods
        .iter()
        .filter_map(|p| {
            let role = removed(&**p, specs)?;
            let drain = Drain::of_child(&**p);
            // Whether it carries the gate costs a parse of its spec: read for a drain only.
            let gated = drain.is_some() && serving::gated(p);
            let view = PodView {
                gated,
                ..pod_view(p, clock)
            };
            Some((view, role, drain))
        })
        .collect();
    let mut podsets: Vec<(PodView, &str, Option<Drain>)> = observed
        .podsets
        .iter()
        .filter_map(|p| {
            let role = removed(&**p, specs)?;
            Some((podset_view(p, clock), role, Drain::of_child(&**p)))
        })
        .collect();
    let now = clock.now;
    let mut retired_out = BTreeMap::new();
    for (children, gang) in [(&mut pods, false), (&mut podsets, true)] {
        for (view, _, _) in children.iter_mut() {
            with_written_drains(std::slice::from_mut(view), written_drains);
        }
        let views: Vec<PodView> = children.iter().map(|(v, _, _)| v.clone()).collect();
        let mut going = retire(&views);
        let retired: Vec<Retired<'_>> = children
            .iter()
            .map(|(child, role, drain)| Retired {
                child,
                role,
                drain: drain.clone(),
            })
            .collect();
        let before = pass.drain.out.len();
        drain_retired(&mut going, &retired, gang, readings, now, &mut pass.drain);
        for name in &pass.drain.out[before..] {
            retired_out.insert(name.clone(), Reason::Draining);
        }
        if gang {
            pass.retired_podsets = going;
        } else {
            pass.retired_pods = going;
        }
    }
    if !retired_out.is_empty() {
        let gangs = Gangs::new(observed.podsets, observed.gang_pods);
        let by_name: BTreeMap<&str, &CachedPod> =
            observed.pods.iter().map(|p| (p.name(), &**p)).collect();
        let units = retired_out.keys().map(String::as_str);
        pass.gates.extend(serving::gates(
            units,
            &by_name,
            &gangs,
            &retired_out,
            observed.written_gates,
        ));
    }
}

/// When a pass is due though no event may come: the next Ready child becomes available, a
/// role's warm pods are to go, or a drain's next reading or timeout (`drain`).
fn wake_at(specs: &[&RoleSpec], inputs: &[RoleInput], drain: Option<i64>) -> Option<i64> {
    let warm_ends = specs
        .iter()
        .zip(inputs)
        .filter(|(_, input)| input.warm)
        .filter_map(|(role, _)| warm_until(role));
    inputs
        .iter()
        .flat_map(|role| &role.pods)
        .filter_map(|pod| pod.available_at)
        .chain(warm_ends)
        .chain(drain)
        .min()
}

/// What pairing reads of a pass's input.
struct Observed<'a> {
    pods: &'a [Arc<CachedPod>],
    podsets: &'a [Arc<PodSet>],
    gang_pods: &'a [Arc<CachedPod>],
    written_gates: &'a BTreeMap<String, bool>,
}

/// Pairing's part of the pass (docs/rollouts.md#pairing): the removals in `actions` held
/// back, the gate writes by pod (a gang's on each of its pods) and what the keys serve.
fn pair(
    groups: &[PairingGroup],
    input: &Observed<'_>,
    roles: &[RoleInput],
    held_out: &BTreeMap<String, Reason>,
    actions: &mut [RoleAction],
) -> (Vec<Gate>, Option<pairing::PairingReport>) {
    let written = input.written_gates;
    let gangs = Gangs::new(input.podsets, input.gang_pods);
    let mut paired = paired_pods(groups, input.pods, input.podsets, &gangs, written);
    // Out of traffic whatever its key does: [`serve`] closes its gate.
    paired.retain(|p| !held_out.contains_key(p.name));
    let gates = pair_removals(groups, &paired, roles, actions)
        .into_iter()
        .flat_map(|(unit, servable)| {
            gate_writes(&unit, servable, &gangs, written)
                .into_iter()
                .map(move |pod| Gate::paired(pod, servable))
        })
        .collect();
    let desired = roles.iter().map(|r| (r.name.clone(), r.desired)).collect();
    (gates, Some(pairing::report(groups, &paired, &desired)))
}

/// The units (pods, or PodSets) held out of traffic while they keep running, and why: every
/// one of a RoleSet whose serving gate is `Closed`, and the warm pods of its roles.
fn held_out(roleset: &RoleSet, roles: &[RoleInput]) -> BTreeMap<String, Reason> {
    let held = |name: &String| (name.clone(), Reason::HeldOut);
    if roleset.spec.serving_gate == Some(ServingGate::Closed) {
        return roles
            .iter()
            .flat_map(|r| r.pods.iter().map(|p| held(&p.name)))
            .collect();
    }
    roles
        .iter()
        .filter(|r| r.warm)
        .flat_map(RoleInput::warm_pods)
        .map(|name| (name, Reason::HeldOut))
        .collect()
}

/// The serving gates pairing does not decide (docs/rollouts.md#the-serving-gate), on a
/// RoleSet whose `servingGate` is set: every unit of a role outside pairing, and the units
/// held out of a paired one.
fn serve(
    roleset: &RoleSet,
    input: &Observed<'_>,
    roles: &[RoleInput],
    held_out: &BTreeMap<String, Reason>,
) -> Vec<Gate> {
    let gangs = Gangs::new(input.podsets, input.gang_pods);
    let pods: BTreeMap<&str, &CachedPod> = input
        .pods
        .iter()
        .filter(|p| !p.is_deleting())
        .map(|p| (p.name(), &**p))
        .collect();
    let units = roles.iter().flat_map(|role| {
        let paired = group_of(&roleset.spec, &role.name).is_some();
        role.pods
            .iter()
            .filter(move |p| !p.terminating && (!paired || held_out.contains_key(&p.name)))
            .map(|p| p.name.as_str())
    });
    serving::gates(units, &pods, &gangs, held_out, input.written_gates)
}

/// Holds back the removals in
/// `actions` that would leave a partner role serving below its floor, and returns the gates
/// (by pod, or by gang).
fn pair_removals(
    groups: &[PairingGroup],
    paired: &[pairing::PairedPod<'_>],
    roles: &[RoleInput],
    actions: &mut [RoleAction],
) -> Vec<(String, bool)> {
    let deletes: Vec<String> = actions.iter().flat_map(|a| a.delete.clone()).collect();
    let moves: Vec<String> = actions
        .iter()
        .flat_map(|a| a.in_place_start.clone())
        .collect();
    let floors: BTreeMap<String, u32> = roles
        .iter()
        .filter(|r| groups.iter().any(|g| g.roles.contains(&r.name)))
        .map(|r| {
            let floor = r.desired.saturating_sub(r.budgets.max_unavailable);
            (r.name.clone(), floor)
        })
        .collect();
    let creating: BTreeSet<String> = actions
        .iter()
        .zip(roles)
        .filter(|(action, _)| action.creates() > 0)
        .map(|(_, role)| role.name.clone())
        .collect();
    let decided = pairing::pass(groups, paired, &deletes, &moves, &creating, &floors);
    for action in actions.iter_mut() {
        action.delete.retain(|n| !decided.withheld.contains(n));
        action
            .in_place_start
            .retain(|n| !decided.withheld.contains(n));
    }
    decided.gates
}

/// A role's stable template (a pooled canary's, from its stable revision), as its pods
/// are rendered from it.
struct StableTemplate {
    /// Its hash.
    hash: String,
    /// The role with the stable template.
    role: RoleSpec,
    /// The pairing key of pods rendered from the stable revision, for a paired role.
    pairing_key: Option<String>,
}

/// The pairing key of `role`'s pods rendered from the stable `revision`: the RoleSet's groups,
/// the revision's templates and protocol; None for a role the RoleSet does not pair.
fn stable_pairing_key(
    roleset: &RoleSet,
    revision: &ControllerRevision,
    role: &str,
) -> Option<String> {
    group_of(&roleset.spec, role)?;
    let held = template_of(revision).ok()?.spec.unwrap_or_default();
    pairing_key(&roleset.spec, &held, role)
}

/// What the role planner knows of one role.
fn role_input(
    roleset: &RoleSet,
    role: &RoleSpec,
    children: RoleChildren,
    pending: Pending,
    stable_hash: Option<String>,
    pods: &[Arc<CachedPod>],
    now: i64,
) -> RoleInput {
    let desired = u32::try_from(role.replicas_or_default()).unwrap_or(0);
    let budgets = role.fenceposts(desired);
    let target_hash = template_hash(&role.template.clone().unwrap_or_default());
    let in_place = role.update_strategy_type() == RoleUpdateStrategyType::InPlaceIfPossible;
    let ineligible = if !in_place {
        BTreeMap::new()
    } else if children.gang {
        // Multi-node roles always recreate their PodSets (docs/rollouts.md#gangs).
        children
            .children
            .iter()
            .filter(|v| v.hash != target_hash)
            .map(|v| {
                (
                    v.name.clone(),
                    "a PodSet (podGroupSize > 1) cannot be updated in place".to_string(),
                )
            })
            .collect()
    } else {
        ineligible_pods(roleset, role, &target_hash, of_role(pods, &role.name))
    };
    RoleInput {
        name: role.name.clone(),
        desired,
        budgets,
        target_hash,
        pods: children.children,
        stateful: children.gang || role.stateful == Some(true),
        pending_creates: pending.creates,
        pending_stable_creates: pending.stable_creates,
        partition: partition(role),
        stable_hash,
        pending_slots: pending.slots,
        pending_deletes: pending.deletes,
        in_place,
        ineligible,
        warm: warm_until(role).is_some_and(|until| now < until),
    }
}

/// When a role's warm pods go (its `rollout.warmUntil`), in Unix seconds.
fn warm_until(role: &RoleSpec) -> Option<i64> {
    role.rollout
        .as_ref()
        .and_then(|r| r.warm_until.as_ref())
        .map(|t| t.0.as_second())
}

/// Renders the creates of a role's action and builds its in-place patches.
fn role_writes(
    roleset: &RoleSet,
    role: &RoleSpec,
    input: &RoleInput,
    stable: Option<&StableTemplate>,
    action: RoleAction,
    pods: &[Arc<CachedPod>],
) -> RoleWrites {
    let gang = role.pod_group_size_or_default() > 1;
    // The stable template a new child of a slot (None: stateless) is rendered from, if any.
    let stable_for = |slot: Option<u32>, from_stable: bool| {
        stable.filter(|_| from_stable || input.stable_slot(slot))
    };
    // Rendered from the role's template, a child takes its pairing key from the RoleSet's;
    // from the stable one, the stable revision's.
    let keyed = |labels: &mut Option<BTreeMap<String, String>>, stable: Option<&StableTemplate>| {
        if let Some(stable) = stable {
            let labels = labels.get_or_insert_default();
            match &stable.pairing_key {
                Some(key) => labels.insert(LABEL_PAIRING_KEY.into(), key.clone()),
                None => labels.remove(LABEL_PAIRING_KEY),
            };
        }
    };
    // The role (with its template) and the hash a child is rendered from.
    fn rendered_from<'a>(
        stable: Option<&'a StableTemplate>,
        role: &'a RoleSpec,
        target_hash: &'a str,
    ) -> (&'a RoleSpec, &'a str) {
        match stable {
            Some(stable) => (&stable.role, stable.hash.as_str()),
            None => (role, target_hash),
        }
    }
    let stateless = |from_stable: bool| {
        let stable = stable_for(None, from_stable);
        let (from, hash) = rendered_from(stable, role, &input.target_hash);
        let mut pod = stateless_pod(roleset, from, hash);
        keyed(&mut pod.metadata.labels, stable);
        Create {
            slot: None,
            stable: stable.is_some(),
            child: NewChild::Pod(Box::new(pod)),
        }
    };
    let slotted = |slot: u32| {
        let stable = stable_for(Some(slot), false);
        let (from, hash) = rendered_from(stable, role, &input.target_hash);
        let child = if gang {
            let mut podset = podset_for_slot(roleset, from, hash, slot);
            keyed(&mut podset.metadata.labels, stable);
            NewChild::PodSet(Box::new(podset))
        } else {
            let mut pod = stateful_pod(roleset, from, hash, slot);
            keyed(&mut pod.metadata.labels, stable);
            NewChild::Pod(Box::new(pod))
        };
        Create {
            slot: Some(slot),
            stable: stable.is_some(),
            child,
        }
    };
    let creates = (0..action.create)
        .map(|_| stateless(false))
        .chain((0..action.create_stable).map(|_| stateless(true)))
        .chain(action.create_slots.iter().map(|&slot| slotted(slot)))
        .collect();
    let in_place = if input.in_place {
        in_place_writes(roleset, role, input, &action, pods)
    } else {
        InPlaceWrites::default()
    };
    RoleWrites {
        role: role.name.clone(),
        gang,
        target_hash: input.target_hash.clone(),
        action,
        creates,
        in_place,
        adopted: Vec::new(),
        relabel: Vec::new(),
    }
}

/// The in-place part of a role's action, as writes.
fn in_place_writes(
    roleset: &RoleSet,
    role: &RoleSpec,
    input: &RoleInput,
    action: &RoleAction,
    pods: &[Arc<CachedPod>],
) -> InPlaceWrites {
    let find = |name: &str| pods.iter().find(|p| p.name() == name);
    // The few pods whose update starts or completes now, their specs decoded.
    let whole = |name: &str| find(name).and_then(|p| p.to_pod().ok());
    let complete = action
        .in_place_complete
        .iter()
        .filter_map(|name| whole(name).map(|pod| (name.clone(), has_readiness_gate(&pod))))
        .collect();
    let pending = action
        .in_place_pending
        .iter()
        .filter(|(name, reason)| {
            let recorded =
                find(name).and_then(|p| p.annotations().get(ANNOTATION_IN_PLACE_PENDING_REASON));
            recorded != Some(reason.as_str())
        })
        .map(|(name, reason)| (name.clone(), reason.as_str()))
        .collect();
    let start = action
        .in_place_start
        .iter()
        .filter_map(|name| {
            let pod = whole(name)?;
            let desired = desired_pod(roleset, role, &input.target_hash, &pod);
            Some(InPlaceStart {
                pod: name.clone(),
                gated: has_readiness_gate(&pod),
                patch: start_patch(&pod, &desired, &input.target_hash),
            })
        })
        .collect();
    InPlaceWrites {
        fallback: action.fallback.clone(),
        complete,
        pending,
        start,
    }
}

/// Outdated pods of an in-place role that are not being updated toward `target_hash` and
/// cannot be, with the reason (their specs decoded: this is where in-place decisions read
/// them).
fn ineligible_pods<'a>(
    roleset: &RoleSet,
    role: &RoleSpec,
    target_hash: &str,
    pods: impl Iterator<Item = &'a CachedPod>,
) -> BTreeMap<String, String> {
    pods.filter(|p| p.labels().get(LABEL_ROLE_TEMPLATE_HASH) != Some(target_hash))
        .filter(|p| in_place_target(*p) != Some(target_hash))
        .filter_map(|cached| {
            let why = match cached.to_pod() {
                Ok(pod) => {
                    let desired = desired_pod(roleset, role, target_hash, &pod);
                    eligibility(&pod, &desired).err()?.to_string()
                }
                Err(e) => format!("its spec does not decode: {e}"),
            };
            Some((cached.name().to_string(), why))
        })
        .collect()
}

/// Live pods and PodSets of `roles` that lack the affinity the `topologyPolicy` asks for,
/// when there are any: affinity is fixed at creation, so they keep the old one until
/// replaced (the `TopologyPolicyPendingPodReplacement` event counts them).
fn topology_pending(
    roleset: &RoleSet,
    roles: &[&RoleSpec],
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
) -> Option<(usize, usize)> {
    roleset.spec.topology_policy.as_ref()?;
    let lacks = |role: &str, spec: Option<&PodSpec>| {
        let Some((term, mode)) = topology_affinity(roleset, role) else {
            return false;
        };
        !spec.is_some_and(|spec| has_affinity(spec, &term, mode))
    };
    let (mut stale_pods, mut stale_podsets) = (0, 0);
    for role in roles {
        let role = role.name.as_str();
        stale_pods += of_role(pods, role)
            .filter(|p| !p.is_deleting())
            .filter(|p| {
                let spec = PodSpec {
                    affinity: p.affinity(),
                    ..PodSpec::default()
                };
                lacks(role, Some(&spec))
            })
            .count();
        stale_podsets += of_role(podsets, role)
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| lacks(role, p.spec.template.spec.as_ref()))
            .count();
    }
    (stale_pods + stale_podsets > 0).then_some((stale_pods, stale_podsets))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::api::keys::{
        ANNOTATION_DRAIN_POLICY, ANNOTATION_DRAIN_STARTED, ANNOTATION_IN_PLACE_TARGET_HASH,
        CONDITION_PAIRING_SERVABLE, LABEL_PODSET_NAME, LABEL_ROLE_REPLICA_INDEX,
    };
    use crate::planner::status::Reason;
    use children::role_children;

    fn roleset(roles: Value) -> RoleSet {
        serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid"},
            "spec": {"roles": roles}
        }))
        .unwrap()
    }

    fn role(name: &str, replicas: u32, group: u32) -> Value {
        json!({"name": name, "replicas": replicas, "podGroupSize": group,
            "template": {"spec": {"containers": [{"name": "c", "image": "engine:1"}]}}})
    }

    fn target_hash(rs: &RoleSet, role: &str) -> String {
        let spec = rs.spec.roles.iter().flatten().find(|r| r.name == role);
        template_hash(&spec.unwrap().template.clone().unwrap_or_default())
    }

    fn labels(role: &str, hash: &str) -> Value {
        json!({LABEL_ROLE_NAME: role, LABEL_ROLE_TEMPLATE_HASH: hash})
    }

    fn pod(name: &str, role: &str, hash: &str, ready: bool, terminating: bool) -> Arc<Pod> {
        let mut pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels(role, hash)},
            "spec": {"containers": [{"name": "c", "image": "engine:1"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]}
        }))
        .unwrap();
        if terminating {
            pod.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        Arc::new(pod)
    }

    fn podset(name: &str, role: &str, hash: &str) -> Arc<PodSet> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
                "metadata": {"name": name, "labels": labels(role, hash)},
                "spec": {"podGroupSize": 2, "template": {"spec": {"containers": []}}},
                "status": {"phase": "Ready", "readyPods": 2, "totalPods": 2}
            }))
            .unwrap(),
        )
    }

    /// A pass over `pods` as the cache holds them, with nothing pending and no stable
    /// revision read.
    fn pass(rs: &RoleSet, pods: &[Arc<Pod>], podsets: &[Arc<PodSet>]) -> Pass {
        pass_with_gang(rs, pods, podsets, Gang::NotRequested)
    }

    /// [`pass`], with the gang's PodGroup where `gang` says.
    fn pass_with_gang(
        rs: &RoleSet,
        pods: &[Arc<Pod>],
        podsets: &[Arc<PodSet>],
        gang: Gang,
    ) -> Pass {
        let pods: Vec<Arc<CachedPod>> = pods
            .iter()
            .map(|p| Arc::new(CachedPod::from_pod(p)))
            .collect();
        let roles = role_children(rs, &pods, podsets, Availability::default());
        let n = roles.len();
        decide(PassInput {
            roleset: rs,
            pods: &pods,
            podsets,
            gang_pods: &[],
            written_gates: &BTreeMap::new(),
            roles,
            pending: vec![Pending::default(); n],
            stable: vec![None; n],
            gang,
            clock: Availability::default(),
            written_drains: &BTreeMap::new(),
            readings: &BTreeMap::new(),
        })
    }

    /// A pod Ready since the Unix second `since`.
    fn ready_since(name: &str, role: &str, hash: &str, since: i64) -> Arc<Pod> {
        let mut pod = (*pod(name, role, hash, true, false)).clone();
        let conditions = pod.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions[0].last_transition_time =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(since).unwrap(),
            ));
        Arc::new(pod)
    }

    /// [`pass`] at the Unix second `now`, with the RoleSet's `minReadySeconds`.
    fn pass_at(rs: &RoleSet, pods: &[Arc<Pod>], now: i64) -> Pass {
        pass_read(rs, pods, now, &BTreeMap::new(), &BTreeMap::new())
    }

    /// [`pass_at`], with drain starts written and not yet seen, and readings of requests in
    /// flight.
    fn pass_read(
        rs: &RoleSet,
        pods: &[Arc<Pod>],
        now: i64,
        written_drains: &BTreeMap<String, i64>,
        readings: &BTreeMap<String, Reading>,
    ) -> Pass {
        let pods: Vec<Arc<CachedPod>> = pods
            .iter()
            .map(|p| Arc::new(CachedPod::from_pod(p)))
            .collect();
        let clock = Availability::new(
            rs.spec.min_ready_seconds,
            k8s_openapi::jiff::Timestamp::from_second(now).unwrap(),
        );
        let roles = role_children(rs, &pods, &[], clock);
        let n = roles.len();
        decide(PassInput {
            roleset: rs,
            pods: &pods,
            podsets: &[],
            gang_pods: &[],
            written_gates: &BTreeMap::new(),
            roles,
            pending: vec![Pending::default(); n],
            stable: vec![None; n],
            gang: Gang::NotRequested,
            clock,
            written_drains,
            readings,
        })
    }

    /// A gated pod out of traffic since `out` for a drain started at `started`.
    fn draining(name: &str, role: &str, hash: &str, started: i64, out: i64) -> Arc<Pod> {
        let at = |s: i64| {
            k8s_openapi::jiff::Timestamp::from_second(s)
                .unwrap()
                .to_string()
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels(role, hash),
                    "annotations": {ANNOTATION_DRAIN_STARTED: at(started)}},
                "spec": {"containers": [{"name": "c", "image": "engine:1"}],
                    "readinessGates": [{"conditionType": CONDITION_PAIRING_SERVABLE}]},
                "status": {"phase": "Running", "conditions": [
                    {"type": "ContainersReady", "status": "True"},
                    {"type": CONDITION_PAIRING_SERVABLE, "status": "False"},
                    {"type": "Ready", "status": "False", "lastTransitionTime": at(out)}]}
            }))
            .unwrap(),
        )
    }

    fn draining_role(rs: &mut RoleSet, query: bool) {
        let decode = &mut rs.spec.roles.as_mut().unwrap()[0];
        decode.update_strategy =
            Some(serde_json::from_value(json!({"maxSurge": 0, "maxUnavailable": 1})).unwrap());
        decode.drain = Some(
            serde_json::from_value(if query {
                json!({"timeout": 60, "query": {"query": "q", "interval": 5}})
            } else {
                json!({"timeout": 30})
            })
            .unwrap(),
        );
    }

    #[test]
    fn a_rollout_drains_a_pod_out_of_traffic_before_it_deletes_it() {
        let mut rs = roleset(json!([role("decode", 2, 1)]));
        draining_role(&mut rs, true);
        let (old_a, old_b) = (
            serving("old-a", "decode", "old"),
            serving("old-b", "decode", "old"),
        );
        // The planner picks one pod within maxUnavailable: its drain starts, its gate closes.
        let start = pass_at(&rs, &[old_a.clone(), old_b.clone()], 1_000);
        let started: Vec<&str> = start.drain.start.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(started.len(), 1, "{:?}", start.drain);
        assert!(start.roles[0].action.delete.is_empty(), "nothing goes yet");
        assert_eq!(
            start.gates,
            [Gate {
                pod: started[0].into(),
                servable: false,
                reason: Reason::Draining
            }]
        );
        let name = started[0].to_string();
        let other = if name == "old-a" { old_b } else { old_a };
        // Its start written and not yet seen: the next pass drains the same pod, no other.
        let written = BTreeMap::from([(name.clone(), 1_000)]);
        let again = pass_read(
            &rs,
            &[serving(&name, "decode", "old"), other.clone()],
            1_001,
            &written,
            &BTreeMap::new(),
        );
        assert!(again.drain.start.is_empty() && again.roles[0].action.delete.is_empty());
        assert_eq!(
            again.roles[0].action.creates(),
            0,
            "maxSurge 0: it holds its place"
        );

        let out = draining(&name, "decode", "old", 1_000, 1_001);
        let pods = [out, other];
        let read = |value: f64, at: i64| {
            BTreeMap::from([(
                name.clone(),
                Reading {
                    value: Ok(value),
                    at,
                },
            )])
        };
        // Requests in flight, or a zero read in the second it left: it waits one interval.
        for readings in [read(3.0, 1_010), read(0.0, 1_001)] {
            let wait = pass_read(&rs, &pods, 1_010, &BTreeMap::new(), &readings);
            assert!(wait.roles[0].action.delete.is_empty(), "{readings:?}");
            assert_eq!(wait.wake_at, Some(1_015));
            assert!(wait.gates.is_empty(), "its gate stays closed");
        }
        let noted = pass_read(&rs, &pods, 1_010, &BTreeMap::new(), &read(3.0, 1_010));
        assert_eq!(
            noted.drain.note.len(),
            1,
            "the reading is noted for squall status"
        );
        // Zero, read after it left: it goes.
        let idle = pass_read(&rs, &pods, 1_012, &BTreeMap::new(), &read(0.0, 1_011));
        assert_eq!(idle.roles[0].action.delete, [name.as_str()]);
        assert!(idle.drain.timed_out.is_empty());
        // Never zero: it goes at its timeout, said.
        let late = pass_read(&rs, &pods, 1_060, &BTreeMap::new(), &read(2.0, 1_055));
        assert_eq!(late.roles[0].action.delete, [name.as_str()]);
        assert_eq!(late.drain.timed_out.len(), 1);
        assert_eq!(late.drain.timed_out[0].1, Some(2.0));
    }

    #[test]
    fn a_scale_down_drains_and_a_scale_back_up_ends_the_drain() {
        let mut rs = roleset(json!([role("decode", 1, 1)]));
        draining_role(&mut rs, false);
        let hash = target_hash(&rs, "decode");
        let (a, b) = (
            serving("a", "decode", &hash),
            draining("b", "decode", &hash, 1_000, 1_000),
        );
        let waiting = pass_at(&rs, &[a.clone(), b.clone()], 1_010);
        assert!(waiting.roles[0].action.delete.is_empty());
        assert!(
            waiting.drain.start.is_empty(),
            "the draining pod is the one to go"
        );
        assert_eq!(waiting.wake_at, Some(1_030), "a fixed delay: its timeout");
        let gone = pass_at(&rs, &[a.clone(), b.clone()], 1_030);
        assert_eq!(gone.roles[0].action.delete, ["b"]);
        assert!(
            gone.drain.timed_out.is_empty(),
            "without a query the delay is the drain"
        );
        // Scaled back up to 2 before it went: it serves again.
        rs.spec.roles.as_mut().unwrap()[0].replicas = Some(2);
        let kept = pass_at(&rs, &[a, b], 1_010);
        assert_eq!(kept.drain.cancel.len(), 1);
        assert!(kept.roles[0].action.delete.is_empty());
        assert_eq!(
            kept.gates,
            [Gate {
                pod: "b".into(),
                servable: true,
                reason: Reason::Serving
            }]
        );
    }

    #[test]
    fn a_multi_node_replica_drains_whole_and_goes_on_its_pods_sum() {
        let mut rs = roleset(json!([role("decode", 1, 2)]));
        rs.spec.roles.as_mut().unwrap()[0].drain = Some(
            serde_json::from_value(json!({"timeout": 30, "query": {"query": "q", "interval": 5}}))
                .unwrap(),
        );
        let hash = target_hash(&rs, "decode");
        let at = |s: i64| {
            k8s_openapi::jiff::Timestamp::from_second(s)
                .unwrap()
                .to_string()
        };
        // A gang of two gated pods; `out`: drained since 1,000, out of traffic since 1,001.
        let gang = |name: &str, out: bool| {
            let mut labels = labels("decode", &hash);
            labels[LABEL_ROLE_REPLICA_INDEX] = json!(if name == "a" { "1" } else { "0" });
            let mut podset: PodSet = serde_json::from_value(json!({
                "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
                "metadata": {"name": name, "labels": labels},
                "spec": {"podGroupSize": 2, "template": {"spec": {"containers": [],
                    "readinessGates": [{"conditionType": CONDITION_PAIRING_SERVABLE}]}}},
                "status": {"phase": if out { "Running" } else { "Ready" },
                    "readyPods": 2, "totalPods": 2, "conditions": [{"type": "Ready",
                    "status": if out { "False" } else { "True" },
                    "lastTransitionTime": at(1_001)}]}
            }))
            .unwrap();
            if out {
                podset
                    .annotations_mut()
                    .insert(ANNOTATION_DRAIN_STARTED.into(), at(1_000));
            }
            let members: Vec<Arc<CachedPod>> = (0..2)
                .map(|i| {
                    let mut pod = (*serving(&format!("{name}-{i}"), "decode", &hash)).clone();
                    pod.labels_mut()
                        .insert(LABEL_PODSET_NAME.into(), name.into());
                    Arc::new(CachedPod::from_pod(&pod))
                })
                .collect();
            (Arc::new(podset), members)
        };
        let run =
            |podsets: &[(Arc<PodSet>, Vec<Arc<CachedPod>>)], now: i64, read: Option<(f64, i64)>| {
                let sets: Vec<Arc<PodSet>> = podsets.iter().map(|(p, _)| p.clone()).collect();
                let gang_pods: Vec<Arc<CachedPod>> =
                    podsets.iter().flat_map(|(_, m)| m.clone()).collect();
                let clock = Availability::new(
                    None,
                    k8s_openapi::jiff::Timestamp::from_second(now).unwrap(),
                );
                let readings: BTreeMap<String, Reading> = read
                    .map(|(value, at)| {
                        (
                            "a".to_string(),
                            Reading {
                                value: Ok(value),
                                at,
                            },
                        )
                    })
                    .into_iter()
                    .collect();
                decide(PassInput {
                    roleset: &rs,
                    pods: &[],
                    podsets: &sets,
                    gang_pods: &gang_pods,
                    written_gates: &BTreeMap::new(),
                    roles: role_children(&rs, &[], &sets, clock),
                    pending: vec![Pending::default()],
                    stable: vec![None],
                    gang: Gang::NotRequested,
                    clock,
                    written_drains: &BTreeMap::new(),
                    readings: &readings,
                })
            };
        // Scaled to one of two slots: slot 1's PodSet drains, both its pods leave traffic.
        let start = run(&[gang("a", false), gang("b", false)], 1_000, None);
        assert_eq!(start.drain.start.len(), 1);
        let unit = &start.drain.start[0];
        assert!(unit.gang);
        assert!(start.roles[0].action.delete.is_empty());
        let name = unit.name.clone();
        let mut closed: Vec<Gate> = start.gates.clone();
        closed.sort_by(|a, b| a.pod.cmp(&b.pod));
        let expected: Vec<Gate> = (0..2)
            .map(|i| Gate {
                pod: format!("{name}-{i}"),
                servable: false,
                reason: Reason::Draining,
            })
            .collect();
        assert_eq!(closed, expected, "both of its pods leave traffic");
        // Draining: the sum over its pods read after it left traffic decides.
        let pods = [gang("a", true), gang("b", false)];
        let busy = run(&pods, 1_010, Some((1.0, 1_009)));
        assert!(busy.roles[0].action.delete.is_empty());
        let idle = run(&pods, 1_010, Some((0.0, 1_009)));
        assert_eq!(idle.roles[0].action.delete, ["a"]);
    }

    #[test]
    fn a_removed_roles_pods_drain_as_they_were_created_to() {
        let mut rs = roleset(json!([role("decode", 1, 1), role("prefill", 1, 1)]));
        draining_role(&mut rs, false);
        // Created to drain for 30 s; then prefill leaves the spec.
        let rendered = stateless_pod(&rs, &rs.spec.roles.as_ref().unwrap()[0], "h");
        let policy = rendered.annotations()[ANNOTATION_DRAIN_POLICY].clone();
        let gates = rendered.spec.as_ref().unwrap().readiness_gates.clone();
        assert!(
            gates
                .iter()
                .flatten()
                .any(|g| g.condition_type == CONDITION_PAIRING_SERVABLE),
            "a draining role's pod carries the serving gate"
        );
        let with_policy = |pod: Arc<Pod>| {
            let mut pod = (*pod).clone();
            pod.annotations_mut()
                .insert(ANNOTATION_DRAIN_POLICY.into(), policy.clone());
            Arc::new(pod)
        };
        rs.spec.roles.as_mut().unwrap().remove(0);
        let serving_pod = with_policy(serving("old", "decode", "h"));
        let start = pass_at(&rs, &[serving_pod], 1_000);
        assert!(start.retired_pods.is_empty(), "it drains first");
        assert_eq!(start.drain.start.len(), 1);
        assert_eq!(start.drain.start[0].role, "decode");
        assert_eq!(
            start.gates,
            [Gate {
                pod: "old".into(),
                servable: false,
                reason: Reason::Draining
            }]
        );
        let out = with_policy(draining("old", "decode", "h", 1_000, 1_000));
        let waiting = pass_at(&rs, std::slice::from_ref(&out), 1_010);
        assert!(waiting.retired_pods.is_empty() && waiting.gates.is_empty());
        assert_eq!(waiting.wake_at, Some(1_030));
        assert_eq!(pass_at(&rs, &[out], 1_030).retired_pods, ["old"]);
        // Without the annotation (created before its role drained): it goes at once.
        let plain = pass_at(&rs, &[serving("plain", "decode", "h")], 1_000);
        assert_eq!(plain.retired_pods, ["plain"]);
    }

    #[test]
    fn a_new_pod_replaces_an_old_one_only_once_ready_for_min_ready_seconds() {
        let mut rs = roleset(json!([role("decode", 2, 1)]));
        rs.spec.min_ready_seconds = Some(20);
        rs.spec.roles.as_mut().unwrap()[0].update_strategy =
            Some(serde_json::from_value(json!({"maxSurge": 1, "maxUnavailable": 0})).unwrap());
        let new = target_hash(&rs, "decode");
        let pods = [
            ready_since("old-a", "decode", "old", 0),
            ready_since("old-b", "decode", "old", 0),
            ready_since("new-a", "decode", &new, 1_000),
        ];
        let warming = pass_at(&rs, &pods, 1_019);
        assert!(
            warming.roles[0].action.delete.is_empty(),
            "a pod Ready for 19 s of 20 is not available: {:?}",
            warming.roles[0].action
        );
        assert_eq!(warming.wake_at, Some(1_020), "the pass is due when it is");
        let status = status::role_status(&warming.inputs[0]);
        assert_eq!(
            (
                status.ready_replicas,
                status.available_replicas,
                status.updated_available_replicas
            ),
            (3, Some(2), Some(0))
        );
        assert!(!warming.inputs[0].all_available());

        let warm = pass_at(&rs, &pods, 1_020);
        assert_eq!(
            warm.roles[0].action.delete.len(),
            1,
            "{:?}",
            warm.roles[0].action
        );
        assert_eq!(warm.wake_at, None);
        let status = status::role_status(&warm.inputs[0]);
        assert_eq!(status.updated_available_replicas, Some(1));

        rs.spec.min_ready_seconds = None;
        let unset = pass_at(&rs, &pods, 1_000);
        assert_eq!(
            unset.roles[0].action.delete.len(),
            1,
            "without it, Ready is available"
        );
        assert_eq!(unset.wake_at, None);
    }

    /// A pod with the serving gate, up, its gate open.
    fn serving(name: &str, role: &str, hash: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels(role, hash)},
                "spec": {"containers": [{"name": "c", "image": "engine:1"}],
                    "readinessGates": [{"conditionType": CONDITION_PAIRING_SERVABLE}]},
                "status": {"phase": "Running", "conditions": [
                    {"type": "ContainersReady", "status": "True"},
                    {"type": CONDITION_PAIRING_SERVABLE, "status": "True"},
                    {"type": "Ready", "status": "True"}]}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn an_aborted_pooled_canarys_pods_stay_out_of_traffic_until_their_time_then_go() {
        let mut rs = roleset(json!([role("decode", 2, 1)]));
        rs.spec.serving_gate = Some(ServingGate::Open);
        let decode = &mut rs.spec.roles.as_mut().unwrap()[0];
        decode.update_strategy =
            Some(serde_json::from_value(json!({"maxSurge": 1, "maxUnavailable": 0})).unwrap());
        decode.rollout = Some(
            serde_json::from_value(json!({
            "partition": 2, "warmUntil": "1970-01-01T00:16:40Z"}))
            .unwrap(),
        );
        let canary = target_hash(&rs, "decode");
        let pods = [
            serving("stable-a", "decode", "stable"),
            serving("stable-b", "decode", "stable"),
            serving("canary-a", "decode", &canary),
        ];
        let warm = pass_at(&rs, &pods, 900);
        assert!(
            warm.roles[0].action.is_empty(),
            "{:?}",
            warm.roles[0].action
        );
        assert_eq!(
            warm.gates,
            [Gate {
                pod: "canary-a".into(),
                servable: false,
                reason: Reason::HeldOut
            }],
            "out of traffic"
        );
        assert_eq!(warm.wake_at, Some(1_000), "due when the time is up");
        assert_eq!(
            status::role_status(&warm.inputs[0]).replicas,
            2,
            "not counted"
        );

        // Warm pods hold room under maxSurge: a lost stable pod waits for it.
        let two_warm = [
            pods[1].clone(),
            pods[2].clone(),
            serving("canary-b", "decode", &canary),
        ];
        let lost = pass_at(&rs, &two_warm, 900);
        assert_eq!(
            lost.roles[0].action.creates(),
            0,
            "1 stable + 2 warm fill 2 + 1"
        );
        let one_warm = pass_at(&rs, &pods[1..], 900);
        assert_eq!(one_warm.roles[0].action.creates(), 1);

        let over = pass_at(&rs, &pods, 1_000);
        assert_eq!(
            over.roles[0].action.delete,
            ["canary-a"],
            "gone when the time is up"
        );

        // A retry: the partition gives the canary a pod again, the warm one serves again.
        let decode = &mut rs.spec.roles.as_mut().unwrap()[0];
        decode.rollout = Some(serde_json::from_value(json!({"partition": 1})).unwrap());
        let mut closed = (*pods[2]).clone();
        let conditions = closed.status.as_mut().unwrap().conditions.as_mut().unwrap();
        conditions[1].status = "False".into();
        conditions[2].status = "False".into();
        let retried = pass_at(
            &rs,
            &[pods[0].clone(), pods[1].clone(), Arc::new(closed)],
            950,
        );
        assert_eq!(
            retried.gates,
            [Gate {
                pod: "canary-a".into(),
                servable: true,
                reason: Reason::Serving
            }]
        );
        assert!(
            retried.roles[0].action.creates() == 0,
            "the warm pod is taken back, none created: {:?}",
            retried.roles[0].action
        );
    }

    #[test]
    fn a_closed_roleset_holds_every_pod_out_of_traffic_and_deletes_none() {
        let mut rs = roleset(json!([role("decode", 2, 1)]));
        rs.spec.serving_gate = Some(ServingGate::Closed);
        let hash = target_hash(&rs, "decode");
        let pods = [serving("a", "decode", &hash), serving("b", "decode", &hash)];
        let pass = pass_at(&rs, &pods, 100);
        let closed: Vec<(&str, bool)> = pass
            .gates
            .iter()
            .map(|g| (g.pod.as_str(), g.servable))
            .collect();
        assert_eq!(closed, [("a", false), ("b", false)]);
        assert!(pass.roles[0].action.is_empty());
        rs.spec.serving_gate = None;
        assert!(
            pass_at(&rs, &pods, 100).gates.is_empty(),
            "no gate: nothing written"
        );
    }

    fn rendered_labels(create: &Create) -> &BTreeMap<String, String> {
        match &create.child {
            NewChild::Pod(pod) => pod.labels(),
            NewChild::PodSet(podset) => podset.labels(),
        }
    }

    #[test]
    fn children_of_the_other_kind_and_of_removed_roles_are_deleted() {
        let rs = roleset(json!([role("router", 1, 1), role("decode", 1, 2)]));
        let (router, decode) = (target_hash(&rs, "router"), target_hash(&rs, "decode"));
        let pods = [
            pod("router-a", "router", &router, true, false),
            // decode became multi-node: its plain pod is an orphan.
            pod("decode-a", "decode", &decode, true, false),
            // prefill left the spec: its live pod goes, the terminating one is already going.
            pod("prefill-a", "prefill", "h", true, false),
            pod("prefill-b", "prefill", "h", true, true),
        ];
        let podsets = [
            podset("decode-0", "decode", &decode),
            // router runs plain pods: a PodSet of it is an orphan.
            podset("router-0", "router", &router),
            podset("prefill-0", "prefill", "h"),
        ];
        let pass = pass(&rs, &pods, &podsets);
        assert_eq!(pass.orphan_pods, ["decode-a"]);
        assert_eq!(pass.orphan_podsets, ["router-0"]);
        assert_eq!(pass.retired_pods, ["prefill-a"]);
        assert_eq!(pass.retired_podsets, ["prefill-0"]);
        let counted: Vec<Vec<&str>> = pass
            .inputs
            .iter()
            .map(|r| r.pods.iter().map(|p| p.name.as_str()).collect())
            .collect();
        assert_eq!(counted, [vec!["router-a"], vec!["decode-0"]]);
        assert!(pass.problems.is_empty() && pass.sequence.is_none());
    }

    #[test]
    fn creates_are_rendered_for_their_role_and_kind() {
        let rs = roleset(json!([role("router", 2, 1), role("decode", 1, 2)]));
        let pass = pass(&rs, &[], &[]);
        let router = &pass.roles[0];
        assert_eq!(router.creates.len(), 2);
        assert!(
            router
                .creates
                .iter()
                .all(|c| matches!(c.child, NewChild::Pod(_)))
        );
        let decode = &pass.roles[1];
        assert_eq!(decode.creates.len(), 1);
        assert!(matches!(decode.creates[0].child, NewChild::PodSet(_)));
        assert_eq!(decode.creates[0].slot, Some(0));
        for (writes, name) in [(router, "router"), (decode, "decode")] {
            for create in &writes.creates {
                let labels = rendered_labels(create);
                assert_eq!(labels[LABEL_ROLE_NAME], name);
                assert_eq!(labels[LABEL_ROLE_TEMPLATE_HASH], target_hash(&rs, name));
                assert!(!create.stable);
            }
        }
    }

    #[test]
    fn an_unreadable_stable_revision_is_a_problem_of_its_role() {
        let mut with_partition = role("decode", 2, 1);
        with_partition["rollout"] = json!({"partition": 1, "stableRevision": "svc-abc"});
        let rs = roleset(json!([role("router", 1, 1), with_partition]));
        let roles = role_children(&rs, &[], &[], Availability::default());
        let asked: Vec<Option<&str>> = roles.iter().map(|r| r.stable_revision.as_deref()).collect();
        assert_eq!(
            asked,
            [None, Some("svc-abc")],
            "only a held-back partition asks"
        );
        let pass = decide(PassInput {
            roleset: &rs,
            pods: &[],
            podsets: &[],
            gang_pods: &[],
            written_gates: &BTreeMap::new(),
            roles,
            pending: vec![Pending::default(); 2],
            stable: vec![None, Some(Err("not found".into()))],
            gang: Gang::NotRequested,
            clock: Availability::default(),
            written_drains: &BTreeMap::new(),
            readings: &BTreeMap::new(),
        });
        assert_eq!(pass.problems, ["role decode: not found"]);
        // Without the stable template, replacements come from the target.
        assert!(pass.roles[1].creates.iter().all(|c| !c.stable));
    }

    #[test]
    fn a_sequential_rollout_names_its_order() {
        let mut first = role("decode", 1, 1);
        first["upgradeOrder"] = json!(-1);
        let rs = roleset(json!([role("router", 1, 1), first]));
        let pods = [
            pod("router-a", "router", "old", true, false),
            pod(
                "decode-a",
                "decode",
                &target_hash(&rs, "decode"),
                true,
                false,
            ),
        ];
        let pass = pass(&rs, &pods, &[]);
        assert_eq!(pass.sequence.as_deref(), Some("decode(-1) -> router(0)"));
        let settled = [
            pod(
                "router-a",
                "router",
                &target_hash(&rs, "router"),
                true,
                false,
            ),
            pod(
                "decode-a",
                "decode",
                &target_hash(&rs, "decode"),
                true,
                false,
            ),
        ];
        assert_eq!(
            super::tests::pass(&rs, &settled, &[]).sequence,
            None,
            "nothing rolls"
        );
    }

    #[test]
    fn pods_without_the_topology_affinity_are_counted() {
        let mut rs = roleset(json!([role("router", 2, 1)]));
        rs.metadata.labels = Some(BTreeMap::from([(
            crate::api::keys::LABEL_STORM_SERVICE_NAME.to_string(),
            "svc".to_string(),
        )]));
        rs.spec.topology_policy =
            serde_json::from_value(json!({"scope": "Role", "key": "kubernetes.io/hostname"})).ok();
        assert!(
            rs.spec.topology_policy.is_some(),
            "the test's policy parses"
        );
        let hash = target_hash(&rs, "router");
        let spec = rs.spec.roles.iter().flatten().next().unwrap().clone();
        let mut rendered = stateless_pod(&rs, &spec, &hash);
        rendered.metadata.name = Some("router-new".into());
        let pods = [
            pod("router-old", "router", &hash, true, false),
            Arc::new(rendered),
        ];
        assert_eq!(
            pass(&rs, &pods, &[]).topology_pending,
            Some((1, 0)),
            "the pod rendered since has the affinity"
        );
        rs.spec.topology_policy = None;
        assert_eq!(pass(&rs, &pods, &[]).topology_pending, None);
    }

    #[test]
    fn in_place_writes_start_outdated_pods_and_record_only_changed_pending_reasons() {
        let mut in_place = role("decode", 3, 1);
        in_place["updateStrategy"] = json!({"type": "InPlaceIfPossible", "maxUnavailable": 3});
        let rs = roleset(json!([in_place]));
        let target = target_hash(&rs, "decode");
        let updating = |name: &str, recorded: Option<&str>| {
            let mut pod = (*pod(name, "decode", "old", false, false)).clone();
            let annotations = pod.metadata.annotations.get_or_insert_default();
            annotations.insert(ANNOTATION_IN_PLACE_TARGET_HASH.into(), target.clone());
            if let Some(reason) = recorded {
                annotations.insert(ANNOTATION_IN_PLACE_PENDING_REASON.into(), reason.into());
            }
            Arc::new(pod)
        };
        // A pod rendered from the template before its image changed, Ready.
        let mut before = rs.spec.roles.as_ref().unwrap()[0].clone();
        before
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("engine:0".into());
        let mut outdated = stateless_pod(&rs, &before, "old");
        outdated.metadata.name = Some("outdated".into());
        outdated.status = pod("x", "decode", "old", true, false).status.clone();
        let pods = [
            updating("recorded", Some("PodNotReady")),
            updating("unrecorded", None),
            Arc::new(outdated),
        ];
        let pass = pass(&rs, &pods, &[]);
        let writes = &pass.roles[0].in_place;
        assert_eq!(writes.fallback, None);
        assert_eq!(
            writes.pending,
            [("unrecorded".to_string(), "PodNotReady")],
            "a reason already recorded is not written again"
        );
        let started: Vec<&str> = writes.start.iter().map(|s| s.pod.as_str()).collect();
        assert_eq!(started, ["outdated"]);
        let patch = writes.start[0].patch.to_string();
        assert!(
            patch.contains("engine:1") && patch.contains(&target),
            "the patch moves the image and records the target: {patch}"
        );
        assert!(pass.roles[0].creates.is_empty() && pass.roles[0].action.delete.is_empty());
    }

    #[test]
    fn an_in_place_move_waits_for_the_drain_and_ends_it() {
        let mut in_place = role("decode", 1, 1);
        in_place["updateStrategy"] = json!({"type": "InPlaceIfPossible", "maxUnavailable": 1});
        in_place["drain"] = json!({"timeout": 30});
        let rs = roleset(json!([in_place]));
        // A serving pod rendered before its image changed.
        let mut before = rs.spec.roles.as_ref().unwrap()[0].clone();
        before
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("engine:0".into());
        let mut outdated = stateless_pod(&rs, &before, "old");
        outdated.metadata.name = Some("p".into());
        outdated.status = serving("x", "decode", "old").status.clone();
        let start = pass_at(&rs, &[Arc::new(outdated.clone())], 1_000);
        assert!(start.roles[0].in_place.start.is_empty(), "it drains first");
        assert_eq!(start.drain.start.len(), 1);
        // Out of traffic for its drain, then drained: the move starts and ends the drain.
        let at = |s: i64| {
            k8s_openapi::jiff::Timestamp::from_second(s)
                .unwrap()
                .to_string()
        };
        outdated
            .annotations_mut()
            .insert(ANNOTATION_DRAIN_STARTED.into(), at(1_000));
        outdated.status = draining("x", "decode", "old", 1_000, 1_000).status.clone();
        let waiting = pass_at(&rs, &[Arc::new(outdated.clone())], 1_010);
        assert!(waiting.roles[0].in_place.start.is_empty());
        assert_eq!(waiting.wake_at, Some(1_030));
        assert!(waiting.roles[0].creates.is_empty(), "it holds its place");
        let moved = pass_at(&rs, &[Arc::new(outdated)], 1_030);
        let started = &moved.roles[0].in_place.start;
        assert_eq!(started.len(), 1);
        assert_eq!(
            started[0].patch["metadata"]["annotations"][ANNOTATION_DRAIN_STARTED],
            Value::Null,
            "the move ends the drain: {}",
            started[0].patch
        );
        assert!(
            started[0].patch["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key(ANNOTATION_DRAIN_STARTED)
        );
    }

    fn arb_child() -> impl Strategy<Value = (u8, u8, bool, bool, bool)> {
        // (role: 0..3 where 3 is a removed role, hash: 0 target / 1 old, ready, terminating,
        // PodSet rather than pod)
        (0u8..4, 0u8..2, any::<bool>(), any::<bool>(), any::<bool>())
    }

    proptest! {
        /// Whatever the cache holds, a pass deletes only observed children of the kind it
        /// names, each at most once, never one already terminating, and renders every create
        /// for its own role and template.
        #[test]
        fn a_pass_deletes_each_observed_child_at_most_once_and_renders_creates_for_their_role(
            replicas in proptest::collection::vec(0u32..4, 3),
            gang in proptest::collection::vec(any::<bool>(), 3),
            children in proptest::collection::vec(arb_child(), 0..16),
        ) {
            let names = ["router", "prefill", "decode", "removed"];
            let roles: Vec<Value> = (0..3)
                .map(|i| role(names[i], replicas[i], if gang[i] { 2 } else { 1 }))
                .collect();
            let rs = roleset(Value::Array(roles));
            let (mut pods, mut podsets) = (Vec::new(), Vec::new());
            for (i, &(r, h, ready, terminating, is_podset)) in children.iter().enumerate() {
                let role = names[usize::from(r)];
                let hash = if h == 0 && r < 3 { target_hash(&rs, role) } else { "old".into() };
                if is_podset {
                    let mut ps = (*podset(&format!("ps-{i}"), role, &hash)).clone();
                    if !ready { ps.status = None; }
                    if terminating {
                        ps.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
                    }
                    podsets.push(Arc::new(ps));
                } else {
                    pods.push(pod(&format!("pod-{i}"), role, &hash, ready, terminating));
                }
            }
            let pass = pass(&rs, &pods, &podsets);
            let live = |name: &str| {
                pods.iter().map(|p| &p.metadata).chain(podsets.iter().map(|p| &p.metadata))
                    .find(|m| m.name.as_deref() == Some(name))
                    .map(|m| m.deletion_timestamp.is_none())
            };
            let mut deleted = BTreeSet::new();
            let role_deletes = pass.roles.iter().flat_map(|r| r.action.delete.iter());
            for name in pass.orphan_pods.iter().chain(&pass.orphan_podsets)
                .chain(&pass.retired_pods).chain(&pass.retired_podsets).chain(role_deletes)
            {
                prop_assert!(live(name).is_some(), "{name} was never observed");
                prop_assert!(deleted.insert(name.clone()), "{name} deleted twice");
            }
            for name in pass.orphan_pods.iter().chain(&pass.retired_pods) {
                prop_assert!(name.starts_with("pod-"), "{name} is not a pod");
            }
            for name in pass.orphan_podsets.iter().chain(&pass.retired_podsets) {
                prop_assert!(name.starts_with("ps-"), "{name} is not a PodSet");
            }
            for name in pass.retired_pods.iter().chain(&pass.retired_podsets) {
                prop_assert_eq!(live(name), Some(true), "{} is already going", name);
            }
            for (i, writes) in pass.roles.iter().enumerate() {
                prop_assert_eq!(writes.creates.len() as u32, writes.action.creates());
                for create in &writes.creates {
                    prop_assert_eq!(matches!(create.child, NewChild::PodSet(_)), gang[i]);
                    let labels = rendered_labels(create);
                    prop_assert_eq!(&labels[LABEL_ROLE_NAME], names[i]);
                    prop_assert_eq!(&labels[LABEL_ROLE_TEMPLATE_HASH], &writes.target_hash);
                }
            }
        }
    }

    #[test]
    fn a_gang_waiting_for_its_podgroup_creates_no_pod() {
        let rs = roleset(json!([role("decode", 2, 1)]));
        let creates = |pass: &Pass| pass.roles.iter().map(|r| r.creates.len()).sum::<usize>();
        assert_eq!(creates(&pass(&rs, &[], &[])), 2);
        assert_eq!(creates(&pass_with_gang(&rs, &[], &[], Gang::Waiting)), 0);
        assert_eq!(creates(&pass_with_gang(&rs, &[], &[], Gang::Ready)), 2);
    }

    #[test]
    fn a_paired_roles_stable_pods_carry_the_stable_revisions_key() {
        use crate::api::RoleSetTemplateSpec;
        use crate::planner::revision::revision_data;
        use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
        let paired = |image: &str| {
            let role = |name: &str, replicas: u32| {
                json!({"name": name, "replicas": replicas,
                    "template": {"spec": {"containers": [{"name": "c", "image": image}]}}})
            };
            let mut rs = roleset(json!([role("prefill", 2), role("decode", 1)]));
            rs.spec.pairing =
                serde_json::from_value(json!([{"roles": ["prefill", "decode"]}])).unwrap();
            rs
        };
        let stable = paired("engine:1").spec;
        let revision = Arc::new(ControllerRevision {
            metadata: kube::api::ObjectMeta {
                name: Some("svc-stable".into()),
                ..Default::default()
            },
            data: Some(RawExtension(revision_data(&RoleSetTemplateSpec {
                metadata: None,
                spec: Some(stable.clone()),
            }))),
            revision: 1,
        });
        let mut rs = paired("engine:2");
        rs.spec.roles.as_mut().unwrap()[0].rollout =
            serde_json::from_value(json!({"partition": 1, "stableRevision": "svc-stable"}))
                .unwrap();
        let roles = role_children(&rs, &[], &[], Availability::default());
        let pass = decide(PassInput {
            roleset: &rs,
            pods: &[],
            podsets: &[],
            gang_pods: &[],
            written_gates: &BTreeMap::new(),
            roles,
            pending: vec![Pending::default(); 2],
            stable: vec![Some(Ok(revision)), None],
            gang: Gang::NotRequested,
            clock: Availability::default(),
            written_drains: &BTreeMap::new(),
            readings: &BTreeMap::new(),
        });
        let mut keys: Vec<(bool, Option<String>)> = pass.roles[0]
            .creates
            .iter()
            .map(|create| {
                let NewChild::Pod(pod) = &create.child else {
                    panic!("a plain-pod role")
                };
                (create.stable, pod.labels().get(LABEL_PAIRING_KEY).cloned())
            })
            .collect();
        keys.sort();
        let target = pairing_key(&rs.spec, &rs.spec, "prefill");
        let from_stable = pairing_key(&rs.spec, &stable, "prefill");
        assert_ne!(target, from_stable);
        assert_eq!(keys, [(false, target.clone()), (true, from_stable)]);
        let decode = &pass.roles[1].creates;
        assert!(
            decode.iter().all(|c| matches!(&c.child,
                NewChild::Pod(pod) if pod.labels().get(LABEL_PAIRING_KEY) == target.as_ref())),
            "a role without a partition: the target's key"
        );
    }
}
