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

/// Every text file of the repository that people read or the build uses (not build output).
fn repository_files() -> Vec<PathBuf> {
    let skip = ["target", ".git", "corpus", "artifacts"];
    let mut files = Vec::new();
    let mut pending = vec![root()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !skip.contains(&name.as_str()) {
                    pending.push(path);
                }
            } else if std::fs::read_to_string(&path).is_ok() {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The design documents every newcomer gets, one per topic.
const DOCS: [&str; 5] = [
    "architecture.md",
    "rollouts.md",
    "admission.md",
    "certificates.md",
    "aibrix-compatibility.md",
];

#[test]
fn comments_cite_this_repositorys_docs_not_documents_it_does_not_hold() {
    // Spelled in two pieces, so this file does not cite them itself.
    let foreign = [concat!("SPEC", " §"), concat!("AIBRIX-REFERENCE", " §")];
    let mut found = Vec::new();
    for file in repository_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            if foreign.iter().any(|f| line.contains(f)) {
                found.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(root()).unwrap().display(),
                    number + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/ instead:\n{}",
        found.join("\n")
    );
}

/// GitHub's anchor for a Markdown heading: lower case, spaces to '-', punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn every_cited_docs_section_exists() {
    let mut anchors = std::collections::BTreeMap::new();
    for doc in DOCS {
        let text = std::fs::read_to_string(root().join("docs").join(doc))
            .unwrap_or_else(|e| panic!("docs/{doc}: {e}"));
        let headings: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .map(|h| anchor(h.trim_start_matches('#')))
            .collect();
        assert!(headings.len() > 3, "docs/{doc} has sections");
        anchors.insert(doc.to_string(), headings);
    }
    let mut broken = Vec::new();
    let mut cited = 0;
    for file in repository_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (doc, section) in citations(&text) {
            cited += 1;
            let ok = anchors
                .get(&doc)
                .is_some_and(|headings| section.as_ref().is_none_or(|s| headings.contains(s)));
            if !ok {
                broken.push(format!(
                    "{}: docs/{doc}{}",
                    file.strip_prefix(root()).unwrap().display(),
                    section.map(|s| format!("#{s}")).unwrap_or_default()
                ));
            }
        }
    }
    assert!(cited > 50, "only {cited} citations of docs/ found");
    assert!(
        broken.is_empty(),
        "citations of missing sections:\n{}",
        broken.join("\n")
    );
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains("| `docs/` |"),
        "the README's layout table lists docs/"
    );
}

/// The `docs/<file>.md[#section]` citations in `text`.
fn citations(text: &str) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    for (at, _) in text.match_indices("docs/") {
        if at > 0 && text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // another path ending in docs/
        }
        let rest = &text[at + "docs/".len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || "-_.#".contains(c)))
            .unwrap_or(rest.len());
        let cited = rest[..end].trim_end_matches('.');
        let Some(md) = cited.find(".md") else {
            continue; // the directory itself
        };
        let doc = cited[..md + 3].to_string();
        let section = cited[md + 3..].strip_prefix('#').map(str::to_string);
        found.push((doc, section));
    }
    found
}
