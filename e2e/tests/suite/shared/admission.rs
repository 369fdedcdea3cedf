//! The admission webhooks at `kubectl apply` time, served by the shared operator
//! (`e2e/operator.sh start`): defaults are stored, every webhook rule of docs/admission.md#rules
//! denies with the webhook's name and the field path, warnings reach kubectl.

use e2e::fixtures::{SCHEMA_ENFORCED, fixture_object, header, invalid_fixtures as fixtures};
use e2e::{TestNamespace, client, install_crds, kubectl};
use kube::api::Api;
use serde_json::json;
use squall::api::StormService;

fn require_shared_operator() {
    let out = kubectl(&["get", "validatingwebhookconfiguration", "squall"], None);
    assert!(
        out.success,
        "the shared operator's webhooks are not registered (run `e2e/operator.sh start`): {}",
        out.stderr
    );
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn webhook_defaults_are_stored_and_idempotent() {
    install_crds();
    require_shared_operator();
    let client = client().await;
    let ns = TestNamespace::create(&client, "defaults").await;
    let manifest = json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "defaults"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "defaults"}},
            "updateStrategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}},
            "template": {"metadata": {"labels": {"app": "defaults"}}, "spec": {"roles": [
                {"name": "prefill", "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}
            ]}}
        }
    })
    .to_string();
    let out = e2e::apply(ns.name(), &manifest);
    assert!(out.success, "{}", out.stderr);

    let api: Api<StormService> = Api::namespaced(client, ns.name());
    let stored = api.get("defaults").await.unwrap();
    let strategy = stored.spec.update_strategy.clone().unwrap();
    let steps = strategy.canary.clone().unwrap().steps.unwrap();
    assert_eq!(
        steps.last().unwrap().set_weight,
        Some(100),
        "a final setWeight: 100 is appended"
    );
    assert_eq!(steps.len(), 3);
    assert_eq!(
        serde_json::to_value(&strategy).unwrap(),
        json!({"type": "RollingUpdate", "maxUnavailable": 1, "maxSurge": 0,
               "canary": {"steps": [{"setWeight": 50}, {"pause": {}}, {"setWeight": 100}]}})
    );
    let role = &stored
        .spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .roles
        .as_ref()
        .unwrap()[0];
    assert_eq!(role.upgrade_order, Some(0));
    assert_eq!(role.replicas, Some(1));

    // Re-applying the same manifest changes nothing.
    let out = e2e::apply(ns.name(), &manifest);
    assert!(out.success, "{}", out.stderr);
    let again = api.get("defaults").await.unwrap();
    // The controller writes status and its finalizer meanwhile; the spec is what must not
    // move.
    assert_eq!(again.metadata.generation, stored.metadata.generation);
    assert_eq!(again.spec, stored.spec);

    // Replaying the stored object through the mutate path gives an empty patch.
    let mut replay = serde_json::to_value(&again).unwrap();
    replay["apiVersion"] = json!("orchestration.aibrix.ai/v1alpha1");
    replay["kind"] = json!("StormService");
    let mutation = squall::webhook::mutation(&replay).unwrap();
    assert_eq!(
        mutation.operations,
        0,
        "non-empty patch on replay: {}",
        String::from_utf8_lossy(&mutation.patch)
    );
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn every_webhook_rule_is_enforced_at_apply_time() {
    install_crds();
    require_shared_operator();
    let client = client().await;
    let ns = TestNamespace::create(&client, "rules").await;
    let mut checked = 0;
    for path in fixtures() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let errors = header(&path, "# expect-error:");
        let warnings = header(&path, "# expect-warning:");
        let object = fixture_object(&path);
        let out = kubectl(
            &["apply", "-n", ns.name(), "-f", "-"],
            Some(&object.to_string()),
        );
        if errors.is_empty() {
            assert!(
                out.success,
                "{name}: a warning-only object must be admitted: {}",
                out.stderr
            );
            for warning in &warnings {
                assert!(
                    out.stderr.contains("Warning: ") && out.stderr.contains(warning.as_str()),
                    "{name}: kubectl did not show the warning {warning:?}: {}",
                    out.stderr
                );
            }
        } else {
            assert!(!out.success, "{name}: admitted, expected a denial");
            if !SCHEMA_ENFORCED.contains(&name.as_str()) {
                let webhook = format!(
                    "admission webhook \"v{}.squall.dev\" denied the request",
                    object["kind"].as_str().unwrap().to_lowercase()
                );
                assert!(
                    out.stderr.contains(&webhook),
                    "{name}: not denied by the webhook: {}",
                    out.stderr
                );
            }
            for field in &errors {
                // The schema names a duplicate list-map entry by its index, not its key field.
                let parent = field.rsplit_once('.').map_or(field.as_str(), |(p, _)| p);
                let named = out.stderr.contains(field.as_str())
                    || (SCHEMA_ENFORCED.contains(&name.as_str()) && out.stderr.contains(parent));
                assert!(
                    named,
                    "{name}: the denial does not name {field}: {}",
                    out.stderr
                );
            }
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} fixtures");
}
