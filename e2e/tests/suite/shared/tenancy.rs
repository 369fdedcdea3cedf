//! A namespace is a trust boundary (shared operator): a tenant with `edit` in namespace A
//! writes pods, PodSets, RoleSets and ControllerRevisions that claim namespace B's owners by
//! UID and carry B's child names; B's children are never touched, and B rolls out meanwhile
//! within its budgets, deleting only what its own rollout replaces.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use e2e::operator::{counter_sum, shared_operator_admin};
use e2e::roles::{assert_roleset_budgets, replay, set_role_image, stormservice_settled};
use e2e::tenant::tenant;
use e2e::{Observed, Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use squall::api::{PodSet, RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);
/// How long B is watched under attack before its rollout starts.
const WINDOW: Duration = Duration::from_secs(60);

/// A copy of `object` for namespace `namespace`: its name, labels, controller
/// ownerReference (the owner's UID in B) and spec — what a hostile tenant can write.
fn shadow_of<K: Serialize>(object: &K, namespace: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap();
    let meta = value["metadata"].take();
    let mut owners = meta["ownerReferences"].clone();
    for owner in owners.as_array_mut().into_iter().flatten() {
        // Blocking the owner's deletion needs rights on the owner, which the tenant lacks.
        owner.as_object_mut().unwrap().remove("blockOwnerDeletion");
    }
    value["metadata"] = json!({
        "name": meta["name"], "namespace": namespace,
        "labels": meta["labels"], "ownerReferences": owners,
    });
    if let Some(spec) = value["spec"].as_object_mut() {
        spec.remove("nodeName");
    }
    value.as_object_mut().unwrap().remove("status");
    value
}

/// Creates, in the tenant's namespace, a shadow of every object of `victims` that has none
/// yet (the garbage collector deletes them, as their owners are not in their namespace);
/// counts the shadows created.
async fn shadow_all<K>(victims: &Api<K>, tenant: &Api<K>, namespace: &str, made: &AtomicUsize)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let Ok(list) = victims.list(&Default::default()).await else {
        return;
    };
    for victim in list.items {
        if victim.meta().owner_references.is_none() {
            continue;
        }
        let shadow: K = serde_json::from_value(shadow_of(&victim, namespace)).unwrap();
        match tenant.create(&PostParams::default(), &shadow).await {
            Ok(_) => {
                made.fetch_add(1, Ordering::Relaxed);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => panic!("the tenant may write {}: {error}", victim.name_any()),
        }
    }
}

/// Runs the tenant's attack until dropped: a shadow of every child of B, renewed once a
/// second.
fn attack(admin: &Client, tenant_client: &Client, victim: &str, attacker: &str) -> Attack {
    let made = Arc::new(AtomicUsize::new(0));
    let (admin, tenant_client) = (admin.clone(), tenant_client.clone());
    let (victim, attacker) = (victim.to_string(), attacker.to_string());
    let counter = made.clone();
    let task = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            macro_rules! shadow {
                ($kind:ty) => {
                    shadow_all::<$kind>(
                        &Api::namespaced(admin.clone(), &victim),
                        &Api::namespaced(tenant_client.clone(), &attacker),
                        &attacker,
                        &counter,
                    )
                    .await
                };
            }
            shadow!(RoleSet);
            shadow!(PodSet);
            shadow!(Pod);
            shadow!(ControllerRevision);
        }
    });
    Attack { made, task }
}

struct Attack {
    made: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Attack {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Every object each name was observed as, by UID, and the deleted ones.
fn identities<K: Resource + Clone>(
    events: &[Observed<K>],
) -> (BTreeMap<String, BTreeSet<String>>, Vec<K>) {
    let mut uids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut deleted = Vec::new();
    for event in events {
        for object in event.applied() {
            uids.entry(object.meta().name.clone().unwrap_or_default())
                .or_default()
                .insert(object.meta().uid.clone().unwrap_or_default());
        }
        if let Observed::Deleted(object) = event {
            deleted.push(object.clone());
        }
    }
    (uids, deleted)
}

/// No object of B was deleted or replaced while only the tenant acted.
fn assert_untouched<K: Resource + Clone>(what: &str, events: &[Observed<K>]) {
    let (uids, deleted) = identities(events);
    assert!(!uids.is_empty(), "B has {what}");
    for (name, seen) in &uids {
        assert_eq!(
            seen.len(),
            1,
            "{what} {name} of B was replaced: UIDs {seen:?}"
        );
    }
    let deleted: Vec<String> = deleted
        .iter()
        .map(|o| o.meta().name.clone().unwrap_or_default())
        .collect();
    assert!(
        deleted.is_empty(),
        "{} {what} of B deleted under the tenant's attack, first {:?}",
        deleted.len(),
        &deleted[..deleted.len().min(5)]
    );
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_tenant_claiming_another_namespaces_owners_never_touches_its_children() {
    install_crds();
    let admin = client().await;
    let victim = TestNamespace::create(&admin, "tenant-b").await;
    let attacker = TestNamespace::create(&admin, "tenant-a").await;
    let user = format!("tenant-of-{}", attacker.name());
    let revisions_too = PolicyRule {
        api_groups: Some(vec!["apps".into()]),
        resources: Some(vec!["controllerrevisions".into()]),
        verbs: vec!["create".into(), "get".into(), "list".into()],
        ..PolicyRule::default()
    };
    let tenant_client = tenant(&admin, attacker.name(), &user, vec![revisions_too]).await;

    let services: Api<StormService> = Api::namespaced(admin.clone(), victim.name());
    let service: StormService = serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "llm"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "llm"}},
            "updateStrategy": {"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0},
            "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"roles": [
                {"name": "decode", "replicas": 2, "template": {"spec": {"containers": [
                    {"name": "engine", "image": "engine:1"}]}}},
                {"name": "prefill", "replicas": 1, "podGroupSize": 2, "template": {"spec": {
                    "containers": [{"name": "engine", "image": "engine:1"}]}}},
            ]}},
        }
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let settled = wait_for(&services, "llm", "B's StormService Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, Some(1))
    })
    .await
    .unwrap()
    .unwrap();
    let stable_revision = settled.status.as_ref().unwrap().current_revision.clone();

    let pods = Recorder::start(Api::<Pod>::namespaced(admin.clone(), victim.name())).await;
    let podsets = Recorder::start(Api::<PodSet>::namespaced(admin.clone(), victim.name())).await;
    let rolesets = Recorder::start(Api::<RoleSet>::namespaced(admin.clone(), victim.name())).await;
    let revisions = Recorder::start(Api::<ControllerRevision>::namespaced(
        admin.clone(),
        victim.name(),
    ))
    .await;
    let claims_before = counter_sum(
        shared_operator_admin(),
        "squall_foreign_owner_claims_total",
        &[],
    );

    let attack = attack(&admin, &tenant_client, victim.name(), attacker.name());
    // B's owners reconcile while the shadows stand: the operator sees and ignores them.
    let nudge = async {
        let rolesets_api = Api::<RoleSet>::namespaced(admin.clone(), victim.name());
        let podsets_api = Api::<PodSet>::namespaced(admin.clone(), victim.name());
        let mut round = 0;
        let deadline = tokio::time::Instant::now() + WINDOW;
        while tokio::time::Instant::now() < deadline {
            round += 1;
            let mark = Patch::Merge(
                json!({"metadata": {"annotations": {"e2e.squall.dev/nudge": round.to_string()}}}),
            );
            for rs in rolesets_api.list(&Default::default()).await.unwrap() {
                rolesets_api
                    .patch(&rs.name_any(), &PatchParams::default(), &mark)
                    .await
                    .unwrap();
            }
            for ps in podsets_api.list(&Default::default()).await.unwrap() {
                podsets_api
                    .patch(&ps.name_any(), &PatchParams::default(), &mark)
                    .await
                    .unwrap();
            }
            services
                .patch("llm", &PatchParams::default(), &mark)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    };
    nudge.await;
    assert_untouched("pods", &pods.events());
    assert_untouched("PodSets", &podsets.events());
    assert_untouched("RoleSets", &rolesets.events());
    assert_untouched("ControllerRevisions", &revisions.events());
    let claims = counter_sum(
        shared_operator_admin(),
        "squall_foreign_owner_claims_total",
        &[],
    );
    let made = attack.made.load(Ordering::Relaxed);
    assert!(made > 0, "the tenant wrote no shadow");
    assert!(
        claims > claims_before,
        "the operator saw none of the {made} shadows claim B's owners ({claims_before} → {claims})"
    );
    let now = services.get("llm").await.unwrap();
    assert!(
        stormservice_settled(Some(&now), Some(1)),
        "B's status changed under the attack: {:?}",
        now.status
    );
    assert_eq!(
        now.status.as_ref().unwrap().current_revision,
        stable_revision
    );

    // B rolls out with the shadows still coming: within budgets at every observed state,
    // and only what the rollout replaces is deleted.
    let start = rolesets.events().len();
    set_role_image(&services, "llm", 0, "engine:2").await;
    wait_for(&services, "llm", "B's rollout to engine:2", TIMEOUT, |ss| {
        stormservice_settled(ss, Some(2))
    })
    .await
    .unwrap();
    let new_revision = services
        .get("llm")
        .await
        .unwrap()
        .status
        .unwrap()
        .update_revision;
    wait_for_all(
        &Api::<RoleSet>::namespaced(admin.clone(), victim.name()),
        "the old revision's RoleSets gone",
        TIMEOUT,
        |all| {
            all.iter()
                .all(|rs| rs.labels().get("storm-service-revision") == new_revision.as_ref())
        },
    )
    .await
    .unwrap();
    drop(attack);
    let roleset_events: Vec<_> = rolesets.events();
    replay(&roleset_events, start, |i, state| {
        assert_roleset_budgets(i, state, 3, 2)
    });
    let (_, deleted_rolesets) = identities(&roleset_events);
    for rs in &deleted_rolesets {
        assert_eq!(
            rs.labels().get("storm-service-revision"),
            stable_revision.as_ref(),
            "deleted RoleSet {} was not of the old revision",
            rs.name_any()
        );
    }
    // The RoleSets of the old revision: the only ones whose children may go.
    let replaced: BTreeSet<String> = roleset_events
        .iter()
        .flat_map(|event| event.applied())
        .filter(|rs| rs.labels().get("storm-service-revision") == stable_revision.as_ref())
        .map(|rs| rs.name_any())
        .collect();
    assert_eq!(replaced.len(), 2, "B had two RoleSets of the old revision");
    let (_, deleted_pods) = identities(&pods.events());
    let (_, deleted_podsets) = identities(&podsets.events());
    for (what, owner) in deleted_pods
        .iter()
        .map(|p| {
            (
                format!("pod {}", p.name_any()),
                p.labels().get("roleset-name").cloned(),
            )
        })
        .chain(deleted_podsets.iter().map(|p| {
            (
                format!("PodSet {}", p.name_any()),
                p.labels().get("roleset-name").cloned(),
            )
        }))
    {
        assert!(
            owner.as_ref().is_some_and(|o| replaced.contains(o)),
            "{what} of B deleted, though its RoleSet {owner:?} was not replaced"
        );
    }
}
