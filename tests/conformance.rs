//! Conformance with AIBrix (docs/aibrix-compatibility.md), on `../shared/conformance/`:
//! - every StormService / RoleSet / PodSet sample deserializes and re-serializes without
//!   losing or renaming a field;
//! - squall's CRD schemas accept everything AIBrix's accept, for squall-owned fields and the
//!   embedded core/v1 subtrees, except the intended differences listed (and justified) below;
//! - every sample is valid, before and after defaulting, and defaulting is idempotent.

mod common;

use std::collections::BTreeSet;

use serde_json::{Value, json};
use squall::admission::validation::{OwnedKind, validate_object};
use squall::api::{PodSet, RoleSet, StormService};

use common::{documents, shared_dir, yaml_files};

/// Every squall-kind document of the upstream samples, with its file name.
fn samples() -> Option<Vec<(String, Value)>> {
    let dir = shared_dir()?.join("conformance/aibrix-samples");
    let mut out = Vec::new();
    for file in yaml_files(&dir) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (i, doc) in documents(&file).into_iter().enumerate() {
            if OwnedKind::of(&doc).is_some() {
                out.push((format!("{name}#{i}"), doc));
            }
        }
    }
    assert!(
        out.len() >= 15,
        "expected the upstream samples, found {}",
        out.len()
    );
    Some(out)
}

fn roundtrip(doc: &Value) -> Result<Value, String> {
    fn through<T: serde::de::DeserializeOwned + serde::Serialize>(
        doc: &Value,
    ) -> Result<Value, String> {
        let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    match OwnedKind::of(doc).expect("owned kind") {
        OwnedKind::StormService => through::<StormService>(doc),
        OwnedKind::RoleSet => through::<RoleSet>(doc),
        OwnedKind::PodSet => through::<PodSet>(doc),
    }
}

/// Resource quantities written as YAML numbers (`nvidia.com/gpu: 1`) come back as strings
/// (`"1"`): the same quantity, so the comparison accepts exactly that change inside these maps.
const QUANTITY_MAPS: &[&str] = &["limits", "requests", "overhead", "minResources"];

fn compare(original: &Value, back: &Value, path: &str, diffs: &mut Vec<String>) {
    compare_at(original, back, path, "", diffs);
}

/// `key` is this value's own key in its parent map (keys may contain dots, e.g.
/// `nvidia.com/gpu`, so it is not recovered from `path`).
fn compare_at(original: &Value, back: &Value, path: &str, key: &str, diffs: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => {
            for child_key in a.keys().chain(b.keys()).collect::<BTreeSet<_>>() {
                let child = format!("{path}.{child_key}");
                match (a.get(child_key), b.get(child_key)) {
                    (Some(x), Some(y)) if QUANTITY_MAPS.contains(&key) => {
                        let same_quantity = matches!((x, y), (Value::Number(n), Value::String(s)) if n.to_string() == *s);
                        if !same_quantity && x != y {
                            diffs.push(format!("{child}: {x} became {y}"));
                        }
                    }
                    (Some(x), Some(y)) => compare_at(x, y, &child, child_key, diffs),
                    (Some(_), None) => diffs.push(format!("{child}: lost")),
                    (None, Some(_)) => diffs.push(format!("{child}: added")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                compare_at(x, y, &format!("{path}[{i}]"), "", diffs);
            }
        }
        (a, b) if a == b => {}
        (a, b) => diffs.push(format!("{path}: {a} became {b}")),
    }
}

#[test]
fn samples_roundtrip_without_losing_or_renaming_fields() {
    let Some(samples) = samples() else { return };
    let mut failures = Vec::new();
    for (name, doc) in &samples {
        match roundtrip(doc) {
            Ok(back) => {
                let mut diffs = Vec::new();
                compare(doc, &back, "", &mut diffs);
                failures.extend(diffs.into_iter().map(|d| format!("{name}: {d}")));
            }
            Err(e) => failures.push(format!("{name}: does not deserialize: {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "round-trip differences:\n{}",
        failures.join("\n")
    );
}

#[test]
fn samples_are_valid_before_and_after_defaulting() {
    let Some(samples) = samples() else { return };
    for (name, doc) in &samples {
        let report = validate_object(doc, None).expect("owned kind");
        assert!(report.is_valid(), "{name}: {}", report.error_message());

        let mut defaulted = doc.clone();
        squall::admission::defaulting::apply_defaults(&mut defaulted)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let report = validate_object(&defaulted, None).expect("owned kind");
        assert!(
            report.is_valid(),
            "{name} (defaulted): {}",
            report.error_message()
        );

        let mut twice = defaulted.clone();
        squall::admission::defaulting::apply_defaults(&mut twice).expect("defaulted object parses");
        assert_eq!(twice, defaulted, "{name}: defaulting is not idempotent");
        assert!(
            squall::webhook::mutation(&defaulted)
                .expect("parses")
                .operations
                == 0,
            "{name}: a second mutation must yield an empty patch"
        );
    }
}

#[test]
fn lint_accepts_every_sample() {
    let Some(dir) = shared_dir() else { return };
    for file in yaml_files(&dir.join("conformance/aibrix-samples")) {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_squall"))
            .args(["lint", "-f"])
            .arg(&file)
            .output()
            .expect("run squall lint");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: squall lint exited {:?}:\n{stdout}{}",
            file.display(),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(": valid"),
            "{}: nothing validated:\n{stdout}",
            file.display()
        );
    }
}

// ---------------------------------------------------------------------------------------
// Schema superset

/// Intended differences where squall's schema is stricter than AIBrix's, with the reason.
/// Paths use `[]` for list items and `{}` for map values.
const INTENDED: &[(&str, &str, &str)] = &[
    (
        "podsets:status.phase",
        "enum where AIBrix has none",
        "status is written by the controller; AIBrix's PodSet controller writes only these \
         four phases too",
    ),
    (
        "*",
        "required [spec]",
        "kube-derive requires `spec`; an object without one has nothing to reconcile (and a \
         StormService without `spec.selector` / `spec.template` was already invalid upstream)",
    ),
    (
        "stormservices:spec.template.spec.roles",
        "x-kubernetes-list-type map",
        "docs/aibrix-compatibility.md: roles are a list map keyed by name so server-side apply merges them; \
         duplicate role names are invalid (docs/admission.md#rules rule 6)",
    ),
    (
        "rolesets:spec.roles",
        "x-kubernetes-list-type map",
        "docs/aibrix-compatibility.md: roles are a list map keyed by name; duplicates are invalid (rule 6)",
    ),
    (
        "stormservices:spec.template.spec.roles[]",
        "required [name]",
        "a list-map key must be required; unnamed roles are invalid (docs/admission.md#rules rule 6)",
    ),
    (
        "rolesets:spec.roles[]",
        "required [name]",
        "a list-map key must be required; unnamed roles are invalid (docs/admission.md#rules rule 6)",
    ),
    (
        "rolesets:spec.roles",
        "maxItems 32 where AIBrix has none",
        "at most 32 roles (README \"Limits\"): work and patches per object stay bounded",
    ),
    (
        "rolesets:spec.roles[].replicas",
        "maximum 10000 where AIBrix has none",
        "the replica bound (src/api/limits.rs, README \"Limits\"): one tenant's count can never exhaust the operator",
    ),
    (
        "rolesets:spec.roles[].template.spec.containers",
        "maxItems 64 where AIBrix has none",
        "at most 64 containers per role template (README \"Limits\")",
    ),
    (
        "rolesets:spec.roles[].template.spec.initContainers",
        "maxItems 64 where AIBrix has none",
        "at most 64 containers per role template (README \"Limits\")",
    ),
    (
        "stormservices:spec.replicas",
        "maximum 10000 where AIBrix has none",
        "the replica bound (src/api/limits.rs, README \"Limits\"): one tenant's count can never exhaust the operator",
    ),
    (
        "stormservices:spec.template.spec.roles",
        "maxItems 32 where AIBrix has none",
        "at most 32 roles (README \"Limits\"): work and patches per object stay bounded",
    ),
    (
        "stormservices:spec.template.spec.roles[].replicas",
        "maximum 10000 where AIBrix has none",
        "the replica bound (src/api/limits.rs, README \"Limits\"): one tenant's count can never exhaust the operator",
    ),
    (
        "stormservices:spec.template.spec.roles[].template.spec.containers",
        "maxItems 64 where AIBrix has none",
        "at most 64 containers per role template (README \"Limits\")",
    ),
    (
        "stormservices:spec.template.spec.roles[].template.spec.initContainers",
        "maxItems 64 where AIBrix has none",
        "at most 64 containers per role template (README \"Limits\")",
    ),
];

#[derive(Debug)]
struct Stricter {
    path: String,
    what: String,
}

fn number(v: Option<&Value>) -> Option<f64> {
    v.and_then(Value::as_f64)
}

/// Collects every way `ours` accepts less than `theirs`.
fn superset(theirs: &Value, ours: &Value, path: &str, out: &mut Vec<Stricter>) {
    let mut stricter = |what: String| {
        out.push(Stricter {
            path: path.to_string(),
            what,
        })
    };
    let t = |k: &str| theirs.get(k);
    let o = |k: &str| ours.get(k);

    let int_or_string = json!(true);
    if t("x-kubernetes-int-or-string") == Some(&int_or_string) {
        if o("x-kubernetes-int-or-string") != Some(&int_or_string) {
            stricter("not int-or-string".into());
        }
    } else if let Some(their_type) = t("type")
        && o("type").is_some_and(|ours| ours != their_type)
        && o("x-kubernetes-int-or-string").is_none()
    {
        stricter(format!(
            "type {} instead of {their_type}",
            o("type").unwrap()
        ));
    }
    if t("x-kubernetes-preserve-unknown-fields") == Some(&json!(true))
        && o("x-kubernetes-preserve-unknown-fields") != Some(&json!(true))
    {
        stricter("unknown fields pruned".into());
    }

    let their_required: BTreeSet<&str> = t("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let extra_required: Vec<&str> = o("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|r| !their_required.contains(r))
        .collect();
    if !extra_required.is_empty() {
        stricter(format!("required [{}]", extra_required.join(", ")));
    }

    if let Some(their_enum) = t("enum").and_then(Value::as_array) {
        if let Some(our_enum) = o("enum").and_then(Value::as_array) {
            let missing: Vec<_> = their_enum
                .iter()
                .filter(|v| !our_enum.contains(v))
                .collect();
            if !missing.is_empty() {
                stricter(format!("enum lacks {missing:?}"));
            }
        }
    } else if o("enum").is_some() {
        stricter("enum where AIBrix has none".into());
    }
    for (bound, lower_is_stricter) in [
        ("minimum", false),
        ("minLength", false),
        ("minItems", false),
        ("maximum", true),
        ("maxLength", true),
        ("maxItems", true),
        ("maxProperties", true),
    ] {
        match (number(t(bound)), number(o(bound))) {
            (None, Some(v)) => stricter(format!("{bound} {v} where AIBrix has none")),
            (Some(theirs), Some(ours))
                if (ours < theirs) == lower_is_stricter && ours != theirs =>
            {
                stricter(format!("{bound} {ours} instead of {theirs}"))
            }
            _ => {}
        }
    }
    if o("pattern").is_some() && o("pattern") != t("pattern") {
        stricter(format!("pattern {}", o("pattern").unwrap()));
    }
    if o("x-kubernetes-list-type") == Some(&json!("map"))
        && t("x-kubernetes-list-type") != Some(&json!("map"))
    {
        stricter("x-kubernetes-list-type map".into());
    }

    if let Some(props) = t("properties").and_then(Value::as_object) {
        let empty = serde_json::Map::new();
        let our_props = o("properties").and_then(Value::as_object).unwrap_or(&empty);
        for (key, their_child) in props {
            let child_path = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match our_props.get(key) {
                Some(our_child) => superset(their_child, our_child, &child_path, out),
                // The API server keeps these at the root whatever the schema says.
                None if path.is_empty()
                    && ["apiVersion", "kind", "metadata"].contains(&key.as_str()) => {}
                None if o("x-kubernetes-preserve-unknown-fields") == Some(&json!(true)) => {}
                None => out.push(Stricter {
                    path: child_path,
                    what: "missing (pruned)".into(),
                }),
            }
        }
    }
    if let (Some(ti), Some(oi)) = (t("items"), o("items")) {
        superset(ti, oi, &format!("{path}[]"), out);
    }
    if let (Some(ta), Some(oa)) = (t("additionalProperties"), o("additionalProperties"))
        && ta.is_object()
    {
        superset(ta, oa, &format!("{path}{{}}"), out);
    }
}

/// Collects differences in CRD defaults on squall-owned fields (docs/admission.md#defaults: the
/// schema carries exactly AIBrix's own defaults). Pod templates are core/v1 and skipped: the Pod
/// API applies its own defaults when pods are created.
fn owned_defaults(theirs: &Value, ours: &Value, path: &str, out: &mut Vec<String>) {
    if ours
        .pointer("/properties/spec/properties/containers")
        .is_some()
    {
        return; // a core/v1 PodTemplateSpec
    }
    if theirs.get("default") != ours.get("default") {
        out.push(format!(
            "{path}: default {:?} instead of AIBrix's {:?}",
            ours.get("default"),
            theirs.get("default")
        ));
    }
    let empty = serde_json::Map::new();
    let their_props = theirs
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let our_props = ours
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (key, our_child) in our_props {
        let child_path = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        owned_defaults(
            their_props.get(key).unwrap_or(&json!({})),
            our_child,
            &child_path,
            out,
        );
    }
    if let Some(our_items) = ours.get("items") {
        owned_defaults(
            theirs.get("items").unwrap_or(&json!({})),
            our_items,
            &format!("{path}[]"),
            out,
        );
    }
}

fn crd_schemas() -> Option<Vec<(String, Value, Value)>> {
    let dir = shared_dir()?.join("conformance/aibrix-crds");
    let ours: Vec<Value> = squall::all_crds()
        .iter()
        .map(|crd| serde_json::to_value(crd).unwrap())
        .collect();
    let mut out = Vec::new();
    for file in yaml_files(&dir) {
        let theirs = documents(&file).remove(0);
        let plural = theirs["spec"]["names"]["plural"]
            .as_str()
            .unwrap()
            .to_string();
        let ours = ours
            .iter()
            .find(|c| c["spec"]["names"]["plural"] == plural.as_str())
            .unwrap_or_else(|| panic!("squall has no CRD for {plural}"));
        let schema = |crd: &Value| crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
        out.push((plural, schema(&theirs), schema(ours)));
    }
    assert_eq!(out.len(), 3);
    Some(out)
}

/// Status is input (any tenant with `edit` writes it, no webhook sees it), so squall bounds
/// every status string, integer and list where AIBrix has no bound (src/api/bounded_status.rs):
/// statuses AIBrix's controllers write stay far inside them.
fn is_status_bound(path: &str, what: &str) -> bool {
    path.starts_with("status")
        && ["maxLength ", "maxItems ", "minimum ", "maximum "]
            .iter()
            .any(|bound| what.starts_with(bound))
}

#[test]
fn schemas_accept_everything_aibrix_accepts() {
    let Some(schemas) = crd_schemas() else { return };
    let mut unexpected = Vec::new();
    let mut used = BTreeSet::new();
    let mut status_bounds = 0;
    for (plural, theirs, ours) in &schemas {
        let mut found = Vec::new();
        superset(theirs, ours, "", &mut found);
        for Stricter { path, what } in found {
            let key = format!("{plural}:{path}");
            if is_status_bound(&path, &what) {
                status_bounds += 1;
                continue;
            }
            match INTENDED
                .iter()
                .position(|(p, w, _)| (*p == key || (*p == "*" && path.is_empty())) && *w == what)
            {
                Some(i) => {
                    used.insert(i);
                }
                None => unexpected.push(format!("{key}: {what}")),
            }
        }
    }
    assert!(
        unexpected.is_empty(),
        "squall's schema rejects what AIBrix's accepts (fix the types, or list the difference in INTENDED with a reason):\n{}",
        unexpected.join("\n")
    );
    assert!(status_bounds > 0, "the status bounds are there");
    let stale: Vec<_> = (0..INTENDED.len())
        .filter(|i| !used.contains(i))
        .map(|i| INTENDED[i].0)
        .collect();
    assert!(
        stale.is_empty(),
        "INTENDED entries that no longer apply: {stale:?}"
    );
}

#[test]
fn schemas_carry_exactly_aibrix_defaults_on_owned_fields() {
    let Some(schemas) = crd_schemas() else { return };
    let mut diffs = Vec::new();
    for (plural, theirs, ours) in &schemas {
        let mut found = Vec::new();
        owned_defaults(theirs, ours, "", &mut found);
        diffs.extend(found.into_iter().map(|d| format!("{plural}: {d}")));
    }
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));
}

#[test]
fn printer_columns_follow_spec() {
    let columns = |plural: &str| -> Vec<String> {
        let crd = squall::all_crds()
            .into_iter()
            .find(|c| c.spec.names.plural == plural)
            .unwrap();
        crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.clone())
            .collect()
    };
    assert_eq!(
        columns("stormservices"),
        [
            "Replicas", "Ready", "Updated", "Step", "Phase", "Paused", "Age"
        ]
    );
    assert_eq!(columns("rolesets"), ["Ready", "Age"]);
    assert_eq!(
        columns("podsets"),
        ["ReadyPods", "TotalPods", "Phase", "Age"]
    );
}

/// The schema markers AIBrix's CRDs carry that decide how the API server merges and checks
/// an object (list and map merge strategies, quantity patterns, int-or-string, defaults):
/// squall's must carry every one of them at the same place, with the same value.
const MARKERS: &[&str] = &[
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "pattern",
    "default",
];

/// Collects AIBrix's markers that squall's schema lacks or states differently.
fn lost_markers(theirs: &Value, ours: &Value, path: &str, out: &mut Vec<String>) {
    for marker in MARKERS {
        if let Some(value) = theirs.get(*marker)
            && ours.get(*marker) != Some(value)
        {
            out.push(format!(
                "{path}: {marker} {value} (squall's: {})",
                ours.get(*marker).map_or("absent".into(), Value::to_string)
            ));
        }
    }
    if let Some(their_props) = theirs.get("properties").and_then(Value::as_object) {
        for (key, their_child) in their_props {
            let child_path = format!("{path}.{key}");
            // A field squall's schema leaves out (the API server's own `metadata`) loses
            // only the markers inside it.
            let our_child = ours
                .pointer(&format!("/properties/{key}"))
                .unwrap_or(&Value::Null);
            lost_markers(their_child, our_child, &child_path, out);
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let (Some(their_inner), Some(our_inner)) = (theirs.get(key), ours.get(key))
            && their_inner.is_object()
        {
            lost_markers(their_inner, our_inner, &format!("{path}{suffix}"), out);
        }
    }
}

#[test]
fn schemas_keep_every_aibrix_marker() {
    let Some(schemas) = crd_schemas() else { return };
    let mut lost = Vec::new();
    for (plural, theirs, ours) in &schemas {
        let mut found = Vec::new();
        lost_markers(theirs, ours, "", &mut found);
        lost.extend(found.into_iter().map(|d| format!("{plural}{d}")));
    }
    assert!(
        lost.is_empty(),
        "{} markers of AIBrix's CRDs lost:\n{}",
        lost.len(),
        lost.join("\n")
    );
}

/// Taking over from AIBrix keeps its revisions: in every `aibrix-live` scenario the revision
/// AIBrix's StormService names as current holds that StormService's template (role replicas
/// and Go's encoding aside), as squall reads it.
#[test]
fn aibrix_revisions_hold_their_stormservice_template() {
    use k8s_openapi::api::apps::v1::ControllerRevision;
    use squall::planner::revision::{holds_as_read, revision_data, template_of};
    let Some(dir) = shared_dir().map(|d| d.join("conformance/aibrix-live")) else {
        return;
    };
    let mut checked = 0;
    for file in yaml_files(&dir) {
        let docs = documents(&file);
        let service: StormService = serde_json::from_value(
            docs.iter()
                .find(|d| d["kind"] == "StormService")
                .unwrap()
                .clone(),
        )
        .unwrap();
        let current = service
            .status
            .as_ref()
            .unwrap()
            .current_revision
            .clone()
            .unwrap();
        let revision: ControllerRevision = serde_json::from_value(
            docs.iter()
                .find(|d| {
                    d["kind"] == "ControllerRevision" && d["metadata"]["name"] == current.as_str()
                })
                .unwrap()
                .clone(),
        )
        .unwrap();
        let held = revision_data(&template_of(&revision).unwrap());
        let ours = revision_data(&service.spec.template);
        assert!(
            holds_as_read(&revision, &service.spec.template),
            "{}: {current} does not hold the template:\n{held:#}\nvs\n{ours:#}",
            file.display()
        );
        checked += 1;
    }
    assert_eq!(checked, 4);
}
