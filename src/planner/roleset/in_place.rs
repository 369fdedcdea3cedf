//! In-place image updates of plain-pod roles (`InPlaceIfPossible`,
//! docs/rollouts.md#in-place-image-updates): whether a live pod can reach the desired pod by
//! changing container images only, why an update in progress has not completed, and the patch that
//! starts one.
//!
//! Pure: the controller reads pods, asks these functions, and writes what they return.
//!
//! Eligibility compares the live pod with the pod the role would create now. The live pod
//! carries what the API server and its admission plugins filled in; a field present only on
//! the live pod is accepted when it holds the value Kubernetes defaults it to (or is one of
//! the service-account token volumes, default tolerations, or the node binding). Anything
//! else that differs — including fields set by other mutating webhooks — makes the pod
//! ineligible, and the role falls back to recreating its pods.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::api::keys::{
    ANNOTATION_DRAIN_IN_FLIGHT, ANNOTATION_DRAIN_POLICY, ANNOTATION_DRAIN_STARTED,
    ANNOTATION_IN_PLACE_PENDING_REASON, ANNOTATION_IN_PLACE_STATE, ANNOTATION_IN_PLACE_TARGET_HASH,
    CONDITION_IN_PLACE_READY, CONDITION_PAIRING_SERVABLE, LABEL_PAIRING_KEY, LABEL_ROLE_REVISION,
    LABEL_ROLE_REVISION_NAME, LABEL_ROLE_TEMPLATE_HASH,
};

/// Env var whose value is the template hash: it differs between revisions by design.
const TEMPLATE_HASH_ENV: &str = "ROLE_TEMPLATE_HASH";
/// Prefix of the service-account token volumes the API server adds.
const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";

/// Why an in-place update has not completed (the `in-place-update-pending-reason` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PendingReason {
    /// The pod is not Ready.
    PodNotReady,
    /// A changed container has no status yet.
    ContainerStatusMissing,
    /// A changed container is not ready.
    ContainerNotReady,
    /// A changed container still reports the imageID it had before the patch.
    ImageIdUnchanged,
}

impl PendingReason {
    /// The annotation value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PodNotReady => "PodNotReady",
            Self::ContainerStatusMissing => "ContainerStatusMissing",
            Self::ContainerNotReady => "ContainerNotReady",
            Self::ImageIdUnchanged => "ImageIDUnchanged",
        }
    }
}

impl fmt::Display for PendingReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a pod cannot be updated in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// Already equal to the desired pod.
    AlreadyUpdated,
    /// Nothing but the template hash differs.
    NoImageChange,
    /// An init container's image changed (init containers cannot be updated in place).
    InitContainerImage(String),
    /// A field other than a main-container image differs, at this path.
    FieldChanged(String),
}

impl fmt::Display for Ineligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyUpdated => f.write_str("pod is already updated"),
            Self::NoImageChange => f.write_str("no container image changes found"),
            Self::InitContainerImage(name) => {
                write!(f, "init container {name} changes its image")
            }
            Self::FieldChanged(path) => write!(f, "{path} changes, not only container images"),
        }
    }
}

/// The `in-place-update-state` annotation: imageIDs from before the patch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceState {
    /// Container name to its status before the patch.
    pub last_container_statuses: BTreeMap<String, LastStatus>,
}

/// One container's status before the patch.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct LastStatus {
    /// Its imageID.
    #[serde(rename = "imageID")]
    pub image_id: String,
}

/// Whether `live`, labelled with another template hash (another controller's — AIBrix hashes
/// templates differently — or an older template that renders the same pod), already is
/// `desired`, the pod the role would create now, with the same tolerance for what the API
/// server filled in: adopting it is a label patch, not a restart.
pub fn adoptable(live: &Pod, desired: &Pod) -> bool {
    matches!(eligibility(live, desired), Err(Ineligible::NoImageChange))
}

/// Whether `live` reaches `desired` (the pod the role would create now) by changing the
/// images of its main containers only.
pub fn eligibility(live: &Pod, desired: &Pod) -> Result<(), Ineligible> {
    if template_hash_of(live).is_some() && template_hash_of(live) == template_hash_of(desired) {
        return Err(Ineligible::AlreadyUpdated);
    }
    let live_spec = live.spec.clone().unwrap_or_default();
    let desired_spec = desired.spec.clone().unwrap_or_default();
    let init_images =
        |spec: &k8s_openapi::api::core::v1::PodSpec| -> Vec<(String, Option<String>)> {
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| (c.name.clone(), c.image.clone()))
                .collect()
        };
    let (live_init, desired_init) = (init_images(&live_spec), init_images(&desired_spec));
    if let Some((name, _)) = desired_init
        .iter()
        .find(|(name, image)| live_init.iter().any(|(n, i)| n == name && i != image))
    {
        return Err(Ineligible::InitContainerImage(name.clone()));
    }
    let images_differ = desired_spec.containers.iter().any(|d| {
        live_spec
            .containers
            .iter()
            .any(|l| l.name == d.name && l.image != d.image)
    });
    let mut live_view = comparable(live);
    let desired_view = comparable(desired);
    // Copy the desired main-container images onto the live pod: they are what may change.
    if let (Some(live_containers), Some(desired_containers)) = (
        live_view
            .pointer_mut("/spec/containers")
            .and_then(Value::as_array_mut),
        desired_view
            .pointer("/spec/containers")
            .and_then(Value::as_array),
    ) {
        for container in live_containers.iter_mut() {
            let name = container.get("name").cloned();
            if let Some(image) = desired_containers
                .iter()
                .find(|d| d.get("name") == name.as_ref())
                .and_then(|d| d.get("image"))
            {
                container["image"] = image.clone();
            }
        }
    }
    if let Some(path) = first_difference(&desired_view, &live_view, "", false) {
        return Err(Ineligible::FieldChanged(path));
    }
    if images_differ {
        Ok(())
    } else {
        Err(Ineligible::NoImageChange)
    }
}

fn template_hash_of(pod: &Pod) -> Option<&String> {
    pod.metadata.labels.as_ref()?.get(LABEL_ROLE_TEMPLATE_HASH)
}

/// The parts of a pod that must match: labels and annotations (without squall's revision and
/// in-place keys) and the spec (without its per-pod fields and the template-hash env value).
fn comparable(pod: &Pod) -> Value {
    let mut labels = pod.metadata.labels.clone().unwrap_or_default();
    for key in [
        LABEL_ROLE_TEMPLATE_HASH,
        LABEL_ROLE_REVISION,
        LABEL_ROLE_REVISION_NAME,
        // A partner's change moves the key without a restart (docs/rollouts.md#pairing).
        LABEL_PAIRING_KEY,
    ] {
        labels.remove(key);
    }
    let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
    for key in [
        ANNOTATION_IN_PLACE_TARGET_HASH,
        ANNOTATION_IN_PLACE_STATE,
        ANNOTATION_IN_PLACE_PENDING_REASON,
        // A drain is squall's state of the pod, and the drain it was created with moves
        // with its role's (docs/rollouts.md#drain-before-delete).
        ANNOTATION_DRAIN_STARTED,
        ANNOTATION_DRAIN_IN_FLIGHT,
        ANNOTATION_DRAIN_POLICY,
    ] {
        annotations.remove(key);
    }
    let mut spec =
        serde_json::to_value(pod.spec.clone().unwrap_or_default()).expect("a PodSpec serializes");
    if let Value::Object(spec) = &mut spec {
        // Per-pod: a stateful pod's hostname is its name, which embeds the hash.
        spec.remove("hostname");
        // A pod made before its role was paired has no pairing gate, and cannot get one
        // (readiness gates are immutable): it moves in place ungated.
        if let Some(Value::Array(gates)) = spec.get_mut("readinessGates") {
            gates.retain(|g| g.get("conditionType") != Some(&json!(CONDITION_PAIRING_SERVABLE)));
            if gates.is_empty() {
                spec.remove("readinessGates");
            }
        }
        for container in containers_mut(spec) {
            if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
                for var in env.iter_mut() {
                    if var.get("name").and_then(Value::as_str) == Some(TEMPLATE_HASH_ENV) {
                        var.as_object_mut().map(|v| v.remove("value"));
                    }
                }
            }
        }
    }
    json!({"metadata": {"labels": labels, "annotations": annotations}, "spec": spec})
}

fn containers_mut(spec: &mut Map<String, Value>) -> impl Iterator<Item = &mut Value> {
    spec.iter_mut()
        .filter(|(k, _)| *k == "containers" || *k == "initContainers")
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
}

/// Values the API server defaults a field to when it is absent (keys inside `spec`).
fn is_default(key: &str, value: &Value, parent: &Map<String, Value>) -> bool {
    let expected = match key {
        "terminationMessagePath" => json!("/dev/termination-log"),
        "terminationMessagePolicy" => json!("File"),
        "protocol" => json!("TCP"),
        "scheme" => json!("HTTP"),
        "apiVersion" => json!("v1"),
        "failureThreshold" => json!(3),
        "successThreshold" | "timeoutSeconds" => json!(1),
        "periodSeconds" => json!(10),
        "dnsPolicy" => json!("ClusterFirst"),
        "enableServiceLinks" => json!(true),
        "preemptionPolicy" => json!("PreemptLowerPriority"),
        "priority" => json!(0),
        "restartPolicy" => json!("Always"),
        "schedulerName" => json!("default-scheduler"),
        "securityContext" | "resources" => json!({}),
        "serviceAccount" | "serviceAccountName" => json!("default"),
        "terminationGracePeriodSeconds" => json!(30),
        "defaultMode" => json!(420),
        // The scheduler's binding, not part of the template.
        "nodeName" => return true,
        // Kubernetes' image rule: Always for `:latest` or untagged images, else IfNotPresent.
        "imagePullPolicy" => {
            let image = parent.get("image").and_then(Value::as_str).unwrap_or("");
            let tag = image
                .rsplit_once('/')
                .map_or(image, |(_, last)| last)
                .split_once(':')
                .map(|(_, tag)| tag);
            let digest = image.contains('@');
            json!(if !digest && tag.is_none_or(|t| t == "latest") {
                "Always"
            } else {
                "IfNotPresent"
            })
        }
        _ => return false,
    };
    value == &expected
}

/// Live-only list items the API server adds: token volumes and their mounts, and the
/// default `not-ready` / `unreachable` NoExecute tolerations.
fn is_added_item(key: &str, item: &Value) -> bool {
    let name = item.get("name").and_then(Value::as_str).unwrap_or("");
    match key {
        "volumes" | "volumeMounts" => name.starts_with(TOKEN_VOLUME_PREFIX),
        "tolerations" => {
            let default_key = matches!(
                item.get("key").and_then(Value::as_str),
                Some("node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable")
            );
            default_key
                && item.get("operator") == Some(&json!("Exists"))
                && item.get("effect") == Some(&json!("NoExecute"))
                && item.get("tolerationSeconds") == Some(&json!(300))
        }
        _ => false,
    }
}

/// The first path where `live` differs from `desired`, allowing API-server defaults on the
/// live side inside the spec.
fn first_difference(desired: &Value, live: &Value, path: &str, in_spec: bool) -> Option<String> {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            for (key, dv) in d {
                let child = format!("{path}.{key}");
                let child_in_spec = in_spec || (path.is_empty() && key == "spec");
                match l.get(key) {
                    Some(lv) => {
                        if let Some(diff) = first_difference(dv, lv, &child, child_in_spec) {
                            return Some(diff);
                        }
                    }
                    None if is_empty(dv) => {}
                    None => return Some(child),
                }
            }
            for (key, lv) in l {
                if d.contains_key(key) || is_empty(lv) {
                    continue;
                }
                let defaulted = in_spec
                    && (is_default(key, lv, l)
                        // Requests default to the limits.
                        || (key == "requests" && d.get("limits") == Some(lv))
                        || lv
                            .as_array()
                            .is_some_and(|items| items.iter().all(|i| is_added_item(key, i))));
                if !defaulted {
                    return Some(format!("{path}.{key}"));
                }
            }
            None
        }
        (Value::Array(d), Value::Array(l)) => {
            let key = path.rsplit('.').next().unwrap_or("");
            let live: Vec<&Value> = if in_spec {
                l.iter()
                    .filter(|item| !is_added_item(key, item) || d.contains(item))
                    .collect()
            } else {
                l.iter().collect()
            };
            if live.len() != d.len() {
                return Some(path.to_string());
            }
            d.iter().zip(live).enumerate().find_map(|(i, (dv, lv))| {
                first_difference(dv, lv, &format!("{path}[{i}]"), in_spec)
            })
        }
        _ if desired == live => None,
        _ => Some(path.to_string()),
    }
}

/// Go's zero values, which the API server omits (`omitempty`): absent equals empty.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Why the in-place update of `pod` has not completed, or None when it has. Readiness is
/// the containers' (`ContainersReady`, else `Ready`): a gated pod is not Ready until its gates
/// are True, and squall sets its gates True after the move completes.
pub fn pending_reason(pod: &Pod) -> Option<PendingReason> {
    let status = pod.status.as_ref();
    let conditions = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let of = |type_: &str| conditions.iter().find(|c| c.type_ == type_);
    let ready = of("ContainersReady")
        .or_else(|| of("Ready"))
        .is_some_and(|c| c.status == "True");
    if !ready {
        return Some(PendingReason::PodNotReady);
    }
    let state: InPlaceState = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_IN_PLACE_STATE))
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let statuses = status
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    for (container, last) in &state.last_container_statuses {
        let Some(current) = statuses.iter().find(|s| &s.name == container) else {
            return Some(PendingReason::ContainerStatusMissing);
        };
        if !current.ready {
            return Some(PendingReason::ContainerNotReady);
        }
        if current.image_id == last.image_id {
            return Some(PendingReason::ImageIdUnchanged);
        }
    }
    None
}

/// Whether the pod declares the in-place readiness gate.
pub fn has_readiness_gate(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| {
            g.iter()
                .any(|g| g.condition_type == CONDITION_IN_PLACE_READY)
        })
}

/// The strategic-merge patch that starts an in-place update of `live` toward `desired`:
/// the changed main-container images, the target hash, and (once) the previous imageIDs.
pub fn start_patch(live: &Pod, desired: &Pod, target_hash: &str) -> Value {
    let live_containers = live
        .spec
        .as_ref()
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    let statuses = live
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let mut state = InPlaceState::default();
    let mut containers = Vec::new();
    for wanted in desired.spec.iter().flat_map(|s| &s.containers) {
        let Some(current) = live_containers.iter().find(|c| c.name == wanted.name) else {
            continue;
        };
        if current.image == wanted.image {
            continue;
        }
        containers.push(json!({"name": wanted.name, "image": wanted.image}));
        let image_id = statuses
            .iter()
            .find(|s| s.name == wanted.name)
            .map(|s| s.image_id.clone())
            .unwrap_or_default();
        state
            .last_container_statuses
            .insert(wanted.name.clone(), LastStatus { image_id });
    }
    let mut annotations = json!({ANNOTATION_IN_PLACE_TARGET_HASH: target_hash});
    let recorded = live
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_IN_PLACE_STATE));
    if !recorded {
        annotations[ANNOTATION_IN_PLACE_STATE] =
            json!(serde_json::to_string(&state).expect("the state serializes"));
    }
    // A drained pod's drain ends with the move (docs/rollouts.md#drain-before-delete).
    for drain in [ANNOTATION_DRAIN_STARTED, ANNOTATION_DRAIN_IN_FLIGHT] {
        if live
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(drain))
        {
            annotations[drain] = Value::Null;
        }
    }
    json!({"metadata": {"annotations": annotations}, "spec": {"containers": containers}})
}

/// The merge patch that completes an in-place update: the pod is now on `target_hash`, and
/// its role-revision labels are the RoleSet's current ones.
pub fn complete_patch(target_hash: &str, role_revision_labels: &[(String, String)]) -> Value {
    let mut labels = Map::from_iter([(LABEL_ROLE_TEMPLATE_HASH.to_string(), json!(target_hash))]);
    labels.extend(
        role_revision_labels
            .iter()
            .map(|(key, value)| (key.clone(), json!(value))),
    );
    json!({"metadata": {
        "labels": labels,
        "annotations": {
            ANNOTATION_IN_PLACE_TARGET_HASH: null,
            ANNOTATION_IN_PLACE_STATE: null,
            ANNOTATION_IN_PLACE_PENDING_REASON: null,
        },
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completing_refreshes_the_hash_and_the_role_revision_labels() {
        let labels = [
            (LABEL_ROLE_REVISION.to_string(), "5".to_string()),
            (LABEL_ROLE_REVISION_NAME.to_string(), "svc-5c8b".to_string()),
        ];
        let patch = complete_patch("h2", &labels);
        assert_eq!(
            patch["metadata"]["labels"],
            json!({LABEL_ROLE_TEMPLATE_HASH: "h2", LABEL_ROLE_REVISION: "5",
                   LABEL_ROLE_REVISION_NAME: "svc-5c8b"})
        );
        assert_eq!(
            patch["metadata"]["annotations"][ANNOTATION_IN_PLACE_TARGET_HASH],
            Value::Null
        );
    }

    /// A pod as squall renders it.
    fn desired(image: &str, hash: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"generateName": "rs-decode-", "labels": {"role-name": "decode", "role-template-hash": hash}},
            "spec": {"containers": [{
                "name": "engine", "image": image,
                "ports": [{"containerPort": 8000}],
                "readinessProbe": {"httpGet": {"path": "/health", "port": 8000}},
                "env": [
                    {"name": "STORM_SERVICE_NAME", "value": ""},
                    {"name": "ROLE_TEMPLATE_HASH", "value": hash},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
                "resources": {"limits": {"cpu": "1"}},
            }]}
        }))
        .unwrap()
    }

    /// The same pod as the local control plane's API server stored it (defaults filled in,
    /// token volume and default tolerations added, bound to a node).
    fn live(image: &str, hash: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "rs-decode-x7k2p", "uid": "u", "resourceVersion": "7",
                "labels": {"role-name": "decode", "role-template-hash": hash}},
            "spec": {
                "containers": [{
                    "name": "engine", "image": image, "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 8000, "protocol": "TCP"}],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"},
                        "failureThreshold": 3, "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1},
                    "env": [
                        {"name": "STORM_SERVICE_NAME"},
                        {"name": "ROLE_TEMPLATE_HASH", "value": hash},
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                    ],
                    "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "name": "kube-api-access-md59f", "readOnly": true}],
                }],
                "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "nodeName": "kwok-node-1",
                "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "restartPolicy": "Always",
                "schedulerName": "default-scheduler", "securityContext": {},
                "serviceAccount": "default", "serviceAccountName": "default",
                "terminationGracePeriodSeconds": 30,
                "tolerations": [
                    {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
                    {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
                ],
                "volumes": [{"name": "kube-api-access-md59f", "projected": {"defaultMode": 420, "sources": []}}],
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "engine", "image": image, "imageID": format!("kwok://{image}"),
                    "ready": true, "restartCount": 0}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn an_image_change_is_eligible_despite_server_defaults() {
        assert_eq!(
            eligibility(&live("engine:1", "h1"), &desired("engine:2", "h2")),
            Ok(())
        );
    }

    #[test]
    fn unchanged_and_non_image_changes_are_not_eligible() {
        assert_eq!(
            eligibility(&live("engine:1", "h1"), &desired("engine:1", "h1")),
            Err(Ineligible::AlreadyUpdated)
        );
        assert_eq!(
            eligibility(&live("engine:1", "h1"), &desired("engine:1", "h2")),
            Err(Ineligible::NoImageChange)
        );
        let mut env_changed = desired("engine:2", "h2");
        env_changed.spec.as_mut().unwrap().containers[0]
            .env
            .as_mut()
            .unwrap()[2]
            .name = "HOST_IP".into();
        assert_eq!(
            eligibility(&live("engine:1", "h1"), &env_changed),
            Err(Ineligible::FieldChanged(
                ".spec.containers[0].env[2].name".into()
            ))
        );
        // A field removed from the template (here the readiness probe) is a change too.
        let mut removed = desired("engine:2", "h2");
        removed.spec.as_mut().unwrap().containers[0].readiness_probe = None;
        assert_eq!(
            eligibility(&live("engine:1", "h1"), &removed),
            Err(Ineligible::FieldChanged(
                ".spec.containers[0].readinessProbe".into()
            ))
        );
        // A live value that is not the default is not mistaken for one.
        let mut tuned = live("engine:1", "h1");
        tuned
            .spec
            .as_mut()
            .unwrap()
            .termination_grace_period_seconds = Some(90);
        assert_eq!(
            eligibility(&tuned, &desired("engine:2", "h2")),
            Err(Ineligible::FieldChanged(
                ".spec.terminationGracePeriodSeconds".into()
            ))
        );
    }

    #[test]
    fn init_container_images_cannot_change_in_place() {
        let mut from = live("engine:1", "h1");
        from.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(json!({"name": "fetch", "image": "fetch:1"})).unwrap(),
        ]);
        let mut to = desired("engine:2", "h2");
        to.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(json!({"name": "fetch", "image": "fetch:2"})).unwrap(),
        ]);
        assert_eq!(
            eligibility(&from, &to),
            Err(Ineligible::InitContainerImage("fetch".into()))
        );
    }

    #[test]
    fn the_image_pull_policy_rule() {
        let policy = |image: &str| {
            let parent: Map<String, Value> =
                serde_json::from_value(json!({"image": image})).unwrap();
            ["Always", "IfNotPresent"]
                .into_iter()
                .find(|p| is_default("imagePullPolicy", &json!(p), &parent))
                .unwrap()
        };
        assert_eq!(policy("engine"), "Always");
        assert_eq!(policy("engine:latest"), "Always");
        assert_eq!(policy("registry:5000/engine"), "Always");
        assert_eq!(policy("registry:5000/engine:2"), "IfNotPresent");
        assert_eq!(policy("engine@sha256:abc"), "IfNotPresent");
    }

    #[test]
    fn pending_reasons_follow_the_kubelet() {
        let live = live("engine:1", "h1");
        let patch = start_patch(&live, &desired("engine:2", "h2"), "h2");
        assert_eq!(
            patch["spec"]["containers"],
            json!([{"name": "engine", "image": "engine:2"}])
        );
        let state = patch["metadata"]["annotations"][ANNOTATION_IN_PLACE_STATE]
            .as_str()
            .unwrap()
            .to_string();
        let mut patched = live.clone();
        patched.metadata.annotations = Some(
            [
                (ANNOTATION_IN_PLACE_STATE.to_string(), state),
                (ANNOTATION_IN_PLACE_TARGET_HASH.to_string(), "h2".into()),
            ]
            .into(),
        );
        assert_eq!(
            pending_reason(&patched),
            Some(PendingReason::ImageIdUnchanged)
        );
        let status = patched.status.as_mut().unwrap();
        status.container_statuses.as_mut().unwrap()[0].ready = false;
        assert_eq!(
            pending_reason(&patched),
            Some(PendingReason::ContainerNotReady)
        );
        let status = patched.status.as_mut().unwrap();
        status.container_statuses = None;
        assert_eq!(
            pending_reason(&patched),
            Some(PendingReason::ContainerStatusMissing)
        );
        patched.status.as_mut().unwrap().conditions = None;
        assert_eq!(pending_reason(&patched), Some(PendingReason::PodNotReady));
        // The kubelet reports the new image.
        let mut done = live.clone();
        done.metadata.annotations = patched.metadata.annotations.clone();
        done.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .image_id = "kwok://engine:2".into();
        assert_eq!(pending_reason(&done), None);
        // The previous imageIDs are recorded once: a second patch keeps them.
        let again = start_patch(&done, &desired("engine:3", "h3"), "h3");
        assert!(
            again["metadata"]["annotations"]
                .get(ANNOTATION_IN_PLACE_STATE)
                .is_none()
        );
    }
}
