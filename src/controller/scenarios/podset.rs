//! The PodSet controller's writes: a gang's pods by index, a refused create, a failed pod
//! recovered, the template hash and the pairing key passed on, the status, ordered deletion,
//! and the finalizer added before anything else.

use serde_json::{Value, json};

use super::{ScriptedApi, path_of, paths};
use crate::api::PodSet;
use crate::api::keys::{
    FINALIZER_PODSET, LABEL_PAIRING_KEY, LABEL_POD_GROUP_INDEX, LABEL_PODSET_NAME,
    LABEL_ROLE_TEMPLATE_HASH,
};
use crate::controller::kit::error::Error;

const PODS: &str = "/api/v1/namespaces/tenant/pods";

fn podset(size: i32) -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "gang", "uid": "gang-uid", "generation": 1,
            "finalizers": [FINALIZER_PODSET], "labels": {LABEL_ROLE_TEMPLATE_HASH: "h1"}},
        "spec": {"podGroupSize": size, "recoveryPolicy": "ReplaceUnhealthy",
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}
    })
}

/// A pod of the gang at `index`, controlled by it, in `phase`.
fn member(index: u32, phase: &str, hash: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("gang-{index}"), "uid": format!("pod-{index}"),
            "labels": {LABEL_PODSET_NAME: "gang", LABEL_POD_GROUP_INDEX: index.to_string(),
                LABEL_ROLE_TEMPLATE_HASH: hash},
            "ownerReferences": [{"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
                "name": "gang", "uid": "gang-uid", "controller": true}]},
        "spec": {"containers": [{"name": "engine", "image": "engine:1"}]},
        "status": {"phase": phase}
    })
}

fn gang_path() -> String {
    path_of(&podset(1))
}

#[tokio::test]
async fn a_gang_gets_its_missing_pods_by_index_and_a_status() {
    let api = ScriptedApi::holding([podset(3), member(1, "Running", "h1")]);
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let writes = api.writes();
    assert_eq!(
        paths(&writes, "create"),
        [format!("{PODS}/gang-0"), format!("{PODS}/gang-2")],
        "the missing indexes, in order: {writes:#?}"
    );
    let status = api.object(&gang_path()).unwrap()["status"].clone();
    assert_eq!(
        status["totalPods"], 1,
        "counted from what the cache showed: {status}"
    );
    assert_eq!(
        paths(&writes, "patch"),
        [format!("{}/status", gang_path())],
        "one status write"
    );
    // The status write is guarded by the version it was decided from.
    let guard = &writes.last().unwrap().body[0];
    assert_eq!(guard["path"], "/metadata/resourceVersion", "{guard}");
}

#[tokio::test]
async fn an_index_whose_pod_is_already_there_counts_as_created() {
    // The cache does not show gang-0 yet; the API server has it.
    let api = ScriptedApi::holding([podset(2)]);
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let first = paths(&api.writes(), "create");
    assert_eq!(first.len(), 2);
    // The next pass, from the same stale cache, meets both names taken: not an error.
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    assert_eq!(
        paths(&api.writes(), "create"),
        first,
        "no pod created twice"
    );
}

#[tokio::test]
async fn a_refused_pod_stops_the_creates_and_is_reported_in_the_status() {
    let api = ScriptedApi::holding([podset(3)]);
    api.refuse("create", "/pods", 403, "exceeded quota: pods=2");
    let ctx = api.context::<PodSet>().await;
    let result = api.reconcile::<PodSet>(&ctx, &gang_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root), Err(Error::Refused(m)) if m.contains("quota")),
        "retried with backoff: {result:?}"
    );
    let writes = api.writes();
    assert!(paths(&writes, "create").is_empty(), "{writes:#?}");
    let status = api.object(&gang_path()).unwrap()["status"].clone();
    let failure = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ReplicaFailure")
        .cloned()
        .unwrap_or_else(|| panic!("a ReplicaFailure condition: {status}"));
    assert_eq!(failure["reason"], "FailedCreate");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .starts_with("pod 0: exceeded quota"),
        "the first refused index, with the API server's message: {failure}"
    );
}

#[tokio::test]
async fn a_failed_member_is_deleted_by_uid_and_a_new_hash_is_passed_on() {
    let mut gang = podset(2);
    gang["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH] = json!("h2");
    let api = ScriptedApi::holding([gang, member(0, "Failed", "h1"), member(1, "Running", "h1")]);
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let writes = api.writes();
    let delete = writes
        .iter()
        .find(|w| w.verb == "delete")
        .expect("the failed pod goes");
    assert_eq!(delete.path, format!("{PODS}/gang-0"));
    assert_eq!(
        delete.body["preconditions"]["uid"], "pod-0",
        "the pod observed, by UID"
    );
    let relabelled: Vec<String> = writes
        .iter()
        .filter(|w| w.verb == "patch" && w.path.starts_with(PODS))
        .map(|w| w.path.clone())
        .collect();
    assert!(
        relabelled.contains(&format!("{PODS}/gang-1")),
        "the live pod takes the PodSet's hash without a restart: {writes:#?}"
    );
    assert_eq!(
        api.object(&format!("{PODS}/gang-1")).unwrap()["metadata"]["labels"]
            [LABEL_ROLE_TEMPLATE_HASH],
        "h2"
    );
}

#[tokio::test]
async fn a_deleted_gang_waits_for_its_pods_then_lets_its_finalizer_go() {
    let mut gang = podset(1);
    gang["metadata"]["deletionTimestamp"] = json!("2026-12-04T00:00:00Z");
    let api = ScriptedApi::holding([gang, member(0, "Running", "h1")]);
    let ctx = api.context::<PodSet>().await;
    let result = api.reconcile::<PodSet>(&ctx, &gang_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root), Err(Error::Waiting(m)) if m == "1 pods still terminating"),
        "{result:?}"
    );
    assert_eq!(paths(&api.writes(), "delete"), [format!("{PODS}/gang-0")]);
    // The cache still shows the pod (its watch is silent): the delete is not sent again.
    let _ = api.reconcile::<PodSet>(&ctx, &gang_path()).await;
    assert_eq!(
        paths(&api.writes(), "delete").len(),
        1,
        "one delete, however many passes"
    );
    // A fresh context's cache shows no pod; the API server confirms none: the finalizer goes.
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let finalizers = &api.object(&gang_path()).unwrap()["metadata"]["finalizers"];
    assert!(
        finalizers.as_array().is_none_or(Vec::is_empty),
        "removed once nothing is left: {finalizers}"
    );
}

#[tokio::test]
async fn a_new_gang_gets_its_finalizer_before_any_pod() {
    let mut gang = podset(2);
    gang["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    let api = ScriptedApi::holding([gang]);
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let writes = api.writes();
    assert_eq!(
        paths(&writes, "patch"),
        [gang_path()],
        "only the finalizer: {writes:#?}"
    );
    assert!(paths(&writes, "create").is_empty(), "{writes:#?}");
    assert_eq!(
        api.object(&gang_path()).unwrap()["metadata"]["finalizers"],
        json!([FINALIZER_PODSET])
    );
    // Its own write brings the next pass, which makes the pods.
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    assert_eq!(paths(&api.writes(), "create").len(), 2);
}

#[tokio::test]
async fn a_gangs_pods_take_the_pairing_key_their_podset_passes_on() {
    let mut gang = podset(2);
    gang["metadata"]["labels"][LABEL_PAIRING_KEY] = json!("k2");
    let api = ScriptedApi::holding([gang, member(0, "Running", "h1"), member(1, "Running", "h1")]);
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    for index in 0..2 {
        let pod = api.object(&format!("{PODS}/gang-{index}")).unwrap();
        assert_eq!(pod["metadata"]["labels"][LABEL_PAIRING_KEY], "k2", "{pod}");
    }
    let patched = paths(&api.writes(), "patch")
        .into_iter()
        .filter(|p| p.starts_with(PODS))
        .count();
    assert_eq!(patched, 2, "one patch per pod: {:#?}", api.writes());
}
