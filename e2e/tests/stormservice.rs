//! The StormService controller on the local control plane (shared operator): upstream samples
//! reach Ready; replica mode rolls RoleSets within its budgets at every observed state, a
//! rollback reuses the old revision and history is truncated; pooled mode updates in place,
//! rolling only the changed role, and a role-replica-only change scales without a revision.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::roles::role_of;
use e2e::{
    Observed, Recorder, TestNamespace, apply, client, documents, install_crds, shared_dir, wait_for,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use squall::api::{RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);

/// Ready at `generation`: status observed there, one revision, condition Ready True.
fn settled(ss: Option<&StormService>, generation: Option<i64>) -> bool {
    let Some(ss) = ss else { return false };
    let Some(status) = ss.status.as_ref() else {
        return false;
    };
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let at = generation.unwrap_or(ss.metadata.generation.unwrap_or_default());
    status.observed_generation == Some(at)
        && ss.metadata.generation == Some(at)
        && status.current_revision == status.update_revision
        && ready
}

fn roleset_ready(rs: &RoleSet) -> bool {
    rs.metadata.deletion_timestamp.is_none()
        && rs.status.as_ref().is_some_and(|s| {
            s.observed_generation == rs.metadata.generation
                && s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

fn stormservice(name: &str, replicas: i32, strategy: Value, roles: &[(&str, i32)]) -> StormService {
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

async fn patch(api: &Api<StormService>, name: &str, ops: Value) -> StormService {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(ops).unwrap()),
    )
    .await
    .unwrap()
}

async fn wait_settled(
    api: &Api<StormService>,
    name: &str,
    generation: i64,
    what: &str,
) -> StormService {
    wait_for(api, name, what, TIMEOUT, |ss| settled(ss, Some(generation)))
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn every_upstream_sample_reaches_ready_with_its_rolesets_and_pods() {
    let Some(shared) = shared_dir() else { return };
    install_crds();
    let client = client().await;
    let mut files: Vec<_> = std::fs::read_dir(shared.join("conformance/aibrix-samples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut checks = Vec::new();
    for file in files {
        let services: Vec<Value> = documents(&file)
            .into_iter()
            .filter(|d| d["kind"] == "StormService")
            .collect();
        if services.is_empty() {
            continue;
        }
        let client = client.clone();
        checks.push(async move {
            let ns = TestNamespace::create(&client, "sample").await;
            let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
            let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
            let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
            for service in &services {
                let mut service = service.clone();
                // One namespace per sample: the sample's own namespace is dropped.
                service["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("namespace");
                let out = apply(ns.name(), &service.to_string());
                assert!(out.success, "{}: {}", file.display(), out.stderr);
            }
            for service in &services {
                let name = service["metadata"]["name"].as_str().unwrap();
                wait_for(
                    &api,
                    name,
                    &format!("{} {name} Ready", file.display()),
                    TIMEOUT,
                    |ss| settled(ss, None),
                )
                .await
                .unwrap();
                let ss = api.get(name).await.unwrap();
                let owned: Vec<RoleSet> = rolesets
                    .list(&Default::default())
                    .await
                    .unwrap()
                    .items
                    .into_iter()
                    .filter(|r| {
                        r.labels().get("storm-service-name").map(String::as_str) == Some(name)
                    })
                    .collect();
                assert_eq!(
                    owned.len() as i32,
                    ss.spec.replicas_or_default(),
                    "{}: RoleSets of {name}",
                    file.display()
                );
                let indexes: BTreeSet<String> = owned
                    .iter()
                    .map(|r| {
                        r.annotations()["stormservice.orchestration.aibrix.ai/roleset-index"]
                            .clone()
                    })
                    .collect();
                assert_eq!(
                    indexes.len(),
                    owned.len(),
                    "{}: distinct roleset-index",
                    file.display()
                );
                let all_pods = pods.list(&Default::default()).await.unwrap().items;
                for roleset in &owned {
                    for role in roleset.spec.roles.iter().flatten() {
                        let want = role.replicas_or_default() * role.pod_group_size_or_default();
                        let have = all_pods
                            .iter()
                            .filter(|p| {
                                p.labels().get("roleset-name") == Some(&roleset.name_any())
                                    && role_of(p) == role.name
                            })
                            .count() as i32;
                        assert_eq!(
                            have,
                            want,
                            "{}: pods of role {} in {}",
                            file.display(),
                            role.name,
                            roleset.name_any()
                        );
                    }
                }
            }
        });
    }
    assert!(!checks.is_empty(), "no StormService sample found");
    futures::future::join_all(checks).await;
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn replica_mode_rolls_within_budgets_rolls_back_and_truncates_history() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "replica").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns.name());
    let recorder = Recorder::start(rolesets.clone()).await;
    let ss = stormservice(
        "llm",
        4,
        json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1}),
        &[("router", 1), ("decode", 1)],
    );
    api.create(&PostParams::default(), &ss).await.unwrap();
    let first = wait_settled(&api, "llm", 1, "llm Ready").await;
    let first_revision = first.status.unwrap().update_revision.unwrap();
    recorder.catch_up(&rolesets).await;
    let start = recorder.events().len();

    let image = |tag: &str| json!([{"op": "replace", "path": "/spec/template/spec/roles/1/template/spec/containers/0/image", "value": tag}]);
    patch(&api, "llm", image("engine:2")).await;
    let second = wait_settled(&api, "llm", 2, "llm Ready after the image change").await;
    let second_revision = second.status.unwrap().update_revision.unwrap();
    assert_ne!(second_revision, first_revision);
    recorder.catch_up(&rolesets).await;

    // Budgets at every observed state: at most 4 + 1 RoleSets, at least 4 - 1 Ready.
    let mut state: BTreeMap<String, RoleSet> = BTreeMap::new();
    let mut seen_new = 0;
    for (i, event) in recorder.events().iter().enumerate() {
        match event {
            Observed::Applied(r) => state.insert(r.name_any(), r.clone()),
            Observed::Deleted(r) => state.remove(&r.name_any()),
        };
        if i < start {
            continue;
        }
        let ready = state.values().filter(|r| roleset_ready(r)).count();
        assert!(
            state.len() <= 5,
            "event {i}: {} RoleSets, at most 5",
            state.len()
        );
        assert!(ready >= 3, "event {i}: {ready} Ready RoleSets, at least 3");
        seen_new = seen_new.max(
            state
                .values()
                .filter(|r| r.labels()["storm-service-revision"] == second_revision)
                .count(),
        );
    }
    assert_eq!(seen_new, 4, "every RoleSet was replaced");
    let after: Vec<RoleSet> = rolesets.list(&Default::default()).await.unwrap().items;
    let indexes: BTreeSet<String> = after
        .iter()
        .map(|r| r.annotations()["stormservice.orchestration.aibrix.ai/roleset-index"].clone())
        .collect();
    assert_eq!(
        indexes,
        ["0", "1", "2", "3"].map(String::from).into(),
        "replacements keep the indexes"
    );
    for roleset in &after {
        let annotations = roleset.annotations();
        assert_eq!(
            annotations["stormservice.orchestration.aibrix.ai/role-revision-name.router"],
            first_revision,
            "the unchanged role keeps its revision"
        );
        assert_eq!(
            annotations["stormservice.orchestration.aibrix.ai/role-revision-name.decode"],
            second_revision
        );
    }

    // Rollback: the first revision is reused (renumbered), not rewritten.
    patch(&api, "llm", image("engine:1")).await;
    let third = wait_settled(&api, "llm", 3, "llm Ready after the rollback").await;
    assert_eq!(
        third.status.unwrap().update_revision.unwrap(),
        first_revision
    );
    let all = revisions.list(&Default::default()).await.unwrap().items;
    assert_eq!(all.len(), 2, "no new revision for a rollback");
    let reused = all.iter().find(|r| r.name_any() == first_revision).unwrap();
    assert_eq!(reused.revision, 3, "the reused revision is the newest");

    // History: with a limit of 1, only one revision besides the live one stays.
    patch(
        &api,
        "llm",
        json!([{"op": "add", "path": "/spec/revisionHistoryLimit", "value": 1}]),
    )
    .await;
    patch(&api, "llm", image("engine:3")).await;
    wait_settled(&api, "llm", 5, "llm Ready on engine:3").await;
    patch(&api, "llm", image("engine:4")).await;
    wait_settled(&api, "llm", 6, "llm Ready on engine:4").await;
    let left = e2e::wait_for_all(
        &revisions,
        "history truncated to 1 + live",
        TIMEOUT,
        |all| all.len() == 2,
    )
    .await
    .unwrap();
    assert!(
        left.iter().all(|r| r.revision >= 4),
        "the oldest revisions went: {:?}",
        left.iter()
            .map(|r| (r.name_any(), r.revision))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn pooled_mode_updates_in_place_and_scales_roles_without_a_revision() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "pooled").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let ss = stormservice(
        "pool",
        1,
        json!({"type": "InPlaceUpdate"}),
        &[("prefill", 2), ("decode", 2)],
    );
    api.create(&PostParams::default(), &ss).await.unwrap();
    wait_settled(&api, "pool", 1, "pool Ready").await;
    let roleset = rolesets.list(&Default::default()).await.unwrap().items[0].name_any();
    let uids = |pods: &[Pod], role: &str| -> BTreeSet<String> {
        pods.iter()
            .filter(|p| role_of(p) == role)
            .map(|p| p.uid().unwrap())
            .collect()
    };
    let before = pods.list(&Default::default()).await.unwrap().items;

    patch(
        &api,
        "pool",
        json!([{"op": "replace", "path": "/spec/template/spec/roles/1/template/spec/containers/0/image", "value": "engine:2"}]),
    )
    .await;
    wait_settled(&api, "pool", 2, "pool Ready after the decode change").await;
    let after = pods.list(&Default::default()).await.unwrap().items;
    let current: Vec<RoleSet> = rolesets.list(&Default::default()).await.unwrap().items;
    assert_eq!(current.len(), 1);
    assert_eq!(
        current[0].name_any(),
        roleset,
        "the RoleSet is updated in place"
    );
    assert_eq!(
        uids(&after, "prefill"),
        uids(&before, "prefill"),
        "prefill did not roll"
    );
    assert!(
        uids(&after, "decode").is_disjoint(&uids(&before, "decode")),
        "decode rolled"
    );
    let revision_count = revisions
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(revision_count, 2);

    // An autoscaler's edit: prefill replicas 2 → 3.
    patch(
        &api,
        "pool",
        json!([{"op": "replace", "path": "/spec/template/spec/roles/0/replicas", "value": 3}]),
    )
    .await;
    wait_settled(&api, "pool", 3, "pool Ready with 3 prefill pods").await;
    let scaled = pods.list(&Default::default()).await.unwrap().items;
    assert_eq!(uids(&scaled, "prefill").len(), 3);
    assert!(
        uids(&scaled, "prefill").is_superset(&uids(&after, "prefill")),
        "nothing rolled"
    );
    assert_eq!(uids(&scaled, "decode"), uids(&after, "decode"));
    assert_eq!(
        revisions
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        revision_count,
        "a role-replica change writes no revision"
    );
}
