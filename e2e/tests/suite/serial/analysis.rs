//! Canary analysis against a real Prometheus (docs/rollouts.md#canary-analysis): Prometheus
//! (Debian's, unpacked by hack/build-tools.sh) scrapes an exporter whose values per revision
//! and role the test sets, both on loopback; each test runs its own operator configured with
//! that Prometheus as its analysis endpoint. A healthy canary passes two analysis steps; an
//! unhealthy one aborts by itself at its analysis step, naming the metric and its value; an
//! unreachable endpoint is inconclusive and holds the canary for a person; a pooled canary
//! judged per role aborts when only decode is bad; an operator restart in the middle of an
//! analysis neither repeats nor skips a measurement. Budgets are checked at every observed
//! state.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use e2e::operator::{Operator, cluster_dir, counter_sum, free_port, squall};
use e2e::prometheus::{Exporter, Prometheus};
use e2e::roles::{assert_pod_budgets, assert_roleset_budgets, replay, stormservice};
use e2e::{Recorder, TestNamespace, client, install_crds, wait_for};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use squall::api::analysis::{AnalysisPhase, MeasurementPhase};
use squall::api::{CanaryPhase, PauseReason, RoleSet, StormService};

const TIMEOUT: Duration = Duration::from_secs(180);

/// Prometheus, its exporter, and an operator measuring with them.
struct Analysis {
    exporter: Exporter,
    _prometheus: Prometheus,
    operator: Option<Operator>,
    /// The operator's `--analysis-config`.
    config: PathBuf,
    release: String,
}

impl Analysis {
    /// Starts the exporter, a Prometheus scraping it (endpoint `default`), and an operator
    /// with controllers; `down` adds an endpoint of that name on a loopback port nothing
    /// listens on.
    fn start(name: &str, down: Option<&str>) -> Self {
        let exporter = Exporter::start();
        let prometheus = Prometheus::start(name, &[exporter.addr]);
        let mut config = format!(
            "prometheus:\n- name: default\n  address: http://{}\n  timeout: 2s\n",
            prometheus.addr
        );
        if let Some(down) = down {
            config.push_str(&format!(
                "- name: {down}\n  address: http://127.0.0.1:{}\n  timeout: 2s\n",
                free_port()
            ));
        }
        let path = cluster_dir().join(format!("analysis-{name}.yaml"));
        std::fs::write(&path, config).expect("analysis config");
        let release = format!("analysis-{name}");
        let mut analysis = Self {
            exporter,
            _prometheus: prometheus,
            operator: None,
            config: path,
            release,
        };
        analysis.start_operator();
        analysis
    }

    fn start_operator(&mut self) {
        let config = format!("--analysis-config={}", self.config.display());
        self.operator = Some(Operator::start(
            &self.release,
            &["--controllers=true", &config],
        ));
    }

    fn admin(&self) -> std::net::SocketAddr {
        self.operator.as_ref().expect("running").admin_addr
    }
}

/// A metric of `squall_e2e_metric{name}` for the canary revision (and `{{role}}` with a
/// role): good below 0.05, bad from 0.1.
fn metric(name: &str, role: Option<&str>, extra: Value) -> Value {
    let role_match = if role.is_some() {
        r#",role="{{role}}""#
    } else {
        ""
    };
    let mut metric = json!({
        "name": name,
        "provider": {"prometheus": {"query": format!(
            r#"max(squall_e2e_metric{{name="{name}",revision="{{{{revision.canary}}}}"{role_match}}})"#
        )}},
        "successCondition": "result < 0.05",
        "failureCondition": "result >= 0.1",
        "initialDelay": "1s",
    });
    if let Some(role) = role {
        metric["role"] = json!(role);
    }
    for (k, v) in extra.as_object().unwrap() {
        metric[k] = v.clone();
    }
    metric
}

/// 4 RoleSets of one `decode` role; 25 % → analysis of the error rate (two measurements 2 s
/// apart) → 50 % → analysis of the error rate and latency → 100 %.
fn replica_service(name: &str, endpoint: Option<&str>) -> StormService {
    let mut error_rate = metric("error-rate", None, json!({"count": 2, "interval": "2s"}));
    if let Some(endpoint) = endpoint {
        error_rate["provider"]["prometheus"]["endpoint"] = json!(endpoint);
    }
    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1,
    "canary": {"steps": [
        {"setWeight": 25},
        {"analysis": {"metrics": [error_rate]}},
        {"setWeight": 50},
        {"analysis": {"metrics": [
            metric("error-rate", None, json!({})),
            metric("latency", None, json!({"successCondition": "result < 0.5",
                                            "failureCondition": "result >= 1"})),
        ]}},
        {"setWeight": 100},
    ]}});
    stormservice(name, 4, strategy, &[("decode", 1)])
}

async fn create_ready(api: &Api<StormService>, ss: StormService) -> String {
    let name = ss.metadata.name.clone().unwrap();
    let replicas = ss.spec.replicas_or_default();
    api.create(&PostParams::default(), &ss).await.unwrap();
    let ready = wait_for(api, &name, "Ready on one revision", TIMEOUT, |ss| {
        ss.and_then(|s| s.status.as_ref()).is_some_and(|s| {
            s.ready_replicas == replicas && s.current_revision == s.update_revision
        })
    })
    .await
    .unwrap()
    .unwrap();
    ready.status.unwrap().current_revision.unwrap()
}

async fn set_images(api: &Api<StormService>, name: &str, roles: &[usize], image: &str) {
    let ops: Vec<Value> = roles
        .iter()
        .map(|i| {
            json!({"op": "replace",
                "path": format!("/spec/template/spec/roles/{i}/template/spec/containers/0/image"),
                "value": image})
        })
        .collect();
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!(ops)).unwrap()),
    )
    .await
    .unwrap();
}

fn canary(ss: Option<&StormService>) -> Option<&squall::api::CanaryStatus> {
    ss?.status.as_ref()?.canary_status.as_ref()
}

fn condition<'a>(ss: &'a StormService, type_: &str) -> Option<&'a squall::api::Condition> {
    ss.status
        .as_ref()?
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
}

/// The canary's events: (reason, note).
async fn events(client: &kube::Client, ns: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref().is_some_and(|r| r.starts_with("Canary")))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn a_healthy_canary_completes_through_two_analysis_steps_and_a_bad_one_aborts_by_itself() {
    install_crds();
    let client = client().await;
    let setup = Analysis::start("verdicts", None);
    let ns = TestNamespace::create(&client, "analysis").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let _revisions = setup
        .exporter
        .follow_revisions(Api::namespaced(client.clone(), ns.name()));
    // Healthy until the test says otherwise: the error rate is 1 %, latency 0.2 s.
    setup
        .exporter
        .set_for_every_revision("error-rate", "", 0.01);
    setup.exporter.set_for_every_revision("latency", "", 0.2);

    let recorder = Recorder::start(rolesets.clone()).await;
    let stable = create_ready(&api, replica_service("good", None)).await;
    recorder.catch_up(&rolesets).await;
    let start = recorder.events().len();
    set_images(&api, "good", &[0], "engine:2").await;
    let done = wait_for(&api, "good", "the canary completed", TIMEOUT, |ss| {
        canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Completed))
    })
    .await
    .unwrap()
    .unwrap();
    let last = canary(Some(&done)).unwrap().analysis.as_ref().unwrap();
    assert_eq!(last.step, Some(3), "the last analysis was step 3's");
    assert_eq!(last.phase, AnalysisPhase::Successful);
    let names: Vec<&str> = last.metrics.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["error-rate", "latency"]);
    for metric in &last.metrics {
        let taken = &metric.measurements[0];
        assert_eq!(
            (taken.number, taken.phase),
            (1, MeasurementPhase::Successful),
            "{}",
            metric.name
        );
    }
    assert_eq!(
        last.metrics[1].measurements[0].value.as_deref(),
        Some("0.2")
    );
    let recorded = events(&client, ns.name()).await;
    let passed: Vec<&String> = recorded
        .iter()
        .filter(|(r, _)| r == "CanaryAnalysisPassed")
        .map(|(_, note)| note)
        .collect();
    assert_eq!(passed.len(), 2, "{recorded:?}");
    assert!(
        passed.iter().all(|n| n.contains("trigger=analysis")),
        "{passed:?}"
    );
    recorder.catch_up(&rolesets).await;
    replay(&recorder.events(), start, |i, state| {
        assert_roleset_budgets(i, state, 5, 3);
    });
    assert!(
        counter_sum(
            setup.admin(),
            "squall_analysis_measurements_total",
            &["result=\"number\""]
        ) >= 4.0
    );

    // The same service, now with a bad canary: 30 % of requests fail on the new revision.
    let bad_stable = done
        .status
        .as_ref()
        .unwrap()
        .current_revision
        .clone()
        .unwrap();
    assert_ne!(bad_stable, stable);
    setup.exporter.set_for_every_revision("error-rate", "", 0.3);
    // The stable revision stays healthy: only the canary's series is bad.
    setup.exporter.set("error-rate", &bad_stable, "", 0.01);
    recorder.catch_up(&rolesets).await;
    let start = recorder.events().len();
    set_images(&api, "good", &[0], "engine:3").await;
    let aborted = wait_for(
        &api,
        "good",
        "the canary aborted by itself",
        TIMEOUT,
        |ss| {
            canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Aborted))
                && ss
                    .and_then(|s| s.status.as_ref())
                    .is_some_and(|s| s.updated_ready_replicas == 0 && s.ready_replicas == 4)
        },
    )
    .await
    .unwrap()
    .unwrap();
    let status = canary(Some(&aborted)).unwrap();
    assert_eq!(status.current_step, 1, "aborted at the first analysis step");
    assert_eq!(status.abort, None, "nobody asked for it");
    let message = status.message.clone().unwrap();
    assert!(
        message.contains("metric error-rate failed: measured 0.3"),
        "{message}"
    );
    let analysis = condition(&aborted, "CanaryAnalysis").expect("the CanaryAnalysis condition");
    assert_eq!(
        (analysis.status.as_str(), analysis.reason.as_deref()),
        ("False", Some("MetricFailed"))
    );
    assert!(
        analysis
            .message
            .as_deref()
            .is_some_and(|m| m.contains("error-rate") && m.contains("0.3")),
        "{analysis:?}"
    );
    let recorded = events(&client, ns.name()).await;
    assert!(
        recorded.iter().any(|(r, note)| r == "CanaryAnalysisFailed"
            && note.contains("error-rate")
            && note.contains("0.3")
            && note.contains("trigger=analysis")),
        "{recorded:?}"
    );
    let series = format!("namespace=\"{}\"", ns.name());
    assert_eq!(
        counter_sum(
            setup.admin(),
            "squall_canary_analysis_failed_value",
            &[&series, "name=\"good\"", "metric=\"error-rate\""]
        ),
        0.3
    );
    // Back on the stable revision, every observed state within the budgets.
    recorder.catch_up(&rolesets).await;
    replay(&recorder.events(), start, |i, state| {
        assert_roleset_budgets(i, state, 5, 3);
    });
    let (code, out) = squall(&["status", "good", "-n", ns.name()]);
    assert_eq!(code, 0, "{out}");
    for expected in [
        "waiting for: `squall retry` (aborted)",
        "analysis of step 2: Failed",
        "metric error-rate",
        "0.3",
    ] {
        assert!(out.contains(expected), "{expected:?} in:\n{out}");
    }
}

#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn an_unreachable_endpoint_is_inconclusive_and_holds_the_canary_until_promoted() {
    install_crds();
    let client = client().await;
    let setup = Analysis::start("unreachable", Some("down"));
    let ns = TestNamespace::create(&client, "analysis").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let _revisions = setup
        .exporter
        .follow_revisions(Api::namespaced(client.clone(), ns.name()));
    setup
        .exporter
        .set_for_every_revision("error-rate", "", 0.01);
    setup.exporter.set_for_every_revision("latency", "", 0.2);
    create_ready(&api, replica_service("dark", Some("down"))).await;
    set_images(&api, "dark", &[0], "engine:2").await;
    let held = wait_for(&api, "dark", "the inconclusive gate", TIMEOUT, |ss| {
        canary(ss).is_some_and(|c| {
            c.pause_conditions
                .iter()
                .flatten()
                .any(|p| p.reason == PauseReason::CanaryAnalysisInconclusive)
        })
    })
    .await
    .unwrap()
    .unwrap();
    let status = canary(Some(&held)).unwrap();
    assert_eq!(
        (status.phase, status.current_step),
        (Some(CanaryPhase::Paused), 1)
    );
    let taken = &status.analysis.as_ref().unwrap().metrics[0].measurements[0];
    assert_eq!(taken.phase, MeasurementPhase::Inconclusive);
    assert!(
        taken
            .message
            .as_deref()
            .is_some_and(|m| m.contains("connecting to 127.0.0.1")),
        "{taken:?}"
    );
    let analysis = condition(&held, "CanaryAnalysis").unwrap();
    assert_eq!(
        (analysis.status.as_str(), analysis.reason.as_deref()),
        ("Unknown", Some("Inconclusive"))
    );
    // It holds: nothing is measured or moved while the gate is open.
    let measured = |ss: &StormService| {
        canary(Some(ss)).unwrap().analysis.as_ref().unwrap().metrics[0].measured
    };
    let (code, out) = squall(&["status", "dark", "-n", ns.name()]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("`squall promote` to go on or `squall abort` (analysis inconclusive)"),
        "{out}"
    );
    let still = api.get_status("dark").await.unwrap();
    assert_eq!(measured(&still), 1);
    assert_eq!(canary(Some(&still)).unwrap().current_step, 1);

    let (code, out) = squall(&["promote", "dark", "-n", ns.name()]);
    assert_eq!(code, 0, "squall promote: {out}");
    wait_for(&api, "dark", "the canary completed", TIMEOUT, |ss| {
        canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Completed))
    })
    .await
    .unwrap();
    let recorded = events(&client, ns.name()).await;
    for (reason, trigger) in [
        ("CanaryAnalysisInconclusive", "analysis"),
        ("CanaryAnalysisPassed", "user"),
        ("CanaryAnalysisPassed", "analysis"),
    ] {
        assert!(
            recorded
                .iter()
                .any(|(r, n)| r == reason && n.contains(&format!("trigger={trigger}"))),
            "{reason} {trigger}: {recorded:?}"
        );
    }
}

#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn a_pooled_canary_judged_per_role_aborts_when_only_decode_is_bad() {
    install_crds();
    let client = client().await;
    let setup = Analysis::start("pooled", None);
    let ns = TestNamespace::create(&client, "analysis").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let _revisions = setup
        .exporter
        .follow_revisions(Api::namespaced(client.clone(), ns.name()));
    // Prefill's time to first token is fine; decode's inter-token latency is not.
    setup
        .exporter
        .set_for_every_revision("ttft", "prefill", 0.01);
    setup.exporter.set_for_every_revision("itl", "decode", 0.5);
    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1,
        "canary": {"steps": [
        {"setWeight": 50},
        {"analysis": {"metrics": [
            metric("ttft", Some("prefill"), json!({"count": 2, "interval": "2s"})),
            metric("itl", Some("decode"), json!({"count": 2, "interval": "2s"})),
        ]}},
        {"setWeight": 100},
    ]}});
    let roles = [("prefill", 2), ("decode", 2)];
    create_ready(&api, stormservice("pool", 1, strategy, &roles)).await;
    let recorder = Recorder::start(pods.clone()).await;
    recorder.catch_up(&pods).await;
    let start = recorder.events().len();
    set_images(&api, "pool", &[0, 1], "engine:2").await;
    let aborted = wait_for(
        &api,
        "pool",
        "the canary aborted by itself",
        TIMEOUT,
        |ss| canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Aborted)),
    )
    .await
    .unwrap()
    .unwrap();
    let status = canary(Some(&aborted)).unwrap();
    let message = status.message.clone().unwrap();
    assert!(
        message.contains("metric itl (role decode) failed: measured 0.5"),
        "{message}"
    );
    let analysis = status.analysis.as_ref().unwrap();
    let prefill = &analysis.metrics[0];
    assert_eq!(prefill.name, "ttft");
    assert_eq!(
        prefill.failed, 0,
        "prefill was judged on its own and was fine"
    );
    assert!(prefill.successful >= 1);
    // Every pod back on the stable template, every observed state within the role budgets.
    e2e::wait_for_all(&pods, "every pod back on engine:1", TIMEOUT, |all| {
        let live: Vec<&Pod> = all
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        live.len() == 4
            && live.iter().all(|p| {
                p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("engine:1")
                    && e2e::roles::is_ready(p)
            })
    })
    .await
    .unwrap();
    recorder.catch_up(&pods).await;
    replay(&recorder.events(), start, |i, state| {
        assert_pod_budgets(i, state, &roles, 0, 1);
    });
}

#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn an_operator_restart_mid_analysis_neither_repeats_nor_skips_a_measurement() {
    install_crds();
    let client = client().await;
    let mut setup = Analysis::start("restart", None);
    let ns = TestNamespace::create(&client, "analysis").await;
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let _revisions = setup
        .exporter
        .follow_revisions(Api::namespaced(client.clone(), ns.name()));
    setup
        .exporter
        .set_for_every_revision("error-rate", "", 0.01);
    const COUNT: i32 = 5;
    const INTERVAL: i64 = 2;
    let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0,
    "canary": {"steps": [
        {"setWeight": 50},
        {"analysis": {"metrics": [metric("error-rate", None,
            json!({"count": COUNT, "interval": format!("{INTERVAL}s")}))]}},
        {"setWeight": 100},
    ]}});
    create_ready(&api, stormservice("steady", 2, strategy, &[("decode", 1)])).await;
    let history = Recorder::start(api.clone()).await;
    set_images(&api, "steady", &[0], "engine:2").await;
    wait_for(&api, "steady", "two measurements taken", TIMEOUT, |ss| {
        canary(ss)
            .and_then(|c| c.analysis.as_ref())
            .is_some_and(|a| a.metrics[0].measured >= 2)
    })
    .await
    .unwrap();
    // Down mid-analysis, without any shutdown step; a new process takes over.
    setup.operator.take().unwrap().kill();
    setup.start_operator();
    let done = wait_for(&api, "steady", "the canary completed", TIMEOUT, |ss| {
        canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Completed))
    })
    .await
    .unwrap()
    .unwrap();
    let final_metric = &canary(Some(&done))
        .unwrap()
        .analysis
        .as_ref()
        .unwrap()
        .metrics[0];
    assert_eq!(final_metric.measured, COUNT);
    // Every measurement any observed status held: each number once, with one time.
    history.catch_up(&api).await;
    let mut seen: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
    for state in history.states_of("steady") {
        let Some(analysis) = canary(Some(&state)).and_then(|c| c.analysis.as_ref()) else {
            continue;
        };
        let mut measured_before = 0;
        for m in &analysis.metrics[0].measurements {
            seen.entry(m.number)
                .or_default()
                .insert(m.time.0.to_string());
            measured_before = measured_before.max(m.number);
        }
        assert_eq!(measured_before, analysis.metrics[0].measured);
    }
    let numbers: Vec<i32> = seen.keys().copied().collect();
    assert_eq!(numbers, (1..=COUNT).collect::<Vec<_>>(), "none skipped");
    for (number, times) in &seen {
        assert_eq!(
            times.len(),
            1,
            "measurement {number} taken again: {times:?}"
        );
    }
    let times: Vec<i64> = final_metric
        .measurements
        .iter()
        .map(|m| m.time.0.as_second())
        .collect();
    for pair in times.windows(2) {
        assert!(
            pair[1] - pair[0] >= INTERVAL,
            "measurements {times:?} closer than the {INTERVAL}s interval"
        );
    }
}

/// Tenancy (docs/rollouts.md#tenancy), against a real Prometheus holding the series of two
/// namespaces: team A's `sum(up)` and `max(...)` measure only A's series (unscoped, both
/// would measure B's too and fail); a query that selects on the namespace label itself is
/// denied at admission with its field path, and one stored before the admin scoped the
/// endpoint is refused by the controller (inconclusive, sent nowhere); no label value of B
/// appears in A's statuses, events or the operator's log.
#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn a_tenants_analysis_measures_only_its_own_namespace() {
    install_crds();
    let client = client().await;
    let team_a = TestNamespace::create(&client, "tenant-a").await;
    let team_b = TestNamespace::create(&client, "tenant-b").await;
    let (a, b) = (Exporter::start(), Exporter::start());
    a.set("load", "a-series", "", 0.01);
    b.set("load", "b-secret-revision", "", 100.0);
    let prometheus = Prometheus::start_in_namespaces(
        "tenancy",
        &[(a.addr, Some(team_a.name())), (b.addr, Some(team_b.name()))],
    );
    assert_eq!(
        (
            prometheus.query("sum(up)"),
            prometheus.query(r#"max(squall_e2e_metric{name="load"})"#)
        ),
        (Some(2.0), Some(100.0)),
        "Prometheus holds both namespaces' series"
    );
    let config = cluster_dir().join("analysis-tenancy.yaml");
    let write_config = |tenancy: &str| {
        let text = format!(
            "prometheus:\n- name: default\n  address: http://{}\n  timeout: 2s\n{tenancy}",
            prometheus.addr
        );
        std::fs::write(&config, text).expect("analysis config");
    };
    let start = || {
        let flag = format!("--analysis-config={}", config.display());
        Operator::start("analysis-tenancy", &["--controllers=true", &flag])
    };
    let api: Api<StormService> = Api::namespaced(client.clone(), team_a.name());
    let analysed = |name: &str, metric: Value| {
        let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1,
        "canary": {"steps": [
            {"setWeight": 50},
            {"analysis": {"metrics": [metric]}},
            {"setWeight": 100},
        ]}});
        stormservice(name, 2, strategy, &[("decode", 1)])
    };
    let metric = |name: &str, query: &str, success: &str| {
        json!({"name": name, "provider": {"prometheus": {"query": query}},
               "successCondition": success})
    };
    let every_namespace = metric("all", r#"sum(up{namespace=~".+"})"#, "result == 0");

    // Before the admin scoped the endpoint, a query over every namespace is admitted.
    write_config("  tenancy: none\n");
    let operator = start();
    create_ready(&api, analysed("stored", every_namespace.clone())).await;
    operator.kill();

    // Scoped (the default): the same query is denied, naming the field.
    write_config("");
    let operator = start();
    let denied = api
        .create(&PostParams::default(), &analysed("denied", every_namespace))
        .await
        .expect_err("a query over every namespace is denied");
    let message = denied.to_string();
    assert!(
        message.contains(
            "spec.updateStrategy.canary.steps[1].analysis.metrics[0].provider.prometheus.query: \
             Invalid value: (as written): endpoint \"default\" (tenancy: namespace): the query \
             selects on `namespace` itself"
        ),
        "{message}"
    );

    // A's own series only: unscoped, sum(up) would be 2 and max(...) 100.
    let mut scoped = analysed("scoped", metric("up", "sum(up)", "result == 1"));
    let mut spec = serde_json::to_value(&scoped.spec).unwrap();
    spec["updateStrategy"]["canary"]["steps"][1]["analysis"]["metrics"]
        .as_array_mut()
        .unwrap()
        .push(metric(
            "load",
            r#"max(squall_e2e_metric{name="load"})"#,
            "result < 50",
        ));
    scoped.spec = serde_json::from_value(spec).unwrap();
    create_ready(&api, scoped).await;
    set_images(&api, "scoped", &[0], "engine:2").await;
    wait_for(
        &api,
        "scoped",
        "the scoped canary completed",
        TIMEOUT,
        |ss| canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Completed)),
    )
    .await
    .unwrap();
    let passed = events(&client, team_a.name()).await;
    assert!(
        passed
            .iter()
            .any(|(r, n)| r == "CanaryAnalysisPassed" && n.contains("trigger=analysis")),
        "measured A's series alone, both metrics passed: {passed:?}"
    );

    // Stored before: the controller refuses to send it.
    set_images(&api, "stored", &[0], "engine:2").await;
    let held = wait_for(&api, "stored", "the refused query's gate", TIMEOUT, |ss| {
        canary(ss).is_some_and(|c| {
            c.pause_conditions
                .iter()
                .flatten()
                .any(|p| p.reason == PauseReason::CanaryAnalysisInconclusive)
        })
    })
    .await
    .unwrap()
    .unwrap();
    let taken = &canary(Some(&held))
        .unwrap()
        .analysis
        .as_ref()
        .unwrap()
        .metrics[0]
        .measurements[0];
    assert_eq!(taken.phase, MeasurementPhase::Inconclusive);
    assert_eq!(taken.value, None, "nothing was measured");
    assert!(
        taken
            .message
            .as_deref()
            .is_some_and(|m| m.contains("selects on `namespace` itself")),
        "{taken:?}"
    );

    // Nothing of B's series reached A: not its namespace, its target nor its labels.
    let b_values = [
        team_b.name().to_string(),
        "b-secret-revision".to_string(),
        b.addr.to_string(),
    ];
    let statuses =
        serde_json::to_string(&api.list(&Default::default()).await.unwrap().items).unwrap();
    let notes: Vec<String> = Api::<Event>::namespaced(client.clone(), team_a.name())
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    let log = operator.log();
    for value in &b_values {
        assert!(!statuses.contains(value), "A's statuses hold {value}");
        assert!(
            !notes.iter().any(|n| n.contains(value)),
            "A's events hold {value}"
        );
        assert!(!log.contains(value), "the operator's log holds {value}");
    }
}

/// 16 StormServices of one tenant whose analyses query an endpoint that never answers:
/// their measurements run off the reconcile path, within that namespace's share of the
/// permits, so another namespace's measurement on a healthy endpoint is taken within its
/// initial delay plus one timeout, and its rollouts (analysed or not) proceed meanwhile.
/// Resetting a slow analysis's status (the tenant may) makes its measurement due again by
/// the status, but not by the operator's clock: the silent endpoint sees no new query.
#[tokio::test]
#[ignore = "needs the local control plane and Prometheus from hack/build-tools.sh (make test); runs its own operator"]
async fn a_tenants_silent_endpoint_starves_no_other_namespace() {
    const SLOW: usize = 16;
    const TIMEOUT_SECONDS: i64 = 2;
    install_crds();
    let client = client().await;
    let slow_ns = TestNamespace::create(&client, "slow").await;
    let other_ns = TestNamespace::create(&client, "bystander").await;
    let exporter = Exporter::start();
    let _revisions = exporter.follow_revisions(Api::namespaced(client.clone(), other_ns.name()));
    exporter.set_for_every_revision("ok", "", 0.01);
    let prometheus = Prometheus::start("starve", &[exporter.addr]);
    let silent = e2e::prometheus::Silent::start();
    let config = cluster_dir().join("analysis-starve.yaml");
    std::fs::write(
        &config,
        format!(
            "prometheus:\n- name: default\n  address: http://{}\n  timeout: {TIMEOUT_SECONDS}s\n\
             - name: silent\n  address: http://{}\n  timeout: {TIMEOUT_SECONDS}s\n",
            prometheus.addr, silent.addr
        ),
    )
    .expect("analysis config");
    let flag = format!("--analysis-config={}", config.display());
    let _operator = Operator::start("analysis-starve", &["--controllers=true", &flag]);

    // The slow tenant: every measurement waits for its timeout.
    let slow_api: Api<StormService> = Api::namespaced(client.clone(), slow_ns.name());
    let slow_name = |i: usize| format!("slow-{i:02}");
    for i in 0..SLOW {
        let interval = if i == 0 { "30s" } else { "1s" };
        let strategy = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1,
        "canary": {"steps": [
            {"analysis": {"metrics": [{"name": "slow", "count": 100, "interval": interval,
                "inconclusiveLimit": 100, "successCondition": "result > 0",
                "provider": {"prometheus": {"endpoint": "silent",
                    "query": r#"sum(up{job="{{name}}"})"#}}}]}},
            {"setWeight": 100},
        ]}});
        create_ready(
            &slow_api,
            stormservice(&slow_name(i), 1, strategy, &[("decode", 1)]),
        )
        .await;
    }
    for i in 0..SLOW {
        set_images(&slow_api, &slow_name(i), &[0], "engine:2").await;
    }
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while (0..SLOW)
        .filter(|i| silent.queries_containing(&slow_name(*i)) > 0)
        .count()
        < 4
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the silent endpoint got no queries of 4 slow StormServices within {TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Another namespace: an analysed canary and a plain rollout proceed meanwhile.
    let other_api: Api<StormService> = Api::namespaced(client.clone(), other_ns.name());
    let analysed = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1,
    "canary": {"steps": [
        {"setWeight": 50},
        {"analysis": {"metrics": [metric("ok", None,
            json!({"count": 2, "interval": "1s", "failureCondition": "result >= 0.1"}))]}},
        {"setWeight": 100},
    ]}});
    create_ready(
        &other_api,
        stormservice("analysed", 2, analysed, &[("decode", 1)]),
    )
    .await;
    let plain = json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1});
    create_ready(
        &other_api,
        stormservice("plain", 2, plain, &[("decode", 1)]),
    )
    .await;
    set_images(&other_api, "analysed", &[0], "engine:2").await;
    set_images(&other_api, "plain", &[0], "engine:2").await;
    let measuring = wait_for(
        &other_api,
        "analysed",
        "its first measurement",
        TIMEOUT,
        |ss| {
            canary(ss)
                .and_then(|c| c.analysis.as_ref())
                .is_some_and(|a| a.metrics[0].measured >= 1)
        },
    )
    .await
    .unwrap()
    .unwrap();
    let analysis = canary(Some(&measuring)).unwrap().analysis.clone().unwrap();
    let first = &analysis.metrics[0].measurements[0];
    assert_eq!(first.phase, MeasurementPhase::Successful, "{first:?}");
    // Status times are whole seconds: one more for the rounding of each.
    let waited = first.time.0.as_second() - analysis.start_time.0.as_second();
    assert!(
        waited <= 1 + TIMEOUT_SECONDS + 2,
        "measured {waited} s after the analysis began (initial delay 1 s, timeout {TIMEOUT_SECONDS} s)"
    );
    wait_for(
        &other_api,
        "analysed",
        "the canary completed",
        TIMEOUT,
        |ss| canary(ss).is_some_and(|c| c.phase == Some(CanaryPhase::Completed)),
    )
    .await
    .unwrap();
    wait_for(
        &other_api,
        "plain",
        "the plain rollout settled",
        TIMEOUT,
        |ss| {
            e2e::roles::stormservice_settled(ss, None)
                && ss.is_some_and(|s| s.metadata.generation == Some(2))
        },
    )
    .await
    .unwrap();

    // Status resets: due again by the status, not by the operator's clock.
    let reset = slow_name(0);
    let measured_once = |ss: Option<&StormService>| {
        canary(ss)
            .and_then(|c| c.analysis.as_ref())
            .is_some_and(|a| a.metrics[0].measured == 1)
    };
    wait_for(
        &slow_api,
        &reset,
        "its first measurement",
        TIMEOUT,
        measured_once,
    )
    .await
    .unwrap();
    let sent = silent.queries_containing(&reset);
    assert_eq!(sent, 1, "one query per 30 s interval");
    for _ in 0..3 {
        let patched = slow_api
            .patch_status(
                &reset,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"canaryStatus": {"analysis": null}}})),
            )
            .await
            .unwrap();
        let reset_at = patched.metadata.resource_version.clone();
        wait_for(
            &slow_api,
            &reset,
            "the reset analysis measured again",
            TIMEOUT,
            |ss| measured_once(ss) && ss.is_some_and(|s| s.metadata.resource_version != reset_at),
        )
        .await
        .unwrap();
    }
    assert_eq!(
        silent.queries_containing(&reset),
        sent,
        "a status reset sends no query before the interval is over"
    );
}
