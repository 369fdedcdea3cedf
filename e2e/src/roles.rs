//! RoleSet fixtures and pod accessors shared by the RoleSet tests.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};
use squall::api::RoleSet;

/// A RoleSet `name` with `roles` as (name, replicas, upgradeOrder), every role running one
/// container `engine` with `image`.
pub fn roleset(name: &str, roles: &[(&str, i32, Option<i32>)], image: &str) -> RoleSet {
    let roles: Vec<Value> = roles
        .iter()
        .map(|(role, replicas, order)| {
            let mut r = json!({"name": role, "replicas": replicas,
                "template": {"spec": {"containers": [{"name": "engine", "image": image}]}}});
            if let Some(order) = order {
                r["upgradeOrder"] = json!(order);
            }
            r
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": name}, "spec": {"roles": roles}
    }))
    .unwrap()
}

/// Ready at `generation`, with status observed at that generation.
pub fn settled(rs: Option<&RoleSet>, generation: i64) -> bool {
    let Some(rs) = rs else { return false };
    let Some(status) = rs.status.as_ref() else {
        return false;
    };
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    status.observed_generation == Some(generation)
        && rs.metadata.generation == Some(generation)
        && ready
}

/// Condition Ready is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The `role-name` label.
pub fn role_of(pod: &Pod) -> String {
    pod.labels().get("role-name").cloned().unwrap_or_default()
}

/// The `role-template-hash` label.
pub fn hash_of(pod: &Pod) -> String {
    pod.labels()
        .get("role-template-hash")
        .cloned()
        .unwrap_or_default()
}

/// Replays recorded pod events, calling `check(index, live pods)` for every observed state
/// from event `start` on (earlier events only build the state).
pub fn replay(
    events: &[crate::Observed<Pod>],
    start: usize,
    mut check: impl FnMut(usize, &std::collections::BTreeMap<String, Pod>),
) {
    let mut state = std::collections::BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        match event {
            crate::Observed::Applied(p) => state.insert(p.name_any(), p.clone()),
            crate::Observed::Deleted(p) => state.remove(&p.name_any()),
        };
        if i >= start {
            check(i, &state);
        }
    }
}
