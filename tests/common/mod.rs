#![allow(dead_code)] // each test binary uses a subset of the helpers
//! Helpers shared by the integration tests: locating `../shared` and reading manifests.

use std::path::PathBuf;

use serde_json::Value;

/// The shared design folder (`SQUALL_SHARED_DIR`, default `<workspace>/../shared`).
///
/// When it is absent the calling test is skipped with a message, unless `REQUIRE_SHARED=1`
/// (set by `.ci/run`), in which case the test fails.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SQUALL_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"));
    if dir.join("conformance").is_dir() {
        return Some(dir);
    }
    let message = format!(
        "{} has no conformance/ folder; set SQUALL_SHARED_DIR to the shared design folder",
        dir.display()
    );
    if std::env::var("REQUIRE_SHARED").as_deref() == Ok("1") {
        panic!("REQUIRE_SHARED=1: {message}");
    }
    eprintln!("skipping: {message}");
    None
}

/// Every `*.yaml` file of a folder, sorted.
pub fn yaml_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("readable dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{} has no YAML files", dir.display());
    files
}

/// The non-empty documents of a multi-document YAML file.
pub fn documents(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// The `response.patch` bytes of an AdmissionReview answer: base64, the API server's wire
/// format for bytes (a JSON array of numbers, which it reads too, is accepted here as well).
pub fn patch_bytes(answer: &Value) -> Option<Vec<u8>> {
    use base64::Engine;
    match &answer["response"]["patch"] {
        Value::Null => None,
        Value::String(text) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .expect("a base64 patch"),
        ),
        Value::Array(bytes) => Some(
            bytes
                .iter()
                .map(|b| u8::try_from(b.as_u64().expect("a byte")).expect("a byte"))
                .collect(),
        ),
        other => panic!("a patch of {other}"),
    }
}
