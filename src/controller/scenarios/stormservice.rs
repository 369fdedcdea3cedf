//! The StormService controller's writes: its revision, headless Service and RoleSets; a
//! Service somebody else owns; a drifted Service repaired; a refused RoleSet; a scale-down by
//! UID; a rollback that reuses its revision; an invalid spec; ordered deletion; a pooled
//! canary's move in place, guarded by the version it was decided from; and a canary whose
//! stable revision is gone.

use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::{ScriptedApi, path_of, paths};
use crate::api::StormService;
use crate::api::keys::{
    FINALIZER_STORMSERVICE, LABEL_REVISION_HASH, LABEL_REVISION_OWNER, LABEL_STORM_SERVICE_NAME,
    LABEL_STORM_SERVICE_REVISION,
};
use crate::controller::kit::error::Error;

const ROLESETS: &str = "/apis/orchestration.aibrix.ai/v1alpha1/namespaces/tenant/rolesets";
const REVISIONS: &str = "/apis/apps/v1/namespaces/tenant/controllerrevisions";
const SERVICE: &str = "/api/v1/namespaces/tenant/services/svc";

fn stormservice(replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "svc", "uid": "svc-uid", "generation": 1,
            "finalizers": [FINALIZER_STORMSERVICE]},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "svc"}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": {"app": "svc"}}, "spec": {"roles": [
                {"name": "decode", "replicas": 1,
                 "template": {"spec": {"containers": [{"name": "engine", "image": image}]}}}]}}
        }
    })
}

fn svc_path() -> String {
    path_of(&stormservice(1, "engine:1"))
}

fn condition(api: &ScriptedApi, type_: &str) -> Option<Value> {
    let status = api.object(&svc_path())?["status"].clone();
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

/// Whether a revision's data holds `image`.
fn holds(revision: &Value, image: &str) -> bool {
    revision["data"]
        .to_string()
        .contains(&format!("\"{image}\""))
}

#[tokio::test]
async fn a_new_stormservice_gets_its_revision_its_headless_service_and_its_rolesets() {
    let api = ScriptedApi::holding([stormservice(2, "engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let created = paths(&api.writes(), "create");
    assert_eq!(
        created[0], SERVICE,
        "the headless Service first: {created:#?}"
    );
    assert!(
        created[1].starts_with(REVISIONS),
        "then the revision: {created:#?}"
    );
    assert_eq!(
        created[2..]
            .iter()
            .filter(|p| p.starts_with(ROLESETS))
            .count(),
        2,
        "then one RoleSet per replica: {created:#?}"
    );
    assert_eq!(
        api.event_reasons().first().map(String::as_str),
        Some("HeadlessServiceSynced")
    );
    let status = api.object(&svc_path()).unwrap()["status"].clone();
    let revision = &api.objects("apps/v1", "ControllerRevision")[0];
    assert_eq!(
        status["updateRevision"], revision["metadata"]["name"],
        "{status}"
    );
    // The cache never shows the RoleSets: no more are created.
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    assert_eq!(paths(&api.writes(), "create").len(), created.len());
}

#[tokio::test]
async fn a_service_somebody_else_owns_is_left_alone_and_reported() {
    let theirs = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "svc", "labels": {"team": "other"}},
        "spec": {"selector": {"app": "theirs"}}});
    let api = ScriptedApi::holding([stormservice(1, "engine:1"), theirs]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let writes = api.writes();
    assert!(
        writes.iter().all(|w| w.path != SERVICE),
        "their Service is not written: {writes:#?}"
    );
    let conflict = condition(&api, "ServiceConflict").expect("ServiceConflict");
    assert_eq!(conflict["status"], "True");
    assert!(api.event_reasons().contains(&"ServiceConflict".to_string()));
    assert_eq!(
        api.object(SERVICE).unwrap()["spec"]["selector"]["app"],
        "theirs"
    );
}

#[tokio::test]
async fn our_service_that_drifted_gets_only_its_drifted_fields_back() {
    let api = ScriptedApi::holding([stormservice(1, "engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    api.edit(SERVICE, |service| {
        service["spec"]["publishNotReadyAddresses"] = json!(false);
        service["metadata"]["labels"]["team"] = json!("theirs");
    });
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let repairs: Vec<_> = api
        .writes()
        .into_iter()
        .filter(|w| w.verb == "patch" && w.path == SERVICE)
        .collect();
    assert_eq!(repairs.len(), 1, "{repairs:#?}");
    let service = api.object(SERVICE).unwrap();
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(
        service["metadata"]["labels"]["team"], "theirs",
        "the rest is left as it is"
    );
    assert_eq!(
        service["metadata"]["labels"][LABEL_STORM_SERVICE_NAME],
        "svc"
    );
}

#[tokio::test]
async fn a_refused_roleset_is_reported_and_retried() {
    let api = ScriptedApi::holding([stormservice(2, "engine:1")]);
    api.refuse("create", "/rolesets", 403, "exceeded quota: rolesets");
    let ctx = api.context::<StormService>().await;
    let result = api.reconcile::<StormService>(&ctx, &svc_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root), Err(Error::Refused(m)) if m.contains("quota")),
        "{result:?}"
    );
    let failure = condition(&api, "ReplicaFailure").expect("ReplicaFailure");
    assert_eq!(failure["reason"], "FailedCreate");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("exceeded quota"),
        "{failure}"
    );
}

#[tokio::test]
async fn a_scale_down_deletes_rolesets_by_uid() {
    let api = ScriptedApi::holding([stormservice(3, "engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    api.edit(&svc_path(), |svc| svc["spec"]["replicas"] = json!(1));
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let deletes: Vec<_> = api
        .writes()
        .into_iter()
        .filter(|w| w.verb == "delete")
        .collect();
    assert_eq!(deletes.len(), 2, "{deletes:#?}");
    assert!(deletes.iter().all(|d| {
        d.path.starts_with(ROLESETS)
            && d.body["preconditions"]["uid"]
                .as_str()
                .is_some_and(|u| u.starts_with("uid-"))
    }));
    assert_eq!(
        api.objects("orchestration.aibrix.ai/v1alpha1", "RoleSet")
            .len(),
        1
    );
}

#[tokio::test]
async fn a_template_put_back_reuses_its_revision_as_the_newest() {
    let api = ScriptedApi::holding([stormservice(1, "engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let set_image = |image: &'static str| {
        move |svc: &mut Value| {
            svc["spec"]["template"]["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
                json!(image)
        }
    };
    api.edit(&svc_path(), set_image("engine:2"));
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    assert_eq!(
        api.objects("apps/v1", "ControllerRevision").len(),
        2,
        "a new revision"
    );
    api.edit(&svc_path(), set_image("engine:1"));
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let revisions = api.objects("apps/v1", "ControllerRevision");
    assert_eq!(revisions.len(), 2, "no third revision");
    let first = revisions.iter().find(|r| holds(r, "engine:1")).unwrap();
    assert_eq!(first["revision"], 3, "renumbered as the newest: {first}");
    assert!(
        api.writes()
            .iter()
            .any(|w| w.verb == "patch" && w.path.starts_with(REVISIONS)),
        "by a patch of the old revision"
    );
}

#[tokio::test]
async fn an_invalid_spec_is_reported_and_its_rolesets_are_left_alone() {
    let mut svc = stormservice(1, "engine:1");
    svc["spec"]["selector"]["matchLabels"]["app"] = json!("other");
    let api = ScriptedApi::holding([svc]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let writes = api.writes();
    assert_eq!(
        paths(&writes, "patch"),
        [format!("{}/status", svc_path())],
        "only the status: {writes:#?}"
    );
    assert!(paths(&writes, "create").is_empty());
    let invalid = condition(&api, "InvalidSpec").expect("InvalidSpec");
    assert_eq!(invalid["status"], "True");
    assert!(
        invalid["message"].as_str().unwrap().contains("selector"),
        "{invalid}"
    );
}

#[tokio::test]
async fn a_deleted_stormservice_deletes_its_rolesets_then_lets_its_finalizer_go() {
    let api = ScriptedApi::holding([stormservice(2, "engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    api.edit(&svc_path(), |svc| {
        svc["metadata"]["deletionTimestamp"] = json!("2026-12-04T00:00:00Z")
    });
    let ctx = api.context::<StormService>().await;
    let result = api.reconcile::<StormService>(&ctx, &svc_path()).await;
    assert!(
        matches!(result.as_ref().map_err(Error::root),
            Err(Error::Waiting(m)) if m == "2 RoleSets still terminating"),
        "{result:?}"
    );
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let finalizers = &api.object(&svc_path()).unwrap()["metadata"]["finalizers"];
    assert!(
        finalizers.as_array().is_none_or(Vec::is_empty),
        "{finalizers}"
    );
}

#[tokio::test]
async fn a_roles_replicas_changed_respecs_the_rolesets_without_a_new_revision() {
    let api = ScriptedApi::holding([stormservice(2, "engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    // An autoscaler's edit: role replicas are not part of a revision.
    api.edit(&svc_path(), |svc| {
        svc["spec"]["template"]["spec"]["roles"][0]["replicas"] = json!(3);
    });
    let ctx = api.context::<StormService>().await;
    let before = api.writes().len();
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "create").is_empty(),
        "no revision, no RoleSet: {writes:#?}"
    );
    let respecs: Vec<_> = writes
        .iter()
        .filter(|w| w.verb == "patch" && w.path.starts_with(ROLESETS))
        .collect();
    assert_eq!(respecs.len(), 2, "each RoleSet: {writes:#?}");
    for roleset in api.objects("orchestration.aibrix.ai/v1alpha1", "RoleSet") {
        assert_eq!(roleset["spec"]["roles"][0]["replicas"], 3, "{roleset}");
    }
    assert_eq!(api.objects("apps/v1", "ControllerRevision").len(), 1);
}

/// The name squall gives the revision of `svc`'s template at `collision_count`.
fn revision_name_of(svc: &Value, collision_count: u32) -> String {
    use crate::planner::revision::{revision_data, revision_hash, revision_name};
    let template: crate::api::RoleSetTemplateSpec =
        serde_json::from_value(svc["spec"]["template"].clone()).unwrap();
    revision_name(
        "svc",
        &revision_hash(&revision_data(&template), collision_count),
    )
}

/// A revision of `svc` named `name`, numbered `revision`, holding `data`.
fn revision(name: &str, revision: i64, data: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": name, "labels": {LABEL_REVISION_OWNER: "svc", LABEL_REVISION_HASH: "x"},
            "ownerReferences": [{"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
                "name": "svc", "uid": "svc-uid", "controller": true}]},
        "revision": revision, "data": data})
}

#[tokio::test]
async fn a_revision_name_taken_by_other_data_is_retried_with_the_next_collision_count() {
    let svc = stormservice(1, "engine:1");
    let taken = revision_name_of(&svc, 0);
    // Somebody's object under the name squall would write, holding other data, and not
    // controlled by the StormService (the cache does not show it; the create meets it).
    let mut squatter = revision(&taken, 1, json!({"spec": {"roles": []}}));
    squatter["metadata"]["ownerReferences"] = json!([]);
    let api = ScriptedApi::holding([svc.clone(), squatter]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let written = format!("{REVISIONS}/{}", revision_name_of(&svc, 1));
    assert!(
        paths(&api.writes(), "create").contains(&written),
        "written under the next name: {:#?}",
        api.writes()
    );
    let status = api.object(&svc_path()).unwrap()["status"].clone();
    assert_eq!(status["collisionCount"], 1, "{status}");
    assert_eq!(status["updateRevision"], revision_name_of(&svc, 1));
    assert_eq!(
        api.object(&format!("{REVISIONS}/{taken}")).unwrap()["data"],
        json!({"spec": {"roles": []}}),
        "the other object is left as it was"
    );
}

/// The revision data of `svc`'s template.
fn data_of(svc: &Value) -> Value {
    let template: crate::api::RoleSetTemplateSpec =
        serde_json::from_value(svc["spec"]["template"].clone()).unwrap();
    crate::planner::revision::revision_data(&template)
}

#[tokio::test]
async fn revisions_beyond_the_history_limit_that_nothing_uses_are_deleted_oldest_first() {
    let (first, second) = (stormservice(1, "engine:0"), stormservice(1, "engine:1"));
    let mut svc = stormservice(1, "engine:2");
    svc["spec"]["revisionHistoryLimit"] = json!(1);
    let old = [
        revision(&revision_name_of(&first, 0), 1, data_of(&first)),
        revision(&revision_name_of(&second, 0), 2, data_of(&second)),
    ];
    let api = ScriptedApi::holding([svc.clone(), old[0].clone(), old[1].clone()]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let deletes: Vec<_> = api
        .writes()
        .into_iter()
        .filter(|w| w.verb == "delete")
        .collect();
    let oldest = format!("{REVISIONS}/{}", revision_name_of(&first, 0));
    assert_eq!(
        deletes.iter().map(|d| d.path.clone()).collect::<Vec<_>>(),
        [oldest],
        "one beyond the limit of 1 unused, the oldest"
    );
    assert!(
        deletes[0].body["preconditions"]["uid"]
            .as_str()
            .is_some_and(|u| u.starts_with("uid-"))
    );
    let kept: Vec<String> = api
        .objects("apps/v1", "ControllerRevision")
        .iter()
        .map(|r| r["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(kept.contains(&revision_name_of(&second, 0)), "{kept:?}");
    assert!(
        kept.contains(&revision_name_of(&svc, 0)),
        "the new one: {kept:?}"
    );
}

/// A pooled StormService (one RoleSet whose roles are pools, moved in place) whose canary
/// moves 25 % and then waits for promote.
fn pooled_canary(image: &str) -> Value {
    let mut svc = stormservice(1, image);
    svc["spec"]["updateStrategy"] = json!({"type": "InPlaceUpdate",
        "canary": {"steps": [{"setWeight": 25}, {"pause": {}}]}});
    svc["spec"]["template"]["spec"]["roles"][0]["replicas"] = json!(4);
    svc
}

fn set_image(image: &'static str) -> impl FnOnce(&mut Value) {
    move |svc: &mut Value| {
        svc["spec"]["template"]["spec"]["roles"][0]["template"]["spec"]["containers"][0]["image"] =
            json!(image)
    }
}

/// A pooled canary's StormService reconciled once at `engine:1` (its stable revision and
/// its one RoleSet), then edited to `engine:2`: the scripted server, the RoleSet's path and
/// the stable revision's name.
async fn pooled_canary_edited() -> (ScriptedApi, String, String) {
    let api = ScriptedApi::holding([pooled_canary("engine:1")]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let stable = api.object(&svc_path()).unwrap()["status"]["currentRevision"]
        .as_str()
        .expect("a current revision")
        .to_string();
    let rolesets = api.objects("orchestration.aibrix.ai/v1alpha1", "RoleSet");
    assert_eq!(rolesets.len(), 1, "one pool: {rolesets:#?}");
    api.edit(&svc_path(), set_image("engine:2"));
    (api, path_of(&rolesets[0]), stable)
}

#[tokio::test]
async fn a_pooled_canary_moves_its_roleset_in_place_guarded_by_its_version() {
    let (api, roleset, stable) = pooled_canary_edited().await;
    let version = api.object(&roleset).unwrap()["metadata"]["resourceVersion"].clone();
    let ctx = api.context::<StormService>().await;
    let before = api.writes().len();
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let writes = api.writes()[before..].to_vec();
    assert!(
        paths(&writes, "create")
            .iter()
            .all(|p| p.starts_with(REVISIONS)),
        "the canary's revision, and no RoleSet: {writes:#?}"
    );
    assert!(paths(&writes, "delete").is_empty(), "{writes:#?}");
    let moves: Vec<_> = writes.iter().filter(|w| w.path == roleset).collect();
    assert_eq!(moves.len(), 1, "one move of the pool: {writes:#?}");
    assert_eq!(
        moves[0].body[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": version}),
        "guarded by the version it was decided from"
    );
    let moved = api.object(&roleset).unwrap();
    let role = &moved["spec"]["roles"][0];
    assert_eq!(
        role["rollout"],
        json!({"partition": 3, "stableRevision": stable}),
        "25 % of 4 pods move, 3 stay on the stable revision: {role}"
    );
    assert_eq!(
        role["template"]["spec"]["containers"][0]["image"],
        "engine:2"
    );
    let status = api.object(&svc_path()).unwrap()["status"].clone();
    assert_eq!(
        moved["metadata"]["labels"][LABEL_STORM_SERVICE_REVISION], status["updateRevision"],
        "the pool is labelled with the canary's revision: {moved}"
    );
    let canary = &status["canaryStatus"];
    assert_eq!(
        (
            &canary["mode"],
            &canary["currentStep"],
            &canary["stableRevision"]
        ),
        (&json!("Pooled"), &json!(0), &json!(stable)),
        "{canary}"
    );
    assert_eq!(canary["roles"][0]["target"], 1, "{canary}");
    assert!(
        api.event_reasons().contains(&"CanaryStarted".to_string()),
        "{:?}",
        api.event_reasons()
    );
}

#[tokio::test]
async fn a_pooled_move_decided_from_a_stale_roleset_is_refused_not_written_over() {
    let (api, roleset, _) = pooled_canary_edited().await;
    let ctx = api.context::<StormService>().await;
    // Somebody's write the cache has not shown yet.
    api.edit(&roleset, |r| {
        r["metadata"]["labels"]["team"] = json!("inference");
    });
    let result = api.reconcile::<StormService>(&ctx, &svc_path()).await;
    assert!(result.is_err(), "retried: {result:?}");
    let kept = api.object(&roleset).unwrap();
    assert_eq!(kept["metadata"]["labels"]["team"], "inference");
    let role = &kept["spec"]["roles"][0];
    assert!(role["rollout"].is_null(), "not moved: {role}");
    assert_eq!(
        role["template"]["spec"]["containers"][0]["image"],
        "engine:1"
    );
}

#[tokio::test]
async fn a_canary_whose_stable_revision_is_gone_waits_and_says_so_once() {
    let (api, roleset, stable) = pooled_canary_edited().await;
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let moved = api.object(&roleset).unwrap();
    // A user deletes the stable revision mid-canary.
    api.remove(&format!("{REVISIONS}/{stable}"));
    let ctx = api.context::<StormService>().await;
    let before = api.writes().len();
    for _ in 0..2 {
        let action = api
            .reconcile::<StormService>(&ctx, &svc_path())
            .await
            .unwrap();
        assert_eq!(action, Action::await_change(), "until the user acts");
    }
    let writes = api.writes()[before..].to_vec();
    assert!(
        writes
            .iter()
            .all(|w| w.path == format!("{}/status", svc_path())),
        "only the status: {writes:#?}"
    );
    assert_eq!(
        api.object(&roleset).unwrap(),
        moved,
        "the pool stays as it is"
    );
    let progressing = condition(&api, "Progressing").expect("Progressing");
    assert_eq!(
        (&progressing["status"], &progressing["reason"]),
        (&json!("False"), &json!("StableRevisionMissing")),
        "{progressing}"
    );
    assert!(
        progressing["message"].as_str().unwrap().contains(&stable),
        "{progressing}"
    );
    let warned = api
        .event_reasons()
        .iter()
        .filter(|r| *r == "StableRevisionMissing")
        .count();
    assert_eq!(warned, 1, "once per generation: {:?}", api.event_reasons());
}

#[tokio::test]
async fn taking_over_from_another_controllers_revision_keeps_its_number_and_says_so() {
    let svc = stormservice(1, "engine:1");
    // AIBrix's revision of the same template: Go's encoding writes an empty `resources`,
    // and its name is not squall's hash of its data.
    let mut data = data_of(&svc);
    data["spec"]["template"]["spec"]["roles"][0]["template"]["spec"]["containers"][0]["resources"] =
        json!({});
    let theirs = revision("svc-7d9f8b6c5", 4, data);
    let api = ScriptedApi::holding([svc.clone(), theirs]);
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let ours = format!("{REVISIONS}/{}", revision_name_of(&svc, 0));
    assert!(
        paths(&api.writes(), "create").contains(&ours),
        "squall's own revision of the template: {:#?}",
        api.writes()
    );
    assert_eq!(
        api.object(&ours).unwrap()["revision"],
        4,
        "the same place in the history"
    );
    let cut_over = api.event("CutOver").expect("a CutOver event");
    let note = cut_over["note"].to_string();
    assert!(
        note.contains("took over from revision svc-7d9f8b6c5"),
        "{cut_over}"
    );
    assert!(
        api.object(&format!("{REVISIONS}/svc-7d9f8b6c5")).is_some(),
        "theirs is kept"
    );
    // Said once: the next pass reuses squall's revision.
    let ctx = api.context::<StormService>().await;
    api.reconcile::<StormService>(&ctx, &svc_path())
        .await
        .unwrap();
    let said = api
        .event_reasons()
        .iter()
        .filter(|r| *r == "CutOver")
        .count();
    assert_eq!(said, 1, "{:?}", api.event_reasons());
}
