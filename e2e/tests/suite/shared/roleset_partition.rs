//! The role `rollout` block (docs/rollouts.md#the-pooled-canary-the-role-rollout-block) on the
//! local control plane (shared operator): a partition of 2 of 3 keeps two pods on the stable
//! template through an image change, and a stable pod that dies comes back from the stable
//! ControllerRevision.

use std::time::Duration;

use e2e::roles::{hash_of, is_ready, replay, roleset, settled};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::podgroup::PodGroupCrds;
use squall::api::{RoleSet, RoleSetTemplateSpec};
use squall::controller::cache::scope::Caches;
use squall::controller::kit::children::Writes;
use squall::controller::kit::context::Context;
use squall::controller::revision::write_revision;

const TIMEOUT: Duration = Duration::from_secs(120);

fn image_of(pod: &Pod) -> String {
    pod.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_partition_keeps_stable_pods_and_recreates_them_from_the_stable_revision() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "partition").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    // The StormService controller's revision writer, with a context of its own (its caches
    // are never started: the writer sends, it does not read).
    let metrics = std::sync::Arc::new(squall::metrics::Metrics::default());
    let (caches, _never_run) = Caches::new(
        &client,
        Some(ns.name()),
        &metrics,
        tokio::sync::watch::channel(PodGroupCrds::Unknown).1,
    );
    let ctx = Context::new("stormservice", client.clone(), caches, metrics);
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let recorder = Recorder::start(pods.clone()).await;

    let created = rolesets
        .create(
            &PostParams::default(),
            &roleset("rs", &[("decode", 3, None)], "engine:1"),
        )
        .await
        .unwrap();
    wait_for(&rolesets, "rs", "RoleSet rs Ready", TIMEOUT, |rs| {
        settled(rs, 1)
    })
    .await
    .unwrap();
    let stable_hash = hash_of(&pods.list(&Default::default()).await.unwrap().items[0]);

    // The stable template as the StormService controller stores it. Writing it twice
    // returns the same revision.
    let revisions = Writes::<ControllerRevision>::beside(&ctx, &created);
    let template = RoleSetTemplateSpec {
        metadata: None,
        spec: Some(created.spec.clone()),
    };
    let (revision, collisions) = write_revision(&revisions, &created, &template, 1, 0)
        .await
        .unwrap();
    assert_eq!(collisions, 0);
    let (again, _) = write_revision(&revisions, &created, &template, 1, 0)
        .await
        .unwrap();
    assert_eq!(
        again.uid(),
        revision.uid(),
        "equal data reuses the revision"
    );

    recorder.catch_up(&pods).await;
    let start = recorder.events().len();
    let patch = json!([
        {"op": "replace", "path": "/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"},
        {"op": "add", "path": "/spec/roles/0/rollout", "value": {"partition": 2, "stableRevision": revision.name_any()}},
    ]);
    rolesets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(patch).unwrap()),
        )
        .await
        .unwrap();
    wait_for(
        &rolesets,
        "rs",
        "RoleSet rs Ready at its partition",
        TIMEOUT,
        |rs| settled(rs, 2),
    )
    .await
    .unwrap();
    let after = pods.list(&Default::default()).await.unwrap().items;
    let stable: Vec<&Pod> = after.iter().filter(|p| hash_of(p) == stable_hash).collect();
    assert_eq!(after.len(), 3);
    assert_eq!(stable.len(), 2, "two pods stay stable");
    let status = rolesets.get("rs").await.unwrap().status.unwrap();
    assert_eq!(status.roles.unwrap()[0].updated_replicas, 1);

    // A stable pod dies: its replacement carries the stable hash and image.
    let victim = stable[0].name_any();
    pods.delete(&victim, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let replaced = wait_for_all(
        &pods,
        "two Ready stable pods again, without the deleted one",
        TIMEOUT,
        |all| {
            let live: Vec<&Pod> = all
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            live.len() == 3
                && live.iter().all(|p| is_ready(p) && p.name_any() != victim)
                && live.iter().filter(|p| hash_of(p) == stable_hash).count() == 2
        },
    )
    .await
    .unwrap();
    let replacement = replaced
        .iter()
        .find(|p| hash_of(p) == stable_hash && !stable.iter().any(|s| s.uid() == p.uid()))
        .expect("a new stable pod");
    assert_eq!(image_of(replacement), "engine:1");

    // At every observed state: at most 3 pods (maxSurge 0), at least 2 Ready
    // (maxUnavailable 1), and no more than one pod off the stable template.
    recorder.catch_up(&pods).await;
    replay(&recorder.events(), start, |i, state| {
        let live: Vec<&Pod> = state
            .values()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        assert!(state.len() <= 3, "event {i}: {} pods", state.len());
        let ready = live.iter().filter(|p| is_ready(p)).count();
        assert!(ready >= 2, "event {i}: {ready} Ready pods");
        let canary = state.values().filter(|p| hash_of(p) != stable_hash).count();
        assert!(
            canary <= 1,
            "event {i}: {canary} pods off the stable template"
        );
    });
}
