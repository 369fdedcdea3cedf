//! The mutating webhook as it was before it emitted its decisions as patch operations:
//! defaults applied to a copy of the object in place, and the runtime sidecar injected the
//! same way (the webhook then diffed the copy against the request). Kept only as the
//! reference of the property test that the emitted patch makes exactly the same object.

use serde_json::{Map, Value, json};

use super::sidecar::{
    ANNOTATION_ENGINE, ANNOTATION_SIDECAR_IMAGE, ANNOTATION_SIDECAR_INJECTION, DEFAULT_IMAGE,
    MOUNT_PATH, SIDECAR_NAME, VOLUME,
};
use crate::admission::validation::{
    FieldError, OwnedKind, mixed_upgrade_order_warning, parse, raw_bounds,
};
use crate::api::defaults::{
    DEFAULT_PROGRESS_DEADLINE_SECONDS, DEFAULT_REPLICAS, DEFAULT_REVISION_HISTORY_LIMIT,
};
use crate::api::limits::MAX_CANARY_STEPS;
use crate::api::{PodSet, RoleSet, StormService};

/// The object the old webhook's patch made: defaults, then (StormService) the sidecar.
pub fn mutated(object: &Value) -> Result<(Value, Vec<String>), FieldError> {
    let mut mutated = object.clone();
    let mut warnings = defaults(&mut mutated)?;
    if mutated["kind"] == "StormService" {
        warnings.extend(inject(&mut mutated));
    }
    Ok((mutated, warnings))
}

pub fn defaults(object: &mut Value) -> Result<Vec<String>, FieldError> {
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

pub fn inject(stormservice: &mut Value) -> Option<String> {
    let annotations = stormservice.pointer("/metadata/annotations")?.as_object()?;
    let value = annotations.get(ANNOTATION_SIDECAR_INJECTION)?.clone();
    if value != json!("true") {
        return Some(format!(
            "metadata.annotations[{ANNOTATION_SIDECAR_INJECTION}] is {value}; only \"true\" injects the runtime sidecar"
        ));
    }
    let image = annotations
        .get(ANNOTATION_SIDECAR_IMAGE)
        .and_then(Value::as_str)
        .unwrap_or(DEFAULT_IMAGE)
        .to_string();
    let engine_annotation = stormservice
        .pointer(&format!(
            "/spec/template/metadata/annotations/{}",
            ANNOTATION_ENGINE.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        .map(str::to_string);
    let roles = stormservice
        .pointer_mut("/spec/template/spec/roles")
        .and_then(Value::as_array_mut)?;
    for pod_spec in roles
        .iter_mut()
        .filter_map(|role| role.pointer_mut("/template/spec"))
        .filter_map(Value::as_object_mut)
    {
        inject_into_pod(pod_spec, &image, engine_annotation.as_deref());
    }
    None
}

fn inject_into_pod(pod: &mut Map<String, Value>, image: &str, engine: Option<&str>) {
    let containers = pod
        .get("containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if containers.iter().any(|c| c["name"] == SIDECAR_NAME) {
        return;
    }
    let engine = engine
        .map(str::to_string)
        .unwrap_or_else(|| super::sidecar::infer_engine(&containers));

    let volumes = pod.entry("volumes").or_insert_with(|| json!([]));
    if let Some(volumes) = volumes.as_array_mut() {
        match volumes.iter_mut().find(|v| v["name"] == VOLUME) {
            Some(existing) if existing.get("emptyDir").is_some() => {}
            Some(existing) => *existing = json!({"name": VOLUME, "emptyDir": {}}),
            None => volumes.push(json!({"name": VOLUME, "emptyDir": {}})),
        }
    }
    let mount = json!({"name": VOLUME, "mountPath": MOUNT_PATH});
    let mut containers = containers;
    for container in containers.iter_mut().filter_map(Value::as_object_mut) {
        let mounts = container.entry("volumeMounts").or_insert_with(|| json!([]));
        if let Some(mounts) = mounts.as_array_mut()
            && !mounts.iter().any(|m| m["name"] == VOLUME)
        {
            mounts.push(mount.clone());
        }
    }
    let sidecar = json!({
        "name": SIDECAR_NAME,
        "image": image,
        "command": ["aibrix_runtime", "--port", "8080"],
        "env": [
            {"name": "INFERENCE_ENGINE", "value": engine},
            {"name": "INFERENCE_ENGINE_ENDPOINT", "value": "http://localhost:8000"},
        ],
        "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}],
        "volumeMounts": [mount],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "initialDelaySeconds": 3, "periodSeconds": 2},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "initialDelaySeconds": 5, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"cpu": "500m", "memory": "512Mi"},
        },
    });
    containers.insert(0, sidecar);
    pod.insert("containers".into(), Value::Array(containers));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::hook::Hook;
    use crate::api::podgroup::{PodGroupCrds, Scheduler};
    use crate::webhook::mutation;
    use proptest::prelude::*;

    /// Absent, `null`, or one of `values`.
    fn field(values: Vec<Value>) -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            2 => Just(None),
            1 => Just(Some(Value::Null)),
            3 => proptest::sample::select(values).prop_map(Some),
        ]
    }

    fn set(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
        if let Some(value) = value {
            map.insert(key.into(), value);
        }
    }

    fn budgets() -> impl Strategy<Value = (Option<Value>, Option<Value>)> {
        let budget = || {
            field(vec![
                json!(0),
                json!(1),
                json!(2),
                json!("25%"),
                json!("100%"),
            ])
        };
        (budget(), budget())
    }

    fn role_strategy() -> impl Strategy<Value = Option<Value>> {
        let ty = field(vec![json!("Recreate"), json!("InPlaceIfPossible")]);
        prop_oneof![
            1 => Just(None),
            1 => Just(Some(Value::Null)),
            3 => (ty, budgets()).prop_map(|(ty, (surge, unavailable))| {
                let mut map = Map::new();
                set(&mut map, "type", ty);
                set(&mut map, "maxSurge", surge);
                set(&mut map, "maxUnavailable", unavailable);
                Some(Value::Object(map))
            }),
        ]
    }

    fn role() -> impl Strategy<Value = Value> {
        let containers = proptest::collection::vec(
            proptest::sample::select(vec![
                "vllm/vllm-openai:v0.9.0",
                "lmsysorg/sglang:v0.4",
                "engine:1",
                "aibrix-runtime",
            ]),
            1..3,
        );
        (
            "[a-z]{1,6}",
            field(vec![json!(0), json!(1), json!(3)]),
            field(vec![json!(0), json!(2)]),
            role_strategy(),
            containers,
            any::<bool>(),
            scheduling(),
        )
            .prop_map(|(name, replicas, order, strategy, images, volume, gang)| {
                let containers: Vec<Value> = images
                    .iter()
                    .enumerate()
                    .map(|(i, image)| {
                        let name = if *image == "aibrix-runtime" {
                            SIDECAR_NAME.to_string()
                        } else {
                            format!("c{i}")
                        };
                        json!({"name": name, "image": image})
                    })
                    .collect();
                let mut pod = json!({"containers": containers});
                if volume {
                    pod["volumes"] = json!([{"name": VOLUME, "hostPath": {"path": "/x"}}]);
                }
                let mut map = Map::new();
                map.insert("name".into(), json!(name));
                set(&mut map, "replicas", replicas);
                set(&mut map, "upgradeOrder", order);
                set(&mut map, "updateStrategy", strategy);
                set(&mut map, "schedulingStrategy", gang);
                map.insert("template".into(), json!({"spec": pod}));
                Value::Object(map)
            })
    }

    /// A `schedulingStrategy`: one scheduler, none, or two (denied).
    fn scheduling() -> impl Strategy<Value = Option<Value>> {
        field(vec![
            json!({"volcanoSchedulingStrategy": {"queue": "q"}}),
            json!({"coschedulingSchedulingStrategy": {}}),
            json!({"godelSchedulingStrategy": {"minMember": 2}}),
            json!({}),
            json!({"coschedulingSchedulingStrategy": {}, "godelSchedulingStrategy": {}}),
        ])
    }

    /// What the cluster is known to serve of the PodGroup CRDs.
    fn podgroup_crds() -> impl Strategy<Value = PodGroupCrds> {
        prop_oneof![
            Just(PodGroupCrds::Unknown),
            proptest::sample::subsequence(Scheduler::ALL.to_vec(), 0..=3)
                .prop_map(PodGroupCrds::known),
        ]
    }

    fn roleset_spec() -> impl Strategy<Value = Value> {
        (
            field(vec![
                json!("Sequential"),
                json!("Parallel"),
                json!("Interleave"),
            ]),
            proptest::collection::vec(role(), 0..4),
            scheduling(),
        )
            .prop_map(|(strategy, roles, gang)| {
                let mut map = Map::new();
                set(&mut map, "updateStrategy", strategy);
                set(&mut map, "schedulingStrategy", gang);
                map.insert("roles".into(), Value::Array(roles));
                Value::Object(map)
            })
    }

    fn steps() -> impl Strategy<Value = Value> {
        let step = prop_oneof![
            (0..=100i64).prop_map(|w| json!({"setWeight": w})),
            Just(json!({"setWeight": 100})),
            Just(json!({"pause": {}})),
            Just(json!({"pause": {"duration": "30s"}})),
        ];
        // Short lists, and lists at the bound (where the final step is no longer appended).
        let length = prop_oneof![0..5usize, (MAX_CANARY_STEPS - 1)..(MAX_CANARY_STEPS + 3)];
        length
            .prop_flat_map(move |n| proptest::collection::vec(step.clone(), n))
            .prop_map(Value::Array)
    }

    fn stormservice() -> impl Strategy<Value = Value> {
        let strategy = prop_oneof![
            1 => Just(None),
            1 => Just(Some(Value::Null)),
            4 => (
                field(vec![json!("RollingUpdate"), json!("InPlaceUpdate")]),
                budgets(),
                proptest::option::of(steps()),
            )
                .prop_map(|(ty, (surge, unavailable), steps)| {
                    let mut map = Map::new();
                    set(&mut map, "type", ty);
                    set(&mut map, "maxSurge", surge);
                    set(&mut map, "maxUnavailable", unavailable);
                    if let Some(steps) = steps {
                        map.insert("canary".into(), json!({"steps": steps}));
                    }
                    Some(Value::Object(map))
                }),
        ];
        let annotations = prop_oneof![
            2 => Just(None),
            2 => Just(Some(json!({ANNOTATION_SIDECAR_INJECTION: "true"}))),
            1 => Just(Some(json!({ANNOTATION_SIDECAR_INJECTION: "true", ANNOTATION_SIDECAR_IMAGE: "my/runtime:1"}))),
            1 => Just(Some(json!({ANNOTATION_SIDECAR_INJECTION: "yes"}))),
        ];
        (
            field(vec![json!(0), json!(1), json!(4)]),
            field(vec![json!(3)]),
            field(vec![json!(120)]),
            strategy,
            roleset_spec(),
            annotations,
            proptest::option::of(Just(json!({ANNOTATION_ENGINE: "triton"}))),
        )
            .prop_map(
                |(replicas, history, deadline, strategy, template_spec, annotations, engine)| {
                    let mut spec = Map::new();
                    set(&mut spec, "replicas", replicas);
                    set(&mut spec, "revisionHistoryLimit", history);
                    set(&mut spec, "progressDeadlineSeconds", deadline);
                    set(&mut spec, "updateStrategy", strategy);
                    spec.insert("selector".into(), json!({"matchLabels": {"app": "a"}}));
                    let mut metadata = json!({"labels": {"app": "a"}});
                    if let Some(engine) = engine {
                        metadata["annotations"] = engine;
                    }
                    spec.insert(
                        "template".into(),
                        json!({"metadata": metadata, "spec": template_spec}),
                    );
                    let mut object = json!({
                        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
                        "metadata": {"name": "s"}, "spec": spec,
                    });
                    if let Some(annotations) = annotations {
                        object["metadata"]["annotations"] = annotations;
                    }
                    object
                },
            )
    }

    fn roleset() -> impl Strategy<Value = Value> {
        roleset_spec().prop_map(|spec| {
            json!({"apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                   "metadata": {"name": "r"}, "spec": spec})
        })
    }

    /// A review of `object` (and `old`) for `hook`, with the stored object absent or `null`
    /// on a create.
    fn review_of(hook: Hook, update: bool, object: &Value, old: Option<Value>) -> Vec<u8> {
        let (group, version) = ("orchestration.aibrix.ai", "v1alpha1");
        let mut request = json!({
            "uid": "u", "kind": {"group": group, "version": version, "kind": hook.kind()},
            "resource": {"group": group, "version": version, "resource": hook.resource()},
            "name": "n", "namespace": "default",
            "operation": if update { "UPDATE" } else { "CREATE" },
            "userInfo": {"username": "u"}, "object": object,
        });
        if update || old.is_some() {
            request["oldObject"] = old.unwrap_or(Value::Null);
        }
        serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1",
                                   "kind": "AdmissionReview", "request": request}))
        .unwrap()
    }

    /// What [`the_scanner_answers_only_as_serde_reads`] writes into a review.
    const EDITS: &[&str] = &[
        " ",
        "\n",
        "\u{c}",
        "\u{7}",
        "null",
        ",",
        ":",
        "{",
        "}",
        "[",
        "]",
        "\"",
        "\\",
        "é",
        "\"x\":1,",
        "\"name\":\"a\",",
        "\"spec\":null,",
        "\"replicas\":2,",
        "\"replicas\":null,",
        "\"replicas\":1.0,",
        "\"replicas\":2e0,",
        "\"stateful\":true,",
        "\"analysis\":{},",
        "\"metadata\":{},",
        "\"kind\":\"RoleSet\",",
        "\\u0061",
        "\\\"",
        "-0",
        "01",
        "1.5",
        "1e3",
        "-",
        "3000000000",
        "true",
        "nul",
        "\"uid\":\"u\",",
        "\"oldObject\":{},",
        "\"operation\":\"DELETE\",",
        "\"dryRun\":null,",
    ];

    fn hooks_of(object: &Value) -> [Hook; 2] {
        if object["kind"] == "RoleSet" {
            [Hook::MutateRoleSet, Hook::ValidateRoleSet]
        } else {
            [Hook::MutateStormService, Hook::ValidateStormService]
        }
    }

    proptest! {
        /// Where the one-pass reading answers a review, it answers byte for byte as the
        /// general path does: creates and updates (the stored object an edit of the new one
        /// or another generated object), to both webhooks of the kind, whatever the cluster
        /// serves of the PodGroup CRDs.
        #[test]
        fn one_pass_answers_as_the_general_path(
            (object, stored) in prop_oneof![
                (stormservice(), proptest::option::of(stormservice())),
                (roleset(), proptest::option::of(roleset())),
            ],
            update in any::<bool>(),
            crds in podgroup_crds(),
        ) {
            let old = update.then(|| stored.unwrap_or_else(|| object.clone()));
            let crds = crate::webhook::Cluster { crds, endpoints: None };
            for hook in hooks_of(&object) {
                let body = review_of(hook, update, &object, old.clone());
                let general = crate::webhook::review_in_general(hook, &body, crds).unwrap();
                let one_pass = crate::webhook::review_in_one_pass(hook, &body, crds);
                let scanned = crate::webhook::review_scanned(hook, &body, crds);
                for answer in one_pass.into_iter().chain(scanned) {
                    prop_assert_eq!(
                        String::from_utf8(answer.json).unwrap(),
                        &*String::from_utf8_lossy(&general.json)
                    );
                    prop_assert_eq!(answer.verdict, general.verdict);
                }
            }
        }

        /// The scanner gives up on what it does not read as serde does: a generated review
        /// edited at random (whitespace, nulls, repeated or unknown fields, escapes, numbers
        /// serde refuses or reads otherwise, broken nesting, analyses) is either left to serde
        /// or answered exactly as serde's reading answers it.
        #[test]
        fn the_scanner_answers_only_as_serde_reads(
            object in prop_oneof![stormservice(), roleset()],
            update in any::<bool>(),
            edits in proptest::collection::vec(
                (any::<proptest::sample::Index>(), proptest::sample::select(EDITS), any::<bool>()),
                0..4,
            ),
        ) {
            let crds = crate::webhook::Cluster::default();
            for hook in hooks_of(&object) {
                let old = update.then(|| object.clone());
                let mut body = String::from_utf8(review_of(hook, update, &object, old)).unwrap();
                for (at, snippet, replace) in &edits {
                    let at = at.index(body.len());
                    if !body.is_char_boundary(at) {
                        continue;
                    }
                    let end = if *replace { (at + snippet.len()).min(body.len()) } else { at };
                    if body.is_char_boundary(end) {
                        body.replace_range(at..end, snippet);
                    }
                }
                if let Some(answer) = crate::webhook::review_scanned(hook, body.as_bytes(), crds) {
                    let general = crate::webhook::review_in_general(hook, body.as_bytes(), crds);
                    let general = general.expect("serde reads what the scanner read");
                    prop_assert_eq!(
                        String::from_utf8(answer.json).unwrap(),
                        String::from_utf8(general.json).unwrap(),
                        "{}", body
                    );
                }
            }
        }

        /// Applying the emitted additions gives exactly the object the old copy-and-diff
        /// webhook's patch gave, with the same warnings (or the same error).
        #[test]
        fn emitted_patch_makes_the_object_the_old_webhook_made(
            object in prop_oneof![stormservice(), roleset()]
        ) {
            match (mutation(&object), mutated(&object)) {
                (Ok(mutation), Ok((expected, expected_warnings))) => {
                    let patch: json_patch::Patch =
                        serde_json::from_slice(&mutation.patch).unwrap();
                    prop_assert_eq!(patch.0.len(), mutation.operations);
                    let mut patched = object.clone();
                    json_patch::patch(&mut patched, &patch).unwrap();
                    prop_assert_eq!(patched, expected);
                    prop_assert_eq!(mutation.warnings, expected_warnings);
                }
                (Err(error), Err(expected)) => prop_assert_eq!(error, expected),
                (new, old) => prop_assert!(false, "new {:?} vs old {:?}", new.map(|_| ()), old.map(|_| ())),
            }
        }
    }
}
