//! The committed CRD YAML (`manifests/crds/`, the chart's `templates/crds/`) must equal what
//! `squall crds` generates. Regenerate with `UPDATE_CRDS=1 cargo test --test crd_drift`.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check(path: &Path, generated: &str) {
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::create_dir_all(path.parent().expect("has a parent")).expect("create dir");
        std::fs::write(path, generated).expect("write CRD");
    }
    let committed = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run `UPDATE_CRDS=1 cargo test --test crd_drift` and commit",
            path.display()
        )
    });
    assert!(
        committed == generated,
        "{} is stale; run `UPDATE_CRDS=1 cargo test --test crd_drift` and commit",
        path.display()
    );
}

#[test]
fn manifests_crds_match_generated() {
    check(
        &root().join("manifests/crds/crds.yaml"),
        &squall::crds_yaml(),
    );
}

#[test]
fn chart_crd_templates_match_generated() {
    let crds = squall::all_crds();
    assert_eq!(crds.len(), 3);
    for crd in &crds {
        let name = crd.metadata.name.as_deref().expect("CRDs are named");
        // Descriptions name the analysis query placeholders (`{{role}}`): Helm must print
        // them, not run them.
        let yaml = squall::crd_yaml(crd).replace("{{", r#"{{ "{{" }}"#);
        let template = format!("{{{{- if .Values.crds.install }}}}\n{yaml}{{{{- end }}}}\n");
        check(
            &root().join(format!("charts/squall/templates/crds/{name}.yaml")),
            &template,
        );
    }
}

#[test]
fn crds_are_kept_on_helm_uninstall() {
    for crd in squall::all_crds() {
        let annotations = crd.metadata.annotations.unwrap_or_default();
        assert_eq!(
            annotations
                .get("helm.sh/resource-policy")
                .map(String::as_str),
            Some("keep"),
            "{:?}",
            crd.metadata.name
        );
    }
}

#[test]
fn no_crds_directory_in_the_chart() {
    // Helm never upgrades `crds/`; squall's CRDs are templates gated by `crds.install`.
    assert!(!root().join("charts/squall/crds").exists());
}

/// Every field has a description, so `kubectl explain` documents the whole API.
#[test]
fn every_field_is_documented() {
    fn walk(schema: &serde_json::Value, path: &str, missing: &mut Vec<String>) {
        if let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) {
            for (key, child) in properties {
                let child_path = format!("{path}.{key}");
                if child
                    .get("description")
                    .and_then(|d| d.as_str())
                    .is_none_or(str::is_empty)
                {
                    missing.push(child_path.clone());
                }
                walk(child, &child_path, missing);
            }
        }
        for nested in ["items", "additionalProperties"] {
            if let Some(child) = schema.get(nested).filter(|c| c.is_object()) {
                walk(child, &format!("{path}[]"), missing);
            }
        }
    }
    for crd in squall::all_crds() {
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let mut missing = Vec::new();
        walk(&schema["openAPIV3Schema"], "", &mut missing);
        assert!(
            missing.is_empty(),
            "{:?}: undocumented fields {missing:?}",
            crd.metadata.name
        );
    }
}
