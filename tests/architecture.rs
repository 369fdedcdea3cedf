//! The shape of the code, checked: imports point down (api ← planner ← controller / webhook
//! ← cli), and the design the comments cite is this repository's own `docs/`.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The `crate::<module>` paths a layer's files name (in `use` lines or inline) that belong
/// to `forbidden` modules, as `file:line: text`.
fn reaches(layer: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in rust_files(&root().join("src").join(layer)) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            for module in forbidden {
                let path = format!("crate::{module}");
                let hit = line.match_indices(&path).any(|(at, _)| {
                    // `crate::api` must not match `crate::apiserver`.
                    !line[at + path.len()..].starts_with(|c: char| c == '_' || c.is_alphanumeric())
                });
                if hit {
                    found.push(format!(
                        "{}:{}: {}",
                        file.strip_prefix(root()).unwrap().display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

/// The modules that do I/O or sit above the pure layers.
const ABOVE_PLANNER: [&str; 8] = [
    "controller",
    "webhook",
    "cli",
    "server",
    "admin",
    "client",
    "metrics",
    "main",
];

#[test]
fn the_api_depends_on_nothing_above_it() {
    let mut above = vec!["planner"];
    above.extend(ABOVE_PLANNER);
    let found = reaches("api", &above);
    assert!(found.is_empty(), "api reaches up:\n{}", found.join("\n"));
}

#[test]
fn the_planner_depends_only_on_the_api() {
    let found = reaches("planner", &ABOVE_PLANNER);
    assert!(
        found.is_empty(),
        "planner reaches up:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_sees_a_reach_up() {
    // The scan itself finds paths: api names its own modules as `crate::api::…`.
    let found = reaches("api", &["api"]);
    assert!(
        !found.is_empty(),
        "api's own `crate::api` paths are visible to the scan"
    );
}
