//! Defaulting (docs/admission.md#defaults), decided on a view of the object's JSON and written as a
//! JSON patch that only adds what is absent and never rewrites a field the user set. The
//! controllers treat an absent value exactly as its default, so behaviour never depends on the
//! webhook.

use serde_json::Value;

use super::validation::{
    FieldError, OwnedKind, Spec, View, mixed_upgrade_order_warning, read_error,
};
use super::view::{RoleSetSpecView, StepView, StormServiceSpecView};
use crate::api::analysis::{
    Analysis, DEFAULT_ANALYSIS_COUNT, DEFAULT_ENDPOINT, MAX_ANALYSIS_METRICS,
};
use crate::api::defaults::{
    DEFAULT_PROGRESS_DEADLINE_SECONDS, DEFAULT_REPLICAS, DEFAULT_REVISION_HISTORY_LIMIT,
};
use crate::api::limits::MAX_CANARY_STEPS;
use crate::api::{PodSet, StormServiceUpdateStrategyType, ends_at_full_weight};

/// One decision of sidecar injection: `value` goes at the JSON pointer `path` (a JSON
/// patch `add` operation).
#[derive(Clone, Debug, PartialEq)]
pub struct Addition {
    /// RFC 6901 pointer; its parent exists.
    pub path: String,
    /// What goes there.
    pub value: Value,
}

/// A JSON patch of `add` operations, written as it is decided: the bytes the API server
/// gets, with no intermediate document.
#[derive(Debug, Default)]
pub struct PatchWriter {
    bytes: Vec<u8>,
    operations: usize,
}

impl PatchWriter {
    /// A writer with room for a patch of `bytes` (the defaults of an object are about half
    /// its size; more grows the buffer).
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(bytes),
            operations: 0,
        }
    }

    /// Adds the JSON text `value` (written in pieces) at the pointer `path` (pieces of plain
    /// keys and indexes, joined): copied in as bytes, with no formatting machinery.
    fn add<'p>(&mut self, path: impl IntoIterator<Item = &'p str>, value: &[&str]) {
        self.bytes
            .push(if self.operations == 0 { b'[' } else { b',' });
        self.bytes.extend_from_slice(br#"{"op":"add","path":""#);
        for piece in path {
            self.bytes.extend_from_slice(piece.as_bytes());
        }
        self.bytes.extend_from_slice(br#"","value":"#);
        for piece in value {
            self.bytes.extend_from_slice(piece.as_bytes());
        }
        self.bytes.push(b'}');
        self.operations += 1;
    }

    /// Adds an [`Addition`].
    pub fn push(&mut self, addition: &Addition) {
        let value = serde_json::to_string(&addition.value).expect("a JSON value serializes");
        self.add([addition.path.as_str()], &[&value]);
    }

    /// How many operations it holds.
    pub fn operations(&self) -> usize {
        self.operations
    }

    /// The patch (`[]` when empty).
    pub fn into_bytes(mut self) -> Vec<u8> {
        if self.operations == 0 {
            self.bytes.push(b'[');
        }
        self.bytes.push(b']');
        self.bytes
    }
}

/// The defaults of docs/admission.md#defaults for the JSON of a StormService or a RoleSet, written
/// into `patch` as `add` operations while reading its view ([`crate::admission::view`]): what is absent
/// (or `null`) gets its default; a field the user set is never rewritten.
///
/// An object that does not parse into squall's types, or is over the list bounds, gets no
/// defaults and the error is returned (found on the slow path that names the field), so the
/// API server's schema validation or the validating webhook reports the real problem — a
/// patch never grows with an oversized list. A PodSet has no defaults beyond its CRD
/// schema's. Defaulting an object twice adds nothing the second time.
///
/// The warnings are about defaults that behave differently from AIBrix (a role list that
/// mixes explicit and absent `upgradeOrder`).
pub fn write_defaults(
    kind: OwnedKind,
    json: &str,
    patch: &mut PatchWriter,
) -> Result<Vec<String>, FieldError> {
    if kind == OwnedKind::PodSet {
        return match serde_json::from_str::<PodSet>(json) {
            Ok(_) => Ok(Vec::new()),
            Err(_) => Err(read_error(kind, json)),
        };
    }
    let Some(view) = View::parse_once(kind, json) else {
        return Err(read_error(kind, json));
    };
    write_view_defaults(&view, patch)
}

/// [`write_defaults`] of an object already read as a view: the first list bound it exceeds,
/// or the defaults and warnings.
pub fn write_view_defaults(
    view: &View<'_>,
    patch: &mut PatchWriter,
) -> Result<Vec<String>, FieldError> {
    view.bounds()?;
    let mut warnings = Vec::new();
    match &view.spec {
        Spec::StormService(spec) => default_stormservice(spec, patch, &mut warnings),
        Spec::RoleSet(spec) => default_roleset_spec(spec, "/spec", "spec", patch, &mut warnings),
    }
    Ok(warnings)
}

/// Applies the defaults of docs/admission.md#defaults ([`write_defaults`]) to a raw object of an
/// owned kind, in place; other kinds are left untouched.
pub fn apply_defaults(object: &mut Value) -> Result<Vec<String>, FieldError> {
    let Some(kind) = OwnedKind::of(object) else {
        return Ok(Vec::new());
    };
    let mut patch = PatchWriter::default();
    let warnings = write_defaults(kind, &object.to_string(), &mut patch)?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&patch.into_bytes()).expect("the written patch parses");
    json_patch::patch(object, &patch).expect("defaults apply to the object they were decided on");
    Ok(warnings)
}

fn default_stormservice(
    spec: &StormServiceSpecView<'_>,
    patch: &mut PatchWriter,
    warnings: &mut Vec<String>,
) {
    let mut number = itoa::Buffer::new();
    if spec.replicas.is_none() {
        patch.add(["/spec/replicas"], &[number.format(DEFAULT_REPLICAS)]);
    }
    if spec.revision_history_limit.is_none() {
        patch.add(
            ["/spec/revisionHistoryLimit"],
            &[number.format(DEFAULT_REVISION_HISTORY_LIMIT)],
        );
    }
    if spec.progress_deadline_seconds.is_none() {
        patch.add(
            ["/spec/progressDeadlineSeconds"],
            &[number.format(DEFAULT_PROGRESS_DEADLINE_SECONDS)],
        );
    }
    match &spec.update_strategy {
        None => patch.add(
            ["/spec/updateStrategy"],
            &[r#"{"type":"RollingUpdate","#, BUDGET_DEFAULTS, "}"],
        ),
        Some(strategy) => {
            if strategy.type_.is_none() {
                patch.add(["/spec/updateStrategy/type"], &[r#""RollingUpdate""#]);
            }
            if strategy.type_.unwrap_or_default() == StormServiceUpdateStrategyType::RollingUpdate {
                default_budgets(
                    strategy.max_surge.is_none() && strategy.max_unavailable.is_none(),
                    &["/spec/updateStrategy"],
                    patch,
                );
            }
            let canary = strategy.canary.as_ref();
            let steps = canary.and_then(|c| c.steps.as_deref()).unwrap_or_default();
            if steps.len() <= MAX_CANARY_STEPS {
                let mut index = itoa::Buffer::new();
                for (i, step) in steps.iter().enumerate() {
                    if let Some(analysis) = &step.analysis {
                        let at = ["/spec/updateStrategy/canary/steps/", index.format(i)];
                        default_analysis(analysis, &[at[0], at[1], "/analysis"], true, patch);
                    }
                }
            }
            if let Some(analysis) = canary.and_then(|c| c.analysis.as_deref()) {
                default_analysis(
                    analysis,
                    &["/spec/updateStrategy/canary/analysis"],
                    false,
                    patch,
                );
            }
            if needs_full_weight_step(steps) {
                patch.add(
                    ["/spec/updateStrategy/canary/steps/-"],
                    &[r#"{"setWeight":100}"#],
                );
            }
        }
    }
    if let Some(template_spec) = &spec.template.spec {
        default_roleset_spec(
            template_spec,
            "/spec/template/spec",
            "spec.template.spec",
            patch,
            warnings,
        );
    }
}

/// A canary analysis's defaults, under the pointer `at` (in pieces): `count: 1` for a
/// step's metrics (a background metric without `count` runs as long as the canary),
/// `failureLimit: 0`, `inconclusiveLimit: 0` and the `default` endpoint. More metrics than
/// validation allows get none (validation denies them; the patch never grows with them).
fn default_analysis(analysis: &Analysis, at: &[&str], step: bool, patch: &mut PatchWriter) {
    if analysis.metrics.len() > MAX_ANALYSIS_METRICS {
        return;
    }
    let mut number = itoa::Buffer::new();
    for (i, metric) in analysis.metrics.iter().enumerate() {
        // Formatted for analyses only, which an ordinary review does not have.
        let metric_at = |field: &str| format!("{}/metrics/{i}{field}", at.concat());
        if step && metric.count.is_none() {
            let count = number.format(DEFAULT_ANALYSIS_COUNT);
            patch.add([metric_at("/count").as_str()], &[count]);
        }
        if metric.failure_limit.is_none() {
            patch.add([metric_at("/failureLimit").as_str()], &["0"]);
        }
        if metric.inconclusive_limit.is_none() {
            patch.add([metric_at("/inconclusiveLimit").as_str()], &["0"]);
        }
        if metric
            .provider
            .prometheus
            .as_ref()
            .is_some_and(|p| p.endpoint.is_none())
        {
            let endpoint = format!("{DEFAULT_ENDPOINT:?}");
            patch.add(
                [metric_at("/provider/prometheus/endpoint").as_str()],
                &[&endpoint],
            );
        }
    }
}

/// The budgets both default to when neither is set, as JSON object members.
const BUDGET_DEFAULTS: &str = r#""maxUnavailable":1,"maxSurge":0"#;

/// Defaults of a RoleSet spec (also `StormService.spec.template.spec`), at the pointer
/// `path` (`field` in messages).
fn default_roleset_spec(
    spec: &RoleSetSpecView<'_>,
    path: &str,
    field: &str,
    patch: &mut PatchWriter,
    warnings: &mut Vec<String>,
) {
    if spec.update_strategy.is_none() {
        patch.add([path, "/updateStrategy"], &[r#""Sequential""#]);
    }
    let roles = spec.roles.as_deref().unwrap_or_default();
    let without_order = roles.iter().filter(|r| r.upgrade_order.is_none()).count();
    if without_order > 0 && without_order < roles.len() {
        warnings.push(mixed_upgrade_order_warning(field));
    }
    let (mut index, mut number) = (itoa::Buffer::new(), itoa::Buffer::new());
    for (i, role) in roles.iter().enumerate() {
        let role_path = [path, "/roles/", index.format(i)];
        let at = |field| role_path.into_iter().chain([field]);
        if role.replicas.is_none() {
            patch.add(at("/replicas"), &[number.format(DEFAULT_REPLICAS)]);
        }
        if role.upgrade_order.is_none() {
            patch.add(at("/upgradeOrder"), &["0"]);
        }
        match &role.update_strategy {
            None => patch.add(
                at("/updateStrategy"),
                &[r#"{"type":"Recreate","#, BUDGET_DEFAULTS, "}"],
            ),
            Some(strategy) => {
                if strategy.type_.is_none() {
                    patch.add(at("/updateStrategy/type"), &[r#""Recreate""#]);
                }
                default_budgets(
                    strategy.max_surge.is_none() && strategy.max_unavailable.is_none(),
                    &[path, "/roles/", role_path[2], "/updateStrategy"],
                    patch,
                );
            }
        }
    }
}

/// `maxUnavailable: 1`, `maxSurge: 0` under the pointer `strategy` (in pieces), only when
/// both are absent.
fn default_budgets(both_absent: bool, strategy: &[&str], patch: &mut PatchWriter) {
    if both_absent {
        let at = |field| strategy.iter().copied().chain([field]);
        patch.add(at("/maxUnavailable"), &["1"]);
        patch.add(at("/maxSurge"), &["0"]);
    }
}

/// The implied final full weight ([`ends_at_full_weight`]), made visible: appended when the
/// steps do not end at one. Lists longer than validation allows are left for validation to
/// deny.
fn needs_full_weight_step(steps: &[StepView<'_>]) -> bool {
    !steps.is_empty()
        && !ends_at_full_weight(steps.last().and_then(|last| last.set_weight))
        && steps.len() <= MAX_CANARY_STEPS
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    /// The final-full-weight rule is stated once ([`ends_at_full_weight`]): the steps the
    /// controller runs and `squall status` shows ([`StormServiceSpec::effective_steps`]) are
    /// the same before and after defaulting, and defaulting leaves nothing for the rollout
    /// to append — weights over 100 and duplicate finals included.
    #[test]
    fn defaulting_and_the_rollout_agree_on_the_steps() {
        use crate::api::{Step, StormService};
        let (w, p) = (Step::Weight, Step::Pause);
        let table: [(Value, Option<Vec<Step>>); 8] = [
            (
                json!([{"setWeight": 20}, {"pause": {}}]),
                Some(vec![w(20), p(None), w(100)]),
            ),
            (
                json!([{"setWeight": 20}, {"setWeight": 100}]),
                Some(vec![w(20), w(100)]),
            ),
            (
                json!([{"setWeight": 100}, {"setWeight": 100}]),
                Some(vec![w(100), w(100)]),
            ),
            (json!([{"setWeight": 150}]), Some(vec![w(100)])),
            (
                json!([{"setWeight": 50}, {"setWeight": 150}]),
                Some(vec![w(50), w(100)]),
            ),
            (
                json!([{"pause": {"duration": "30s"}}]),
                Some(vec![p(Some(30)), w(100)]),
            ),
            (
                json!([{"setWeight": 100}, {"pause": {}}]),
                Some(vec![w(100), p(None), w(100)]),
            ),
            (json!([]), None),
        ];
        for (steps, expected) in table {
            let mut spec = minimal_spec();
            spec["updateStrategy"] = json!({"canary": {"steps": steps}});
            let object = stormservice(spec);
            let typed = |o: &Value| serde_json::from_value::<StormService>(o.clone()).unwrap();
            let before = typed(&object).spec.effective_steps();
            assert_eq!(before, expected, "{steps}");
            let after = typed(&defaulted(object.clone())).spec;
            assert_eq!(after.effective_steps(), before, "{steps}: defaulted");
            if let Some(written) = after.canary_steps() {
                assert_eq!(written.len(), before.unwrap().len(), "{steps}: defaulted");
            }
        }
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

    #[test]
    fn analyses_get_their_counts_limits_and_endpoint() {
        let metric = |extra: Value| {
            let mut m = json!({"name": "errors", "provider": {"prometheus": {"query": "up"}},
                               "successCondition": "result < 1"});
            for (k, v) in extra.as_object().unwrap() {
                m[k] = v.clone();
            }
            m
        };
        let mut spec = minimal_spec();
        spec["updateStrategy"] = json!({"canary": {
            "steps": [{"setWeight": 10}, {"analysis": {"metrics": [
                metric(json!({})),
                metric(json!({"name": "kept", "count": 3, "interval": "5s", "failureLimit": 2,
                              "inconclusiveLimit": 1,
                              "provider": {"prometheus": {"endpoint": "staging", "query": "up"}}})),
            ]}}],
            "analysis": {"metrics": [metric(json!({"interval": "1m"}))]},
        }});
        let once = defaulted(stormservice(spec));
        let canary = &once["spec"]["updateStrategy"]["canary"];
        let step = &canary["steps"][1]["analysis"]["metrics"];
        assert_eq!(
            (
                &step[0]["count"],
                &step[0]["failureLimit"],
                &step[0]["inconclusiveLimit"]
            ),
            (&json!(1), &json!(0), &json!(0))
        );
        assert_eq!(step[0]["provider"]["prometheus"]["endpoint"], "default");
        assert_eq!(
            step[1],
            metric(
                json!({"name": "kept", "count": 3, "interval": "5s", "failureLimit": 2,
                          "inconclusiveLimit": 1,
                          "provider": {"prometheus": {"endpoint": "staging", "query": "up"}}})
            ),
            "what the user wrote is kept"
        );
        let background = &canary["analysis"]["metrics"][0];
        assert!(
            background.get("count").is_none(),
            "a background metric without count runs as long as the canary"
        );
        assert_eq!(background["failureLimit"], 0);
        assert_eq!(canary["steps"][2], json!({"setWeight": 100}));
        assert_eq!(defaulted(once.clone()), once);
    }
}
