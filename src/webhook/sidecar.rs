//! AIBrix's runtime-sidecar injection (docs/admission.md#defaults), for StormServices annotated
//! `model.aibrix.ai/sidecar-injection: "true"`. Decided on the raw object, like defaulting,
//! as additions: each changed role's pod spec, whole.

use serde_json::{Map, Value, json};

use crate::admission::defaulting::Addition;

/// Opt-in annotation on the StormService; only `"true"` injects.
pub const ANNOTATION_SIDECAR_INJECTION: &str = "model.aibrix.ai/sidecar-injection";
/// Sidecar image override (StormService annotation).
pub const ANNOTATION_SIDECAR_IMAGE: &str = "model.aibrix.ai/sidecar-runtime-image";
/// Engine type (annotation on `spec.template.metadata`).
pub const ANNOTATION_ENGINE: &str = "model.aibrix.ai/engine";
/// Name of the injected container.
pub const SIDECAR_NAME: &str = "aibrix-runtime";
pub(super) const DEFAULT_IMAGE: &str = "aibrix/runtime:v0.5.0";
pub(super) const VOLUME: &str = "adapter-storage";
pub(super) const MOUNT_PATH: &str = "/tmp/aibrix/adapters";

/// The pod specs of the roles lacking the sidecar, with it injected, when the annotation is
/// `"true"`; a warning when the annotation has any other value (nothing is injected then).
pub fn injection(stormservice: &Value) -> (Vec<Addition>, Option<String>) {
    let mut additions = Vec::new();
    let warning = inject(stormservice, &mut additions);
    (additions, warning)
}

fn inject(stormservice: &Value, additions: &mut Vec<Addition>) -> Option<String> {
    let annotations = stormservice.pointer("/metadata/annotations")?.as_object()?;
    let value = annotations.get(ANNOTATION_SIDECAR_INJECTION)?;
    if value != "true" {
        return Some(format!(
            "metadata.annotations[{ANNOTATION_SIDECAR_INJECTION}] is {value}; only \"true\" injects the runtime sidecar"
        ));
    }
    let image = annotations
        .get(ANNOTATION_SIDECAR_IMAGE)
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_IMAGE)
        .to_string();
    let engine_annotation = stormservice
        .pointer(&format!(
            "/spec/template/metadata/annotations/{}",
            ANNOTATION_ENGINE.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .map(str::to_string);
    let roles = stormservice
        .pointer("/spec/template/spec/roles")
        .and_then(Value::as_array)?;
    for (i, role) in roles.iter().enumerate() {
        if let Some(pod) = role.pointer("/template/spec").and_then(Value::as_object)
            && let Some(injected) = injected_pod(pod, &image, engine_annotation.as_deref())
        {
            additions.push(Addition {
                path: format!("/spec/template/spec/roles/{i}/template/spec"),
                value: Value::Object(injected),
            });
        }
    }
    None
}

/// `pod` with the sidecar, its volume and mounts; `None` when it has the sidecar already.
fn injected_pod(
    pod: &Map<String, Value>,
    image: &str,
    engine: Option<&str>,
) -> Option<Map<String, Value>> {
    let containers = pod
        .get("containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if containers.iter().any(|c| c["name"] == SIDECAR_NAME) {
        return None;
    }
    let mut pod = pod.clone();
    let engine = engine
        .map(str::to_string)
        .unwrap_or_else(|| infer_engine(&containers));

    let volumes = pod.entry("volumes").or_insert_with(|| json!([]));
    if let Some(volumes) = volumes.as_array_mut() {
        match volumes.iter_mut().find(|v| v["name"] == VOLUME) {
            Some(existing) if existing.get("emptyDir").is_some() => {}
            Some(existing) => *existing = json!({"name": VOLUME, "emptyDir": {}}),
            None => volumes.push(json!({"name": VOLUME, "emptyDir": {}})),
        }
    }
    let mount = json!({"name": VOLUME, "mountPath": MOUNT_PATH});
    let mut containers = containers;
    for container in containers.iter_mut().filter_map(Value::as_object_mut) {
        let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
        if let Some(mounts) = mounts.as_array_mut()
            && !mounts.iter().any(|m| m["name"] == VOLUME)
        {
            mounts.push(mount.clone());
        }
    }
    let sidecar = json!({
        "name": SIDECAR_NAME,
        "image": image,
        "command": ["aibrix_runtime", "--port", "8080"],
        "env": [
            {"name": "INFERENCE_ENGINE", "value": engine},
            {"name": "INFERENCE_ENGINE_ENDPOINT", "value": "http://localhost:8000"},
        ],
        "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}],
        "volumeMounts": [mount],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 3, "periodSeconds": 2},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "initialDelaySeconds": 5, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
    });
    containers.insert(0, sidecar);
    pod.insert("containers".into(), Value::Array(containers));
    Some(pod)
}

/// The engine named by the containers' images.
pub(super) fn infer_engine(containers: &[Value]) -> String {
    let images: Vec<String> = containers
        .iter()
        .filter_map(|c| c["image"].as_str())
        .map(str::to_lowercase)
        .collect();
    let any = |needle: &str| images.iter().any(|i| i.contains(needle));
    let engine = if any("vllm") {
        "vllm"
    } else if any("sglang") {
        "sglang"
    } else if any("text-generation-inference") || any("tgi") {
        "tgi"
    } else if any("triton") {
        "triton"
    } else if images
        .iter()
        .any(|i| i.contains("llama") && i.contains("cpp"))
    {
        "llamacpp"
    } else {
        "unknown"
    };
    engine.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::defaulting::PatchWriter;

    /// Applies the injection as the webhook's patch would; its warning.
    fn inject(stormservice: &mut Value) -> Option<String> {
        let (additions, warning) = injection(stormservice);
        let mut patch = PatchWriter::default();
        for addition in &additions {
            patch.push(addition);
        }
        let patch: json_patch::Patch = serde_json::from_slice(&patch.into_bytes()).unwrap();
        json_patch::patch(stormservice, &patch).unwrap();
        warning
    }

    fn stormservice(annotation: &str) -> Value {
        json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": "s", "annotations": {ANNOTATION_SIDECAR_INJECTION: annotation}},
            "spec": {"template": {"spec": {"roles": [
                {"name": "prefill", "template": {"spec": {
                    "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.9.0"}],
                    "volumes": [{"name": VOLUME, "hostPath": {"path": "/x"}}]
                }}},
                {"name": "decode", "template": {"spec": {"containers": [{"name": "engine", "image": "lmsysorg/sglang:v0.4"}]}}}
            ]}}}
        })
    }

    #[test]
    fn injects_the_runtime_sidecar_once() {
        let mut ss = stormservice("true");
        assert_eq!(inject(&mut ss), None);
        let prefill = &ss["spec"]["template"]["spec"]["roles"][0]["template"]["spec"];
        assert_eq!(prefill["containers"][0]["name"], SIDECAR_NAME);
        assert_eq!(prefill["containers"][0]["env"][0]["value"], "vllm");
        assert_eq!(
            prefill["containers"][1]["volumeMounts"][0]["mountPath"],
            MOUNT_PATH
        );
        assert_eq!(
            prefill["volumes"],
            json!([{"name": VOLUME, "emptyDir": {}}]),
            "converted to emptyDir"
        );
        let decode = &ss["spec"]["template"]["spec"]["roles"][1]["template"]["spec"];
        assert_eq!(decode["containers"][0]["env"][0]["value"], "sglang");

        let once = ss.clone();
        assert_eq!(inject(&mut ss), None);
        assert_eq!(ss, once, "idempotent");
    }

    #[test]
    fn other_values_warn_and_do_not_inject() {
        let mut ss = stormservice("yes");
        let before = ss.clone();
        let warning = inject(&mut ss).expect("a warning");
        assert!(warning.contains("only \"true\""), "{warning}");
        assert_eq!(ss, before);
    }

    #[test]
    fn engine_annotation_wins_over_images() {
        let mut ss = stormservice("true");
        ss["spec"]["template"]["metadata"] = json!({"annotations": {ANNOTATION_ENGINE: "triton"}});
        inject(&mut ss);
        assert_eq!(
            ss["spec"]["template"]["spec"]["roles"][1]["template"]["spec"]["containers"][0]["env"]
                [0]["value"],
            "triton"
        );
    }
}
