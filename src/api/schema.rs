//! Kubernetes' own schema markers on the core/v1 types squall's CRDs embed (pod templates,
//! label and node selectors, quantities). Kubernetes declares them on its Go types
//! (`+listType=map`, `+structType=atomic`, `+default=`) and `controller-gen` writes them into
//! CRDs — AIBrix's carry them — but k8s-openapi's generated schemas do not. Without them
//! server-side apply and GitOps tools replace a whole `containers` or `env` list where they
//! should merge by key, and `resources.limits: {cpu: lots}` is accepted until a pod is created.
//!
//! The rules are stated by Kubernetes type and field, as Kubernetes states them; where each
//! type sits in a CRD is found by generating the CRD's root type a second time with named
//! definitions and walking both schemas side by side.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// The syntax of a `resource.Quantity`, as Kubernetes' CRD schemas check it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

const CORE: &str = "io.k8s.api.core.v1.";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
/// Left as k8s-openapi writes it: the API server treats embedded metadata on its own.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LABEL_SELECTOR: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector";

/// Lists merged by key (`+listType=map` with its `+listMapKey`s): core/v1 type, field, keys.
/// Every other list of a Kubernetes type is `atomic`, as nearly all are declared.
const MAP_LISTS: &[(&str, &str, &[&str])] = &[
    ("PodSpec", "containers", &["name"]),
    ("PodSpec", "initContainers", &["name"]),
    ("PodSpec", "ephemeralContainers", &["name"]),
    ("PodSpec", "volumes", &["name"]),
    ("PodSpec", "imagePullSecrets", &["name"]),
    ("PodSpec", "resourceClaims", &["name"]),
    ("PodSpec", "schedulingGates", &["name"]),
    ("PodSpec", "hostAliases", &["ip"]),
    (
        "PodSpec",
        "topologySpreadConstraints",
        &["topologyKey", "whenUnsatisfiable"],
    ),
    ("Container", "env", &["name"]),
    ("Container", "ports", &["containerPort", "protocol"]),
    ("Container", "volumeMounts", &["mountPath"]),
    ("Container", "volumeDevices", &["devicePath"]),
    ("EphemeralContainer", "env", &["name"]),
    (
        "EphemeralContainer",
        "ports",
        &["containerPort", "protocol"],
    ),
    ("EphemeralContainer", "volumeMounts", &["mountPath"]),
    ("EphemeralContainer", "volumeDevices", &["devicePath"]),
    ("ResourceRequirements", "claims", &["name"]),
];

/// Structs replaced whole (`+structType=atomic`), including those that embed a
/// `LocalObjectReference` (the marker comes with it).
const ATOMIC_STRUCTS: &[&str] = &[
    "NodeSelector",
    "NodeSelectorTerm",
    "ObjectFieldSelector",
    "ResourceFieldSelector",
    "LocalObjectReference",
    "TypedLocalObjectReference",
    "ConfigMapKeySelector",
    "SecretKeySelector",
    "ConfigMapEnvSource",
    "SecretEnvSource",
    "ConfigMapVolumeSource",
    "ConfigMapProjection",
    "SecretProjection",
];

/// Maps replaced whole (`+mapType=atomic`): core/v1 type, field.
const ATOMIC_MAPS: &[(&str, &str)] = &[("PodSpec", "nodeSelector")];

/// Field defaults (`+default=`): core/v1 type, field, the default as JSON.
const DEFAULTS: &[(&str, &str, &str)] = &[
    ("ContainerPort", "protocol", r#""TCP""#),
    ("GRPCAction", "service", r#""""#),
    ("AzureDiskVolumeSource", "fsType", r#""ext4""#),
    ("AzureDiskVolumeSource", "readOnly", "false"),
    ("ISCSIVolumeSource", "iscsiInterface", r#""default""#),
    ("RBDVolumeSource", "keyring", r#""/etc/ceph/keyring""#),
    ("RBDVolumeSource", "pool", r#""rbd""#),
    ("RBDVolumeSource", "user", r#""admin""#),
    ("ScaleIOVolumeSource", "fsType", r#""xfs""#),
    ("ScaleIOVolumeSource", "storageMode", r#""ThinProvisioned""#),
];

/// Writes Kubernetes' markers into `schema`, the CRD schema generated (inlined) for `T`.
pub fn restore_kubernetes_markers<T: JsonSchema>(schema: &mut Value) {
    let named = SchemaSettings::openapi3()
        .with(|s| s.meta_schema = None)
        .into_generator()
        .into_root_schema_for::<T>();
    let named = serde_json::to_value(named).expect("a schema serializes");
    let definitions = named
        .pointer("/components/schemas")
        .cloned()
        .unwrap_or_default();
    walk(&named, schema, &definitions);
}

/// The definition `typed` stands for (through `$ref`s and the `allOf` / `anyOf` an optional
/// field is wrapped in), with its type name when it has one.
fn resolve<'a>(mut typed: &'a Value, definitions: &'a Value) -> (&'a Value, Option<&'a str>) {
    let mut name = None;
    for _ in 0..8 {
        if let Some(reference) = typed.get("$ref").and_then(Value::as_str) {
            let referenced = reference.rsplit('/').next().unwrap_or_default();
            name = Some(referenced);
            typed = &definitions[referenced];
            continue;
        }
        let wrapped = ["allOf", "anyOf", "oneOf"].iter().find_map(|key| {
            typed
                .get(key)?
                .as_array()?
                .iter()
                .find(|s| s.get("$ref").is_some())
        });
        match wrapped {
            Some(inner) => typed = inner,
            None => break,
        }
    }
    (typed, name)
}

fn walk(typed: &Value, node: &mut Value, definitions: &Value) {
    let (typed, name) = resolve(typed, definitions);
    if name == Some(OBJECT_META) {
        return;
    }
    let Some(node) = node.as_object_mut() else {
        return;
    };
    if let Some(name) = name {
        mark_type(name, node);
    }
    let core = name.and_then(|n| n.strip_prefix(CORE));
    let kubernetes = name.is_some_and(|n| n.starts_with("io.k8s."));
    if let (Some(typed_properties), Some(properties)) = (
        typed.get("properties").and_then(Value::as_object),
        node.get_mut("properties").and_then(Value::as_object_mut),
    ) {
        for (field, typed_field) in typed_properties {
            let Some(property) = properties.get_mut(field) else {
                continue;
            };
            if kubernetes && let Some(property) = property.as_object_mut() {
                mark_field(core, field, property);
            }
            walk(typed_field, property, definitions);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let (Some(typed_inner), Some(inner)) = (typed.get(key), node.get_mut(key))
            && typed_inner.is_object()
        {
            walk(typed_inner, inner, definitions);
        }
    }
}

/// The markers a type carries wherever it is used.
fn mark_type(name: &str, node: &mut Map<String, Value>) {
    let core = name.strip_prefix(CORE);
    if name == LABEL_SELECTOR || core.is_some_and(|t| ATOMIC_STRUCTS.contains(&t)) {
        node.insert("x-kubernetes-map-type".into(), json!("atomic"));
    }
    if name == QUANTITY {
        node.insert(
            "anyOf".into(),
            json!([{"type": "integer"}, {"type": "string"}]),
        );
        node.insert("pattern".into(), json!(QUANTITY_PATTERN));
    }
}

/// The markers of `field` of a Kubernetes type (`core`: its name, when it is core/v1's).
fn mark_field(core: Option<&str>, field: &str, property: &mut Map<String, Value>) {
    let of = |t: &str, f: &str| core == Some(t) && field == f;
    if property.get("type") == Some(&json!("array"))
        && !property.contains_key("x-kubernetes-list-type")
    {
        match MAP_LISTS.iter().find(|(t, f, _)| of(t, f)) {
            Some((_, _, keys)) => {
                property.insert("x-kubernetes-list-type".into(), json!("map"));
                property.insert("x-kubernetes-list-map-keys".into(), json!(keys));
            }
            None => {
                property.insert("x-kubernetes-list-type".into(), json!("atomic"));
            }
        }
    }
    if ATOMIC_MAPS.iter().any(|(t, f)| of(t, f)) {
        property.insert("x-kubernetes-map-type".into(), json!("atomic"));
    }
    if let Some((_, _, value)) = DEFAULTS.iter().find(|(t, f, _)| of(t, f)) {
        let value: Value = serde_json::from_str(value).expect("the defaults are JSON");
        property.insert("default".into(), value);
    }
}
