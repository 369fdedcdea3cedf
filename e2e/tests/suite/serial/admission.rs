//! Disruptive admission tests, run serially with their own operator (before the shared one
//! starts): the negative control (no webhooks, the same invalid objects are admitted —
//! proving the webhooks do the work) and ratcheting (an object admitted while the webhooks
//! were away can still be updated and deleted); a `--local` operator stopped by SIGTERM
//! removes the webhook configurations it registered.

use std::path::PathBuf;

use e2e::operator::Operator;
use e2e::{TestNamespace, client, documents, install_crds, kubectl, workspace_root};
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use serde_json::Value;

/// Violations only the validating webhook catches (not the CRD schema).
const WEBHOOK_ONLY: &[&str] = &[
    "rule01-name-not-dns1035.yaml",
    "rule02-selector-empty.yaml",
    "rule02-selector-mismatch.yaml",
    "rule03-no-template-spec.yaml",
    "rule05-rollout-in-template.yaml",
    "rule06-role-name-not-dns1123.yaml",
    "rule08-budgets-both-zero.yaml",
    "rule10-weight-decreases.yaml",
    "rule10-bad-pause-duration.yaml",
];

fn fixture(name: &str) -> Value {
    let path: PathBuf = workspace_root().join("tests/fixtures/invalid").join(name);
    let mut doc = documents(&path).remove(0);
    doc["metadata"].as_object_mut().unwrap().remove("namespace");
    doc
}

fn apply(ns: &str, object: &Value, dry_run: bool) -> e2e::KubectlOutput {
    let mut args = vec!["apply", "-n", ns, "-f", "-"];
    if dry_run {
        args.push("--dry-run=server");
    }
    kubectl(&args, Some(&object.to_string()))
}

#[tokio::test]
#[ignore = "needs the local control plane (make test); disruptive: run serially"]
async fn without_webhooks_invalid_objects_are_admitted_and_stay_updatable() {
    install_crds();
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let out = kubectl(&["get", kind, "-o", "name"], None);
        assert!(
            out.stdout.trim().is_empty(),
            "expected no webhook configurations, found {}",
            out.stdout
        );
    }
    let client = client().await;
    let ns = TestNamespace::create(&client, "negative").await;

    // Negative control: with no webhooks, every webhook-only violation is admitted.
    for name in WEBHOOK_ONLY {
        let out = apply(ns.name(), &fixture(name), true);
        assert!(
            out.success,
            "{name} must be admitted without webhooks: {}",
            out.stderr
        );
    }
    // One of them really stored, as AIBrix (or a webhook outage) would have let it in.
    let mut legacy = fixture("rule06-role-name-not-dns1123.yaml");
    legacy["metadata"]["name"] = "legacy".into(); // distinct from the fixtures' name

    let out = apply(ns.name(), &legacy, false);
    assert!(out.success, "{}", out.stderr);

    let operator = Operator::start("serial-admission", &[]);
    // --local exempts its own identity (the kubeconfig's user) from the RoleSet webhooks:
    // they would only re-check what its controller wrote.
    let me = kube::Api::<SelfSubjectReview>::all(client.clone())
        .create(&Default::default(), &SelfSubjectReview::default())
        .await
        .expect("a SelfSubjectReview")
        .status
        .and_then(|s| s.user_info?.username)
        .expect("a username");
    let configuration: Value = serde_json::from_str(
        &kubectl(
            &[
                "get",
                "validatingwebhookconfiguration",
                "serial-admission",
                "-o",
                "json",
            ],
            None,
        )
        .stdout,
    )
    .expect("the registered configuration");
    for hook in configuration["webhooks"].as_array().expect("webhooks") {
        let conditions = &hook["matchConditions"];
        if hook["rules"][0]["resources"][0] == "rolesets" {
            assert_eq!(
                conditions[0]["expression"],
                format!("request.userInfo.username != {me:?}"),
                "{hook}"
            );
        } else {
            assert!(
                conditions.is_null(),
                "only RoleSet writes are exempted: {hook}"
            );
        }
    }
    // Positive control: the same objects are now denied by the webhook.
    for name in WEBHOOK_ONLY {
        let out = apply(ns.name(), &fixture(name), true);
        assert!(
            !out.success,
            "{name} must be denied with the webhooks registered"
        );
        assert!(
            out.stderr.contains("vstormservice.squall.dev"),
            "{name}: {}",
            out.stderr
        );
    }
    // Ratcheting: the stored invalid object can be updated (its old violation remains)...
    let mut scaled = legacy.clone();
    scaled["spec"]["replicas"] = 3.into();
    let out = apply(ns.name(), &scaled, false);
    assert!(
        out.success,
        "an update keeping an old violation must be allowed: {}",
        out.stderr
    );
    // ...but not given a new violation...
    let mut worse = scaled.clone();
    worse["spec"]["updateStrategy"] =
        serde_json::json!({"type": "RollingUpdate", "maxSurge": 0, "maxUnavailable": 0});
    let out = apply(ns.name(), &worse, false);
    assert!(
        !out.success && out.stderr.contains("spec.updateStrategy.maxUnavailable"),
        "a new violation must be denied: {}",
        out.stderr
    );
    // ...and it can be deleted.
    let name = legacy["metadata"]["name"].as_str().unwrap();
    let out = kubectl(
        &[
            "delete",
            "stormservice",
            name,
            "-n",
            ns.name(),
            "--wait=true",
            "--timeout=30s",
        ],
        None,
    );
    assert!(out.success, "{}", out.stderr);

    let (connections, violations) =
        e2e::network::connections_of(&[("squall".into(), operator.pid())]);
    assert!(
        connections > 0 && violations.is_empty(),
        "operator connections: {violations:?}"
    );
}

#[tokio::test]
#[ignore = "needs the local control plane (make test); starts its own operator"]
async fn sigterm_removes_the_registered_webhook_configurations() {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use kube::Api;
    install_crds();
    let client = client().await;
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let mut operator = Operator::start("sigterm", &[]);
    // Registered (and Ready: /readyz verified the served certificate against them).
    assert!(mutating.get_opt("sigterm").await.unwrap().is_some());
    assert!(validating.get_opt("sigterm").await.unwrap().is_some());
    let status = operator
        .terminate(std::time::Duration::from_secs(30))
        .expect("the operator exits on SIGTERM");
    assert!(
        status.success(),
        "exit status {status}:\n{}",
        operator.log()
    );
    // Gone before the process exited, by the operator itself (the test's own clean-up runs
    // only when `operator` is dropped, below).
    assert!(
        mutating.get_opt("sigterm").await.unwrap().is_none(),
        "{}",
        operator.log()
    );
    assert!(
        validating.get_opt("sigterm").await.unwrap().is_none(),
        "{}",
        operator.log()
    );
    assert!(operator.log().contains("webhook configurations removed"));
}
