//! What routers see during a rollout of paired roles (docs/rollouts.md#pairing): the pods a
//! Service's EndpointSlices list as serving, replayed state by state beside the pods
//! themselves, and checked for partners of the same version.
//!
//! Two watches (pods, EndpointSlices) are merged by arrival. The slices trail the pods (the
//! endpoint controller derives them from pods), so an endpoint whose pod already says it is
//! not Ready, or is gone, is the slice catching up and is not judged.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use squall::api::keys::{CONDITION_PAIRING_SERVABLE, LABEL_PAIRING_KEY};

use crate::roles::{is_ready, role_of};
use crate::{Observed, TimedObservation};

/// The routing domain of a pod: its RoleSet (a pooled StormService has one).
fn domain_of(pod: &Pod) -> String {
    pod.labels()
        .get("roleset-name")
        .cloned()
        .unwrap_or_default()
}

/// The version a pod serves: its first container's image (the tests change every paired
/// role's image to the same new one, so a version is what the pairing key should follow).
pub fn version_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// Endpoint names the slices of `service` list as serving and not terminating.
fn serving_endpoints(slices: &BTreeMap<String, EndpointSlice>, service: &str) -> BTreeSet<String> {
    slices
        .values()
        .filter(|s| {
            s.labels()
                .get("kubernetes.io/service-name")
                .map(String::as_str)
                == Some(service)
        })
        .flat_map(|s| &s.endpoints)
        .filter(|e| {
            let c = e.conditions.as_ref();
            c.and_then(|c| c.serving) == Some(true) && c.and_then(|c| c.terminating) != Some(true)
        })
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect()
}

/// What the replay saw.
#[derive(Debug, Default)]
pub struct Replayed {
    /// Slice states judged.
    pub states: usize,
    /// Versions that were served whole (every paired role serving it in one domain) at
    /// some state, in the order they first were.
    pub served_whole: Vec<String>,
    /// The first violation, if any: the event and what was wrong.
    pub violation: Option<String>,
    /// Per version, the pairing keys its pods carried.
    pub keys: BTreeMap<String, BTreeSet<String>>,
    /// The most any version's serving pods strayed from the group's ratio in one domain
    /// (squall's skew: what the slowest role lacks of the leader's share), and at which
    /// event.
    pub max_skew: (u32, usize),
    /// Per pod: its version and how often its pairing condition changed.
    pub gate_changes: BTreeMap<String, (String, usize)>,
    /// One line per event: the pod or the serving endpoints it showed (for the message).
    pub timeline: Vec<String>,
}

/// An event of either watch.
enum Event<'a> {
    Pod(&'a Observed<Pod>),
    Slice(&'a Observed<EndpointSlice>),
}

/// One event, in a line.
fn describe(event: &Event<'_>, service: &str) -> String {
    match event {
        Event::Pod(Observed::Applied(pod)) => format!(
            "pod {} {} {} ready={} gate={:?} containers={:?}{}",
            pod.name_any(),
            role_of(pod),
            version_of(pod),
            is_ready(pod),
            condition(pod, CONDITION_PAIRING_SERVABLE),
            condition(pod, "ContainersReady"),
            if pod.metadata.deletion_timestamp.is_some() {
                " terminating"
            } else {
                ""
            }
        ),
        Event::Pod(Observed::Deleted(pod)) => format!("pod {} deleted", pod.name_any()),
        Event::Pod(Observed::Relisted(_)) => "pods relisted".into(),
        Event::Slice(slice) => {
            let mut state = BTreeMap::new();
            slice.apply_to(&mut state);
            format!("slices: serving {:?}", serving_endpoints(&state, service))
        }
    }
}

/// Replays the recorded pods and slices of `service` from `since` on and checks, at every
/// state: each serving pod of a `group` role has, in its domain, a serving partner of its
/// version in every later role of the group (a router that picks the first role's pod finds
/// its partners by key) and a live one in every earlier role, and some version is served
/// whole (the old one until the new one is).
pub fn replay(
    pods: &[TimedObservation<Pod>],
    slices: &[TimedObservation<EndpointSlice>],
    service: &str,
    group: &[&str],
    replicas: &[u32],
    since: Instant,
) -> Replayed {
    let mut merged: Vec<(Instant, Event<'_>)> =
        pods.iter().map(|(t, e)| (*t, Event::Pod(e))).collect();
    merged.extend(slices.iter().map(|(t, e)| (*t, Event::Slice(e))));
    // Stable: each watch keeps its order; at the same instant, the pods first.
    merged.sort_by_key(|(t, e)| (*t, matches!(e, Event::Slice(_))));
    let mut pod_state = BTreeMap::new();
    let mut slice_state = BTreeMap::new();
    let mut replayed = Replayed::default();
    for (i, (at, event)) in merged.into_iter().enumerate() {
        replayed
            .timeline
            .push(format!("{i}: {}", describe(&event, service)));
        if let Event::Pod(Observed::Applied(pod)) = event
            && at >= since
        {
            let gate = condition(pod, CONDITION_PAIRING_SERVABLE);
            let before = pod_state
                .get(&pod.name_any())
                .and_then(|p: &Pod| condition(p, CONDITION_PAIRING_SERVABLE));
            let entry = replayed
                .gate_changes
                .entry(pod.name_any())
                .or_insert((version_of(pod), 0));
            if gate.is_some() && gate != before {
                entry.1 += 1;
            }
        }
        match event {
            Event::Pod(e) => e.apply_to(&mut pod_state),
            Event::Slice(e) => e.apply_to(&mut slice_state),
        }
        for pod in pod_state.values() {
            if let Some(key) = pod.labels().get(LABEL_PAIRING_KEY) {
                replayed
                    .keys
                    .entry(version_of(pod))
                    .or_default()
                    .insert(key.clone());
            }
        }
        if at < since || matches!(event, Event::Pod(_)) {
            continue;
        }
        let serving = serving_pods(&pod_state, &slice_state, service, group);
        let skew = skew(&serving, group, replicas);
        if skew > replayed.max_skew.0 {
            replayed.max_skew = (skew, i);
        }
        if replayed.violation.is_some() {
            continue;
        }
        replayed.states += 1;
        if let Err(wrong) = judge(&pod_state, &serving, group, &mut replayed) {
            let recent = replayed.timeline.len().saturating_sub(40);
            replayed.violation = Some(format!(
                "event {i}: {wrong}\nthe events before it:\n{}",
                replayed.timeline[recent..].join("\n")
            ));
        }
    }
    replayed
}

/// The `group`'s pods the slices of `service` list as serving and that agree they serve (the
/// rest is the slice catching up).
fn serving_pods<'a>(
    pods: &'a BTreeMap<String, Pod>,
    slices: &BTreeMap<String, EndpointSlice>,
    service: &str,
    group: &[&str],
) -> Vec<&'a Pod> {
    serving_endpoints(slices, service)
        .iter()
        .filter_map(|name| pods.get(name))
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_ready(p))
        .filter(|p| group.contains(&role_of(p).as_str()))
        .collect()
}

/// The largest skew of any version in any domain (`replicas` per domain of each role of the
/// `group`).
fn skew(serving: &[&Pod], group: &[&str], replicas: &[u32]) -> u32 {
    let mut counts: BTreeMap<(String, String), Vec<u32>> = BTreeMap::new();
    for pod in serving {
        let position = group.iter().position(|r| *r == role_of(pod)).unwrap_or(0);
        counts
            .entry((version_of(pod), domain_of(pod)))
            .or_insert_with(|| vec![0; group.len()])[position] += 1;
    }
    counts
        .values()
        .map(|serving| squall::planner::pairing::skew(serving, replicas))
        .max()
        .unwrap_or(0)
}

/// One slice state's `serving` pods against the pods as they are now.
fn judge(
    pods: &BTreeMap<String, Pod>,
    serving: &[&Pod],
    group: &[&str],
    replayed: &mut Replayed,
) -> Result<(), String> {
    let serves = |role: &str, version: &str, domain: &str| {
        serving
            .iter()
            .any(|q| role_of(q) == role && version_of(q) == version && domain_of(q) == domain)
    };
    for pod in serving {
        let (version, domain) = (version_of(pod), domain_of(pod));
        let position = group.iter().position(|r| *r == role_of(pod)).unwrap_or(0);
        for (other, role) in group.iter().enumerate().filter(|(i, _)| *i != position) {
            // A later role serves the version; an earlier one at least has a live pod of it
            // (the group's last role serves alone at a key's first and last instants).
            let partner = if other > position {
                serves(role, &version, &domain)
            } else {
                pods.values().any(|q| {
                    role_of(q) == *role
                        && version_of(q) == version
                        && domain_of(q) == domain
                        && q.metadata.deletion_timestamp.is_none()
                        && condition(q, "ContainersReady").as_deref() == Some("True")
                })
            };
            if !partner {
                return Err(format!(
                    "{} ({version}, {domain}) serves without a {role} of its version: serving {:?}",
                    pod.name_any(),
                    serving
                        .iter()
                        .map(|q| format!("{}:{}", q.name_any(), version_of(q)))
                        .collect::<Vec<_>>()
                ));
            }
        }
    }
    let whole: BTreeSet<String> = serving
        .iter()
        .map(|p| (version_of(p), domain_of(p)))
        .filter(|(version, domain)| group.iter().all(|role| serves(role, version, domain)))
        .map(|(version, _)| version)
        .collect();
    if whole.is_empty() {
        return Err(format!(
            "no version is served whole: serving {:?}",
            serving
                .iter()
                .map(|q| format!("{}:{}", q.name_any(), version_of(q)))
                .collect::<Vec<_>>()
        ));
    }
    for version in whole {
        if !replayed.served_whole.contains(&version) {
            replayed.served_whole.push(version);
        }
    }
    Ok(())
}
