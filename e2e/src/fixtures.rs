//! The invalid-object fixtures of `tests/fixtures/invalid/` (one per rule of
//! docs/admission.md#rules): each file's header names the fields its errors and warnings must
//! mention.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::shared::{documents, workspace_root};

/// Fixtures whose violation the CRD schema already rejects (before the validating webhook
/// runs): enums, bounds, `maxProperties`, `maxItems`, list-map key uniqueness, and the scale
/// subresource's non-negative `spec.replicas`.
pub const SCHEMA_ENFORCED: &[&str] = &[
    "rule07-negative-replicas.yaml",
    "rule06-role-name-duplicate.yaml",
    "rule07-negative-upgrade-order.yaml",
    "rule07-pod-group-size.yaml",
    "rule09-two-schedulers.yaml",
    "rule09-unknown-role-strategy.yaml",
    "rule09-unknown-roleset-strategy.yaml",
    "rule09-unknown-stormservice-strategy.yaml",
    "rule10-weight-out-of-range.yaml",
    "rule13-pairing-one-role.yaml",
    "limit-replicas-too-many.yaml",
    "limit-role-replicas-too-many.yaml",
    "limit-too-many-containers.yaml",
    "limit-too-many-roles.yaml",
    "limit-min-ready-seconds.yaml",
    "limit-abort-scale-down-delay.yaml",
];

/// Every fixture file, sorted.
pub fn invalid_fixtures() -> Vec<PathBuf> {
    let dir = workspace_root().join("tests/fixtures/invalid");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

/// The values of the fixture's header lines starting with `prefix` (`# expect-error:`,
/// `# expect-warning:`).
pub fn header(path: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(|s| s.trim().to_string())
        .collect()
}

/// The fixture's object without its namespace, as JSON.
pub fn fixture_object(path: &Path) -> Value {
    let mut doc = documents(path).remove(0);
    doc["metadata"].as_object_mut().unwrap().remove("namespace");
    doc
}

/// Whether the CRD schema rejects the fixture before any webhook runs.
pub fn schema_enforced(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    SCHEMA_ENFORCED.contains(&name.as_ref())
}
