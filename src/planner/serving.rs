//! The serving gate (docs/rollouts.md#the-serving-gate): the readiness gate
//! `pairing.squall.dev/servable` squall holds on a pod, so that the pod serves — is Ready,
//! listed in the EndpointSlices — only while squall lets it, and leaves traffic while it
//! keeps running. Pairing closes it on a pod whose key cannot serve (`super::pairing`); an
//! aborted canary's pods kept warm are out of traffic by it; outside those, a gated pod
//! serves while it is up.
//!
//! Pure: the RoleSet planner asks which gates to write.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::PodSet;
use crate::api::cached::pod::CachedPod;
use crate::api::keys::{
    ANNOTATION_IN_PLACE_TARGET_HASH, CONDITION_PAIRING_SERVABLE, LABEL_PODSET_NAME,
};
use crate::planner::status::Reason;

/// A pod's serving condition, as written when the cache does not show it yet; None while
/// absent.
pub(crate) fn gate(pod: &CachedPod, written: &BTreeMap<String, bool>) -> Option<bool> {
    written.get(pod.name()).copied().or_else(|| {
        pod.condition(CONDITION_PAIRING_SERVABLE)
            .map(|s| s == "True")
    })
}

/// Its containers are ready, it runs (or is about to) and no in-place move runs on it.
pub(crate) fn up(pod: &CachedPod) -> bool {
    pod.phase()
        .is_none_or(|phase| phase == "Running" || phase == "Pending")
        && pod.condition("ContainersReady") == Some("True")
        && !pod
            .annotations()
            .contains_key(ANNOTATION_IN_PLACE_TARGET_HASH)
}

/// A RoleSet's PodSets' live pods, by PodSet: one look-up per gang, however many.
#[derive(Debug, Default)]
pub struct Gangs<'a>(BTreeMap<&'a str, Vec<&'a CachedPod>>);

impl<'a> Gangs<'a> {
    /// `gang_pods` by the PodSet of `podsets` they belong to (by its label).
    pub fn new(podsets: &'a [Arc<PodSet>], gang_pods: &'a [Arc<CachedPod>]) -> Self {
        let mut members: BTreeMap<&str, Vec<&CachedPod>> = podsets
            .iter()
            .filter_map(|p| Some((p.metadata.name.as_deref()?, Vec::new())))
            .collect();
        for pod in gang_pods.iter().filter(|p| !p.is_deleting()) {
            let podset = pod.labels().get(LABEL_PODSET_NAME);
            if let Some(pods) = podset.and_then(|name| members.get_mut(name)) {
                pods.push(pod);
            }
        }
        Self(members)
    }

    /// The live pods of PodSet `name`; None when it is not a PodSet.
    pub(crate) fn members(&self, name: &str) -> Option<&[&'a CachedPod]> {
        self.0.get(name).map(Vec::as_slice)
    }
}

/// The pods whose serving condition a gate decision on `unit` writes: the pod itself, or a
/// gang's pods whose condition is not `servable` yet.
pub fn gate_writes(
    unit: &str,
    servable: bool,
    gangs: &Gangs<'_>,
    written: &BTreeMap<String, bool>,
) -> Vec<String> {
    let Some(gang) = gangs.members(unit) else {
        return vec![unit.to_string()];
    };
    gang.iter()
        .filter(|p| gate(p, written).unwrap_or(false) != servable)
        .map(|p| p.name().to_string())
        .collect()
}

/// A serving condition to write on a pod, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    /// The pod.
    pub pod: String,
    /// The condition's status: True lets the pod serve.
    pub servable: bool,
    /// The condition's reason.
    pub reason: Reason,
}

impl Gate {
    /// A gate pairing decided: its reason follows from its status.
    pub fn paired(pod: String, servable: bool) -> Self {
        let reason = if servable {
            Reason::PartnersReady
        } else {
            Reason::NoPartner
        };
        Self {
            pod,
            servable,
            reason,
        }
    }
}

/// Whether a pod declares the serving gate or already carries its condition (only such a
/// pod can be taken out of traffic without being deleted).
pub(crate) fn gated(pod: &CachedPod) -> bool {
    pod.condition(CONDITION_PAIRING_SERVABLE).is_some()
        || pod.has_readiness_gate(CONDITION_PAIRING_SERVABLE)
}

/// The gate writes for `units` (pods, or PodSets by name) that pairing does not decide: a
/// gated pod serves while it is up, and not at all while its unit is `held_out` (for the
/// reason given). A pod
/// without the gate is left alone, and a gate not yet written is not written False (a gate
/// without its condition holds the pod out already).
pub fn gates<'a>(
    units: impl IntoIterator<Item = &'a str>,
    pods: &BTreeMap<&str, &CachedPod>,
    gangs: &Gangs<'_>,
    held_out: &BTreeMap<String, Reason>,
    written: &BTreeMap<String, bool>,
) -> Vec<Gate> {
    let mut writes = Vec::new();
    for unit in units {
        let members: Vec<&CachedPod> = match gangs.members(unit) {
            Some(gang) => gang.to_vec(),
            None => pods.get(unit).copied().into_iter().collect(),
        };
        let out = held_out.get(unit).copied();
        for pod in members.into_iter().filter(|p| gated(p)) {
            let reason = match (out, up(pod)) {
                (Some(reason), _) => reason,
                (None, true) => Reason::Serving,
                (None, false) => Reason::NotUp,
            };
            let servable = reason == Reason::Serving;
            if gate(pod, written).unwrap_or(false) != servable {
                writes.push(Gate {
                    pod: pod.name().to_string(),
                    servable,
                    reason,
                });
            }
        }
    }
    writes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, gate: Option<bool>, containers_ready: bool) -> CachedPod {
        let mut conditions = vec![json!({"type": "ContainersReady",
            "status": if containers_ready { "True" } else { "False" }})];
        if let Some(gate) = gate {
            conditions.push(json!({"type": CONDITION_PAIRING_SERVABLE,
                "status": if gate { "True" } else { "False" }}));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [], "readinessGates": [{"conditionType": CONDITION_PAIRING_SERVABLE}]},
            "status": {"phase": "Running", "conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn a_gated_pod_serves_while_up_and_not_while_held_out() {
        let (up_closed, up_open, starting, warm) = (
            pod("up-closed", Some(false), true),
            pod("up-open", Some(true), true),
            pod("starting", None, false),
            pod("warm", Some(true), true),
        );
        let pods: BTreeMap<&str, &CachedPod> = [&up_closed, &up_open, &starting, &warm]
            .into_iter()
            .map(|p| (p.name(), p))
            .collect();
        let held_out = BTreeMap::from([("warm".to_string(), Reason::HeldOut)]);
        let writes = gates(
            ["up-closed", "up-open", "starting", "warm"],
            &pods,
            &Gangs::default(),
            &held_out,
            &BTreeMap::new(),
        );
        let said: Vec<(&str, bool, Reason)> = writes
            .iter()
            .map(|g| (g.pod.as_str(), g.servable, g.reason))
            .collect();
        assert_eq!(
            said,
            [
                ("up-closed", true, Reason::Serving),
                ("warm", false, Reason::HeldOut)
            ],
            "an open gate stays, a starting pod's unwritten gate is not written False"
        );
        // Written and not yet seen: nothing twice.
        let written = writes.iter().map(|g| (g.pod.clone(), g.servable)).collect();
        let again = gates(
            ["up-closed", "up-open", "starting", "warm"],
            &pods,
            &Gangs::default(),
            &held_out,
            &written,
        );
        assert!(again.is_empty(), "{again:?}");
    }
}
