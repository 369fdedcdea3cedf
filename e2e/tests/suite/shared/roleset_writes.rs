//! API writes the RoleSet controller makes to create, roll and delete a three-role RoleSet, read
//! from `squall_api_requests_total` of the shared operator. The test is alone in its binary and
//! starts counting once no namespace of earlier tests is still terminating (their RoleSets'
//! ordered deletion writes too), so only this RoleSet's writes are counted.

use std::time::Duration;

use e2e::operator::{shared_operator_admin, write_requests};
use e2e::roles::{assert_pod_budgets, replay};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::RoleSet;

/// Write requests the RoleSet controller sent (its finalizer patches included).
fn writes() -> f64 {
    write_requests(shared_operator_admin(), &["roleset"])
        .values()
        .sum()
}

fn ready_at(rs: Option<&RoleSet>, generation: i64) -> bool {
    rs.and_then(|rs| rs.status.as_ref()).is_some_and(|s| {
        s.observed_generation == Some(generation)
            && s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn writes_for_creating_rolling_and_deleting_a_three_role_roleset_are_bounded() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "writes").await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_for_all(
        &namespaces,
        "the namespaces of earlier tests to finish terminating",
        Duration::from_secs(180),
        |all| {
            all.iter()
                .all(|n| n.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating"))
        },
    )
    .await
    .unwrap();
    let api: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let recorder = Recorder::start(pods.clone()).await;
    let role = |name: &str| json!({"name": name, "replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "engine:1"}]}}});
    let roleset: RoleSet = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "rs"}, "spec": {"roles": [role("router"), role("prefill"), role("decode")]}
    }))
    .unwrap();

    let before = writes();
    api.create(&PostParams::default(), &roleset).await.unwrap();
    wait_for(
        &api,
        "rs",
        "RoleSet Ready",
        Duration::from_secs(120),
        |rs| ready_at(rs, 1),
    )
    .await
    .unwrap();
    let create_writes = writes() - before;
    recorder.catch_up(&pods).await;
    let start = recorder.events().len();

    let patch: Vec<_> = (0..3)
        .map(|i| json!({"op": "replace", "path": format!("/spec/roles/{i}/template/spec/containers/0/image"), "value": "engine:2"}))
        .collect();
    api.patch(
        "rs",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!(patch)).unwrap()),
    )
    .await
    .unwrap();
    let before_roll = writes();
    wait_for(
        &api,
        "rs",
        "RoleSet Ready after the rollout",
        Duration::from_secs(120),
        |rs| ready_at(rs, 2),
    )
    .await
    .unwrap();
    let roll_writes = writes() - before_roll;
    // The writes bought a rollout within the role budgets (maxSurge 0, maxUnavailable 1).
    recorder.catch_up(&pods).await;
    let roles = [("router", 2), ("prefill", 2), ("decode", 2)];
    replay(&recorder.events(), start, |i, state| {
        assert_pod_budgets(i, state, &roles, 0, 1)
    });
    println!("roleset writes: create {create_writes}, roll {roll_writes} (3 roles x 2 pods)");

    // 6 pod creates, the finalizer (a RoleSet a user creates comes without it) and status
    // patches: a first status that only counts pods waits for Ready (up to a minute), later
    // counts up to 5 s on a quiet cluster (planner::status::coalesce_window).
    assert!(
        create_writes >= 6.0,
        "at least the 6 pod creates: {create_writes}"
    );
    assert!(
        create_writes <= 6.0 + 1.0 + 2.0,
        "create took {create_writes} writes"
    );
    // 6 deletes + 6 creates plus status patches (Ready turning False and True again, counts
    // at most every 5 s between).
    assert!(
        roll_writes >= 12.0,
        "at least 6 deletes and 6 creates: {roll_writes}"
    );
    assert!(
        roll_writes <= 12.0 + 10.0,
        "rollout took {roll_writes} writes"
    );

    // Ordered deletion: each pod is deleted once, however many of the pods' termination
    // events reconcile the RoleSet before the cache shows them going away; then the
    // finalizer goes.
    let pod_deletes = || {
        write_requests(shared_operator_admin(), &["roleset"])
            .get("delete pods")
            .copied()
            .unwrap_or_default()
    };
    // Deletion writes only: a count the rollout left held back (its window is still open)
    // may land now, and is no part of deleting.
    let deletion_writes = || {
        write_requests(shared_operator_admin(), &["roleset"])
            .into_iter()
            .filter(|(kind, _)| !kind.ends_with("/status"))
            .map(|(_, n)| n)
            .sum::<f64>()
    };
    let by_kind_before = write_requests(shared_operator_admin(), &["roleset"]);
    let (before_delete, pod_deletes_before) = (deletion_writes(), pod_deletes());
    api.delete("rs", &DeleteParams::default()).await.unwrap();
    wait_for(
        &api,
        "rs",
        "the RoleSet gone",
        Duration::from_secs(120),
        |rs| rs.is_none(),
    )
    .await
    .unwrap();
    let deleted = pod_deletes() - pod_deletes_before;
    let delete_writes = deletion_writes() - before_delete;
    let by_kind: Vec<String> = write_requests(shared_operator_admin(), &["roleset"])
        .into_iter()
        .map(|(kind, n)| {
            format!(
                "{kind}: {}",
                n - by_kind_before.get(&kind).copied().unwrap_or_default()
            )
        })
        .collect();
    println!(
        "roleset writes: delete {delete_writes} ({})",
        by_kind.join(", ")
    );
    assert_eq!(deleted, 6.0, "each of the 6 pods deleted once");
    // The finalizer's removal is sent once: a reconcile queued before it (a requeue, say)
    // that still finds the finalizer in the cache is held back until the cache catches up.
    assert!(
        delete_writes <= 6.0 + 1.0,
        "6 pod deletes and the finalizer's removal, not {delete_writes} writes"
    );
}
