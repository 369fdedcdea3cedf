//! RoleSet and StormService fixtures and accessors shared by the e2e tests.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::{Value, json};
use squall::api::{RoleSet, StormService};

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

/// A StormService that has settled: its status observed at its generation (`at`, when
/// given, must be that generation), one revision, condition Ready True.
pub fn stormservice_settled(ss: Option<&StormService>, at: Option<i64>) -> bool {
    let Some((ss, status)) = ss.and_then(|s| s.status.as_ref().map(|st| (s, st))) else {
        return false;
    };
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    status.observed_generation == ss.metadata.generation
        && at.is_none_or(|at| ss.metadata.generation == Some(at))
        && status.current_revision == status.update_revision
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

/// Replays recorded events, calling `check(index, live objects)` for every observed state
/// from event `start` on (earlier events only build the state).
pub fn replay<K: kube::Resource + Clone>(
    events: &[crate::Observed<K>],
    start: usize,
    mut check: impl FnMut(usize, &std::collections::BTreeMap<String, K>),
) {
    let mut state = std::collections::BTreeMap::new();
    for (i, event) in events.iter().enumerate() {
        event.apply_to(&mut state);
        if i >= start {
            check(i, &state);
        }
    }
}

/// A RoleSet that is not terminating and whose status, observed at its generation, says
/// Ready.
pub fn roleset_ready(roleset: &RoleSet) -> bool {
    roleset.metadata.deletion_timestamp.is_none()
        && roleset.status.as_ref().is_some_and(|s| {
            s.observed_generation == roleset.metadata.generation
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// The pod budgets of RoleSet roles at one observed state (docs/rollouts.md#invariants, for the
/// controller's own actions): per RoleSet and role, at most `replicas + max_surge` pods,
/// terminating ones included, and at least `replicas - max_unavailable` that are live and Ready.
/// `roles` is (role, replicas); pods of other roles are not checked.
pub fn assert_pod_budgets(
    event: usize,
    state: &std::collections::BTreeMap<String, Pod>,
    roles: &[(&str, i32)],
    max_surge: i32,
    max_unavailable: i32,
) {
    let mut per_role: std::collections::BTreeMap<(String, String), (i32, i32)> = Default::default();
    for pod in state.values() {
        let roleset = pod
            .labels()
            .get("roleset-name")
            .cloned()
            .unwrap_or_default();
        let entry = per_role.entry((roleset, role_of(pod))).or_default();
        entry.0 += 1;
        entry.1 += i32::from(pod.metadata.deletion_timestamp.is_none() && is_ready(pod));
    }
    for ((roleset, role), (present, ready)) in per_role {
        let Some(&(_, replicas)) = roles.iter().find(|(name, _)| *name == role) else {
            continue;
        };
        assert!(
            present <= replicas + max_surge,
            "event {event}: {roleset}/{role} has {present} pods, at most {} allowed",
            replicas + max_surge
        );
        assert!(
            ready >= replicas - max_unavailable,
            "event {event}: {roleset}/{role} has {ready} Ready pods, at least {} required",
            replicas - max_unavailable
        );
    }
}

/// The StormService budgets at one observed state: at most `max_present` RoleSets (counting
/// terminating ones) and at least `min_ready` Ready.
pub fn assert_roleset_budgets(
    event: usize,
    state: &std::collections::BTreeMap<String, RoleSet>,
    max_present: usize,
    min_ready: usize,
) {
    let ready = state.values().filter(|r| roleset_ready(r)).count();
    assert!(
        state.len() <= max_present,
        "event {event}: {} RoleSets, at most {max_present}",
        state.len()
    );
    assert!(
        ready >= min_ready,
        "event {event}: {ready} Ready RoleSets, at least {min_ready}"
    );
}

/// A StormService `name` with `replicas` RoleSets, the update `strategy`, and `roles` as
/// (name, replicas), every role running one container `engine` with `engine:1`.
pub fn stormservice(
    name: &str,
    replicas: i32,
    strategy: Value,
    roles: &[(&str, i32)],
) -> StormService {
    let roles: Vec<Value> = roles
        .iter()
        .map(|(role, n)| {
            json!({"name": role, "replicas": n,
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": strategy,
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"roles": roles}},
        }
    }))
    .unwrap()
}

/// The RoleSets of `api` that are not terminating (Ready says nothing of RoleSets a
/// rollout is still deleting).
pub async fn live_rolesets(api: &kube::Api<RoleSet>) -> Vec<RoleSet> {
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Changes the image of the first container of role `role` (its index in the template) of
/// the StormService `name` — the template change that starts a rollout.
pub async fn set_role_image(api: &kube::Api<StormService>, name: &str, role: usize, image: &str) {
    let patch = json!([{"op": "replace",
        "path": format!("/spec/template/spec/roles/{role}/template/spec/containers/0/image"),
        "value": image}]);
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Json::<()>(serde_json::from_value(patch).expect("a JSON patch")),
    )
    .await
    .unwrap_or_else(|e| panic!("changing the image of {name}: {e}"));
}
