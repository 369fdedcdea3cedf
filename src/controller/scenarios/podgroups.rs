//! The PodGroup writer (`controller::podgroups`), through the PodSet controller that calls it:
//! a gang's PodGroup created before its pods, a drifted one patched back, one as asked left
//! unwritten, one another controls left alone, a refused create, a create that lost a race,
//! and a cluster without the CRD.

use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::{ScriptedApi, path_of, paths};
use crate::api::PodSet;
use crate::api::keys::{FINALIZER_PODSET, LABEL_PODSET_NAME};

const PODS: &str = "/api/v1/namespaces/tenant/pods";
const PODGROUP: &str = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/tenant/podgroups/gang";

/// A gang of `size` pods that asks for a coscheduling PodGroup.
fn gang(size: i32) -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
        "metadata": {"name": "gang", "uid": "gang-uid", "generation": 1,
            "finalizers": [FINALIZER_PODSET]},
        "spec": {"podGroupSize": size,
            "schedulingStrategy": {"coschedulingSchedulingStrategy": {"scheduleTimeoutSeconds": 60}},
            "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}
    })
}

/// The gang's PodGroup as stored, controlled by `controller` (a UID), with `spec`.
fn podgroup(controller: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "gang",
            "ownerReferences": [{"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "PodSet",
                "name": "gang", "uid": controller, "controller": true}]},
        "spec": spec
    })
}

fn gang_path() -> String {
    path_of(&gang(1))
}

/// The writes to the gang's PodGroup.
fn podgroup_writes(api: &ScriptedApi) -> Vec<super::Write> {
    api.writes()
        .into_iter()
        .filter(|w| w.path.starts_with(PODGROUP))
        .collect()
}

#[tokio::test]
async fn a_gang_gets_its_podgroup_before_its_pods() {
    let api = ScriptedApi::holding([gang(2)]);
    let ctx = api.context_with_coscheduling::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let writes = api.writes();
    assert_eq!(
        paths(&writes, "create"),
        [
            PODGROUP.to_string(),
            format!("{PODS}/gang-0"),
            format!("{PODS}/gang-1")
        ],
        "the PodGroup first, then the pods: {writes:#?}"
    );
    let group = api.object(PODGROUP).unwrap();
    assert_eq!(
        group["spec"],
        json!({"minMember": 2, "scheduleTimeoutSeconds": 60}),
        "the strategy, with the gang's size as minMember: {group}"
    );
    let owner = &group["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["uid"], &owner["controller"]),
        (&json!("gang-uid"), &json!(true)),
        "{owner}"
    );
    assert_eq!(group["metadata"]["labels"][LABEL_PODSET_NAME], "gang");
    assert_eq!(api.event_reasons(), ["PodGroupSynced"]);
}

#[tokio::test]
async fn a_podgroup_whose_spec_drifted_gets_the_strategys_fields_back_and_keeps_the_rest() {
    let api = ScriptedApi::holding([
        gang(2),
        podgroup(
            "gang-uid",
            json!({"minMember": 1, "scheduleTimeoutSeconds": 60, "minResources": {"cpu": "1"}}),
        ),
    ]);
    let ctx = api.context_with_coscheduling::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    let writes = podgroup_writes(&api);
    assert_eq!(paths(&writes, "patch"), [PODGROUP], "{writes:#?}");
    assert!(paths(&writes, "create").is_empty(), "{writes:#?}");
    let spec = &api.object(PODGROUP).unwrap()["spec"];
    assert_eq!(spec["minMember"], 2, "{spec}");
    assert_eq!(
        spec["minResources"],
        json!({"cpu": "1"}),
        "a field the strategy does not set is kept: {spec}"
    );
    assert_eq!(api.event_reasons(), ["PodGroupSynced"]);
}

#[tokio::test]
async fn a_podgroup_as_the_strategy_asks_is_not_written_and_the_pods_follow() {
    let api = ScriptedApi::holding([
        gang(2),
        podgroup(
            "gang-uid",
            json!({"minMember": 2, "scheduleTimeoutSeconds": 60}),
        ),
    ]);
    let ctx = api.context_with_coscheduling::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    assert!(podgroup_writes(&api).is_empty(), "{:#?}", api.writes());
    assert_eq!(
        paths(&api.writes(), "create"),
        [format!("{PODS}/gang-0"), format!("{PODS}/gang-1")]
    );
    assert!(api.event_reasons().is_empty(), "{:?}", api.event_reasons());
}

#[tokio::test]
async fn a_podgroup_another_controls_is_left_alone_and_the_gang_waits() {
    let foreign = podgroup("someone-else", json!({"minMember": 7}));
    let api = ScriptedApi::holding([gang(2), foreign.clone()]);
    let ctx = api.context_with_coscheduling::<PodSet>().await;
    for _ in 0..2 {
        let action = api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
        assert_ne!(action, Action::await_change(), "looked at again");
    }
    let writes = api.writes();
    assert!(podgroup_writes(&api).is_empty(), "{writes:#?}");
    assert!(
        paths(&writes, "create").is_empty(),
        "no pod joins it: {writes:#?}"
    );
    assert_eq!(
        api.object(PODGROUP).unwrap()["spec"],
        foreign["spec"],
        "untouched"
    );
    assert_eq!(
        api.event_reasons(),
        ["PodGroupConflict"],
        "once per generation, however often it is reconciled"
    );
}

#[tokio::test]
async fn a_refused_podgroup_is_reported_and_no_pod_is_created() {
    let api = ScriptedApi::holding([gang(2)]);
    api.refuse("create", "/podgroups", 403, "podgroups are forbidden here");
    let ctx = api.context_with_coscheduling::<PodSet>().await;
    let result = api.reconcile::<PodSet>(&ctx, &gang_path()).await;
    assert!(result.is_err(), "retried with backoff: {result:?}");
    assert!(api.writes().is_empty(), "{:#?}", api.writes());
    assert_eq!(api.event_reasons(), ["PodGroupFailed"]);
}

#[tokio::test]
async fn a_podgroup_made_meanwhile_holds_the_pods_for_one_pass() {
    let api = ScriptedApi::holding([gang(2)]);
    // Made by an earlier pass the cache does not show yet.
    api.refuse("create", "/podgroups", 409, "already exists");
    let ctx = api.context_with_coscheduling::<PodSet>().await;
    let action = api.reconcile::<PodSet>(&ctx, &gang_path()).await;
    assert!(
        matches!(action, Ok(ref a) if *a != Action::await_change()),
        "looked at again shortly: {action:?}"
    );
    assert!(
        paths(&api.writes(), "create").is_empty(),
        "{:#?}",
        api.writes()
    );
    assert!(
        api.event_reasons().is_empty(),
        "nothing to report: {:?}",
        api.event_reasons()
    );
}

#[tokio::test]
async fn without_the_podgroup_crd_the_gang_is_created_without_one() {
    let api = ScriptedApi::holding([gang(2)]);
    let ctx = api.context::<PodSet>().await;
    api.reconcile::<PodSet>(&ctx, &gang_path()).await.unwrap();
    assert!(podgroup_writes(&api).is_empty(), "{:#?}", api.writes());
    assert_eq!(
        paths(&api.writes(), "create"),
        [format!("{PODS}/gang-0"), format!("{PODS}/gang-1")]
    );
}
