//! One test per validation rule of docs/admission.md#rules.
//!
//! CREATE-time rules use the fixtures in `tests/fixtures/invalid/`: each file starts with
//! `# expect-error: <field path>` / `# expect-warning: <text>` lines, checked both against
//! the validation function and against `squall lint` (exit code and output). UPDATE-time
//! rules (immutable selector, ratcheting, the canary-edit warning) are tested on objects
//! built here.

mod common;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use squall::admission::defaulting::apply_defaults;
use squall::admission::validation::{ErrorKind, validate_object};

struct Expectations {
    errors: Vec<String>,
    warnings: Vec<String>,
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/invalid")
        .join(name)
}

fn expectations(path: &Path) -> Expectations {
    let text = std::fs::read_to_string(path).unwrap();
    let header = |prefix: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .map(|s| s.trim().to_string())
            .collect()
    };
    let e = Expectations {
        errors: header("# expect-error:"),
        warnings: header("# expect-warning:"),
    };
    assert!(
        !e.errors.is_empty() || !e.warnings.is_empty(),
        "{}: no expectations",
        path.display()
    );
    e
}

/// The fixture is rejected with exactly the expected field paths, or warned with the
/// expected text — and its defaulted form is judged the same way.
fn check_fixture(name: &str) {
    let path = fixture(name);
    let expected = expectations(&path);
    let docs = common::documents(&path);
    assert_eq!(docs.len(), 1, "{name}: one object per fixture");
    let mut defaulted = docs[0].clone();
    let parses = apply_defaults(&mut defaulted).is_ok();
    for (label, object) in [("as written", &docs[0]), ("defaulted", &defaulted)] {
        if label == "defaulted" && !parses {
            continue; // defaulting leaves unparsable objects alone
        }
        let report = validate_object(object, None).expect("owned kind");
        let paths: Vec<&str> = report.errors.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths, expected.errors,
            "{name} ({label}): errors were {:#?}",
            report.errors
        );
        for error in &report.errors {
            assert!(
                error.to_string().starts_with(&error.path),
                "{name}: message must name the field: {error}"
            );
        }
        if label == "as written" {
            for warning in &expected.warnings {
                assert!(
                    report.warnings.iter().any(|w| w.contains(warning.as_str())),
                    "{name}: expected a warning containing {warning:?}, got {:#?}",
                    report.warnings
                );
            }
        }
    }
}

macro_rules! rule_tests {
    ($($test:ident => $file:literal,)*) => {
        $(#[test] fn $test() { check_fixture($file); })*

        /// Every fixture file has a test above.
        #[test]
        fn every_fixture_has_a_test() {
            let mut listed = vec![$($file),*];
            listed.sort();
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
            let on_disk: Vec<String> = common::yaml_files(&dir)
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            assert_eq!(on_disk, listed);
        }
    };
}

rule_tests! {
    rule01_name_is_a_dns1035_label => "rule01-name-not-dns1035.yaml",
    rule02_selector_is_not_empty => "rule02-selector-empty.yaml",
    rule02_selector_selects_template_labels => "rule02-selector-mismatch.yaml",
    rule03_template_spec_is_required => "rule03-no-template-spec.yaml",
    rule03_at_least_one_role => "rule03-no-roles.yaml",
    rule05_rollout_block_in_template_is_forbidden => "rule05-rollout-in-template.yaml",
    rule05_min_ready_seconds_in_template_is_forbidden => "rule05-min-ready-seconds-in-template.yaml",
    rule05_serving_gate_in_template_is_forbidden => "rule05-serving-gate-in-template.yaml",
    rule06_role_name_is_a_dns1123_label => "rule06-role-name-not-dns1123.yaml",
    rule06_role_name_is_at_most_44_characters => "rule06-role-name-too-long.yaml",
    rule06_role_name_is_required => "rule06-role-name-empty.yaml",
    rule06_role_names_are_unique => "rule06-role-name-duplicate.yaml",
    rule07_replicas_are_not_negative => "rule07-negative-replicas.yaml",
    rule07_role_replicas_are_not_negative => "rule07-negative-role-replicas.yaml",
    rule07_upgrade_order_is_not_negative => "rule07-negative-upgrade-order.yaml",
    rule07_pod_group_size_is_1_to_100 => "rule07-pod-group-size.yaml",
    rule08_budgets_are_not_both_zero => "rule08-budgets-both-zero.yaml",
    rule08_percentages_are_at_most_100 => "rule08-budget-percent-out-of-range.yaml",
    rule08_budget_strings_are_percentages => "rule08-budget-string-not-percent.yaml",
    rule08_role_budgets_are_not_negative => "rule08-role-budget-negative.yaml",
    rule08_percentages_resolving_to_zero_warn => "rule08-percentages-resolve-to-zero.yaml",
    rule09_scheduling_strategy_not_at_both_levels => "rule09-scheduling-at-both-levels.yaml",
    rule09_one_scheduler_per_strategy => "rule09-two-schedulers.yaml",
    rule09_unknown_stormservice_strategy_type => "rule09-unknown-stormservice-strategy.yaml",
    rule09_unknown_roleset_strategy => "rule09-unknown-roleset-strategy.yaml",
    rule09_unknown_role_strategy_type => "rule09-unknown-role-strategy.yaml",
    rule10_at_most_50_steps => "rule10-too-many-steps.yaml",
    rule10_step_has_not_both_fields => "rule10-step-with-both.yaml",
    rule10_step_has_one_field => "rule10-empty-step.yaml",
    rule10_weight_is_0_to_100 => "rule10-weight-out-of-range.yaml",
    rule10_weights_never_decrease => "rule10-weight-decreases.yaml",
    rule10_pause_duration_grammar => "rule10-bad-pause-duration.yaml",
    rule11_budgets_on_inplace_without_canary_warn => "rule11-inplace-budgets-without-canary.yaml",
    rule11_upgrade_order_with_parallel_warns => "rule11-upgrade-order-with-parallel.yaml",
    rule11_mixed_upgrade_order_warns => "rule11-mixed-upgrade-order.yaml",
    rule11_inplace_with_pod_groups_warns => "rule11-inplace-with-pod-groups.yaml",
    rule11_stateful_is_ignored_with_a_warning => "rule11-stateful-ignored.yaml",
    rule11_disruption_tolerance_is_ignored_with_a_warning => "rule11-disruption-tolerance-ignored.yaml",
    rule12_analysis_has_metrics => "rule12-analysis-without-metrics.yaml",
    rule12_conditions_parse => "rule12-bad-condition.yaml",
    rule12_a_metric_has_a_condition => "rule12-no-condition.yaml",
    rule12_queries_use_known_placeholders => "rule12-unknown-placeholder.yaml",
    rule12_a_metric_role_is_a_template_role => "rule12-unknown-role.yaml",
    rule12_repeated_measurements_need_an_interval => "rule12-interval-required.yaml",
    rule12_interval_is_1s_to_1h => "rule12-interval-out-of-range.yaml",
    rule12_metric_names_are_unique => "rule12-duplicate-metric-name.yaml",
    rule12_a_step_is_an_analysis_or_something_else => "rule12-step-with-analysis-and-weight.yaml",
    rule12_a_background_analysis_needs_an_interval => "rule12-background-interval-required.yaml",
    rule13_a_pairing_group_names_two_roles => "rule13-pairing-one-role.yaml",
    rule13_paired_roles_are_template_roles => "rule13-pairing-unknown-role.yaml",
    rule13_a_role_is_in_one_pairing_group_once => "rule13-pairing-role-in-two-groups.yaml",
    rule13_a_pairing_protocol_is_a_label_value => "rule13-pairing-protocol-not-a-label-value.yaml",
    rule14_a_drain_has_a_timeout_of_1s_to_1h => "rule14-drain-without-timeout.yaml",
    rule14_a_drain_query_uses_its_placeholders_and_interval => "rule14-drain-query.yaml",
    limit_stormservice_replicas => "limit-replicas-too-many.yaml",
    limit_role_replicas => "limit-role-replicas-too-many.yaml",
    limit_roles_per_roleset => "limit-too-many-roles.yaml",
    limit_containers_per_role => "limit-too-many-containers.yaml",
    limit_min_ready_seconds => "limit-min-ready-seconds.yaml",
    limit_abort_scale_down_delay => "limit-abort-scale-down-delay.yaml",
}

#[test]
fn unknown_strategy_type_lists_the_valid_values() {
    let doc = &common::documents(&fixture("rule09-unknown-stormservice-strategy.yaml"))[0];
    let report = validate_object(doc, None).unwrap();
    let message = report.error_message();
    assert!(
        message.contains("RollingUpdate") && message.contains("InPlaceUpdate"),
        "{message}"
    );
}

#[test]
fn squall_lint_reports_every_fixture_with_its_field_path() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    for path in common::yaml_files(&dir) {
        let expected = expectations(&path);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_squall"))
            .args(["lint", "-f"])
            .arg(&path)
            .output()
            .expect("run squall lint");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let want_code = if expected.errors.is_empty() { 0 } else { 1 };
        assert_eq!(
            out.status.code(),
            Some(want_code),
            "{}:\n{stdout}",
            path.display()
        );
        for field in &expected.errors {
            assert!(
                stdout.contains(&format!("error: {field}: ")),
                "{}: output does not name {field}:\n{stdout}",
                path.display()
            );
        }
        for warning in &expected.warnings {
            assert!(
                stdout.contains("warning: ") && stdout.contains(warning.as_str()),
                "{}: output lacks warning {warning:?}:\n{stdout}",
                path.display()
            );
        }
    }
}

#[test]
fn lint_skips_kinds_it_does_not_own_and_fails_on_unreadable_input() {
    let dir = tempdir();
    let file = dir.join("mixed.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
    )
    .unwrap();
    let lint = |arg: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_squall"))
            .args(["lint", "-f"])
            .arg(arg)
            .output()
            .unwrap()
    };
    let out = lint(&file);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("skipped")
            .count(),
        2
    );

    std::fs::write(&file, "kind: [unclosed\n").unwrap();
    assert_eq!(lint(&file).status.code(), Some(2), "unparsable YAML");
    assert_eq!(
        lint(&dir.join("missing.yaml")).status.code(),
        Some(2),
        "missing file"
    );
}

/// With the operator's analysis configuration, lint holds analysis metrics to its endpoints
/// as the webhook does; without it, it cannot know them and says nothing.
#[test]
fn lint_checks_analysis_endpoints_against_the_analysis_config() {
    let dir = tempdir();
    let manifest = dir.join("analysis.yaml");
    let mut doc = stormservice();
    doc["spec"]["updateStrategy"] = json!({"canary": {"steps": [
        {"setWeight": 50},
        {"analysis": {"metrics": [{"name": "ttft",
            "provider": {"prometheus": {"endpoint": "staging", "query": "up"}},
            "successCondition": "result < 1"}]}}
    ]}});
    std::fs::write(&manifest, serde_json::to_string(&doc).unwrap()).unwrap();
    let lint = |config: Option<&str>| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_squall"));
        command.args(["lint", "-f"]).arg(&manifest);
        if let Some(config) = config {
            let path = dir.join("analysis-config.yaml");
            std::fs::write(&path, config).unwrap();
            command.arg("--analysis-config").arg(path);
        }
        let out = command.output().expect("run squall lint");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(lint(None).0, Some(0), "{}", lint(None).1);
    let (code, stdout) = lint(Some(
        "prometheus:\n- name: default\n  address: http://127.0.0.1:9090\n",
    ));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "error: spec.updateStrategy.canary.steps[1].analysis.metrics[0].provider.prometheus.endpoint: Invalid value: \"staging\""
        ),
        "{stdout}"
    );
    let both = "prometheus:\n- name: default\n  address: http://127.0.0.1:9090\n- name: staging\n  address: http://127.0.0.1:9091\n";
    assert_eq!(lint(Some(both)).0, Some(0));
    assert_eq!(
        lint(Some("prometheus: 3\n")).0,
        Some(2),
        "an unreadable config"
    );
    // A query its endpoint cannot scope to the namespace, as the webhook denies it.
    doc["spec"]["updateStrategy"]["canary"]["steps"][1]["analysis"]["metrics"][0]["provider"] =
        json!({"prometheus": {"query": "sum(up{namespace=\"other\"})"}});
    std::fs::write(&manifest, serde_json::to_string(&doc).unwrap()).unwrap();
    let (code, stdout) = lint(Some(both));
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "error: spec.updateStrategy.canary.steps[1].analysis.metrics[0].provider.prometheus.query: Invalid value: (as written): endpoint \"default\" (tenancy: namespace): the query selects on `namespace` itself"
        ),
        "{stdout}"
    );
    let as_written =
        "prometheus:\n- name: default\n  address: http://127.0.0.1:9090\n  tenancy: none\n";
    assert_eq!(lint(Some(as_written)).0, Some(0));
    let (code, stdout) = lint(Some(
        "prometheus:\n- name: default\n  address: http://127.0.0.1:9090\n  namespaceLabel: kube_namespace\n",
    ));
    assert_eq!(
        code,
        Some(0),
        "with another label, `namespace` is a label like any: {stdout}"
    );
    assert_eq!(
        lint(Some("prometheus:\n- name: default\n  address: http://127.0.0.1:9090\n  namespaceLabel: a.b\n")).0,
        Some(2),
        "a label name Prometheus does not have"
    );
}

/// The README's StormService examples (the vLLM canary analysis among them) pass every rule.
#[test]
fn the_readme_examples_are_valid() {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let mut checked = 0;
    for block in readme.split("```yaml\n").skip(1) {
        let yaml = block.split("```").next().unwrap();
        if !yaml.contains("kind: StormService") {
            continue;
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("README YAML parses");
        for doc in docs.iter().filter(|d| d["kind"] == "StormService") {
            let report = validate_object(doc, None).unwrap();
            assert!(
                report.is_valid(),
                "{}: {:#?}",
                doc["metadata"]["name"],
                report.errors
            );
            checked += 1;
        }
    }
    assert!(checked >= 2, "only {checked} README examples found");
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("squall-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// ---------------------------------------------------------------------------------------
// UPDATE-time rules

fn stormservice() -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1",
        "kind": "StormService",
        "metadata": {"name": "demo", "namespace": "default", "generation": 1},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo", "tier": "llm"}},
                "spec": {"roles": [{"name": "prefill", "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}]}
            }
        }
    })
}

fn errors(new: &Value, old: &Value) -> Vec<(String, ErrorKind)> {
    validate_object(new, Some(old))
        .unwrap()
        .errors
        .into_iter()
        .map(|e| (e.path, e.kind))
        .collect()
}

#[test]
fn rule04_selector_is_immutable() {
    let old = stormservice();
    let mut new = old.clone();
    new["spec"]["selector"] = json!({"matchLabels": {"tier": "llm"}});
    let errs = errors(&new, &old);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].0, "spec.selector");
    assert!(
        matches!(&errs[0].1, ErrorKind::Invalid { detail, .. } if detail == "field is immutable")
    );
    // The same selector change is fine on CREATE.
    assert!(validate_object(&new, None).unwrap().is_valid());
}

#[test]
fn ratcheting_allows_updates_that_keep_existing_violations() {
    // Admitted earlier (by AIBrix or during a webhook outage) with an invalid role name.
    let mut old = stormservice();
    old["spec"]["template"]["spec"]["roles"][0]["name"] = json!("Prefill");
    assert!(!validate_object(&old, None).unwrap().is_valid());

    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = json!(3);
    assert!(
        errors(&scaled, &old).is_empty(),
        "an old violation must not block scaling"
    );

    let mut worse = scaled.clone();
    worse["spec"]["replicas"] = json!(-1);
    let errs = errors(&worse, &old);
    assert_eq!(
        errs.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["spec.replicas"],
        "only the new violation is reported"
    );
}

#[test]
fn ratcheting_allows_metadata_only_updates_and_deletion() {
    let mut old = stormservice();
    old["spec"]["replicas"] = json!(-1);
    old["spec"]["selector"] = json!({});

    let mut finalizing = old.clone();
    finalizing["metadata"]["finalizers"] = json!([]);
    assert!(errors(&finalizing, &old).is_empty());

    let mut deleting = old.clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-29T00:00:00Z");
    deleting["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
    assert!(
        errors(&deleting, &old).is_empty(),
        "a terminating object may always be updated"
    );
}

#[test]
fn ratcheting_applies_to_rolesets() {
    let old = json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "rs", "namespace": "default"},
        "spec": {"roles": [{"name": "a", "replicas": -1}]}
    });
    let mut new = old.clone();
    new["spec"]["updateStrategy"] = json!("Parallel");
    assert!(errors(&new, &old).is_empty());
    new["spec"]["roles"][0]["podGroupSize"] = json!(0);
    assert_eq!(errors(&new, &old).len(), 1);
}

/// `InPlaceUpdate` paces RoleSets by `maxUnavailable` (no warning) and adds none for
/// `maxSurge` to bound (a warning that says what happens instead).
#[test]
fn in_place_update_warns_about_max_surge_only() {
    let mut service = stormservice();
    service["spec"]["updateStrategy"] = json!({"type": "InPlaceUpdate", "maxUnavailable": 2});
    let report = validate_object(&service, None).unwrap();
    assert_eq!(report.warnings, Vec::<String>::new());
    service["spec"]["updateStrategy"]["maxSurge"] = json!(1);
    let report = validate_object(&service, None).unwrap();
    assert!(
        matches!(report.warnings.as_slice(), [w] if w.contains("maxSurge has no effect")
            && w.contains("maxUnavailable sets how many are updated at a time")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn editing_canary_steps_during_a_canary_warns() {
    let mut old = stormservice();
    old["spec"]["updateStrategy"] =
        json!({"canary": {"steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}]}});
    old["status"] = json!({"canaryStatus": {"currentStep": 1, "phase": "Paused"}});
    let mut new = old.clone();
    new["spec"]["updateStrategy"]["canary"]["steps"][0]["setWeight"] = json!(25);
    let report = validate_object(&new, Some(&old)).unwrap();
    assert!(report.is_valid());
    assert!(
        report.warnings.iter().any(
            |w| w == "editing canary steps while a canary is in progress restarts it at step 0"
        ),
        "{:?}",
        report.warnings
    );

    // No warning once the canary completed.
    old["status"]["canaryStatus"]["phase"] = json!("Completed");
    let report = validate_object(&new, Some(&old)).unwrap();
    assert!(
        report.warnings.iter().all(|w| !w.contains("canary")),
        "{:?}",
        report.warnings
    );
}

#[test]
fn bundled_samples_are_valid() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("manifests/samples");
    for path in common::yaml_files(&dir) {
        for doc in common::documents(&path) {
            let report = validate_object(&doc, None).expect("samples are squall kinds");
            assert!(
                report.is_valid(),
                "{}: {}",
                path.display(),
                report.error_message()
            );
            assert!(
                report.warnings.is_empty(),
                "{}: {:?}",
                path.display(),
                report.warnings
            );
        }
    }
}

// ---------------------------------------------------------------------------------------
// Hostile sizes (issue 14)

/// A 3 MB StormService of 72,000 minimal roles, each asking for a warning: what passes the
/// API server's size limit.
fn oversized() -> Value {
    let roles: Vec<Value> = (0..72_000)
        .map(|i| json!({"name": format!("r{i}"), "disruptionTolerance": {}}))
        .collect();
    let mut ss = stormservice();
    ss["spec"]["template"]["spec"]["roles"] = Value::Array(roles);
    ss
}

/// Validation stops at the bound: one error naming the list, no per-role errors or warnings
/// (before, each role was checked and each warning looked up in a list: quadratic, 7 s).
#[test]
fn an_oversized_role_list_is_one_error_and_no_per_role_work() {
    let ss = oversized();
    let report = validate_object(&ss, None).unwrap();
    assert_eq!(
        report
            .errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["spec.template.spec.roles: Too many: 72000: must have at most 32 items"]
    );
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    // Ratcheting over an oversized stored object is bounded the same way.
    let mut new = ss.clone();
    new["spec"]["replicas"] = json!(3);
    assert_eq!(validate_object(&new, Some(&ss)).unwrap().errors.len(), 0);
}

/// The mutating webhook adds no defaults to an oversized list (before: 3 patch operations per
/// role, a 227 MB response to a 3 MB review); its answer stays small.
#[test]
fn an_oversized_role_list_gets_no_patch() {
    use squall::admission::hook::Hook;
    use squall::webhook::{Verdict, review};
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "operation": "CREATE", "userInfo": {"username": "u"},
            "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": "StormService"},
            "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": "stormservices"},
            "name": "demo", "namespace": "default", "object": oversized()
        }
    }))
    .unwrap();
    assert!(body.len() > 2_000_000, "{} bytes", body.len());
    let answer = review(Hook::MutateStormService, &body).unwrap();
    assert_eq!(answer.verdict, Verdict::Allowed);
    assert!(answer.json.len() < 1024, "{} bytes", answer.json.len());
    let answer: Value = serde_json::from_slice(&answer.json).unwrap();
    assert!(common::patch_bytes(&answer).is_none());
    assert!(apply_defaults(&mut oversized()).is_err());
}

/// The largest patch a legal object gets — every role of the longest role list defaulted,
/// and the runtime sidecar injected — stays within the request's size plus the headroom the
/// webhook allows (`PATCH_HEADROOM`; past it, it denies).
#[test]
fn the_largest_legal_patch_fits_the_bound() {
    use squall::admission::hook::Hook;
    use squall::webhook::{PATCH_HEADROOM, Verdict, review};
    let roles: Vec<Value> = (0..squall::api::limits::MAX_ROLES)
        .map(|i| json!({"name": format!("r{i}")}))
        .collect();
    let mut ss = stormservice();
    ss["metadata"]["annotations"] = json!({"model.aibrix.ai/sidecar-injection": "true"});
    ss["spec"]["template"]["spec"]["roles"] = Value::Array(roles);
    let body = serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u", "operation": "CREATE", "userInfo": {"username": "u"},
            "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": "StormService"},
            "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": "stormservices"},
            "name": "demo", "namespace": "default", "object": ss
        }
    }))
    .unwrap();
    let answer = review(Hook::MutateStormService, &body).unwrap();
    assert_eq!(answer.verdict, Verdict::Patched);
    let patch = common::patch_bytes(&serde_json::from_slice(&answer.json).unwrap()).unwrap();
    assert!(
        patch.len() <= body.len() + PATCH_HEADROOM,
        "{} bytes of patch for {} of request",
        patch.len(),
        body.len()
    );
}
