//! The RoleSet controller's writes: a role's pods created once however stale the cache, a
//! refused create by role, a slot's name already taken, a scale-down by UID, a removed
//! role's pods, an invalid spec, ordered deletion, an in-place move started, waiting and
//! completed (and a gated pod's conditions around it), a change in-place cannot make, a pod
//! adopted under its new hash (a multi-node role's PodSet too), a gang whose PodGroup CRD is
//! missing, a multi-node role's PodSets (and a role that becomes one), a pooled role's stable
//! revision (cached, read, missing, unreadable), a topology policy added over running pods,
//! and a pairing group added over running pods.

use serde_json::{Value, json};

use super::{ScriptedApi, path_of, paths};
use crate::api::RoleSet;
use crate::api::keys::{
    ANNOTATION_IN_PLACE_PENDING_REASON, ANNOTATION_IN_PLACE_TARGET_HASH, CONDITION_IN_PLACE_READY,
    FINALIZER_ROLESET, LABEL_PAIRING_KEY, LABEL_REVISION_OWNER, LABEL_ROLE_TEMPLATE_HASH,
};
use crate::controller::kit::error::Error;

const PODS: &str = "/api/v1/namespaces/tenant/pods";
const PODSETS: &str = "/apis/orchestration.aibrix.ai/v1alpha1/namespaces/tenant/podsets";

fn roleset(replicas: i32, stateful: bool) -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "rs", "uid": "rs-uid", "generation": 1,
            "finalizers": [FINALIZER_ROLESET]},
        "spec": {"roles": [{"name": "decode", "replicas": replicas, "stateful": stateful,
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}]}
    })
}

fn rs_path() -> String {
    path_of(&roleset(1, false))
}

fn condition(api: &ScriptedApi, type_: &str) -> Option<Value> {
    let status = api.object(&rs_path())?["status"].clone();
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

#[tokio::test]
async fn a_role_gets_its_pods_once_however_often_a_stale_cache_reconciles() {
    let api = ScriptedApi::holding([roleset(3, false)]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let created = paths(&api.writes(), "create");
    assert_eq!(created.len(), 3, "{created:?}");
    assert!(created.iter().all(|p| p.starts_with(PODS)));
    // The cache never shows them (its watch is silent): the creates are expected, not
    // repeated.
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    assert_eq!(paths(&api.writes(), "create"), created);
}

#[tokio::test]
async fn a_refused_pod_is_reported_by_role_and_retried() {
    let api = ScriptedApi::holding([roleset(3, false)]);
    api.refuse("create", "/pods", 403, "exceeded quota: pods=0");
    let ctx = api.context::<RoleSet>().await;
    let result = api.reconcile::<RoleSet>(&ctx, &rs_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root),
            Err(Error::Refused(m)) if m == "role decode: exceeded quota: pods=0"),
        "{result:?}"
    );
    let failure = condition(&api, "ReplicaFailure").expect("ReplicaFailure");
    assert_eq!(failure["reason"], "FailedCreate");
    assert_eq!(failure["message"], "role decode: exceeded quota: pods=0");
    let ready = condition(&api, "Ready").expect("Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("ReplicaFailure"))
    );
}

#[tokio::test]
async fn a_slots_name_already_taken_counts_as_created_a_generated_one_fails() {
    // Stateful: a slot's pod has its own name; taken means created by an earlier pass.
    let api = ScriptedApi::holding([roleset(2, true)]);
    api.refuse("create", "/pods", 409, "already exists");
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    assert!(condition(&api, "ReplicaFailure").is_none(), "not a failure");

    // Stateless: a generated name taken is the API server's error to retry, not a refusal.
    let api = ScriptedApi::holding([roleset(2, false)]);
    api.refuse("create", "/pods", 409, "already exists");
    let ctx = api.context::<RoleSet>().await;
    let result = api.reconcile::<RoleSet>(&ctx, &rs_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root), Err(Error::Kube(_))),
        "{result:?}"
    );
    assert!(
        condition(&api, "ReplicaFailure").is_none(),
        "nothing to tell the user"
    );
}

#[tokio::test]
async fn a_scaled_down_role_deletes_its_extra_pods_by_uid() {
    let api = ScriptedApi::holding([roleset(3, false)]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    api.edit(&rs_path(), |rs| {
        rs["spec"]["roles"][0]["replicas"] = json!(1)
    });
    // A context whose cache lists what the API server holds now: the three pods.
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let deletes: Vec<_> = api
        .writes()
        .into_iter()
        .filter(|w| w.verb == "delete")
        .collect();
    assert_eq!(deletes.len(), 2, "{deletes:#?}");
    for delete in &deletes {
        assert!(delete.path.starts_with(PODS));
        assert!(
            delete.body["preconditions"]["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("uid-")),
            "by the UID observed: {delete:?}"
        );
    }
    assert_eq!(api.objects("v1", "Pod").len(), 1);
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_nothing_is_created() {
    let mut rs = roleset(2, false);
    let role = rs["spec"]["roles"][0].clone();
    rs["spec"]["roles"] = json!([role, role]);
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    assert!(paths(&api.writes(), "create").is_empty());
    let failure = condition(&api, "ReplicaFailure").expect("ReplicaFailure");
    assert_eq!(failure["reason"], "ReconcileError");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .starts_with("invalid spec: "),
        "{failure}"
    );
}

#[tokio::test]
async fn a_deleted_roleset_deletes_its_pods_then_lets_its_finalizer_go() {
    let api = ScriptedApi::holding([roleset(2, false)]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    api.edit(&rs_path(), |rs| {
        rs["metadata"]["deletionTimestamp"] = json!("2026-12-04T00:00:00Z")
    });
    let ctx = api.context::<RoleSet>().await;
    let result = api.reconcile::<RoleSet>(&ctx, &rs_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root),
            Err(Error::Waiting(m)) if m == "0 PodSets and 2 pods still terminating"),
        "{result:?}"
    );
    assert_eq!(paths(&api.writes(), "delete").len(), 2);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let finalizers = &api.object(&rs_path()).unwrap()["metadata"]["finalizers"];
    assert!(
        finalizers.as_array().is_none_or(Vec::is_empty),
        "{finalizers}"
    );
}

#[tokio::test]
async fn an_image_change_moves_a_running_pod_in_place() {
    let mut rs = roleset(1, false);
    rs["spec"]["roles"][0]["updateStrategy"] = json!({"type": "InPlaceIfPossible"});
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let pod = paths(&api.writes(), "create").remove(0);
    api.edit(&pod, |pod| {
        pod["status"] = json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "engine", "ready": true, "restartCount": 0,
                "image": "engine:1", "imageID": "", "started": true}]});
    });
    api.edit(&rs_path(), |rs| {
        rs["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("engine:2");
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "create").is_empty() && paths(&writes, "delete").is_empty(),
        "not recreated: {writes:#?}"
    );
    let moved = writes
        .iter()
        .find(|w| w.verb == "patch" && w.path == pod)
        .unwrap_or_else(|| panic!("the pod is patched: {writes:#?}"));
    assert!(moved.body.to_string().contains("engine:2"), "{moved:?}");
    assert_eq!(
        api.object(&pod).unwrap()["spec"]["containers"][0]["image"],
        "engine:2"
    );
    assert!(
        api.event_reasons()
            .contains(&"InPlaceUpdateStarted".to_string())
    );
}

/// A running, Ready pod whose one container runs `image`, pulled as `image_id`.
fn running(image: &str, image_id: &str) -> Value {
    json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "engine", "ready": true, "restartCount": 0,
            "image": image, "imageID": image_id, "started": true}]})
}

#[tokio::test]
async fn an_in_place_move_waits_for_the_new_image_then_completes() {
    let mut rs = roleset(1, false);
    rs["spec"]["roles"][0]["updateStrategy"] = json!({"type": "InPlaceIfPossible"});
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let pod = paths(&api.writes(), "create").remove(0);
    api.edit(&pod, |pod| pod["status"] = running("engine:1", "sha-1"));
    api.edit(&rs_path(), |rs| {
        rs["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("engine:2");
    });
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let started = api.object(&pod).unwrap();
    let target = started["metadata"]["annotations"][ANNOTATION_IN_PLACE_TARGET_HASH].clone();
    assert!(target.is_string(), "the move started: {started}");

    // The kubelet reports the new image under the old image ID: not yet.
    api.edit(&pod, |pod| pod["status"] = running("engine:2", "sha-1"));
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert_eq!(paths(&writes, "patch"), [pod.as_str()], "{writes:#?}");
    let waiting = api.object(&pod).unwrap();
    assert_eq!(
        waiting["metadata"]["annotations"][ANNOTATION_IN_PLACE_PENDING_REASON], "ImageIDUnchanged",
        "{waiting}"
    );
    assert_ne!(
        waiting["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH],
        target
    );

    api.edit(&pod, |pod| pod["status"] = running("engine:2", "sha-2"));
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let done = api.object(&pod).unwrap();
    assert_eq!(
        done["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH], target,
        "the pod is labelled with the template it runs: {done}"
    );
    assert_eq!(
        api.event_reasons(),
        ["InPlaceUpdateStarted", "InPlaceUpdateCompleted"]
    );
    assert!(
        paths(&api.writes(), "delete").is_empty(),
        "never recreated: {:#?}",
        api.writes()
    );
}

#[tokio::test]
async fn a_running_pod_that_already_is_the_template_is_adopted_not_restarted() {
    let api = ScriptedApi::holding([roleset(1, false)]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let pod = paths(&api.writes(), "create").remove(0);
    let ours = api.object(&pod).unwrap()["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH].clone();
    // As AIBrix left it: the same pod under AIBrix's hash of the same template.
    api.edit(&pod, |pod| {
        pod["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH] = json!("aibrix-hash");
        pod["status"] = running("engine:1", "sha-1");
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "create").is_empty() && paths(&writes, "delete").is_empty(),
        "not replaced: {writes:#?}"
    );
    assert_eq!(
        api.object(&pod).unwrap()["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH],
        ours,
        "relabelled with squall's hash"
    );
    assert_eq!(api.event_reasons(), ["Adopted"]);
}

#[tokio::test]
async fn a_gang_strategy_whose_crd_is_missing_is_reported_once_and_the_pods_still_come() {
    let mut rs = roleset(2, false);
    rs["spec"]["schedulingStrategy"] =
        json!({"coschedulingSchedulingStrategy": {"scheduleTimeoutSeconds": 60}});
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    for _ in 0..2 {
        api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    }
    assert_eq!(
        paths(&api.writes(), "create").len(),
        2,
        "{:#?}",
        api.writes()
    );
    assert_eq!(
        api.event_reasons(),
        ["PodGroupCRDMissing"],
        "once per generation"
    );
    let failure = condition(&api, "ReplicaFailure").expect("ReplicaFailure");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("podgroups.scheduling.x-k8s.io"),
        "{failure}"
    );
}

/// A RoleSet of one in-place role, reconciled once, its pod then running `engine:1`, and its
/// template edited by `change`: the scripted server and the pod's path.
async fn in_place_role_changed(
    gated: bool,
    change: impl FnOnce(&mut Value),
) -> (ScriptedApi, String) {
    let mut rs = roleset(1, false);
    rs["spec"]["roles"][0]["updateStrategy"] = json!({"type": "InPlaceIfPossible"});
    if gated {
        rs["spec"]["roles"][0]["template"]["spec"]["readinessGates"] =
            json!([{"conditionType": CONDITION_IN_PLACE_READY}]);
    }
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let pod = paths(&api.writes(), "create").remove(0);
    api.edit(&pod, |pod| pod["status"] = running("engine:1", "sha-1"));
    api.edit(&rs_path(), |rs| {
        change(&mut rs["spec"]["roles"][0]["template"])
    });
    (api, pod)
}

/// The conditions a pod status patch sets, by type: (status, reason).
fn conditions_set(write: &super::Write) -> Vec<(String, String, String)> {
    write.body["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let field = |f: &str| c[f].as_str().unwrap_or_default().to_string();
            (field("type"), field("status"), field("reason"))
        })
        .collect()
}

#[tokio::test]
async fn a_gated_pod_leaves_service_before_its_in_place_move_and_rejoins_after() {
    let (api, pod) = in_place_role_changed(true, |template| {
        template["spec"]["containers"][0]["image"] = json!("engine:2");
    })
    .await;
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    let status = format!("{pod}/status");
    let order: Vec<&str> = writes
        .iter()
        .filter(|w| w.path.starts_with(&pod))
        .map(|w| w.path.as_str())
        .collect();
    assert_eq!(
        order,
        [status.as_str(), pod.as_str()],
        "out of service first, then the new image: {writes:#?}"
    );
    let gate = writes.iter().find(|w| w.path == status).unwrap();
    assert_eq!(
        conditions_set(gate),
        [
            (
                CONDITION_IN_PLACE_READY.to_string(),
                "False".to_string(),
                "InPlaceUpdating".to_string()
            ),
            (
                "Ready".to_string(),
                "False".to_string(),
                "InPlaceUpdating".to_string()
            ),
        ]
    );

    api.edit(&pod, |pod| pod["status"] = running("engine:2", "sha-2"));
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    let order: Vec<&str> = writes
        .iter()
        .filter(|w| w.path.starts_with(&pod))
        .map(|w| w.path.as_str())
        .collect();
    assert_eq!(
        order,
        [pod.as_str(), status.as_str()],
        "relabelled, then back in service: {writes:#?}"
    );
    let gate = writes.iter().find(|w| w.path == status).unwrap();
    assert_eq!(
        conditions_set(gate),
        [(
            CONDITION_IN_PLACE_READY.to_string(),
            "True".to_string(),
            "InPlaceUpdateCompleted".to_string()
        )]
    );
}

#[tokio::test]
async fn a_change_that_cannot_be_made_in_place_recreates_the_pod_and_says_why() {
    let (api, pod) = in_place_role_changed(false, |template| {
        template["spec"]["containers"][0]["env"] = json!([{"name": "MODEL", "value": "b"}]);
    })
    .await;
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        writes
            .iter()
            .all(|w| w.verb != "patch" || !w.path.starts_with(&pod)),
        "not patched in place: {writes:#?}"
    );
    assert_eq!(
        paths(&writes, "delete"),
        [pod.as_str()],
        "recreated, within the role's budget: the old pod goes first: {writes:#?}"
    );
    assert!(
        api.event_reasons().contains(&"InPlaceFallback".to_string()),
        "{:?}",
        api.event_reasons()
    );
}

#[tokio::test]
async fn a_multi_node_role_gets_one_podset_per_replica_and_scales_down_by_uid() {
    let mut rs = roleset(2, false);
    rs["spec"]["roles"][0]["podGroupSize"] = json!(2);
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let created = paths(&api.writes(), "create");
    assert_eq!(created.len(), 2, "{created:?}");
    assert!(
        created.iter().all(|p| p.starts_with(PODSETS)),
        "PodSets, not pods: {created:?}"
    );
    for podset in api.objects("orchestration.aibrix.ai/v1alpha1", "PodSet") {
        assert_eq!(podset["spec"]["podGroupSize"], 2, "{podset}");
        assert_eq!(
            podset["metadata"]["ownerReferences"][0]["uid"], "rs-uid",
            "{podset}"
        );
    }
    api.edit(&rs_path(), |rs| {
        rs["spec"]["roles"][0]["replicas"] = json!(1)
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    let deletes: Vec<_> = writes.iter().filter(|w| w.verb == "delete").collect();
    assert_eq!(deletes.len(), 1, "{writes:#?}");
    assert!(deletes[0].path.starts_with(PODSETS), "{writes:#?}");
    assert!(
        deletes[0].body["preconditions"]["uid"].is_string(),
        "by UID: {:?}",
        deletes[0]
    );
    assert_eq!(
        api.objects("orchestration.aibrix.ai/v1alpha1", "PodSet")
            .len(),
        1
    );
}

const REVISIONS: &str = "/apis/apps/v1/namespaces/tenant/controllerrevisions";

/// A StormService's revision `name` whose one role, `decode`, runs `image`; `cached` when it
/// carries what makes it one of the StormServices' revisions the caches hold (the owner
/// label and a StormService controller), else as another writer left it.
fn stable_revision(name: &str, image: &str, cached: bool) -> Value {
    let mut revision = json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": name}, "revision": 1,
        "data": {"spec": {"template": {"$patch": "replace", "spec": {"roles": [{"name": "decode",
            "template": {"spec": {"containers": [{"name": "engine", "image": image}]}}}]}}}}});
    if cached {
        revision["metadata"]["labels"] = json!({LABEL_REVISION_OWNER: "svc"});
        revision["metadata"]["ownerReferences"] = json!([{"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
                "name": "svc", "uid": "svc-uid", "controller": true}]);
    }
    revision
}

/// A pooled role of 2 pods on `engine:2` that keeps 1 on the stable revision `svc-stable`.
fn pooled_role() -> Value {
    let mut rs = roleset(2, false);
    rs["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] = json!("engine:2");
    rs["spec"]["roles"][0]["rollout"] = json!({"partition": 1, "stableRevision": "svc-stable"});
    rs
}

/// The images of the pods created, sorted.
fn created_images(api: &ScriptedApi) -> Vec<String> {
    let mut images: Vec<String> = api
        .objects("v1", "Pod")
        .iter()
        .map(|p| {
            p["spec"]["containers"][0]["image"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    images.sort();
    images
}

#[tokio::test]
async fn a_pooled_role_keeps_its_partition_on_the_stable_revision_read_from_the_cache() {
    let api = ScriptedApi::holding([
        pooled_role(),
        stable_revision("svc-stable", "engine:1", true),
    ]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    assert_eq!(created_images(&api), ["engine:1", "engine:2"]);
    assert!(api.reads().is_empty(), "no GET: {:?}", api.reads());
}

#[tokio::test]
async fn a_stable_revision_another_wrote_is_read_from_the_api_server() {
    let api = ScriptedApi::holding([
        pooled_role(),
        stable_revision("svc-stable", "engine:1", false),
    ]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    assert_eq!(created_images(&api), ["engine:1", "engine:2"]);
    assert_eq!(api.reads(), [format!("{REVISIONS}/svc-stable")]);
}

#[tokio::test]
async fn a_missing_stable_revision_is_reported_by_name_and_the_role_made_from_its_template() {
    let api = ScriptedApi::holding([pooled_role()]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    assert_eq!(api.reads(), [format!("{REVISIONS}/svc-stable")]);
    let failure = condition(&api, "ReplicaFailure").expect("ReplicaFailure");
    assert_eq!(
        (&failure["reason"], &failure["message"]),
        (
            &json!("ReconcileError"),
            &json!("role decode: the stable ControllerRevision svc-stable is not found")
        ),
    );
    // The StormService holds its canary while its stable revision is gone; a RoleSet on
    // its own has no other template to make pods from.
    assert_eq!(created_images(&api), ["engine:2", "engine:2"]);
}

#[tokio::test]
async fn a_stable_revision_that_cannot_be_read_is_retried_not_taken_for_missing() {
    let api = ScriptedApi::holding([
        pooled_role(),
        stable_revision("svc-stable", "engine:1", false),
    ]);
    api.refuse(
        "read",
        "/controllerrevisions/svc-stable",
        500,
        "etcd is away",
    );
    let ctx = api.context::<RoleSet>().await;
    let result = api.reconcile::<RoleSet>(&ctx, &rs_path()).await;
    assert!(result.is_err(), "retried: {result:?}");
    assert!(
        api.writes().is_empty(),
        "nothing made from a guess: {:#?}",
        api.writes()
    );
}

#[tokio::test]
async fn a_topology_policy_added_later_leaves_running_pods_and_says_so_once() {
    let mut rs = roleset(2, false);
    rs["metadata"]["labels"] = json!({"storm-service-name": "svc"});
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    for pod in paths(&api.writes(), "create") {
        api.edit(&pod, |pod| pod["status"] = running("engine:1", "sha-1"));
    }
    api.edit(&rs_path(), |rs| {
        rs["spec"]["topologyPolicy"] = json!({"scope": "Role", "key": "kubernetes.io/hostname"});
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    for _ in 0..2 {
        api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    }
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "delete").is_empty() && paths(&writes, "create").is_empty(),
        "affinity is fixed at creation: nothing is replaced for it: {writes:#?}"
    );
    let pending = api
        .event("TopologyPolicyPendingPodReplacement")
        .expect("the pending pods are reported");
    assert!(
        pending["note"]
            .as_str()
            .unwrap()
            .contains("2 active Pod(s)"),
        "{pending}"
    );
    let said = api
        .event_reasons()
        .iter()
        .filter(|r| *r == "TopologyPolicyPendingPodReplacement")
        .count();
    assert_eq!(said, 1, "once per generation: {:?}", api.event_reasons());
}

#[tokio::test]
async fn a_role_that_becomes_multi_node_replaces_its_pods_with_podsets() {
    let api = ScriptedApi::holding([roleset(1, false)]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let pod = paths(&api.writes(), "create").remove(0);
    api.edit(&pod, |pod| pod["status"] = running("engine:1", "sha-1"));
    api.edit(&rs_path(), |rs| {
        rs["spec"]["roles"][0]["podGroupSize"] = json!(2)
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert_eq!(
        paths(&writes, "delete"),
        [pod.as_str()],
        "the pod of the other kind goes: {writes:#?}"
    );
    let created = paths(&writes, "create");
    assert!(
        created.len() == 1 && created[0].starts_with(PODSETS),
        "a PodSet takes its place: {writes:#?}"
    );
}

#[tokio::test]
async fn a_pairing_group_added_over_running_pods_keys_them_without_a_restart() {
    let mut rs = roleset(1, false);
    rs["spec"]["roles"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "prefill", "replicas": 1,
            "template": {"spec": {"containers": [{"name": "engine", "image": "prefill:1"}]}}}));
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let created = paths(&api.writes(), "create");
    assert_eq!(created.len(), 2);
    api.edit(&rs_path(), |rs| {
        rs["spec"]["pairing"] = json!([{"roles": ["prefill", "decode"]}]);
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "create").is_empty() && paths(&writes, "delete").is_empty(),
        "nothing replaced: {writes:#?}"
    );
    let mut relabelled = paths(&writes, "patch");
    relabelled.retain(|p| p.starts_with(PODS));
    relabelled.sort();
    let mut expected = created.clone();
    expected.sort();
    assert_eq!(relabelled, expected, "one label patch per pod: {writes:#?}");
    let keys: Vec<Value> = created
        .iter()
        .map(|pod| api.object(pod).unwrap()["metadata"]["labels"][LABEL_PAIRING_KEY].clone())
        .collect();
    assert!(keys[0].is_string(), "{keys:?}");
    assert_eq!(keys[0], keys[1], "one key for the group");
    // The next pass has nothing to do.
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let again = api.writes()[before..].to_vec();
    assert!(
        again.iter().all(|w| !w.path.starts_with(PODS)),
        "idempotent: {again:#?}"
    );
}

#[tokio::test]
async fn a_role_removed_from_the_spec_takes_its_pods_by_uid_and_leaves_the_rest() {
    let mut rs = roleset(1, false);
    rs["spec"]["roles"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "gone", "replicas": 2,
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}));
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let pods = api.objects("v1", "Pod");
    let of = |role: &str| -> Vec<String> {
        pods.iter()
            .filter(|p| p["metadata"]["labels"]["role-name"] == role)
            .map(path_of)
            .collect()
    };
    let (kept, gone) = (of("decode"), of("gone"));
    assert_eq!((kept.len(), gone.len()), (1, 2));
    api.edit(&rs_path(), |rs| {
        rs["spec"]["roles"].as_array_mut().unwrap().pop();
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    let mut deleted = paths(&writes, "delete");
    deleted.sort();
    let mut expected = gone.clone();
    expected.sort();
    assert_eq!(deleted, expected, "the removed role's pods: {writes:#?}");
    assert!(
        writes
            .iter()
            .filter(|w| w.verb == "delete")
            .all(|w| w.body["preconditions"]["uid"].is_string()),
        "by UID: {writes:#?}"
    );
    assert!(api.object(&kept[0]).is_some(), "the kept role's pod stays");
}

#[tokio::test]
async fn a_multi_node_roles_podset_that_already_is_the_template_is_adopted_not_replaced() {
    let mut rs = roleset(1, false);
    rs["spec"]["roles"][0]["podGroupSize"] = json!(2);
    let api = ScriptedApi::holding([rs]);
    let ctx = api.context::<RoleSet>().await;
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let podset = paths(&api.writes(), "create").remove(0);
    let ours = api.object(&podset).unwrap()["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH].clone();
    // As AIBrix left it: the same gang under AIBrix's hash of the same template.
    api.edit(&podset, |ps| {
        ps["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH] = json!("aibrix-hash");
        ps["status"] = json!({"phase": "Ready", "readyPods": 2, "totalPods": 2});
    });
    let ctx = api.context::<RoleSet>().await;
    let before = api.writes().len();
    api.reconcile::<RoleSet>(&ctx, &rs_path()).await.unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "create").is_empty() && paths(&writes, "delete").is_empty(),
        "not replaced: {writes:#?}"
    );
    assert_eq!(
        api.object(&podset).unwrap()["metadata"]["labels"][LABEL_ROLE_TEMPLATE_HASH],
        ours,
        "relabelled with squall's hash (its pods follow from the PodSet)"
    );
    assert_eq!(api.event_reasons(), ["Adopted"]);
}
