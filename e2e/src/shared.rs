//! Locating the workspace and the shared design folder, and reading manifests.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ lives in the workspace root")
        .to_path_buf()
}

/// The shared design folder (`SQUALL_SHARED_DIR`, default `<workspace>/../shared`); `None`
/// (with a message) when absent, unless `REQUIRE_SHARED=1`, which makes it a failure.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("SQUALL_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared"));
    if dir.join("conformance").is_dir() {
        return Some(dir);
    }
    let message = format!(
        "{} has no conformance/ folder; set SQUALL_SHARED_DIR to the shared design folder",
        dir.display()
    );
    assert!(
        std::env::var("REQUIRE_SHARED").as_deref() != Ok("1"),
        "REQUIRE_SHARED=1: {message}"
    );
    eprintln!("skipping: {message}");
    None
}

/// The non-empty documents of a multi-document YAML file.
pub fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("{}: not YAML: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}
