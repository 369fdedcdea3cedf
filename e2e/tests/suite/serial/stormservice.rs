//! StormService behaviour that needs an operator of its own (run serially, before the shared
//! operator starts): an invalid spec that no webhook checked is reported as `InvalidSpec` and
//! left alone until fixed; and SIGKILL at observed states of a rollout and a scale-out — the
//! restarted operator completes them within the budgets, without duplicate RoleSets or
//! indexes; and `--namespaces` leaving other namespaces alone.

use std::collections::BTreeSet;
use std::time::Duration;

use e2e::operator::Operator;
use e2e::roles::{
    assert_roleset_budgets, live_rolesets, replay, roleset_ready, stormservice_settled,
};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for, wait_for_all};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use squall::api::{RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);

/// An observed state of the RoleSets at which the operator is killed.
type KillPoint = Box<dyn Fn(&[RoleSet]) -> bool>;
/// Controllers on, no webhook registered: objects reach the API server unchecked.
const UNCHECKED: &[&str] = &["--controllers=true", "--webhook-configs", "none"];

fn stormservice(name: &str, replicas: i32, labels: Value) -> StormService {
    serde_json::from_value(json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "updateStrategy": {"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1},
            "template": {"metadata": {"labels": labels}, "spec": {"roles": [
                {"name": "decode", "replicas": 1,
                 "template": {"spec": {"containers": [{"name": "engine", "image": "engine:1"}]}}}
            ]}},
        }
    }))
    .unwrap()
}

fn condition(ss: Option<&StormService>, type_: &str) -> Option<(String, String)> {
    ss?.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.message.clone().unwrap_or_default()))
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn an_unchecked_invalid_spec_gets_invalid_spec_and_no_rolesets_until_fixed() {
    install_crds();
    let operator = Operator::start("invalid", UNCHECKED);
    let client = client().await;
    let ns = TestNamespace::create(&client, "invalid").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    // The selector does not select the template's labels.
    api.create(
        &PostParams::default(),
        &stormservice("bad", 2, json!({"app": "other"})),
    )
    .await
    .unwrap();
    let reported = wait_for(&api, "bad", "InvalidSpec", TIMEOUT, |ss| {
        condition(ss, "InvalidSpec").is_some_and(|(status, _)| status == "True")
    })
    .await
    .unwrap();
    let (_, message) = condition(reported.as_ref(), "InvalidSpec").unwrap();
    assert!(
        message.contains("spec.template.metadata.labels"),
        "the message names the field: {message}"
    );
    assert!(
        rolesets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no RoleSet"
    );

    api.patch(
        "bad",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"metadata": {"labels": {"app": "bad"}}}}})),
    )
    .await
    .unwrap();
    let fixed = wait_for(&api, "bad", "Ready once fixed", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    assert_eq!(
        condition(fixed.as_ref(), "InvalidSpec")
            .map(|(status, _)| status)
            .as_deref(),
        Some("False")
    );
    assert_eq!(
        rolesets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    drop(operator);
}

/// `--namespaces` scopes the controllers: a StormService outside the list is never touched
/// (checked once one inside it is Ready, so the operator demonstrably reconciles).
#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn a_namespace_list_limits_what_the_controllers_reconcile() {
    install_crds();
    let client = client().await;
    let served = TestNamespace::create(&client, "scoped-in").await;
    let ignored = TestNamespace::create(&client, "scoped-out").await;
    let scope = format!("--namespaces={}", served.name());
    let mut args = UNCHECKED.to_vec();
    args.push(scope.as_str());
    let operator = Operator::start("scoped", &args);
    let inside: Api<StormService> = Api::namespaced(client.clone(), served.name());
    let outside: Api<StormService> = Api::namespaced(client.clone(), ignored.name());
    outside
        .create(
            &PostParams::default(),
            &stormservice("llm", 1, json!({"app": "llm"})),
        )
        .await
        .unwrap();
    inside
        .create(
            &PostParams::default(),
            &stormservice("llm", 1, json!({"app": "llm"})),
        )
        .await
        .unwrap();
    wait_for(
        &inside,
        "llm",
        "llm Ready in the served namespace",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    let untouched = outside.get("llm").await.unwrap();
    assert!(
        untouched.status.is_none() && untouched.finalizers().is_empty(),
        "the StormService outside --namespaces has no status and no finalizer: {:?}",
        untouched.status
    );
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ignored.name());
    assert!(
        rolesets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no RoleSet outside --namespaces"
    );
    drop(operator);
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn killed_mid_rollout_and_mid_scale_out_the_operator_resumes_within_budgets() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "kill").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let recorder = Recorder::start(rolesets.clone()).await;
    let mut operator = Operator::start("killed", UNCHECKED);
    api.create(
        &PostParams::default(),
        &stormservice("llm", 4, json!({"app": "llm"})),
    )
    .await
    .unwrap();
    wait_for(&api, "llm", "llm Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    recorder.catch_up(&rolesets).await;
    let start = recorder.events().len();

    api.patch(
        "llm",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([{"op": "replace",
            "path": "/spec/template/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"}])).unwrap()),
    )
    .await
    .unwrap();
    let first_revision = rolesets.list(&Default::default()).await.unwrap().items[0].labels()
        ["storm-service-revision"]
        .clone();
    // Kill points, defined by observed state.
    let kill_points: [(&str, KillPoint); 2] = [
        (
            "one RoleSet terminating",
            Box::new(|all: &[RoleSet]| all.iter().any(|r| r.metadata.deletion_timestamp.is_some())),
        ),
        (
            "the first new RoleSet Ready",
            Box::new(move |all: &[RoleSet]| {
                all.iter().any(|r| {
                    r.labels()["storm-service-revision"] != first_revision && roleset_ready(r)
                })
            }),
        ),
    ];
    for (what, point) in kill_points {
        wait_for_all(&rolesets, what, TIMEOUT, |all| point(all))
            .await
            .unwrap();
        operator.kill();
        operator = Operator::start("killed", UNCHECKED);
    }
    wait_for(&api, "llm", "llm Ready after the rollout", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    recorder.catch_up(&rolesets).await;
    let rollout_end = recorder.events().len();

    // Mid scale-out: 4 → 8, killed once more RoleSets exist but not all.
    api.patch(
        "llm",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 8}})),
    )
    .await
    .unwrap();
    wait_for_all(&rolesets, "mid scale-out", TIMEOUT, |all| {
        all.len() > 4 && all.len() < 8
    })
    .await
    .unwrap();
    operator.kill();
    let operator = Operator::start("killed", UNCHECKED);
    wait_for(&api, "llm", "llm Ready at 8", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
            && ss.is_some_and(|s| s.status.as_ref().unwrap().ready_replicas == 8)
    })
    .await
    .unwrap();

    let all = live_rolesets(&rolesets).await;
    assert_eq!(all.len(), 8, "no duplicate RoleSet");
    let indexes: BTreeSet<String> = all
        .iter()
        .map(|r| r.annotations()["stormservice.orchestration.aibrix.ai/roleset-index"].clone())
        .collect();
    assert_eq!(indexes.len(), 8, "no duplicate index: {indexes:?}");
    // The budgets at every observed state of the rollout (4 RoleSets, maxSurge 1,
    // maxUnavailable 1), across both restarts.
    replay(&recorder.events()[..rollout_end], start, |i, state| {
        assert_roleset_budgets(i, state, 5, 3)
    });
    drop(operator);
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn a_timed_pause_resumes_with_its_remaining_time_after_an_operator_restart() {
    const PAUSE: u64 = 6;
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "pauserestart").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let operator = Operator::start("pause-restart", UNCHECKED);
    let recorder = Recorder::start(api.clone()).await;
    let mut ss = stormservice("llm", 2, json!({"app": "llm"}));
    ss.spec.update_strategy.as_mut().unwrap().canary = Some(
        serde_json::from_value(json!({"steps": [
            {"setWeight": 50}, {"pause": {"duration": PAUSE}}, {"setWeight": 100},
        ]}))
        .unwrap(),
    );
    api.create(&PostParams::default(), &ss).await.unwrap();
    wait_for(&api, "llm", "llm Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    api.patch(
        "llm",
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([{"op": "replace",
            "path": "/spec/template/spec/roles/0/template/spec/containers/0/image", "value": "engine:2"}])).unwrap()),
    )
    .await
    .unwrap();
    let in_pause = |ss: Option<&StormService>| {
        ss.and_then(|s| s.status.as_ref())
            .and_then(|s| s.canary_status.as_ref())
            .is_some_and(|c| c.current_step == 1)
    };
    wait_for(&api, "llm", "the timed pause", TIMEOUT, in_pause)
        .await
        .unwrap();
    let entered = std::time::Instant::now();
    operator.kill();
    let operator = Operator::start("pause-restart", UNCHECKED);
    wait_for(&api, "llm", "the canary completed", TIMEOUT, |ss| {
        ss.and_then(|s| s.status.as_ref())
            .and_then(|s| s.canary_status.as_ref())
            .is_some_and(|c| c.phase == Some(squall::api::CanaryPhase::Completed))
    })
    .await
    .unwrap();
    assert!(
        entered.elapsed() + Duration::from_secs(1) >= Duration::from_secs(PAUSE),
        "the pause ended after {:?}, before its {PAUSE}s",
        entered.elapsed()
    );
    // The mechanism: the restarted operator kept the stored start of the pause (it neither
    // restarted the clock nor skipped the rest), and nothing was paused meanwhile.
    recorder.catch_up(&api).await;
    let in_pause: Vec<_> = recorder
        .states_of("llm")
        .into_iter()
        .filter_map(|s| s.status?.canary_status)
        .filter(|c| c.current_step == 1)
        .map(|c| (c.step_start_time, c.paused_seconds.unwrap_or(0)))
        .collect();
    assert!(!in_pause.is_empty(), "the pause step was observed");
    assert!(
        in_pause.iter().all(|p| *p == in_pause[0]),
        "one start time and no paused time through the restart: {in_pause:?}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), ns.name());
    let resumed = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("CanaryResumed"))
        .filter_map(|e| e.note)
        .collect::<Vec<_>>();
    assert!(
        resumed.iter().any(|n| n.contains("trigger=timer")),
        "the restarted operator ended the pause by its timer: {resumed:?}"
    );
    drop(operator);
}

/// Puts the CRDs back as the repository has them, even when the test fails.
struct RestoreCrds;

impl Drop for RestoreCrds {
    fn drop(&mut self) {
        install_crds();
    }
}

fn invalid_spec(ss: Option<&StormService>) -> Option<String> {
    condition(ss, "InvalidSpec")
        .filter(|(status, _)| status == "True")
        .map(|(_, message)| message)
}

/// Issue 14 (1): huge replica counts. With the CRD's bounds, `kubectl scale` to 2^31 - 1 is
/// refused naming the field. With an older CRD (bounds removed) and no webhook, the count
/// reaches etcd: the operator reports it (`InvalidSpec`, naming the field), stays up and
/// healthy, leaves the object alone, and a StormService in another namespace still becomes
/// Ready — before, planning allocated per desired slot and the process aborted (and its
/// standby after it).
#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn a_huge_replica_count_is_reported_and_the_operator_serves_everyone_else() {
    install_crds();
    let _restore = RestoreCrds;
    let client = client().await;
    let hostile = TestNamespace::create(&client, "huge").await;
    let other = TestNamespace::create(&client, "huge-other").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), hostile.name());
    let mut operator = Operator::start("huge", UNCHECKED);
    api.create(
        &PostParams::default(),
        &stormservice("scaled", 1, json!({"app": "scaled"})),
    )
    .await
    .unwrap();
    wait_for(&api, "scaled", "scaled Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();

    // The CRD's bound: refused by the API server, naming the field.
    let refused = e2e::kubectl(
        &[
            "scale",
            "stormservice",
            "scaled",
            "--replicas=2147483647",
            "-n",
            hostile.name(),
        ],
        None,
    );
    assert!(!refused.success, "scale to 2^31 - 1 must be refused");
    assert!(
        refused.stderr.contains("spec.replicas") && refused.stderr.contains("10000"),
        "{}",
        refused.stderr
    );

    // An older CRD without the bounds.
    let schema = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    let unbound = json!([
        {"op": "remove", "path": format!("{schema}/replicas/maximum")},
        {"op": "remove", "path": format!("{schema}/template/properties/spec/properties/roles/items/properties/replicas/maximum")},
    ])
    .to_string();
    let patched = e2e::kubectl(
        &[
            "patch",
            "crd",
            "stormservices.orchestration.aibrix.ai",
            "--type=json",
            "-p",
            &unbound,
        ],
        None,
    );
    assert!(patched.success, "{}", patched.stderr);
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let scaled = e2e::kubectl(
            &[
                "scale",
                "stormservice",
                "scaled",
                "--replicas=2147483647",
                "-n",
                hostile.name(),
            ],
            None,
        );
        if scaled.success {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the unbounded CRD never took effect: {}",
            scaled.stderr
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut role = stormservice("role", 1, json!({"app": "role"}));
    role.spec
        .template
        .spec
        .as_mut()
        .unwrap()
        .roles
        .as_mut()
        .unwrap()[0]
        .stateful = Some(true);
    api.create(&PostParams::default(), &role).await.unwrap();
    wait_for(&api, "role", "role Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    api.patch(
        "role",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{"op": "replace",
                "path": "/spec/template/spec/roles/0/replicas", "value": i32::MAX}]))
            .unwrap(),
        ),
    )
    .await
    .unwrap();

    for (name, field) in [
        ("scaled", "spec.replicas"),
        ("role", "spec.template.spec.roles[0].replicas"),
    ] {
        let reported = wait_for(&api, name, "InvalidSpec", TIMEOUT, |ss| {
            invalid_spec(ss).is_some()
        })
        .await
        .unwrap();
        let message = invalid_spec(reported.as_ref()).unwrap();
        assert!(
            message.contains(field) && message.contains("less than or equal to 10000"),
            "{name}: {message}"
        );
    }
    // Left alone: still one RoleSet each.
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), hostile.name());
    assert_eq!(
        rolesets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    // Everyone else is still served.
    let elsewhere: Api<StormService> = Api::namespaced(client.clone(), other.name());
    elsewhere
        .create(
            &PostParams::default(),
            &stormservice("llm", 2, json!({"app": "llm"})),
        )
        .await
        .unwrap();
    wait_for(
        &elsewhere,
        "llm",
        "a StormService in another namespace Ready",
        TIMEOUT,
        |ss| stormservice_settled(ss, None),
    )
    .await
    .unwrap();
    assert!(
        operator.wait_exit(Duration::ZERO).is_none(),
        "the operator is still running"
    );
    let (status, _) = e2e::operator::http_get(operator.admin_addr, "/healthz").unwrap();
    assert_eq!(status, 200);
    drop(operator);
}
