//! Defaulting (SPEC §2), on the raw JSON object so that the mutating webhook's patch only
//! adds what is absent and never rewrites a field the user set. The controllers treat an
//! absent value exactly as its default, so behaviour never depends on the webhook.

use serde_json::{Map, Value, json};

use super::limits::MAX_CANARY_STEPS;
use super::validation::{FieldError, OwnedKind, mixed_upgrade_order_warning, parse, raw_bounds};
use super::{PodSet, RoleSet, StormService};

/// Default StormService `spec.replicas` and role `replicas`.
pub const DEFAULT_REPLICAS: i64 = 1;
/// Default StormService `spec.revisionHistoryLimit`.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i64 = 10;
/// Default StormService `spec.progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;

/// One decision of defaulting (or of sidecar injection): `value` goes at the JSON pointer
/// `path`, where the object has nothing (or, for a whole pod spec, what it replaces). A
/// JSON patch `add` operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Addition {
    /// RFC 6901 pointer; its parent exists once the additions before it are applied.
    pub path: String,
    /// What goes there.
    pub value: Value,
}

/// The defaults of SPEC §2 for a raw object of an owned kind, as additions decided on the
/// object as written (the mutating webhook's patch, without copying or diffing the object).
///
/// An object that does not parse into squall's types, or is over the list bounds
/// ([`raw_bounds`]), gets no defaults and the error is returned, so the API server's schema
/// validation (or the validating webhook) reports the real problem — a patch never grows
/// with an oversized list. Kinds squall does not own get none. Defaulting an object twice
/// adds nothing the second time.
///
/// The warnings are about defaults that behave differently from AIBrix (a role list that
/// mixes explicit and absent `upgradeOrder`).
pub fn default_additions(object: &Value) -> Result<(Vec<Addition>, Vec<String>), FieldError> {
    raw_bounds(object)?;
    let mut out = Additions::default();
    match OwnedKind::of(object) {
        Some(OwnedKind::StormService) => {
            parse::<StormService>(object)?;
            default_stormservice(object, &mut out);
        }
        Some(OwnedKind::RoleSet) => {
            parse::<RoleSet>(object)?;
            if let Some(spec) = object.get("spec").and_then(Value::as_object) {
                default_roleset_spec(spec, "/spec", "spec", &mut out);
            }
        }
        Some(OwnedKind::PodSet) => {
            // No defaults beyond the CRD schema's; parsing still reports a bad object.
            parse::<PodSet>(object)?;
        }
        None => {}
    }
    Ok((out.additions, out.warnings))
}

/// Applies the defaults of SPEC §2 ([`default_additions`]) to `object` in place.
pub fn apply_defaults(object: &mut Value) -> Result<Vec<String>, FieldError> {
    let (additions, warnings) = default_additions(object)?;
    for addition in additions {
        add(object, &addition);
    }
    Ok(warnings)
}

/// Applies one addition (JSON patch `add`). Additions are decided on the object they are
/// applied to, so the parent is there.
pub fn add(object: &mut Value, addition: &Addition) {
    let (parent, key) = addition
        .path
        .rsplit_once('/')
        .expect("a pointer below the root");
    let unescape = |token: &str| token.replace("~1", "/").replace("~0", "~");
    let parent = object
        .pointer_mut(parent)
        .expect("the parent of an addition exists");
    match parent {
        Value::Object(map) => {
            map.insert(unescape(key), addition.value.clone());
        }
        Value::Array(list) if key == "-" => list.push(addition.value.clone()),
        Value::Array(list) => {
            let index: usize = key.parse().expect("an array index");
            list[index] = addition.value.clone();
        }
        _ => panic!("the parent of {} is not a container", addition.path),
    }
}

/// The JSON patch of `additions`, as bytes.
pub fn json_patch(additions: &[Addition]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * additions.len() + 2);
    out.push(b'[');
    for (i, addition) in additions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"op":"add","path":"#);
        serde_json::to_writer(&mut out, &addition.path).expect("a string serializes");
        out.extend_from_slice(br#","value":"#);
        serde_json::to_writer(&mut out, &addition.value).expect("a JSON value serializes");
        out.push(b'}');
    }
    out.push(b']');
    out
}

#[derive(Default)]
struct Additions {
    additions: Vec<Addition>,
    warnings: Vec<String>,
}

impl Additions {
    fn add(&mut self, path: String, value: Value) {
        self.additions.push(Addition { path, value });
    }

    /// `value` at `key` of `map` (at `path`) unless the user set it.
    fn absent(&mut self, map: &Map<String, Value>, path: &str, key: &str, value: Value) {
        if is_absent(map, key) {
            self.add(format!("{path}/{key}"), value);
        }
    }
}

fn default_stormservice(object: &Value, out: &mut Additions) {
    let Some(spec) = object.get("spec").and_then(Value::as_object) else {
        return;
    };
    out.absent(spec, "/spec", "replicas", json!(DEFAULT_REPLICAS));
    out.absent(
        spec,
        "/spec",
        "revisionHistoryLimit",
        json!(DEFAULT_REVISION_HISTORY_LIMIT),
    );
    out.absent(
        spec,
        "/spec",
        "progressDeadlineSeconds",
        json!(DEFAULT_PROGRESS_DEADLINE_SECONDS),
    );

    match spec.get("updateStrategy").and_then(Value::as_object) {
        None => out.add(
            "/spec/updateStrategy".into(),
            json!({"type": "RollingUpdate", "maxUnavailable": 1, "maxSurge": 0}),
        ),
        Some(strategy) => {
            let path = "/spec/updateStrategy";
            out.absent(strategy, path, "type", json!("RollingUpdate"));
            if is_absent(strategy, "type") || strategy["type"] == "RollingUpdate" {
                default_budgets(strategy, path, out);
            }
            if let Some(steps) = strategy
                .get("canary")
                .and_then(|c| c.get("steps"))
                .and_then(Value::as_array)
                && needs_full_weight_step(steps)
            {
                out.add(format!("{path}/canary/steps/-"), json!({"setWeight": 100}));
            }
        }
    }

    if let Some(template_spec) = spec
        .get("template")
        .and_then(|t| t.get("spec"))
        .and_then(Value::as_object)
    {
        default_roleset_spec(
            template_spec,
            "/spec/template/spec",
            "spec.template.spec",
            out,
        );
    }
}

/// Defaults of a RoleSet spec (also `StormService.spec.template.spec`), at the pointer
/// `path` (`field` in messages).
fn default_roleset_spec(spec: &Map<String, Value>, path: &str, field: &str, out: &mut Additions) {
    out.absent(spec, path, "updateStrategy", json!("Sequential"));
    let roles = spec.get("roles").and_then(Value::as_array);
    let without_order = roles
        .into_iter()
        .flatten()
        .filter(|r| r.as_object().is_some_and(|r| is_absent(r, "upgradeOrder")))
        .count();
    if without_order > 0 && without_order < roles.map_or(0, Vec::len) {
        out.warnings.push(mixed_upgrade_order_warning(field));
    }
    for (i, role) in roles.into_iter().flatten().enumerate() {
        let Some(role) = role.as_object() else {
            continue;
        };
        let role_path = format!("{path}/roles/{i}");
        out.absent(role, &role_path, "replicas", json!(DEFAULT_REPLICAS));
        out.absent(role, &role_path, "upgradeOrder", json!(0));
        match role.get("updateStrategy").and_then(Value::as_object) {
            None => out.add(
                format!("{role_path}/updateStrategy"),
                json!({"type": "Recreate", "maxUnavailable": 1, "maxSurge": 0}),
            ),
            Some(strategy) => {
                let strategy_path = format!("{role_path}/updateStrategy");
                out.absent(strategy, &strategy_path, "type", json!("Recreate"));
                default_budgets(strategy, &strategy_path, out);
            }
        }
    }
}

/// `maxUnavailable: 1`, `maxSurge: 0`, only when both are absent.
fn default_budgets(strategy: &Map<String, Value>, path: &str, out: &mut Additions) {
    if is_absent(strategy, "maxUnavailable") && is_absent(strategy, "maxSurge") {
        out.add(format!("{path}/maxUnavailable"), json!(1));
        out.add(format!("{path}/maxSurge"), json!(0));
    }
}

/// Argo's implicit final 100 %, made visible: appended when the steps do not end with
/// `setWeight: 100`. Lists longer than validation allows are left for validation to deny.
fn needs_full_weight_step(steps: &[Value]) -> bool {
    let ends_at_full_weight = steps
        .last()
        .is_some_and(|last| last.get("setWeight") == Some(&json!(100)));
    !steps.is_empty() && !ends_at_full_weight && steps.len() <= MAX_CANARY_STEPS
}

/// Absent or `null` (which the API server treats as absent).
fn is_absent(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).is_none_or(Value::is_null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stormservice(spec: Value) -> Value {
        json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1",
            "kind": "StormService",
            "metadata": {"name": "demo"},
            "spec": spec,
        })
    }

    fn minimal_spec() -> Value {
        json!({
            "selector": {"matchLabels": {"app": "demo"}},
            "template": {
                "metadata": {"labels": {"app": "demo"}},
                "spec": {"roles": [{"name": "prefill"}, {"name": "decode"}]}
            }
        })
    }

    fn defaulted(mut object: Value) -> Value {
        apply_defaults(&mut object).expect("parses");
        object
    }

    #[test]
    fn stormservice_defaults_of_spec_section_2() {
        let out = defaulted(stormservice(minimal_spec()));
        let spec = &out["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["progressDeadlineSeconds"], 600);
        assert_eq!(
            spec["updateStrategy"],
            json!({"type": "RollingUpdate", "maxUnavailable": 1, "maxSurge": 0})
        );
        assert_eq!(spec["template"]["spec"]["updateStrategy"], "Sequential");
        for role in spec["template"]["spec"]["roles"].as_array().unwrap() {
            assert_eq!(role["replicas"], 1);
            assert_eq!(role["upgradeOrder"], 0);
            assert_eq!(
                role["updateStrategy"],
                json!({"type": "Recreate", "maxUnavailable": 1, "maxSurge": 0})
            );
        }
    }

    #[test]
    fn user_values_are_never_touched() {
        let mut spec = minimal_spec();
        spec["replicas"] = json!(0);
        spec["revisionHistoryLimit"] = json!(2);
        spec["progressDeadlineSeconds"] = json!(30);
        spec["updateStrategy"] = json!({"type": "RollingUpdate", "maxSurge": "50%"});
        spec["template"]["spec"]["updateStrategy"] = json!("Parallel");
        spec["template"]["spec"]["roles"][0] = json!({
            "name": "prefill", "replicas": 0, "upgradeOrder": 3,
            "updateStrategy": {"type": "InPlaceIfPossible", "maxUnavailable": "25%"}
        });
        let before = stormservice(spec);
        let out = defaulted(before.clone());
        assert_eq!(out["spec"]["replicas"], 0);
        assert_eq!(out["spec"]["revisionHistoryLimit"], 2);
        assert_eq!(out["spec"]["progressDeadlineSeconds"], 30);
        // Budgets are defaulted only when both are absent.
        assert_eq!(
            out["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "maxSurge": "50%"})
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["updateStrategy"],
            "Parallel"
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["roles"][0],
            before["spec"]["template"]["spec"]["roles"][0]
        );
    }

    #[test]
    fn in_place_update_gets_no_budget_defaults() {
        let mut spec = minimal_spec();
        spec["updateStrategy"] = json!({"type": "InPlaceUpdate"});
        let out = defaulted(stormservice(spec));
        assert_eq!(
            out["spec"]["updateStrategy"],
            json!({"type": "InPlaceUpdate"})
        );
    }

    #[test]
    fn canary_steps_get_a_final_full_weight_step() {
        let with_steps = |steps: Value| {
            let mut spec = minimal_spec();
            spec["updateStrategy"] = json!({"canary": {"steps": steps}});
            defaulted(stormservice(spec))["spec"]["updateStrategy"]["canary"]["steps"].clone()
        };
        assert_eq!(
            with_steps(json!([{"setWeight": 25}, {"pause": {}}])),
            json!([{"setWeight": 25}, {"pause": {}}, {"setWeight": 100}])
        );
        assert_eq!(
            with_steps(json!([{"setWeight": 50}, {"setWeight": 100}])),
            json!([{"setWeight": 50}, {"setWeight": 100}])
        );
        assert_eq!(
            with_steps(json!([])),
            json!([]),
            "no canary, nothing appended"
        );
        let too_many: Vec<Value> = (0..=MAX_CANARY_STEPS)
            .map(|_| json!({"setWeight": 1}))
            .collect();
        assert_eq!(
            with_steps(json!(too_many)).as_array().unwrap().len(),
            MAX_CANARY_STEPS + 1,
            "over-long lists are left for validation to deny"
        );
    }

    #[test]
    fn roleset_defaults() {
        let out = defaulted(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1",
            "kind": "RoleSet",
            "metadata": {"name": "rs"},
            "spec": {"roles": [{"name": "prefill", "updateStrategy": {"maxSurge": 1}}]}
        }));
        assert_eq!(out["spec"]["updateStrategy"], "Sequential");
        assert_eq!(
            out["spec"]["roles"][0],
            json!({"name": "prefill", "replicas": 1, "upgradeOrder": 0,
                   "updateStrategy": {"type": "Recreate", "maxSurge": 1}})
        );
    }

    #[test]
    fn unparsable_objects_are_left_alone() {
        let mut spec = minimal_spec();
        spec["replicas"] = json!("two");
        let mut object = stormservice(spec);
        let before = object.clone();
        let error = apply_defaults(&mut object).unwrap_err();
        assert_eq!(error.path, "spec.replicas");
        assert_eq!(object, before);
    }

    #[test]
    fn other_kinds_are_left_alone() {
        let mut object =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let before = object.clone();
        apply_defaults(&mut object).unwrap();
        assert_eq!(object, before);
    }

    #[test]
    fn defaulting_is_idempotent() {
        let mut spec = minimal_spec();
        spec["updateStrategy"] = json!({"canary": {"steps": [{"setWeight": 10}]}});
        let once = defaulted(stormservice(spec));
        assert_eq!(defaulted(once.clone()), once);
    }
}
