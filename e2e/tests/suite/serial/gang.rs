//! Gang scheduling (run serially, with its own operator: the PodGroup CRDs are cluster-wide).
//! Without a scheduler's PodGroup CRD, a gang-scheduled RoleSet's pods are still created and
//! the RoleSet says the gang guarantee is absent (condition and event); once the CRDs are
//! installed, every gang gets its PodGroup — one per RoleSet for a RoleSet-level strategy,
//! one per PodSet for a role-level one — owned by it, with `minMember` the gang's pods, and
//! its pods carry the membership keys; a PodGroup deleted by someone else is made again, a
//! strategy change updates it, and deleting the owner removes it. `kubectl apply` warns of a
//! strategy whose CRD is missing. The gang samples get the same PodGroups, and their rollouts
//! keep every gang whole at every observed state: a gang is one unit of the budgets.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use e2e::operator::Operator;
use e2e::roles::{hash_of, is_ready, replay, role_of, set_role_image, stormservice_settled};
use e2e::{Observed, Recorder};
use e2e::{
    TestNamespace, apply, client, documents, install_crds, kubectl, shared_dir, wait_for,
    workspace_root,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use squall::api::podgroup::{
    CoschedulingKind, GodelKind, KEY_VOLCANO_GROUP_NAME, LABEL_COSCHEDULING_POD_GROUP, PodGroup,
    Scheduler, SchedulerKind, VolcanoKind,
};
use squall::api::{PodSet, RoleSet, StormService};
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

    // No CRD: `kubectl apply` is warned, naming the field and the CRD.
    let gang_service = std::fs::read_to_string(workspace_root().join(GANG_SAMPLES)).unwrap();
    let warned = |applied: &e2e::KubectlOutput| {
        assert!(applied.success, "dry-run apply: {}", applied.stderr);
        applied.stderr.contains("Warning: ")
            && applied.stderr.contains(
                "spec.template.spec.schedulingStrategy.volcanoSchedulingStrategy: the cluster \
                 does not serve podgroups.scheduling.volcano.sh",
            )
    };
    let dry_run = || {
        kubectl(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-n",
                ns.name(),
                "-f",
                "-",
            ],
            Some(&gang_service),
        )
    };
    let applied = dry_run();
    assert!(warned(&applied), "no CRD warning: {}", applied.stderr);

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
    // The webhooks learn of them at their next lookup, and stop warning.
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let applied = dry_run();
        if !warned(&applied) {
            assert!(
                !applied.stderr.contains("podgroups.scheduling"),
                "{}",
                applied.stderr
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still warned of the CRD {TIMEOUT:?} after it was installed"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

    // A PodGroup of the RoleSet's name that someone else made (no controller reference): it
    // is never patched, the gang's pods wait rather than join it, the RoleSet says why; once
    // it is gone the RoleSet gets its own.
    let resource = Scheduler::Volcano.api_resource();
    let squatter: DynamicObject = serde_json::from_value(json!({
        "apiVersion": resource.api_version, "kind": resource.kind,
        "metadata": {"name": "squatted"},
        "spec": {"minMember": 99, "queue": "tenant"},
    }))
    .unwrap();
    let squatter = Api::<DynamicObject>::namespaced_with(client.clone(), ns.name(), &resource)
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap();
    let squatted = rolesets
        .create(
            &PostParams::default(),
            &roleset(
                "squatted",
                Some(("volcanoSchedulingStrategy", json!({}))),
                json!([role("decode", 2, json!({}))]),
            ),
        )
        .await
        .unwrap();
    wait_for(
        &rolesets,
        "squatted",
        "PodGroupConflict on squatted",
        TIMEOUT,
        |rs| {
            condition(rs, "ReplicaFailure").is_some_and(|(reason, message)| {
                reason == "PodGroupConflict" && message.contains("PodGroup squatted")
            })
        },
    )
    .await
    .unwrap();
    let left = groups.get("squatted").await.unwrap();
    assert_eq!(
        (left.uid(), left.resource_version(), &left.spec["minMember"]),
        (squatter.uid(), squatter.resource_version(), &json!(99)),
        "the foreign PodGroup is left as it was"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    assert!(
        member_pods(&pods, "roleset-name=squatted").await.is_empty(),
        "no gang pod joins a foreign PodGroup"
    );
    groups
        .delete("squatted", &DeleteParams::default())
        .await
        .unwrap();
    podgroup::<VolcanoKind>(
        &client,
        ns.name(),
        "squatted",
        "roleset-name",
        &squatted.uid().unwrap(),
        2,
    )
    .await;
    labelled(&pods, "roleset-name", "squatted", 2).await;
}

/// The gang samples (AIBrix manifests with scheduling strategies).
const GANG_SAMPLES: &str = "manifests/samples/stormservice-gang.yaml";

/// How one StormService's gangs may stand at any observed state of a rollout.
struct GangBudget {
    /// The StormService.
    service: &'static str,
    /// The pod label naming a member's PodGroup.
    key: &'static str,
    /// Pods per gang.
    size: usize,
    /// Gangs present at most (replicas + maxSurge), terminating ones included.
    most: usize,
    /// Gangs whole — every member there, live and Ready — at least (replicas -
    /// maxUnavailable).
    least_whole: usize,
}

/// The gangs of `budget.service` at one observed state: members by the PodGroup they name.
fn gangs<'a>(
    event: usize,
    state: &'a BTreeMap<String, Pod>,
    budget: &GangBudget,
) -> BTreeMap<String, Vec<&'a Pod>> {
    let mut gangs: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in state.values() {
        if pod.labels().get("storm-service-name").map(String::as_str) != Some(budget.service) {
            continue;
        }
        let gang = pod.labels().get(budget.key).unwrap_or_else(|| {
            panic!(
                "event {event}: pod {} of a gang-scheduled service has no {}",
                pod.name_any(),
                budget.key
            )
        });
        gangs.entry(gang.clone()).or_default().push(pod);
    }
    gangs
}

/// Each gang's members: name, Ready or not, terminating or not.
fn describe(gangs: &BTreeMap<String, Vec<&Pod>>) -> String {
    let member = |p: &&Pod| {
        format!(
            "{}{}{}",
            p.name_any(),
            if is_ready(p) { " ready" } else { "" },
            if p.metadata.deletion_timestamp.is_some() {
                " terminating"
            } else {
                ""
            }
        )
    };
    gangs
        .iter()
        .map(|(gang, members)| {
            format!(
                "{gang}: [{}]",
                members.iter().map(member).collect::<Vec<_>>().join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The gangs of `budget.service` left in `state`, with their size.
fn live_gangs(state: &BTreeMap<String, Pod>, budget: &GangBudget) -> Vec<(String, usize)> {
    gangs(0, state, budget)
        .into_keys()
        .map(|gang| (gang, budget.size))
        .collect()
}

/// The pods as `events` leave them.
fn state_after(events: &[Observed<Pod>]) -> BTreeMap<String, Pod> {
    let mut state = BTreeMap::new();
    for event in events {
        event.apply_to(&mut state);
    }
    state
}

/// Checks `budget` at one observed state of the pods: each gang (its members by the PodGroup
/// name they carry) holds at most its size and one template revision per role, no more gangs
/// than `most` exist and at least `least_whole` are whole. Returns the gangs seen.
fn assert_gangs(event: usize, state: &BTreeMap<String, Pod>, budget: &GangBudget) -> Vec<String> {
    let gangs = gangs(event, state, budget);
    let service = budget.service;
    assert!(
        gangs.len() <= budget.most,
        "event {event}: {service} has {} gangs, at most {}: {:?}",
        gangs.len(),
        budget.most,
        gangs.keys().collect::<Vec<_>>()
    );
    let mut whole = 0;
    for (gang, members) in &gangs {
        assert!(
            members.len() <= budget.size,
            "event {event}: gang {gang} has {} pods, more than its {}",
            members.len(),
            budget.size
        );
        let mut revisions: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for pod in members {
            revisions
                .entry(role_of(pod))
                .or_default()
                .insert(hash_of(pod));
        }
        assert!(
            revisions.values().all(|hashes| hashes.len() == 1),
            "event {event}: gang {gang} mixes revisions: {revisions:?}"
        );
        if members.len() == budget.size
            && members
                .iter()
                .all(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
        {
            whole += 1;
        }
    }
    assert!(
        whole >= budget.least_whole,
        "event {event}: {service} has {whole} whole, Ready gangs, at least {}: {}",
        budget.least_whole,
        describe(&gangs)
    );
    gangs.into_keys().collect()
}

/// The resourceVersion at which each object was first observed (its creation: recording
/// starts before any exists). On one etcd these order writes, which is all the local
/// control plane has.
fn first_seen<K: kube::Resource + Clone>(events: &[Observed<K>]) -> BTreeMap<String, u64> {
    let mut first = BTreeMap::new();
    for event in events {
        for object in event.applied() {
            let version = object
                .meta()
                .resource_version
                .as_deref()
                .unwrap_or_default();
            first
                .entry(object.meta().name.clone().unwrap_or_default())
                .or_insert_with(|| version.parse::<u64>().expect("a numeric resourceVersion"));
        }
    }
    first
}

#[tokio::test]
#[ignore = "needs the local control plane (make test); starts its own operator"]
async fn the_gang_samples_get_their_podgroups_and_roll_out_gang_by_gang() {
    install_crds();
    podgroup_crds(true);
    let _operator = Operator::start("gang-roll", &["--controllers=true"]);
    let client = client().await;
    let ns = TestNamespace::create(&client, "gang-roll").await;
    let services: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let podsets: Api<PodSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let volcano: Api<PodGroup<VolcanoKind>> = Api::namespaced(client.clone(), ns.name());
    let cosched: Api<PodGroup<CoschedulingKind>> = Api::namespaced(client.clone(), ns.name());
    let (pod_log, volcano_log, cosched_log) = (
        Recorder::start(pods.clone()).await,
        Recorder::start(volcano.clone()).await,
        Recorder::start(cosched.clone()).await,
    );

    // As written, but for `schedulerName`: the local control plane runs the default
    // scheduler only, which leaves pods named for Volcano's unscheduled.
    for mut doc in documents(&workspace_root().join(GANG_SAMPLES)) {
        for role in doc["spec"]["template"]["spec"]["roles"]
            .as_array_mut()
            .unwrap()
        {
            if let Some(pod) = role["template"]["spec"].as_object_mut() {
                pod.remove("schedulerName");
            }
        }
        let out = apply(ns.name(), &doc.to_string());
        assert!(
            out.success,
            "applying {}: {}",
            doc["metadata"]["name"], out.stderr
        );
    }
    for name in ["vllm-gang", "tp-gang"] {
        wait_for(&services, name, &format!("{name} settled"), TIMEOUT, |s| {
            stormservice_settled(s, None)
        })
        .await
        .unwrap();
    }

    // vllm-gang: a Volcano PodGroup per RoleSet, minMember its 3 pods, the queue as written.
    let sets = labelled(&rolesets, "storm-service-name", "vllm-gang", 2).await;
    for set in &sets {
        let name = set.name_any();
        let spec = podgroup::<VolcanoKind>(
            &client,
            ns.name(),
            &name,
            "roleset-name",
            &set.uid().unwrap(),
            3,
        )
        .await;
        assert_eq!(spec["queue"], "default", "{name}");
        for pod in labelled(&pods, "roleset-name", &name, 3).await {
            assert_eq!(
                pod.labels()[KEY_VOLCANO_GROUP_NAME],
                name,
                "{}",
                pod.name_any()
            );
            assert_eq!(
                pod.annotations()[KEY_VOLCANO_GROUP_NAME],
                name,
                "{}",
                pod.name_any()
            );
        }
    }
    // tp-gang: a coscheduling PodGroup per PodSet, minMember its 2 pods.
    for set in &labelled(&podsets, "storm-service-name", "tp-gang", 3).await {
        let name = set.name_any();
        let spec = podgroup::<CoschedulingKind>(
            &client,
            ns.name(),
            &name,
            "stormservice.orchestration.aibrix.ai/podset-name",
            &set.uid().unwrap(),
            2,
        )
        .await;
        assert_eq!(spec["scheduleTimeoutSeconds"], 60, "{name}");
        for pod in labelled(
            &pods,
            "stormservice.orchestration.aibrix.ai/podset-name",
            &name,
            2,
        )
        .await
        {
            assert_eq!(
                pod.labels()[LABEL_COSCHEDULING_POD_GROUP],
                name,
                "{}",
                pod.name_any()
            );
        }
    }

    // Both roll out at once: whole RoleSets (vllm-gang's gangs), whole PodSets (tp-gang's).
    let rollout_from = pod_log.events().len();
    for name in ["vllm-gang", "tp-gang"] {
        set_role_image(
            &services,
            name,
            0,
            "registry.k8s.io/e2e-test-images/agnhost:2.54",
        )
        .await;
    }
    for name in ["vllm-gang", "tp-gang"] {
        let generation = services.get(name).await.unwrap().metadata.generation;
        wait_for(
            &services,
            name,
            &format!("{name} rolled out"),
            TIMEOUT,
            |s| stormservice_settled(s, generation),
        )
        .await
        .unwrap();
    }
    pod_log.catch_up(&pods).await;

    let budgets = [
        // replicas 2, maxSurge 1, maxUnavailable 0: a gang is a RoleSet of 3 pods.
        GangBudget {
            service: "vllm-gang",
            key: KEY_VOLCANO_GROUP_NAME,
            size: 3,
            most: 3,
            least_whole: 2,
        },
        // role replicas 3, maxSurge 1, maxUnavailable 0: a gang is a PodSet of 2 pods.
        GangBudget {
            service: "tp-gang",
            key: LABEL_COSCHEDULING_POD_GROUP,
            size: 2,
            most: 4,
            least_whole: 3,
        },
    ];
    let events = pod_log.events();
    let mut seen: [BTreeSet<String>; 2] = Default::default();
    replay(&events, rollout_from, |event, state| {
        for (budget, seen) in budgets.iter().zip(&mut seen) {
            seen.extend(assert_gangs(event, state, budget));
        }
    });
    // Every gang was replaced, and only gangs of the two revisions were ever seen: the new
    // revision's gangs are new PodGroups.
    let (start, end) = (state_after(&events[..rollout_from]), state_after(&events));
    for i in 0..2 {
        let before: BTreeSet<String> = gangs(rollout_from, &start, &budgets[i])
            .into_keys()
            .collect();
        let after: BTreeSet<String> = gangs(events.len(), &end, &budgets[i]).into_keys().collect();
        assert!(
            before.len() == after.len()
                && before.is_disjoint(&after)
                && seen[i] == &before | &after,
            "{}: gangs before {before:?}, after {after:?}, seen {:?}",
            budgets[i].service,
            seen[i]
        );
    }

    // `squall status` shows each live gang's PodGroup (no scheduler runs here to fill in
    // its phase and count).
    for (name, scheduler, gang_names) in [
        (
            "vllm-gang",
            Scheduler::Volcano,
            live_gangs(&end, &budgets[0]),
        ),
        (
            "tp-gang",
            Scheduler::Coscheduling,
            live_gangs(&end, &budgets[1]),
        ),
    ] {
        let out = std::process::Command::new(e2e::operator::squall_bin())
            .args(["status", name, "-n", ns.name()])
            .output()
            .expect("squall runs");
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "squall status {name}: {shown}");
        let lines: Vec<&str> = shown.lines().filter(|l| l.starts_with("gang ")).collect();
        assert_eq!(lines.len(), gang_names.len(), "{shown}");
        let placed = if scheduler == Scheduler::Coscheduling {
            "scheduled"
        } else {
            "running"
        };
        for (gang, size) in gang_names {
            let line = format!(
                "gang {gang} ({}): phase -  {placed} -/{size}",
                scheduler.group()
            );
            assert!(lines.contains(&line.as_str()), "{line:?} not in {shown}");
        }
    }

    // Every pod came after its PodGroup.
    volcano_log.catch_up(&volcano).await;
    cosched_log.catch_up(&cosched).await;
    let mut groups = first_seen(&volcano_log.events());
    groups.extend(first_seen(&cosched_log.events()));
    let members = first_seen(&events);
    for pod in events.iter().flat_map(|e| e.applied()) {
        let Some(group) = [KEY_VOLCANO_GROUP_NAME, LABEL_COSCHEDULING_POD_GROUP]
            .iter()
            .find_map(|key| pod.labels().get(*key))
        else {
            continue;
        };
        let made = groups
            .get(group)
            .unwrap_or_else(|| panic!("pod {} joins {group}, never seen", pod.name_any()));
        assert!(
            made < &members[&pod.name_any()],
            "pod {} was made before its PodGroup {group}",
            pod.name_any()
        );
    }
}
