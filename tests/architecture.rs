//! The shape of the code, checked: imports point down (api ← admission, planner ← controller
//! / webhook ← cli), no folder's modules import each other in a circle, and the design the
//! comments cite is this repository's own `docs/`.

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
    let mut above = vec!["planner", "admission"];
    above.extend(ABOVE_PLANNER);
    let found = reaches("api", &above);
    assert!(found.is_empty(), "api reaches up:\n{}", found.join("\n"));
}

#[test]
fn admission_depends_only_on_the_api() {
    // The rules judge an object; they never decide a rollout nor do I/O.
    let mut above = vec!["planner"];
    above.extend(ABOVE_PLANNER);
    let found = reaches("admission", &above);
    assert!(
        found.is_empty(),
        "admission reaches up:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_planner_depends_only_on_the_api() {
    // Not on admission either: a controller validates before it asks the planner.
    let mut above = vec!["admission"];
    above.extend(ABOVE_PLANNER);
    let found = reaches("planner", &above);
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
    // A section sign cites a numbered section of a document this repository does not hold
    // (SPEC.md, AIBRIX-REFERENCE.md, STACK.md): a reader of the repository cannot follow it.
    // Spelled as an escape, so this file holds none itself.
    let section_sign = '\u{a7}';
    let mut found = Vec::new();
    for file in repository_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            if line.contains(section_sign) {
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

/// A module's own code, without its comments and its `#[cfg(test)]` module: what it needs
/// to build, as opposed to what it mentions or what its tests reach for.
fn production_code(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let code = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of each item a `use` group (or a single path) names: `a::b` and
/// `{a::b, c, d::{e}}` give `a`, then `a`, `c`, `d`.
fn first_segments(after: &str) -> Vec<String> {
    let ident = |text: &str| -> String {
        text.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let Some(group) = after.strip_prefix('{') else {
        return vec![ident(after)];
    };
    let mut segments = Vec::new();
    let mut depth = 0;
    let mut start = true;
    for (at, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => start = true,
            c if start && !c.is_whitespace() => {
                segments.push(ident(&group[at..]));
                start = false;
            }
            _ => {}
        }
    }
    segments
}

/// The modules of one folder (`src/<folder>`: its files but the entry, and its sub-folders)
/// and, for each, the siblings its production code names (`super::x` in a file of the
/// folder, `crate::<folder>::x` anywhere in it).
fn sibling_imports(folder: &str) -> std::collections::BTreeMap<String, Vec<String>> {
    let dir = root().join("src").join(folder);
    let mut modules = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let text: Vec<String> = rust_files(&path)
                .iter()
                .map(|f| production_code(f))
                .collect();
            // A folder's `mod.rs` is its module: its `super::` is this folder too.
            let entry = path.join("mod.rs");
            let entry = if entry.is_file() {
                production_code(&entry)
            } else {
                String::new()
            };
            modules.insert(name, (text.join("\n"), entry));
        } else if path.extension().is_some_and(|e| e == "rs")
            && !["mod", "lib", "main"].contains(&name.as_str())
        {
            let code = production_code(&path);
            modules.insert(name, (code.clone(), code));
        }
    }
    let prefix = if folder.is_empty() {
        "crate::".to_owned()
    } else {
        format!("crate::{}::", folder.replace('/', "::"))
    };
    let mut edges = std::collections::BTreeMap::new();
    for (name, (code, entry)) in &modules {
        let after = |code: &'_ str, p: &str| {
            code.match_indices(p)
                .map(|(at, _)| at + p.len())
                .flat_map(|at| first_segments(&code[at..]))
                .collect::<Vec<_>>()
        };
        let mut named: Vec<String> = after(code, &prefix)
            .into_iter()
            .chain(after(entry, "super::"))
            .filter(|sibling| sibling != name && modules.contains_key(sibling))
            .collect();
        named.sort();
        named.dedup();
        edges.insert(name.clone(), named);
    }
    edges
}

/// One circle of `edges`, as the modules along it, when there is one.
fn circle(edges: &std::collections::BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    // Depth-first search; a module met again while still on the path closes a circle.
    fn visit<'a>(
        module: &'a str,
        edges: &'a std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<&'a str>,
        done: &mut std::collections::BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| *m == module) {
            let mut found: Vec<String> = path[at..].iter().map(|m| (*m).to_owned()).collect();
            found.push(module.to_owned());
            return Some(found);
        }
        if !done.insert(module) {
            return None;
        }
        path.push(module);
        for next in edges.get(module).into_iter().flatten() {
            if let Some(found) = visit(next, edges, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = std::collections::BTreeSet::new();
    edges
        .keys()
        .find_map(|module| visit(module, edges, &mut Vec::new(), &mut done))
}

/// `src` and every folder under it, as paths relative to `src` (`""` for `src` itself).
fn source_folders() -> Vec<String> {
    let src = root().join("src");
    let mut folders = vec![String::new()];
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                let relative = path
                    .strip_prefix(&src)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                folders.push(relative);
                pending.push(path);
            }
        }
    }
    folders.sort();
    folders
}

#[test]
fn no_folders_modules_import_each_other_in_a_circle() {
    let circles: Vec<String> = source_folders()
        .iter()
        .filter_map(|folder| {
            circle(&sibling_imports(folder)).map(|c| format!("src/{folder}: {}", c.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "modules of one folder import each other in a circle (move what both need below \
         both):\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_check_sees_a_circle() {
    let edges = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, to)| (m.to_owned(), to.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        circle(&edges),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    assert_eq!(
        first_segments("{a::b, c, d::{e, f}}; rest"),
        ["a", "c", "d"].map(String::from)
    );
    // A circle through `super::` paths, as the planner had (adoption <-> roleset_pass), is
    // seen in the real tree's shape: every folder's scan finds its own sibling imports, from
    // a file and from a sub-folder's `mod.rs`.
    let imports = |folder: &str, module: &str, sibling: &str| {
        sibling_imports(folder)
            .get(module)
            .is_some_and(|to| to.contains(&sibling.to_owned()))
    };
    assert!(
        imports("planner/roleset", "adoption", "children"),
        "planner/roleset/adoption.rs's `super::children` import is visible to the scan"
    );
    assert!(
        imports("planner", "roleset", "render"),
        "planner/roleset/mod.rs's `super::render` import is visible to the scan"
    );
}

#[test]
fn the_readme_layout_table_names_every_source_folder() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let rows: Vec<&str> = readme
        .lines()
        .filter(|line| line.starts_with("| `src/"))
        .collect();
    let listed = |folder: &str| {
        rows.iter()
            .any(|row| row.contains(&format!("`src/{folder}/`")))
    };
    let missing: Vec<String> = source_folders()
        .into_iter()
        .filter(|folder| !folder.is_empty() && !listed(folder))
        .collect();
    assert!(
        missing.is_empty(),
        "README's repository layout lacks a row for src/{missing:?}"
    );
    // And every folder a row names is there.
    let gone: Vec<&str> = rows
        .iter()
        .flat_map(|row| row.split('`'))
        .filter(|cell| cell.starts_with("src/") && cell.ends_with('/'))
        .filter(|folder| !root().join(folder).is_dir())
        .collect();
    assert!(
        gone.is_empty(),
        "README names folders that do not exist: {gone:?}"
    );
}

#[test]
fn the_controllers_read_the_wall_clock_in_one_place() {
    // A pass that read the clock twice could stamp a status with one time and decide by
    // another; the reconcile reads it once (`controller::wall_clock`) and passes it down.
    let readers = ["Timestamp::now()", "SystemTime::now()", "Utc::now()"];
    let mut found = Vec::new();
    for file in rust_files(&root().join("src").join("controller")) {
        let code = production_code(&file);
        for line in code.lines() {
            if readers.iter().any(|reader| line.contains(reader)) {
                found.push(format!(
                    "{}: {}",
                    file.strip_prefix(root()).unwrap().display(),
                    line.trim()
                ));
            }
        }
    }
    assert_eq!(
        found,
        ["src/controller/mod.rs: k8s_openapi::jiff::Timestamp::now()"],
        "the controllers read the wall clock only in `wall_clock`"
    );
}

/// The functions of `file`'s production code longer than `limit` lines, as `name (lines)`. A
/// function ends at the first `}` at the indentation of its `fn` line (rustfmt's layout); a
/// declaration without a body, or a body closed on its last signature line, is short.
fn functions_longer_than(file: &Path, limit: usize) -> Vec<String> {
    let code = production_code(file);
    let lines: Vec<&str> = code.lines().collect();
    let mut long = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let signature = [
            "fn ",
            "pub fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "async fn ",
            "pub async fn ",
            "pub(crate) async fn ",
            "pub(super) async fn ",
            "const fn ",
            "pub const fn ",
        ];
        let Some(rest) = signature.iter().find_map(|s| trimmed.strip_prefix(s)) else {
            continue;
        };
        let indent = &line[..line.len() - trimmed.len()];
        let Some(opens) = lines[at..].iter().position(|l| {
            l.trim_end().ends_with('{')
                || l.trim_end().ends_with(';')
                || l.trim_end().ends_with('}')
        }) else {
            continue;
        };
        if !lines[at + opens].trim_end().ends_with('{') {
            continue;
        }
        let close = format!("{indent}}}");
        let Some(end) = lines[at + opens + 1..].iter().position(|l| *l == close) else {
            continue;
        };
        let length = opens + end + 2;
        if length > limit {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            long.push(format!("{name} ({length} lines)"));
        }
    }
    long
}

#[test]
fn no_planner_function_is_over_150_lines() {
    // A decision longer than this is several decisions: name them (docs/architecture.md).
    const LIMIT: usize = 150;
    let long: Vec<String> = rust_files(&root().join("src").join("planner"))
        .iter()
        .flat_map(|file| {
            functions_longer_than(file, LIMIT)
                .into_iter()
                .map(move |f| format!("{}: {f}", file.strip_prefix(root()).unwrap().display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "planner functions over {LIMIT} lines: {long:#?}"
    );
}

#[test]
fn the_length_check_sees_a_long_function() {
    let dir = std::env::temp_dir().join(format!("squall-architecture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("long.rs");
    let body = "    let x = 1;\n".repeat(200);
    std::fs::write(
        &file,
        format!("fn short() -> u32 {{ 1 }}\n\npub fn long(\n    a: u32,\n) -> u32 {{\n{body}    a\n}}\n\nfn after() {{}}\n"),
    )
    .unwrap();
    let found = functions_longer_than(&file, 150);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found, ["long (205 lines)"]);
}

#[test]
fn no_folder_holds_more_than_about_4000_lines_of_its_own() {
    // Past this a folder is several concerns: give them sub-folders. "About": a folder just
    // over it is named in the assertion, and the split waits for its next concern.
    const LIMIT: usize = 4_500;
    let crowded: Vec<String> = source_folders()
        .into_iter()
        .filter_map(|folder| {
            let dir = root().join("src").join(&folder);
            let lines: usize = std::fs::read_dir(&dir)
                .unwrap()
                .map(|entry| entry.unwrap().path())
                .filter(|path| path.extension().is_some_and(|e| e == "rs"))
                .map(|path| std::fs::read_to_string(path).unwrap().lines().count())
                .sum();
            (lines > LIMIT).then(|| format!("src/{folder}: {lines} lines"))
        })
        .collect();
    assert!(
        crowded.is_empty(),
        "folders over {LIMIT} lines of their own files: {crowded:?}"
    );
}

#[test]
fn each_controller_says_its_name_once() {
    // A controller's name is its `Owner::CONTROLLER`; its writes, events and metrics take it
    // from its context, never from a string passed along.
    let names = ["\"stormservice\"", "\"roleset\"", "\"podset\""];
    let mut found = Vec::new();
    for file in rust_files(&root().join("src").join("controller")) {
        for (number, line) in production_code(&file).lines().enumerate() {
            if names.iter().any(|n| line.contains(n))
                && !line.trim_start().starts_with("const CONTROLLER")
            {
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
        "controller names written outside Owner::CONTROLLER: {found:#?}"
    );
}

#[test]
fn the_metrics_know_nothing_of_who_reports_to_them() {
    // The webhooks, controllers and servers record into the metrics; the metrics name the
    // webhooks from admission's own list (`admission::hook`), never from the server's code.
    let text = production_code(&root().join("src").join("metrics.rs"));
    let reached: Vec<&str> = [
        "crate::webhook",
        "crate::controller",
        "crate::server",
        "crate::cli",
        "crate::admin",
    ]
    .into_iter()
    .filter(|module| text.contains(module))
    .collect();
    assert!(reached.is_empty(), "src/metrics.rs imports {reached:?}");
}

#[test]
fn the_fast_path_reader_has_one_entry() {
    // The scanner's shortcuts are sound only where its caller falls back to serde when it
    // gives up: `scan::review` (and what it returns) is all that leaves the module.
    let text = production_code(&root().join("src").join("admission").join("scan.rs"));
    let public: Vec<&str> = text
        .lines()
        .map(str::trim_start)
        .filter(|line| line.starts_with("pub ") || line.starts_with("pub("))
        .collect();
    let entry = [
        "pub struct Scanned<'a> {",
        "pub uid: &'a str,",
        "pub kind: &'a str,",
        "pub namespace: &'a str,",
        "pub name: &'a str,",
        "pub view: View<'a>,",
        "pub fn review<'a>(hook: Hook, body: &'a str) -> Option<Scanned<'a>> {",
    ];
    let others: Vec<&&str> = public.iter().filter(|l| !entry.contains(l)).collect();
    assert!(
        others.is_empty(),
        "src/admission/scan.rs makes more than its entry public: {others:#?}"
    );
    assert!(
        public.contains(&entry[6]),
        "src/admission/scan.rs lost its entry `review`: {public:#?}"
    );
}
