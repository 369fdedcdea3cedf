//! The local control plane behaves like a cluster: squall's CRDs and every upstream sample
//! pass strict server-side validation, pods are scheduled onto kwok nodes and become Ready
//! through the intermediate states, and the kubelet emulation does what kwok does not.

use std::time::Duration;

use e2e::{
    Recorder, TestNamespace, client, documents, install_crds, kubectl, kubelet, shared_dir,
    wait_for, workspace_root,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

fn is_ready(pod: &Pod) -> bool {
    condition(pod, "Ready") == Some("True")
}

fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

fn test_pod(name: &str, annotations: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"containers": [{"name": "server", "image": "registry.k8s.io/e2e-test-images/agnhost:2.53"}]}
    }))
    .unwrap()
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn crds_and_every_sample_pass_strict_server_side_dry_run() {
    install_crds();
    let dry_run = |path: &std::path::Path| {
        kubectl(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                path.to_str().unwrap(),
            ],
            None,
        )
    };
    let out = dry_run(&workspace_root().join("manifests/crds/crds.yaml"));
    assert!(out.success, "CRDs: {}", out.stderr);
    let out = dry_run(&workspace_root().join("manifests/samples"));
    assert!(out.success, "bundled samples: {}", out.stderr);

    let Some(shared) = shared_dir() else { return };
    let samples = shared.join("conformance/aibrix-samples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&samples).unwrap() {
        let path = entry.unwrap().path();
        for doc in documents(&path) {
            if doc["apiVersion"] != "orchestration.aibrix.ai/v1alpha1" {
                continue; // kinds squall does not own (e.g. PodAutoscaler)
            }
            let out = kubectl(
                &[
                    "apply",
                    "--server-side",
                    "--dry-run=server",
                    "--validate=strict",
                    "--field-manager=e2e",
                    "-f",
                    "-",
                ],
                Some(&doc.to_string()),
            );
            assert!(
                out.success,
                "{} ({} {}): {}",
                path.display(),
                doc["kind"],
                doc["metadata"]["name"],
                out.stderr
            );
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} sample objects checked");
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn pod_is_scheduled_onto_a_kwok_node_and_becomes_ready_after_the_start_stage() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "pod").await;
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let recorder = Recorder::start(pods.clone()).await;

    pods.create(&PostParams::default(), &test_pod("p", json!({})))
        .await
        .unwrap();
    let ready = wait_for(&pods, "p", "pod p Ready", TIMEOUT, |p| {
        p.is_some_and(is_ready)
    })
    .await
    .unwrap()
    .unwrap();
    let node = ready
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap();
    assert!(node.starts_with("kwok-node-"), "scheduled onto {node}");

    // Mechanism, not timing: the pod was observed started-but-not-Ready before Ready.
    recorder.catch_up(&pods).await;
    let states = recorder.states_of("p");
    let first_ready = states.iter().position(is_ready).expect("Ready observed");
    assert!(
        states[..first_ready]
            .iter()
            .any(
                |p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && !is_ready(p)
            ),
        "expected a Running, not-Ready state before Ready; observed {} states",
        states.len()
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn held_pods_become_ready_only_when_released() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "hold").await;
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    pods.create(
        &PostParams::default(),
        &test_pod("held", json!({"e2e.squall.dev/hold-ready": "true"})),
    )
    .await
    .unwrap();
    // A second, unheld pod created after it becomes Ready first: the hold, not timing, decides.
    pods.create(&PostParams::default(), &test_pod("free", json!({})))
        .await
        .unwrap();
    wait_for(&pods, "free", "pod free Ready", TIMEOUT, |p| {
        p.is_some_and(is_ready)
    })
    .await
    .unwrap();
    let held = pods.get("held").await.unwrap();
    assert_eq!(
        condition(&held, "Ready"),
        Some("False"),
        "held pod must not be Ready"
    );

    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"e2e.squall.dev/ready": "true"}}})),
    )
    .await
    .unwrap();
    wait_for(&pods, "held", "released pod Ready", TIMEOUT, |p| {
        p.is_some_and(is_ready)
    })
    .await
    .unwrap();
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn kubelet_emulation_reports_in_place_updates_and_failures() {
    let client = client().await;
    let ns = TestNamespace::create(&client, "kubelet").await;
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    pods.create(&PostParams::default(), &test_pod("p", json!({})))
        .await
        .unwrap();
    wait_for(&pods, "p", "pod p Ready", TIMEOUT, |p| {
        p.is_some_and(is_ready)
    })
    .await
    .unwrap();

    // An in-place image patch, as squall's InPlaceIfPossible strategy makes it.
    let new_image = "registry.k8s.io/e2e-test-images/agnhost:2.54";
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"containers": [{"name": "server", "image": new_image}]}}),
        ),
    )
    .await
    .unwrap();
    let pod = kubelet::apply_in_place_update(&pods, "p").await.unwrap();
    let status = &pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0];
    assert_eq!(status.image, new_image);
    assert_eq!(status.image_id, format!("kwok://{new_image}"));
    assert_eq!(status.restart_count, 1);
    assert!(is_ready(&pod), "conditions are kept by the strategic merge");

    let pod = kubelet::make_not_ready(&pods, "p").await.unwrap();
    assert_eq!(condition(&pod, "Ready"), Some("False"));
    assert_eq!(
        condition(&pod, "PodScheduled"),
        Some("True"),
        "other conditions are kept"
    );

    let pod = kubelet::fail_pod(&pods, "p").await.unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Failed"));
}
