//! Gang scheduling (run serially, with its own operator: the PodGroup CRDs are cluster-wide).
//! Without a scheduler's PodGroup CRD, a gang-scheduled RoleSet's pods are still created and
//! the RoleSet says the gang guarantee is absent (condition and event); once the CRDs are
//! installed, every gang gets its PodGroup — one per RoleSet for a RoleSet-level strategy,
//! one per PodSet for a role-level one — owned by it, with `minMember` the gang's pods, and
//! its pods carry the membership keys; a PodGroup deleted by someone else is made again, a
//! strategy change updates it, and deleting the owner removes it.

use std::time::Duration;

use e2e::operator::Operator;
use e2e::{TestNamespace, client, install_crds, kubectl, shared_dir, wait_for};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use squall::api::podgroup::{
    CoschedulingKind, GodelKind, KEY_VOLCANO_GROUP_NAME, PodGroup, Scheduler, SchedulerKind,
    VolcanoKind,
};
use squall::api::{PodSet, RoleSet};
use squall::planner::podgroup::member_keys;

const TIMEOUT: Duration = Duration::from_secs(120);

const CRD_FILES: [&str; 3] = [
    "scheduling.x-k8s.io_podgroups.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
    "scheduling.godel.kubewharf.io_podgroups.yaml",
];

fn podgroup_crds(install: bool) {
    if install {
        let dir = shared_dir()
            .expect("SQUALL_SHARED_DIR: the PodGroup CRDs are conformance data")
            .join("conformance/podgroup-crds");
        for file in CRD_FILES {
            let path = dir.join(file);
            let path = path.to_str().expect("utf-8 path");
            let out = kubectl(&["apply", "--server-side", "-f", path], None);
            assert!(out.success, "installing {file}: {}", out.stderr);
            let out = kubectl(
                &[
                    "wait",
                    "--for=condition=Established",
                    "--timeout=60s",
                    "-f",
                    path,
                ],
                None,
            );
            assert!(out.success, "{file} not Established: {}", out.stderr);
        }
    } else {
        for scheduler in Scheduler::ALL {
            let out = kubectl(
                &[
                    "delete",
                    "crd",
                    &scheduler.crd_name(),
                    "--ignore-not-found",
                    "--wait=true",
                ],
                None,
            );
            assert!(
                out.success,
                "deleting {}: {}",
                scheduler.crd_name(),
                out.stderr
            );
        }
    }
}

fn roleset(name: &str, strategy: Option<(&str, Value)>, roles: Value) -> RoleSet {
    let mut spec = json!({"roles": roles});
    if let Some((field, value)) = strategy {
        spec["schedulingStrategy"] = json!({ field: value });
    }
    serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

fn role(name: &str, replicas: i32, extra: Value) -> Value {
    let mut role = json!({"name": name, "replicas": replicas,
        "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}});
    role.as_object_mut()
        .unwrap()
        .extend(extra.as_object().cloned().unwrap_or_default());
    role
}

fn condition<'a>(rs: Option<&'a RoleSet>, type_: &str) -> Option<(&'a str, &'a str)> {
    rs?.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find_map(|c| {
            (c.type_ == type_).then(|| {
                (
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().unwrap_or_default(),
                )
            })
        })
}

/// Waits for the PodGroup `name` of scheduler `S`: owned by `owner_uid`, labelled
/// `owner_label`, with `minMember` `members`; returns its spec.
async fn podgroup<S: SchedulerKind>(
    client: &Client,
    ns: &str,
    name: &str,
    owner_label: &str,
    owner_uid: &str,
    members: i64,
) -> Value {
    let groups: Api<PodGroup<S>> = Api::namespaced(client.clone(), ns);
    let what = format!(
        "{} PodGroup {name} with minMember {members}",
        S::SCHEDULER.group()
    );
    let group = wait_for(&groups, name, &what, TIMEOUT, |g| {
        g.is_some_and(|g| g.spec["minMember"] == members)
    })
    .await
    .unwrap()
    .unwrap();
    let owner = &group.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.uid, owner_uid, "{what}: owner");
    assert_eq!(owner.controller, Some(true), "{what}: controller reference");
    assert_eq!(group.labels()[owner_label], name, "{what}: owner label");
    group.spec
}

async fn member_pods(pods: &Api<Pod>, selector: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(selector))
        .await
        .unwrap()
        .items
}

/// Waits until exactly `count` objects of `api` carry `label=value`.
async fn labelled<K>(api: &Api<K>, label: &str, value: &str, count: usize) -> Vec<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let what = format!("{count} objects with {label}={value}");
    let with = |o: &&K| {
        o.meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .map(String::as_str)
            == Some(value)
    };
    let all = e2e::wait_for_all(api, &what, TIMEOUT, |all| {
        all.iter().filter(with).count() == count
    })
    .await
    .unwrap();
    all.into_iter().filter(|o| with(&o)).collect()
}

/// One scheduler's two cases: a RoleSet-level gang and a role-level gang per PodSet.
async fn gangs_of<S: SchedulerKind>(client: &Client, ns: &str) {
    let scheduler = S::SCHEDULER;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns);
    let podsets: Api<PodSet> = Api::namespaced(client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let field = scheduler.strategy_field();

    let tag = match scheduler {
        Scheduler::Coscheduling => "cosched",
        Scheduler::Volcano => "volcano",
        Scheduler::Godel => "godel",
    };
    let name = format!("whole-{tag}");
    let whole = roleset(
        &name,
        Some((field, json!({}))),
        json!([role("prefill", 2, json!({})), role("decode", 1, json!({}))]),
    );
    let created = rolesets
        .create(&PostParams::default(), &whole)
        .await
        .unwrap();
    let uid = created.uid().unwrap();
    podgroup::<S>(client, ns, &name, "roleset-name", &uid, 3).await;
    for pod in &labelled(&pods, "roleset-name", &name, 3).await {
        let (labels, annotations) = member_keys(&name);
        for (key, value) in labels {
            assert_eq!(
                pod.labels().get(&key),
                Some(&value),
                "{}: label {key}",
                pod.name_any()
            );
        }
        for (key, value) in annotations {
            assert_eq!(
                pod.annotations().get(&key),
                Some(&value),
                "{}: annotation {key}",
                pod.name_any()
            );
        }
    }

    let name = format!("split-{tag}");
    let split = roleset(
        &name,
        None,
        json!([role(
            "tp",
            2,
            json!({"podGroupSize": 2, "schedulingStrategy": {field: {}}})
        )]),
    );
    rolesets
        .create(&PostParams::default(), &split)
        .await
        .unwrap();
    for set in &labelled(&podsets, "roleset-name", &name, 2).await {
        let set_name = set.name_any();
        podgroup::<S>(
            client,
            ns,
            &set_name,
            "stormservice.orchestration.aibrix.ai/podset-name",
            &set.uid().unwrap(),
            2,
        )
        .await;
        for pod in &labelled(
            &pods,
            "stormservice.orchestration.aibrix.ai/podset-name",
            &set_name,
            2,
        )
        .await
        {
            assert_eq!(
                pod.labels()[KEY_VOLCANO_GROUP_NAME],
                set_name,
                "{}",
                pod.name_any()
            );
        }
    }
}

#[tokio::test]
#[ignore = "needs the local control plane (make test); starts its own operator"]
async fn gangs_get_their_podgroups_and_a_missing_crd_is_said() {
    install_crds();
    podgroup_crds(false);
    let _operator = Operator::start("gang", &["--controllers=true"]);
    let client = client().await;
    let ns = TestNamespace::create(&client, "gang").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());

    // No CRD: the pods run, and the RoleSet says the gang guarantee is absent.
    let early = roleset(
        "early",
        Some(("volcanoSchedulingStrategy", json!({"queue": "default"}))),
        json!([role("prefill", 2, json!({}))]),
    );
    let early = rolesets
        .create(&PostParams::default(), &early)
        .await
        .unwrap();
    wait_for(
        &rolesets,
        "early",
        "PodGroupCRDMissing on early",
        TIMEOUT,
        |rs| {
            condition(rs, "ReplicaFailure").is_some_and(|(reason, message)| {
                reason == "PodGroupCRDMissing"
                    && message.contains("podgroups.scheduling.volcano.sh")
            })
        },
    )
    .await
    .unwrap();
    assert_eq!(
        member_pods(&pods, "roleset-name=early").await.len(),
        2,
        "pods are still created"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), ns.name());
    let said = events.list(&ListParams::default()).await.unwrap().items;
    assert!(
        said.iter()
            .any(|e| e.reason.as_deref() == Some("PodGroupCRDMissing")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("early")),
        "a PodGroupCRDMissing event on early"
    );

    // The CRDs arrive: the waiting RoleSet gets its PodGroup, and the condition goes.
    podgroup_crds(true);
    podgroup::<VolcanoKind>(
        &client,
        ns.name(),
        "early",
        "roleset-name",
        &early.uid().unwrap(),
        2,
    )
    .await;
    wait_for(&rolesets, "early", "the condition cleared", TIMEOUT, |rs| {
        condition(rs, "ReplicaFailure").is_none()
    })
    .await
    .unwrap();

    gangs_of::<CoschedulingKind>(&client, ns.name()).await;
    gangs_of::<VolcanoKind>(&client, ns.name()).await;
    gangs_of::<GodelKind>(&client, ns.name()).await;

    // A PodGroup deleted by someone else is made again at once (its owner hears of it).
    let groups: Api<PodGroup<VolcanoKind>> = Api::namespaced(client.clone(), ns.name());
    let old_uid = groups.get("early").await.unwrap().uid().unwrap();
    groups
        .delete("early", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        &groups,
        "early",
        "the deleted PodGroup made again",
        TIMEOUT,
        |g| g.is_some_and(|g| g.uid().as_deref() != Some(old_uid.as_str())),
    )
    .await
    .unwrap();

    // A strategy change updates the PodGroup; deleting the RoleSet removes it.
    rolesets
        .patch(
            "early",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"schedulingStrategy":
                {"volcanoSchedulingStrategy": {"queue": "default", "minMember": 1}}}})),
        )
        .await
        .unwrap();
    podgroup::<VolcanoKind>(
        &client,
        ns.name(),
        "early",
        "roleset-name",
        &early.uid().unwrap(),
        1,
    )
    .await;
    rolesets
        .delete("early", &DeleteParams::default())
        .await
        .unwrap();
    let groups: Api<PodGroup<VolcanoKind>> = Api::namespaced(client.clone(), ns.name());
    wait_for(
        &groups,
        "early",
        "the PodGroup gone with its RoleSet",
        TIMEOUT,
        |g| g.is_none(),
    )
    .await
    .unwrap();
}
