//! Multi-node roles (shared operator): `podGroupSize: 2` creates PodSets with indexed pods,
//! and a failed pod is recovered per `recoveryPolicy`.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::{TestNamespace, client, install_crds, kubelet, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use squall::api::{PodSet, PodSetPhase, RoleSet};

const TIMEOUT: Duration = Duration::from_secs(120);
const INDEX: &str = "stormservice.orchestration.aibrix.ai/pod-group-index";

fn gang_ready(ps: Option<&PodSet>) -> bool {
    ps.and_then(|p| p.status.as_ref())
        .is_some_and(|s| s.phase == Some(PodSetPhase::Ready))
}

async fn gang_pods(pods: &Api<Pod>, podset: &str) -> BTreeMap<String, (String, String)> {
    let selector = format!("stormservice.orchestration.aibrix.ai/podset-name={podset}");
    pods.list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                p.labels()[INDEX].clone(),
                (p.name_any(), p.uid().unwrap_or_default()),
            )
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn multi_node_roles_get_podsets_with_indexed_pods_and_recover_failed_pods() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "podset").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let podsets: Api<PodSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let rs: RoleSet = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "tp"},
        "spec": {"roles": [{"name": "prefill", "replicas": 2, "podGroupSize": 2,
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}]}
    }))
    .unwrap();
    rolesets.create(&PostParams::default(), &rs).await.unwrap();
    wait_for(&rolesets, "tp", "RoleSet tp Ready", TIMEOUT, |rs| {
        rs.and_then(|r| r.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
    })
    .await
    .unwrap();

    let sets = podsets.list(&Default::default()).await.unwrap().items;
    assert_eq!(sets.len(), 2, "one PodSet per replica");
    let mut slots: Vec<String> = sets
        .iter()
        .map(|p| p.labels()["stormservice.orchestration.aibrix.ai/role-replica-index"].clone())
        .collect();
    slots.sort();
    assert_eq!(slots, ["0", "1"]);
    let podset = sets[0].name_any();
    let gang = gang_pods(&pods, &podset).await;
    assert_eq!(gang.keys().collect::<Vec<_>>(), ["0", "1"], "indexed pods");
    for (index, (name, _)) in &gang {
        assert_eq!(*name, format!("{podset}-{index}"));
        let pod = pods.get(name).await.unwrap();
        let env = &pod.spec.unwrap().containers[0].env.clone().unwrap();
        let first: Vec<&str> = env.iter().take(3).map(|e| e.name.as_str()).collect();
        assert_eq!(first, ["PODSET_NAME", "POD_GROUP_INDEX", "POD_GROUP_SIZE"]);
    }

    // ReplaceUnhealthy (the default): only the failed pod is replaced.
    let (failed, failed_uid) = gang["1"].clone();
    let (kept, kept_uid) = gang["0"].clone();
    kubelet::fail_pod(&pods, &failed).await.unwrap();
    let recovered = wait_for_gang(&pods, &podset, |g| {
        g.get("1").is_some_and(|(_, uid)| *uid != failed_uid)
    })
    .await;
    assert_eq!(recovered["0"], (kept, kept_uid), "the healthy pod is kept");
    wait_for(&podsets, &podset, "PodSet Ready again", TIMEOUT, |ps| {
        gang_ready(ps)
    })
    .await
    .unwrap();
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn recreate_policy_replaces_the_whole_gang() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "recreate").await;
    let podsets: Api<PodSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let ps: PodSet = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "gang"},
        "spec": {"podGroupSize": 2, "recoveryPolicy": "Recreate",
                 "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}
    }))
    .unwrap();
    podsets.create(&PostParams::default(), &ps).await.unwrap();
    wait_for(&podsets, "gang", "PodSet Ready", TIMEOUT, |ps| {
        gang_ready(ps)
    })
    .await
    .unwrap();
    let before = gang_pods(&pods, "gang").await;
    kubelet::fail_pod(&pods, &before["0"].0).await.unwrap();
    let after = wait_for_gang(&pods, "gang", |g| {
        g.len() == 2 && g.iter().all(|(i, (_, uid))| *uid != before[i].1)
    })
    .await;
    assert_eq!(after.len(), 2);
    wait_for(&podsets, "gang", "PodSet Ready again", TIMEOUT, |ps| {
        gang_ready(ps)
    })
    .await
    .unwrap();
}

/// Waits (bounded) until the gang's live pods satisfy `done`; returns them.
async fn wait_for_gang(
    pods: &Api<Pod>,
    podset: &str,
    done: impl Fn(&BTreeMap<String, (String, String)>) -> bool,
) -> BTreeMap<String, (String, String)> {
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        let gang = gang_pods(pods, podset).await;
        if done(&gang) {
            return gang;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for the gang of {podset}; last: {gang:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The PodSet's `ReplicaFailure` condition, as (reason, message), while it is True.
fn replica_failure(podset: &PodSet) -> Option<(String, String)> {
    podset
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_refused_gang_pod_is_reported_by_its_podset_until_it_is_created() {
    use k8s_openapi::api::core::v1::ResourceQuota;
    use kube::api::{Patch, PatchParams};
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "podset-quota").await;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), ns.name());
    let quota: ResourceQuota = serde_json::from_value(
        json!({"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "1"}}}),
    )
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    // Quota admission enforces a quota once the quota controller has counted its usage.
    wait_for(&quotas, "pods", "the quota counted", TIMEOUT, |q| {
        q.and_then(|q| q.status.as_ref())
            .is_some_and(|s| s.used.is_some())
    })
    .await
    .unwrap();
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let podsets: Api<PodSet> = Api::namespaced(client.clone(), ns.name());
    let rs: RoleSet = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "capped"},
        "spec": {"roles": [{"name": "prefill", "replicas": 1, "podGroupSize": 2,
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}]}
    }))
    .unwrap();
    rolesets.create(&PostParams::default(), &rs).await.unwrap();

    // The quota admits one pod of the gang of two: the PodSet says why the other is missing,
    // also on the passes after the admitted pod shows (the first refusal is reported by the
    // pass that created that pod, before its cache shows it).
    let refused = wait_for_all(
        &podsets,
        "the PodSet's ReplicaFailure beside its admitted pod",
        TIMEOUT,
        |sets| {
            sets.len() == 1
                && replica_failure(&sets[0]).is_some()
                && sets[0].status.as_ref().is_some_and(|s| s.total_pods == 1)
        },
    )
    .await
    .unwrap();
    let (reason, message) = replica_failure(&refused[0]).unwrap();
    assert_eq!(reason, "FailedCreate");
    assert!(
        message.contains("exceeded quota") && message.starts_with("pod 1: "),
        "the refusal names the pod and the quota: {message}"
    );
    assert_ne!(
        refused[0].status.as_ref().unwrap().phase,
        Some(PodSetPhase::Ready)
    );

    // Room for the second pod: the retry creates it, the gang is Ready, the failure clears.
    quotas
        .patch(
            "pods",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"hard": {"pods": "2"}}})),
        )
        .await
        .unwrap();
    let ready = wait_for_all(
        &podsets,
        "the PodSet Ready once the quota allows",
        TIMEOUT,
        |sets| sets.len() == 1 && gang_ready(Some(&sets[0])),
    )
    .await
    .unwrap();
    assert_eq!(replica_failure(&ready[0]), None, "the failure is cleared");
    assert_eq!(ready[0].status.as_ref().unwrap().total_pods, 2);
}
