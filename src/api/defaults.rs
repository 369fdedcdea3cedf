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

/// Applies the defaults of SPEC §2 to a raw object of an owned kind, in place.
///
/// An object that does not parse into squall's types, or is over the list bounds
/// ([`raw_bounds`]), is left untouched and the error is returned, so the API server's schema
/// validation (or the validating webhook) reports the real problem — a patch never grows
/// with an oversized list. Kinds
/// squall does not own are left untouched. Applying the defaults twice changes nothing the
/// second time.
///
/// Returns warnings about defaults that behave differently from AIBrix (a role list that
/// mixes explicit and absent `upgradeOrder`).
pub fn apply_defaults(object: &mut Value) -> Result<Vec<String>, FieldError> {
    raw_bounds(object)?;
    let mut warnings = Vec::new();
    match OwnedKind::of(object) {
        Some(OwnedKind::StormService) => {
            parse::<StormService>(object)?;
            default_stormservice(object, &mut warnings);
        }
        Some(OwnedKind::RoleSet) => {
            parse::<RoleSet>(object)?;
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                default_roleset_spec(spec, "spec", &mut warnings);
            }
        }
        Some(OwnedKind::PodSet) => {
            // No defaults beyond the CRD schema's; parsing still reports a bad object.
            parse::<PodSet>(object)?;
        }
        None => {}
    }
    Ok(warnings)
}

fn default_stormservice(object: &mut Value, warnings: &mut Vec<String>) {
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    set_absent(spec, "replicas", json!(DEFAULT_REPLICAS));
    set_absent(
        spec,
        "revisionHistoryLimit",
        json!(DEFAULT_REVISION_HISTORY_LIMIT),
    );
    set_absent(
        spec,
        "progressDeadlineSeconds",
        json!(DEFAULT_PROGRESS_DEADLINE_SECONDS),
    );

    let strategy = object_entry(spec, "updateStrategy");
    set_absent(strategy, "type", json!("RollingUpdate"));
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        default_budgets(strategy);
    }
    if let Some(steps) = strategy
        .get_mut("canary")
        .and_then(|c| c.get_mut("steps"))
        .and_then(Value::as_array_mut)
    {
        append_full_weight_step(steps);
    }

    if let Some(template_spec) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        default_roleset_spec(template_spec, "spec.template.spec", warnings);
    }
}

/// Defaults of a RoleSet spec (also `StormService.spec.template.spec`).
fn default_roleset_spec(spec: &mut Map<String, Value>, path: &str, warnings: &mut Vec<String>) {
    set_absent(spec, "updateStrategy", json!("Sequential"));
    let roles = spec.get("roles").and_then(Value::as_array);
    let without_order = roles
        .into_iter()
        .flatten()
        .filter(|r| r.as_object().is_some_and(|r| is_absent(r, "upgradeOrder")))
        .count();
    if without_order > 0 && without_order < roles.map_or(0, Vec::len) {
        warnings.push(mixed_upgrade_order_warning(path));
    }
    for role in spec
        .get_mut("roles")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        set_absent(role, "replicas", json!(DEFAULT_REPLICAS));
        set_absent(role, "upgradeOrder", json!(0));
        let strategy = object_entry(role, "updateStrategy");
        set_absent(strategy, "type", json!("Recreate"));
        default_budgets(strategy);
    }
}

/// `maxUnavailable: 1`, `maxSurge: 0`, only when both are absent.
fn default_budgets(strategy: &mut Map<String, Value>) {
    if is_absent(strategy, "maxUnavailable") && is_absent(strategy, "maxSurge") {
        strategy.insert("maxUnavailable".into(), json!(1));
        strategy.insert("maxSurge".into(), json!(0));
    }
}

/// Argo's implicit final 100 %, made visible: appended when the steps do not end with
/// `setWeight: 100`. Lists longer than validation allows are left for validation to deny.
fn append_full_weight_step(steps: &mut Vec<Value>) {
    let ends_at_full_weight = steps
        .last()
        .is_some_and(|last| last.get("setWeight") == Some(&json!(100)));
    if !steps.is_empty() && !ends_at_full_weight && steps.len() <= MAX_CANARY_STEPS {
        steps.push(json!({"setWeight": 100}));
    }
}

/// Absent or `null` (which the API server treats as absent).
fn is_absent(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).is_none_or(Value::is_null)
}

fn set_absent(map: &mut Map<String, Value>, key: &str, value: Value) {
    if is_absent(map, key) {
        map.insert(key.to_string(), value);
    }
}

/// The object at `key`, created empty when absent.
fn object_entry<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    if !map.get(key).is_some_and(Value::is_object) {
        map.insert(key.to_string(), Value::Object(Map::new()));
    }
    map.get_mut(key)
        .and_then(Value::as_object_mut)
        .expect("inserted above")
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
