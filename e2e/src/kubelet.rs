//! What kwok does not emulate of a kubelet: reporting the image (and a new imageID and
//! restart) after an in-place image patch, and failing pods for fault tests.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// Reports the pod's containers as running the images its spec now names, as a kubelet does
/// after an in-place image update: `image` and `imageID` follow the spec and the restart
/// count of every changed container goes up by one.
pub async fn apply_in_place_update(api: &Api<Pod>, name: &str) -> kube::Result<Pod> {
    let pod = api.get(name).await?;
    let spec_images: Vec<(String, String)> = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let updated: Vec<_> = spec_images
        .iter()
        .map(|(container, image)| {
            let old = statuses.iter().find(|s| &s.name == container);
            let changed = old.is_none_or(|s| &s.image != image);
            let restarts = old.map_or(0, |s| s.restart_count) + i32::from(changed);
            json!({
                "name": container,
                "image": image,
                "imageID": format!("kwok://{image}"),
                "ready": true,
                "started": true,
                "restartCount": restarts,
                "state": {"running": {"startedAt": k8s_openapi::jiff::Timestamp::now().to_string()}},
            })
        })
        .collect();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"containerStatuses": updated}})),
    )
    .await
}

/// Marks a pod Failed, as a kubelet does when its containers exit with an error.
pub async fn fail_pod(api: &Api<Pod>, name: &str) -> kube::Result<Pod> {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {
            "phase": "Failed",
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "PodFailed"},
                {"type": "ContainersReady", "status": "False", "reason": "PodFailed"},
            ],
        }})),
    )
    .await
}

/// Makes a pod not Ready and keeps it so (kwok would otherwise make it Ready again): the
/// hold annotation stops kwok's ready stage, then the status is patched.
pub async fn make_not_ready(api: &Api<Pod>, name: &str) -> kube::Result<Pod> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "e2e.squall.dev/hold-ready": "true",
            "e2e.squall.dev/ready": null,
        }}})),
    )
    .await?;
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
        ]}})),
    )
    .await
}
