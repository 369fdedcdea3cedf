//! The admission webhooks' answers, pinned: for every review in the corpus below (each
//! fixture of `tests/fixtures/invalid/` sent to both webhooks of its kind, valid objects,
//! updates that ratchet, freeze or warn, reviews the webhooks allow unchecked, malformed
//! bodies), the verdict, HTTP-level outcome, status code, reason, message, warnings and the
//! object the patch makes are compared with `tests/fixtures/admission-answers.json`.
//!
//! The file was written by the webhooks before their parse-once rewrite, so a change to any
//! answer shows up here as a diff. After an intended change, regenerate it with
//! `SQUALL_BLESS=1 cargo test --test admission_answers` and review the diff.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Value, json};
use squall::admission::hook::Hook;
use squall::webhook::review;

const GOLDEN: &str = "tests/fixtures/admission-answers.json";

fn body(hook: Hook, operation: &str, object: &Value, old: Option<&Value>) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-0000-0000-0000000000aa",
            "kind": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "kind": hook.kind()},
            "resource": {"group": "orchestration.aibrix.ai", "version": "v1alpha1", "resource": hook.resource()},
            "name": object.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
            "namespace": "default",
            "operation": operation,
            "userInfo": {"username": "golden"},
            "object": object,
            "oldObject": old,
            "dryRun": false
        }
    }))
    .expect("serializes")
}

fn stormservice() -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "golden", "namespace": "default"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "golden"}},
            "updateStrategy": {"canary": {"steps": [
                {"setWeight": 25}, {"pause": {"duration": "60s"}}, {"setWeight": 50}, {"pause": {}}
            ]}},
            "template": {"metadata": {"labels": {"app": "golden"}}, "spec": {"roles": [
                {"name": "router", "template": {"spec": {"containers": [{"name": "r", "image": "router:1"}]}}},
                {"name": "prefill", "replicas": 2, "template": {"spec": {"containers": [
                    {"name": "e", "image": "vllm/vllm-openai:v0.9.0", "resources": {"limits": {"nvidia.com/gpu": 1}}}
                ]}}},
                {"name": "decode", "replicas": 2, "upgradeOrder": 1, "template": {"spec": {"containers": [
                    {"name": "e", "image": "vllm/vllm-openai:v0.9.0"}
                ]}}}
            ]}}
        }
    })
}

fn roleset() -> Value {
    json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "golden-0", "namespace": "default"},
        "spec": {"updateStrategy": "Parallel", "roles": [
            {"name": "prefill", "replicas": 2, "podGroupSize": 2,
             "updateStrategy": {"type": "InPlaceIfPossible", "maxSurge": "25%"},
             "template": {"spec": {"containers": [{"name": "e", "image": "engine:1"}]}}},
            {"name": "decode", "upgradeOrder": 2,
             "rollout": {"partition": 1},
             "template": {"spec": {"containers": [{"name": "e", "image": "engine:1"}]}}}
        ]}
    })
}

/// Every review of the corpus, by name.
fn corpus() -> Vec<(String, Hook, Vec<u8>)> {
    let hooks = |kind: &str| match kind {
        "StormService" => [Hook::MutateStormService, Hook::ValidateStormService],
        _ => [Hook::MutateRoleSet, Hook::ValidateRoleSet],
    };
    let mut cases = Vec::new();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/invalid");
    for path in common::yaml_files(&fixtures) {
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        for object in common::documents(&path) {
            for hook in hooks(object["kind"].as_str().unwrap_or_default()) {
                cases.push((
                    format!("{name} create {}", hook.operation()),
                    hook,
                    body(hook, "CREATE", &object, None),
                ));
            }
        }
    }
    let ss = stormservice();
    let rs = roleset();
    let mut bad_ss = ss.clone();
    bad_ss["spec"]["template"]["spec"]["roles"][0]["name"] = json!("Bad_Name");
    let mut bad_ss_more = bad_ss.clone();
    bad_ss_more["spec"]["replicas"] = json!(-1);
    let mut other_selector = ss.clone();
    other_selector["spec"]["selector"]["matchLabels"]["tier"] = json!("x");
    other_selector["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
    let mut running = ss.clone();
    running["status"] = json!({"canaryStatus": {"phase": "Paused", "currentStep": 1}});
    let mut edited_steps = ss.clone();
    edited_steps["spec"]["updateStrategy"]["canary"]["steps"][0] = json!({"setWeight": 10});
    let mut terminating = bad_ss_more.clone();
    terminating["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut relabelled = bad_ss.clone();
    relabelled["metadata"]["labels"] = json!({"team": "a"});
    let mut bad_rs = rs.clone();
    bad_rs["spec"]["roles"][1]["replicas"] = json!(-2);
    let mut escaped = ss.clone();
    escaped["metadata"]["name"] = json!("gol\u{e9}den\"\\\n");
    escaped["spec"]["template"]["spec"]["roles"][0]["name"] = json!("r\u{1F600}");
    let mut sidecar = ss.clone();
    sidecar["metadata"]["annotations"] = json!({"model.aibrix.ai/sidecar-injection": "true"});
    let mut defaulted_ss = ss.clone();
    squall::admission::defaulting::apply_defaults(&mut defaulted_ss).unwrap();
    let not_an_object = json!([1, 2]);
    let roles_not_a_list = json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
        "metadata": {"name": "x"}, "spec": {"roles": "no"}});
    let replicas_not_a_number = json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1",
        "kind": "StormService", "metadata": {"name": "x"},
        "spec": {"replicas": "two", "selector": {}, "template": {}}});
    let pairs: Vec<(&str, Hook, &str, &Value, Option<&Value>)> = vec![
        (
            "stormservice",
            Hook::MutateStormService,
            "CREATE",
            &ss,
            None,
        ),
        (
            "stormservice",
            Hook::ValidateStormService,
            "CREATE",
            &ss,
            None,
        ),
        (
            "defaulted stormservice",
            Hook::MutateStormService,
            "CREATE",
            &defaulted_ss,
            None,
        ),
        (
            "defaulted stormservice",
            Hook::ValidateStormService,
            "CREATE",
            &defaulted_ss,
            None,
        ),
        (
            "escaped strings",
            Hook::MutateStormService,
            "CREATE",
            &escaped,
            None,
        ),
        (
            "escaped strings",
            Hook::ValidateStormService,
            "CREATE",
            &escaped,
            None,
        ),
        (
            "sidecar",
            Hook::MutateStormService,
            "CREATE",
            &sidecar,
            None,
        ),
        (
            "sidecar",
            Hook::ValidateStormService,
            "CREATE",
            &sidecar,
            None,
        ),
        ("roleset", Hook::MutateRoleSet, "CREATE", &rs, None),
        ("roleset", Hook::ValidateRoleSet, "CREATE", &rs, None),
        (
            "ratchet kept",
            Hook::ValidateStormService,
            "UPDATE",
            &bad_ss,
            Some(&bad_ss),
        ),
        (
            "ratchet new error",
            Hook::ValidateStormService,
            "UPDATE",
            &bad_ss_more,
            Some(&bad_ss),
        ),
        (
            "metadata only",
            Hook::ValidateStormService,
            "UPDATE",
            &relabelled,
            Some(&bad_ss),
        ),
        (
            "terminating",
            Hook::ValidateStormService,
            "UPDATE",
            &terminating,
            Some(&bad_ss),
        ),
        (
            "selector changed",
            Hook::ValidateStormService,
            "UPDATE",
            &other_selector,
            Some(&ss),
        ),
        (
            "steps edited mid-canary",
            Hook::ValidateStormService,
            "UPDATE",
            &edited_steps,
            Some(&running),
        ),
        (
            "steps edited mid-canary",
            Hook::MutateStormService,
            "UPDATE",
            &edited_steps,
            Some(&running),
        ),
        (
            "roleset ratchet",
            Hook::ValidateRoleSet,
            "UPDATE",
            &bad_rs,
            Some(&bad_rs),
        ),
        (
            "roleset new error",
            Hook::ValidateRoleSet,
            "UPDATE",
            &bad_rs,
            Some(&rs),
        ),
        (
            "roleset to a stormservice webhook",
            Hook::ValidateStormService,
            "CREATE",
            &rs,
            None,
        ),
        (
            "roleset to a stormservice webhook",
            Hook::MutateStormService,
            "CREATE",
            &rs,
            None,
        ),
        (
            "delete",
            Hook::ValidateStormService,
            "DELETE",
            &Value::Null,
            Some(&bad_ss),
        ),
        (
            "no object",
            Hook::MutateRoleSet,
            "CREATE",
            &Value::Null,
            None,
        ),
        (
            "not an object",
            Hook::ValidateRoleSet,
            "CREATE",
            &not_an_object,
            None,
        ),
        (
            "roles not a list",
            Hook::MutateRoleSet,
            "CREATE",
            &roles_not_a_list,
            None,
        ),
        (
            "roles not a list",
            Hook::ValidateRoleSet,
            "CREATE",
            &roles_not_a_list,
            None,
        ),
        (
            "replicas not a number",
            Hook::ValidateStormService,
            "CREATE",
            &replicas_not_a_number,
            None,
        ),
    ];
    for (name, hook, operation, object, old) in pairs {
        cases.push((
            format!("{name} {} {}", operation.to_lowercase(), hook.operation()),
            hook,
            body(hook, operation, object, old),
        ));
    }
    let mut other_kind: Value =
        serde_json::from_slice(&body(Hook::ValidateRoleSet, "CREATE", &rs, None)).unwrap();
    other_kind["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    cases.push((
        "another kind create validate".into(),
        Hook::ValidateRoleSet,
        serde_json::to_vec(&other_kind).unwrap(),
    ));
    for (name, raw) in [
        ("not json", &b"not json"[..]),
        ("empty object", b"{}"),
        ("not a review", b"{\"apiVersion\":\"v1\",\"kind\":\"Pod\"}"),
        (
            "no request",
            b"{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\"}",
        ),
        ("not utf-8", b"\xff\xfe\x00"),
    ] {
        for hook in [Hook::MutateStormService, Hook::ValidateRoleSet] {
            cases.push((format!("{name} {}", hook.operation()), hook, raw.to_vec()));
        }
    }
    cases
}

/// What an answer means to the API server and to the user.
fn summary(hook: Hook, request: &[u8]) -> Value {
    let Ok(answer) = review(hook, request) else {
        return json!({"http": 400});
    };
    let verdict = answer.verdict;
    let answer: Value = serde_json::from_slice(&answer.json).expect("the answer is JSON");
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = &answer["response"];
    let patched = common::patch_bytes(&answer).map(|bytes| {
        assert_eq!(response["patchType"], "JSONPatch");
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON patch");
        let review: Value = serde_json::from_slice(request).unwrap();
        let mut object = review["request"]["object"].clone();
        json_patch::patch(&mut object, &patch).expect("the patch applies");
        object
    });
    json!({
        "http": 200,
        "verdict": format!("{verdict:?}"),
        "uid": response["uid"],
        "allowed": response["allowed"],
        "code": response.pointer("/status/code"),
        "reason": response.pointer("/status/reason"),
        "message": response.pointer("/status/message"),
        "warnings": response["warnings"],
        "patched": patched,
    })
}

#[test]
fn every_answer_is_the_pinned_one() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    let answers: BTreeMap<String, Value> = corpus()
        .into_iter()
        .map(|(name, hook, request)| (name, summary(hook, &request)))
        .collect();
    if std::env::var("SQUALL_BLESS").as_deref() == Ok("1") {
        let text = serde_json::to_string_pretty(&answers).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
        return;
    }
    let pinned: BTreeMap<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(
        answers.keys().collect::<Vec<_>>(),
        pinned.keys().collect::<Vec<_>>(),
        "the corpus and {GOLDEN} name the same reviews"
    );
    let differing: Vec<String> = answers
        .iter()
        .filter(|(name, answer)| pinned[*name] != **answer)
        .map(|(name, answer)| format!("{name}:\n  pinned: {}\n  now:    {answer}", pinned[name]))
        .collect();
    assert!(
        differing.is_empty(),
        "{} of {} answers changed:\n{}",
        differing.len(),
        answers.len(),
        differing.join("\n")
    );
}
