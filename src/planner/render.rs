//! Pure rendering of children: template hashes and pairing keys, upstream's `Shorten` naming
//! rule, pods and PodSets of roles with their built-in env vars and topology affinity, named
//! and labelled as AIBrix does (docs/aibrix-compatibility.md#the-same).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, Pod, PodAffinityTerm, PodReadinessGate, PodSpec, PodTemplateSpec, Service,
    ServiceSpec, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use crate::api::cached::meta::Pairs;
use crate::api::cached::service::CachedService;
use crate::api::keys::{
    ANNOTATION_DRAIN_POLICY, ANNOTATION_ROLE_REVISION_NAME_PREFIX, ANNOTATION_ROLE_REVISION_PREFIX,
    ANNOTATION_ROLESET_INDEX, CONDITION_PAIRING_SERVABLE, FINALIZER_PODSET, LABEL_PAIRING_KEY,
    LABEL_POD_GROUP_INDEX, LABEL_PODSET_NAME, LABEL_ROLE_NAME, LABEL_ROLE_REPLICA_INDEX,
    LABEL_ROLE_REVISION, LABEL_ROLE_REVISION_NAME, LABEL_ROLE_TEMPLATE_HASH, LABEL_ROLESET_NAME,
    LABEL_STORM_SERVICE_NAME,
};
use crate::api::{
    PairingGroup, PodSet, PodSetSpec, RoleSet, RoleSetSpec, RoleSpec, SchedulingStrategy,
    StormService, TopologyMode, TopologyScope,
};
use crate::planner::podgroup;

/// Kubernetes' "safe" alphabet for generated strings (no vowels, no look-alikes).
pub(crate) const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Hash of a role's pod template: FNV-1a (32 bit) over its canonical JSON (keys sorted,
/// no whitespace), in the safe alphabet. Changing this input or encoding is a breaking
/// change (golden-hash tests pin it).
pub fn template_hash(template: &PodTemplateSpec) -> String {
    let value = serde_json::to_value(template).expect("a PodTemplateSpec serializes");
    text_hash(&canonical_json(&value))
}

/// FNV-1a (32 bit) of `text`, in the safe alphabet: the hash of every short name squall
/// derives (template hashes, pairing keys).
fn text_hash(text: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    safe_encode(hash)
}

/// The decimal digits of `hash` mapped into the safe alphabet (Kubernetes' `SafeEncodeString`).
fn safe_encode(hash: u32) -> String {
    hash.to_string()
        .bytes()
        .map(|digit| SAFE_ALPHABET[usize::from(digit) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// JSON with object keys sorted and no whitespace: the stable input of every hash.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push('{');
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Upstream's `Shorten`: names of at least `limit` characters keep their first character
/// and their last `limit - 1` (so the distinguishing suffix survives).
pub fn shorten(name: &str, limit: usize) -> String {
    if name.len() < limit {
        return name.to_string();
    }
    let first = &name[..1];
    let tail = &name[name.len() - (limit - 1)..];
    format!("{first}{tail}")
}

/// `Shorten` with `keepPrefix`: at most `limit` characters, keeping the first ones (for
/// `generateName` prefixes, whose random suffix distinguishes the objects).
pub fn shorten_keep_prefix(name: &str, limit: usize) -> String {
    name.chars().take(limit).collect()
}

/// Puts `vars` first in every container's env, dropping user vars of the same names.
fn env_first(containers: &mut [Container], vars: &[(&str, &str)]) {
    for container in containers {
        let mut env: Vec<EnvVar> = vars
            .iter()
            .map(|(name, value)| EnvVar {
                name: (*name).into(),
                value: Some((*value).into()),
                ..EnvVar::default()
            })
            .collect();
        env.extend(
            container
                .env
                .take()
                .unwrap_or_default()
                .into_iter()
                .filter(|e| !vars.iter().any(|(name, _)| *name == e.name)),
        );
        container.env = Some(env);
    }
}

/// A PodSet for `slot` of a multi-node role: the gang's template is the role template with
/// the RoleSet's built-in env vars; its name embeds the hash, like a stateful pod's.
pub fn podset_for_slot(roleset: &RoleSet, role: &RoleSpec, hash: &str, slot: u32) -> PodSet {
    let pod = stateful_pod(roleset, role, hash, slot);
    let mut template = role.template.as_deref().cloned().unwrap_or_default();
    let mut spec = pod.spec.expect("rendered pods have a spec");
    spec.hostname = template.spec.as_ref().and_then(|s| s.hostname.clone());
    template.spec = Some(spec);
    // The PodSet carries squall's own labels; the template's stay in the template.
    let own_keys = [
        LABEL_ROLESET_NAME,
        LABEL_ROLE_NAME,
        LABEL_ROLE_TEMPLATE_HASH,
        LABEL_STORM_SERVICE_NAME,
        LABEL_ROLE_REPLICA_INDEX,
        // The gang's pods take it from the PodSet's labels.
        LABEL_PAIRING_KEY,
    ];
    let mut labels = pod.metadata.labels.unwrap_or_default();
    labels.retain(|key, _| own_keys.contains(&key.as_str()));
    let mut annotations = pod.metadata.annotations.unwrap_or_default();
    // Gang membership, which the gang's pods inherit: the RoleSet's PodGroup, or the
    // PodSet's own under a role-level strategy (written last, so it wins, as in AIBrix).
    if gang_requested(roleset.spec.scheduling_strategy.as_ref()) {
        join_gang(&mut labels, &mut annotations, &roleset.name_any());
    }
    if let (true, Some(name)) = (
        gang_requested(role.scheduling_strategy.as_ref()),
        &pod.metadata.name,
    ) {
        join_gang(&mut labels, &mut annotations, name);
    }
    PodSet {
        metadata: ObjectMeta {
            name: pod.metadata.name,
            namespace: pod.metadata.namespace,
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: pod.metadata.owner_references,
            // Born with its finalizer: one write less than the PodSet controller adding it.
            finalizers: Some(vec![FINALIZER_PODSET.into()]),
            ..ObjectMeta::default()
        },
        spec: PodSetSpec {
            pod_group_size: role.pod_group_size_or_default(),
            template,
            stateful: role.stateful,
            recovery_policy: None,
            scheduling_strategy: role.scheduling_strategy.clone(),
        },
        status: None,
    }
}

/// Whether `strategy` names a gang scheduler.
fn gang_requested(strategy: Option<&SchedulingStrategy>) -> bool {
    strategy.and_then(podgroup::requested).is_some()
}

/// Makes pod (or PodSet) metadata a member of the PodGroup `group`.
fn join_gang(
    labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
    group: &str,
) {
    let (member_labels, member_annotations) = podgroup::member_keys(group);
    labels.extend(member_labels);
    annotations.extend(member_annotations);
}

/// Env vars a PodSet adds first to every container of its pods.
pub const PODSET_ENV: [&str; 3] = ["PODSET_NAME", "POD_GROUP_INDEX", "POD_GROUP_SIZE"];

/// Pod `index` of a PodSet's gang: `<podset>-<index>`, the PodSet's labels and annotations
/// under the template's (template values win), `hostname` = name, and the gang env vars in
/// init and main containers.
pub fn gang_pod(podset: &PodSet, index: u32) -> Pod {
    let ps_name = podset.name_any();
    let name = shorten(&format!("{ps_name}-{index}"), 63);
    let mut template = podset.spec.template.clone();
    let meta = template.metadata.take().unwrap_or_default();
    let mut labels = podset.labels().clone();
    labels.extend(meta.labels.unwrap_or_default());
    labels.insert(LABEL_PODSET_NAME.into(), ps_name.clone());
    labels.insert(LABEL_POD_GROUP_INDEX.into(), index.to_string());
    let mut annotations = podset.annotations().clone();
    annotations.extend(meta.annotations.unwrap_or_default());
    let mut spec = template.spec.unwrap_or_default();
    spec.hostname = Some(name.clone());
    if let Some(service) = podset
        .labels()
        .get(LABEL_STORM_SERVICE_NAME)
        .filter(|s| !s.is_empty())
    {
        spec.subdomain = Some(service.clone());
    }
    let index_text = index.to_string();
    let size = podset.spec.pod_group_size.to_string();
    let vars = [
        (PODSET_ENV[0], ps_name.as_str()),
        (PODSET_ENV[1], index_text.as_str()),
        (PODSET_ENV[2], size.as_str()),
    ];
    env_first(&mut spec.containers, &vars);
    if let Some(init) = spec.init_containers.as_mut() {
        env_first(init, &vars);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: podset.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: meta.finalizers,
            owner_references: podset.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The slot env var of stateful pods, injected after [`BUILTIN_ENV`].
pub const ENV_ROLE_REPLICA_INDEX: &str = "ROLE_REPLICA_INDEX";

/// Built-in env vars injected first into every main container, in this order.
pub const BUILTIN_ENV: [&str; 5] = [
    "STORM_SERVICE_NAME",
    "ROLESET_NAME",
    "ROLESET_INDEX",
    "ROLE_NAME",
    "ROLE_TEMPLATE_HASH",
];

/// The pairing group `spec` puts `role` in.
pub fn group_of<'a>(spec: &'a RoleSetSpec, role: &str) -> Option<&'a PairingGroup> {
    spec.pairing
        .iter()
        .flatten()
        .find(|group| group.roles.iter().any(|r| r == role))
}

/// Whether `role`'s pods declare the serving readiness gate
/// (docs/rollouts.md#the-serving-gate): every pod of a paired role, and of a RoleSet whose
/// `servingGate` is set, and of a role that drains (docs/rollouts.md#drain-before-delete); a
/// multi-node role's gang pods too (its PodSets' template carries the gate).
pub fn gated(spec: &RoleSetSpec, role: &RoleSpec) -> bool {
    spec.serving_gate.is_some() || role.drain.is_some() || group_of(spec, &role.name).is_some()
}

/// The pairing key of `role`'s pods rendered from `rendered_from` — the RoleSet's spec, or
/// in a pooled canary the stable revision's — when `spec`, the RoleSet's own, pairs the
/// role: the `protocol` `rendered_from` gives the role's group, else a hash of the templates
/// `rendered_from` gives the roles of `spec`'s group, taken by name (so the order the group
/// lists them in, and every role outside it, leave the key as it is).
pub fn pairing_key(spec: &RoleSetSpec, rendered_from: &RoleSetSpec, role: &str) -> Option<String> {
    let group = group_of(spec, role)?;
    if let Some(protocol) = group_of(rendered_from, role).and_then(|g| g.protocol.as_ref()) {
        return Some(protocol.clone());
    }
    let mut names: Vec<&str> = group.roles.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    let templates: String = names
        .iter()
        .map(|name| {
            let hash = rendered_from
                .roles
                .iter()
                .flatten()
                .find(|r| r.name == *name)
                .map(|r| template_hash(&r.template.clone().unwrap_or_default()))
                .unwrap_or_default();
            format!("{name}={hash};")
        })
        .collect();
    Some(text_hash(&templates))
}

/// The pod labels saying which version of `role` of `roleset` a pod on its template runs:
/// the ControllerRevision the role was last changed in (`role-revision`,
/// `role-revision-name`), from the RoleSet's per-role annotations when it has them —
/// AIBrix's labels, by which a gateway tells the roles that changed — and, for a paired
/// role, its pairing key (docs/rollouts.md#pairing).
pub fn role_revision_labels(roleset: &RoleSet, role: &str) -> Vec<(String, String)> {
    let annotations = roleset.annotations();
    [
        (ANNOTATION_ROLE_REVISION_PREFIX, LABEL_ROLE_REVISION),
        (
            ANNOTATION_ROLE_REVISION_NAME_PREFIX,
            LABEL_ROLE_REVISION_NAME,
        ),
    ]
    .into_iter()
    .filter_map(|(prefix, label)| {
        let value = annotations.get(&format!("{prefix}{role}"))?;
        Some((label.to_string(), value.clone()))
    })
    .chain(
        pairing_key(&roleset.spec, &roleset.spec, role)
            .map(|key| (LABEL_PAIRING_KEY.to_string(), key)),
    )
    .collect()
}

/// A new pod of a stateless role (the API server completes the name from `generateName`).
pub fn stateless_pod(roleset: &RoleSet, role: &RoleSpec, hash: &str) -> Pod {
    render_pod(roleset, role, hash, None)
}

/// A new pod of a stateful role for `slot`: a deterministic name embedding the hash (so a
/// surge pod for the same slot does not clash), `hostname` = name, the slot as label,
/// annotation and `ROLE_REPLICA_INDEX`.
pub fn stateful_pod(roleset: &RoleSet, role: &RoleSpec, hash: &str, slot: u32) -> Pod {
    render_pod(roleset, role, hash, Some(slot))
}

fn render_pod(roleset: &RoleSet, role: &RoleSpec, hash: &str, slot: Option<u32>) -> Pod {
    let template = role.template.as_deref().cloned().unwrap_or_default();
    let rs_name = roleset.name_any();
    let rs_labels = roleset.labels();
    let service = rs_labels
        .get(LABEL_STORM_SERVICE_NAME)
        .cloned()
        .unwrap_or_default();
    let roleset_index = roleset
        .annotations()
        .get(ANNOTATION_ROLESET_INDEX)
        .cloned()
        .unwrap_or_default();

    let template_meta = template.metadata.unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    labels.insert(LABEL_ROLESET_NAME.into(), rs_name.clone());
    labels.insert(LABEL_ROLE_NAME.into(), role.name.clone());
    labels.insert(LABEL_ROLE_TEMPLATE_HASH.into(), hash.into());
    labels.insert(LABEL_STORM_SERVICE_NAME.into(), service.clone());
    for passed_through in ["name", "previous-owner"] {
        if let Some(value) = rs_labels.get(passed_through) {
            labels.insert(passed_through.into(), value.clone());
        }
    }
    labels.extend(role_revision_labels(roleset, &role.name));
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(ANNOTATION_ROLESET_INDEX.into(), roleset_index.clone());
    if let Some(drain) = &role.drain {
        // A child of a role later removed from the spec still drains as created.
        let policy = serde_json::to_string(drain).expect("a drain serializes");
        annotations.insert(ANNOTATION_DRAIN_POLICY.into(), policy);
    }
    if gang_requested(roleset.spec.scheduling_strategy.as_ref()) {
        join_gang(&mut labels, &mut annotations, &rs_name);
    }
    let slot_text = slot.map(|s| s.to_string());
    if let Some(index) = &slot_text {
        labels.insert(LABEL_ROLE_REPLICA_INDEX.into(), index.clone());
        annotations.insert(LABEL_ROLE_REPLICA_INDEX.into(), index.clone());
    }
    let name = slot.map(|s| shorten(&format!("{rs_name}-{}-{hash}-{s}", role.name), 63));

    let mut spec = template.spec.unwrap_or_default();
    if !service.is_empty() {
        spec.subdomain = Some(service.clone());
    }
    if let Some(name) = &name {
        spec.hostname = Some(name.clone());
    }
    let mut builtin: Vec<(&str, &str)> = BUILTIN_ENV
        .iter()
        .copied()
        .zip([
            service.as_str(),
            rs_name.as_str(),
            roleset_index.as_str(),
            role.name.as_str(),
            hash,
        ])
        .collect();
    if let Some(index) = &slot_text {
        builtin.push((ENV_ROLE_REPLICA_INDEX, index));
    }
    env_first(&mut spec.containers, &builtin);
    if let Some((term, mode)) = topology_affinity(roleset, &role.name) {
        add_affinity(&mut spec, term, mode);
    }
    if gated(&roleset.spec, role) {
        let gates = spec.readiness_gates.get_or_insert_default();
        if !gates
            .iter()
            .any(|g| g.condition_type == CONDITION_PAIRING_SERVABLE)
        {
            gates.push(PodReadinessGate {
                condition_type: CONDITION_PAIRING_SERVABLE.into(),
            });
        }
    }

    Pod {
        metadata: ObjectMeta {
            generate_name: name
                .is_none()
                .then(|| shorten(&format!("{rs_name}-{}-", role.name), 58)),
            name,
            namespace: roleset.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: template_meta.finalizers,
            owner_references: roleset.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The pod-affinity term of the RoleSet's `topologyPolicy` for pods of `role`
/// (docs/aibrix-compatibility.md#the-same): the scope's group of pods — the StormService, the
/// RoleSet, or the role across RoleSets — shares one domain of the node label `key`. None without a
/// policy, with an empty key, or for a RoleSet no StormService created (no
/// `storm-service-name` label to match on).
pub fn topology_affinity(roleset: &RoleSet, role: &str) -> Option<(PodAffinityTerm, TopologyMode)> {
    let policy = roleset.spec.topology_policy.as_ref()?;
    let service = roleset.labels().get(LABEL_STORM_SERVICE_NAME)?;
    if policy.key.is_empty() {
        return None;
    }
    let mut labels = BTreeMap::from([(LABEL_STORM_SERVICE_NAME.to_string(), service.clone())]);
    match policy.scope {
        TopologyScope::StormService => {}
        TopologyScope::RoleSet => {
            labels.insert(LABEL_ROLESET_NAME.into(), roleset.name_any());
        }
        TopologyScope::Role => {
            labels.insert(LABEL_ROLE_NAME.into(), role.into());
        }
    }
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(labels),
            match_expressions: None,
        }),
        topology_key: policy.key.clone(),
        ..PodAffinityTerm::default()
    };
    Some((term, policy.mode.unwrap_or(TopologyMode::Preferred)))
}

/// Adds `term` to the pod's affinity — required, or preferred with weight 100 — unless the
/// template already has it. Affinity is fixed at creation: a policy change reaches new pods.
fn add_affinity(spec: &mut PodSpec, term: PodAffinityTerm, mode: TopologyMode) {
    let affinity = spec
        .affinity
        .get_or_insert_with(Default::default)
        .pod_affinity
        .get_or_insert_with(Default::default);
    match mode {
        TopologyMode::Required => {
            let terms = affinity
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new);
            if !terms.contains(&term) {
                terms.push(term);
            }
        }
        TopologyMode::Preferred => {
            let terms = affinity
                .preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new);
            if !terms.iter().any(|t| t.pod_affinity_term == term) {
                terms.push(WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: term,
                });
            }
        }
    }
}

/// Whether a pod spec carries the policy's term (pods created before a policy change do not
/// until they are replaced).
pub fn has_affinity(spec: &PodSpec, term: &PodAffinityTerm, mode: TopologyMode) -> bool {
    let Some(affinity) = spec.affinity.as_ref().and_then(|a| a.pod_affinity.as_ref()) else {
        return false;
    };
    match mode {
        TopologyMode::Required => affinity
            .required_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .any(|t| t == term),
        TopologyMode::Preferred => affinity
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .any(|t| t.pod_affinity_term == *term),
    }
}

/// The headless Service of `service` (docs/aibrix-compatibility.md#the-same): its name, selecting
/// its pods by `storm-service-name`, publishing the addresses of pods not yet Ready, carrying the
/// StormService's labels and that one (how the Services cache finds it), owned by it.
pub fn headless_service(service: &StormService) -> Service {
    let name = service.name_any();
    let selector = BTreeMap::from([(LABEL_STORM_SERVICE_NAME.to_string(), name.clone())]);
    let mut labels = service.metadata.labels.clone().unwrap_or_default();
    labels.extend(selector.clone());
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: service.namespace(),
            labels: Some(labels),
            owner_references: service.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector),
            publish_not_ready_addresses: Some(true),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The merge patch that restores what squall keeps of the headless Service of the
/// StormService `name` — its label, selector and `publishNotReadyAddresses` — when any of them
/// drifted; None when none did (everything else on it is left as it is).
pub fn headless_service_repair(existing: &CachedService, name: &str) -> Option<Value> {
    let selector = BTreeMap::from([(LABEL_STORM_SERVICE_NAME.to_string(), name.to_string())]);
    let labelled = existing.metadata.labels.get(LABEL_STORM_SERVICE_NAME) == Some(name);
    let drifted = !labelled
        || existing.selector != Pairs::from(&selector)
        || existing.publish_not_ready_addresses != Some(true);
    drifted.then(|| {
        serde_json::json!({
            "metadata": {"labels": {LABEL_STORM_SERVICE_NAME: name}},
            "spec": {"selector": selector, "publishNotReadyAddresses": true},
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(image: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": image, "env": [{"name": "ROLE_NAME", "value": "user"}, {"name": "A", "value": "1"}]}]}
        }))
        .unwrap()
    }

    #[test]
    fn golden_template_hashes() {
        // Pinned: a change here rolls every pod of every cluster (a breaking change).
        assert_eq!(
            template_hash(&template("i:1")),
            template_hash(&template("i:1"))
        );
        assert_ne!(
            template_hash(&template("i:1")),
            template_hash(&template("i:2"))
        );
        assert_eq!(template_hash(&PodTemplateSpec::default()), "5859f96865");
        assert_eq!(template_hash(&template("i:1")), "7759dd7d6");
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let mut out = String::new();
        write_canonical(
            &json!({"b": [1, {"d": "x", "c": null}], "a": true}),
            &mut out,
        );
        assert_eq!(out, r#"{"a":true,"b":[1,{"c":null,"d":"x"}]}"#);
    }

    #[test]
    fn stateful_pods_are_named_by_slot_and_hash() {
        let roleset: RoleSet = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "u-1"}, "spec": {"roles": []}
        }))
        .unwrap();
        let role = RoleSpec {
            name: "decode".into(),
            template: Some(template("i:1").into()),
            ..RoleSpec::default()
        };
        let pod = stateful_pod(&roleset, &role, "h1", 3);
        assert_eq!(pod.metadata.name.as_deref(), Some("rs-decode-h1-3"));
        assert_eq!(pod.metadata.generate_name, None);
        assert_eq!(pod.metadata.labels.unwrap()[LABEL_ROLE_REPLICA_INDEX], "3");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("rs-decode-h1-3"));
        let env = spec.containers[0].env.clone().unwrap();
        assert_eq!(
            (env[5].name.as_str(), env[5].value.as_deref()),
            ("ROLE_REPLICA_INDEX", Some("3"))
        );
    }

    #[test]
    fn gang_members_name_their_podgroup() {
        use crate::api::podgroup::{KEY_VOLCANO_GROUP_NAME, LABEL_COSCHEDULING_POD_GROUP};
        let strategy = json!({"volcanoSchedulingStrategy": {"queue": "q"}});
        let roleset = |spec: Value| -> RoleSet {
            serde_json::from_value(json!({
                "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                "metadata": {"name": "rs", "namespace": "ns", "uid": "u-1"}, "spec": spec
            }))
            .unwrap()
        };
        // RoleSet-level: every pod and PodSet joins the RoleSet's PodGroup.
        let gang_set = roleset(json!({"roles": [], "schedulingStrategy": strategy}));
        let pod = stateless_pod(&gang_set, &role(), "h");
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()[KEY_VOLCANO_GROUP_NAME],
            "rs"
        );
        assert_eq!(
            pod.metadata.labels.as_ref().unwrap()[LABEL_COSCHEDULING_POD_GROUP],
            "rs"
        );
        assert_eq!(
            pod.metadata.annotations.as_ref().unwrap()[KEY_VOLCANO_GROUP_NAME],
            "rs"
        );
        let multi = RoleSpec {
            pod_group_size: Some(2),
            ..role()
        };
        let podset = podset_for_slot(&gang_set, &multi, "h", 0);
        assert_eq!(
            podset.metadata.labels.as_ref().unwrap()[KEY_VOLCANO_GROUP_NAME],
            "rs"
        );
        // Role-level: each PodSet's own PodGroup, which its gang's pods inherit.
        let with_role_gang = RoleSpec {
            scheduling_strategy: serde_json::from_value(strategy).unwrap(),
            ..multi
        };
        let podset = podset_for_slot(&roleset(json!({"roles": []})), &with_role_gang, "h", 0);
        let name = podset.metadata.name.clone().unwrap();
        assert_eq!(
            podset.metadata.labels.as_ref().unwrap()[KEY_VOLCANO_GROUP_NAME],
            name
        );
        let member = gang_pod(&podset, 1);
        assert_eq!(
            member.metadata.labels.as_ref().unwrap()[KEY_VOLCANO_GROUP_NAME],
            name
        );
        assert_eq!(
            member.metadata.annotations.as_ref().unwrap()[KEY_VOLCANO_GROUP_NAME],
            name
        );
        // No strategy: no membership.
        let pod = stateless_pod(&roleset(json!({"roles": []})), &role(), "h");
        assert!(
            !pod.metadata
                .labels
                .unwrap()
                .contains_key(KEY_VOLCANO_GROUP_NAME)
        );
    }

    fn owned_roleset(policy: Value) -> RoleSet {
        serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "u-1",
                         "labels": {"storm-service-name": "svc"}},
            "spec": {"roles": [], "topologyPolicy": policy}
        }))
        .unwrap()
    }

    fn role() -> RoleSpec {
        RoleSpec {
            name: "prefill".into(),
            template: Some(template("i:1").into()),
            ..RoleSpec::default()
        }
    }

    #[test]
    fn topology_scopes_match_their_group_of_pods() {
        for (scope, labels) in [
            ("StormService", json!({"storm-service-name": "svc"})),
            (
                "RoleSet",
                json!({"storm-service-name": "svc", "roleset-name": "rs"}),
            ),
            (
                "Role",
                json!({"storm-service-name": "svc", "role-name": "prefill"}),
            ),
        ] {
            let roleset = owned_roleset(json!({"scope": scope, "key": "zone"}));
            let pod = stateless_pod(&roleset, &role(), "h");
            let affinity = pod.spec.unwrap().affinity.unwrap().pod_affinity.unwrap();
            assert_eq!(
                serde_json::to_value(&affinity).unwrap(),
                json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": labels},
                                        "topologyKey": "zone"}}]}),
                "scope {scope}, Preferred by default"
            );
        }
    }

    #[test]
    fn required_topology_reaches_pods_and_podset_templates_once() {
        let roleset = owned_roleset(
            json!({"scope": "RoleSet", "mode": "Required", "key": "kubernetes.io/hostname"}),
        );
        let (term, mode) = topology_affinity(&roleset, "prefill").unwrap();
        // The user's template already holds the same term: it is not added twice.
        let mut role = role();
        let mut spec = role.template.as_ref().unwrap().spec.clone().unwrap();
        add_affinity(&mut spec, term.clone(), mode);
        role.template.as_mut().unwrap().spec = Some(spec);
        let pod = stateful_pod(&roleset, &role, "h", 0);
        let required = pod
            .spec
            .unwrap()
            .affinity
            .unwrap()
            .pod_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(required, std::slice::from_ref(&term));
        let podset = podset_for_slot(&roleset, &role, "h", 0);
        assert!(has_affinity(
            podset.spec.template.spec.as_ref().unwrap(),
            &term,
            mode
        ));
    }

    #[test]
    fn no_topology_affinity_without_a_storm_service_or_a_key() {
        let mut direct = owned_roleset(json!({"scope": "Role", "key": "zone"}));
        direct.metadata.labels = None;
        assert!(topology_affinity(&direct, "prefill").is_none());
        let empty = owned_roleset(json!({"scope": "Role", "key": ""}));
        assert!(topology_affinity(&empty, "prefill").is_none());
        let none = stateless_pod(&owned_roleset(Value::Null), &role(), "h");
        assert!(none.spec.unwrap().affinity.is_none());
    }

    #[test]
    fn shorten_keeps_the_first_character_and_the_tail() {
        assert_eq!(shorten("short-", 58), "short-");
        let long = format!("a{}-prefill-", "x".repeat(60));
        let short = shorten(&long, 58);
        assert_eq!(short.len(), 58);
        assert!(short.starts_with('a') && short.ends_with("-prefill-"));
    }

    #[test]
    fn stateless_pods_carry_labels_env_and_owner() {
        let mut roleset: RoleSet = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "u-1",
                         "labels": {"storm-service-name": "svc"},
                         "annotations": {"stormservice.orchestration.aibrix.ai/roleset-index": "2"}},
            "spec": {"roles": []}
        }))
        .unwrap();
        roleset.metadata.uid = Some("u-1".into());
        let role: RoleSpec = serde_json::from_value(json!({"name": "prefill"})).unwrap();
        let role = RoleSpec {
            template: Some(template("i:1").into()),
            ..role
        };
        let pod = stateless_pod(&roleset, &role, "hash1");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("rs-prefill-"));
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels["roleset-name"], "rs");
        assert_eq!(labels["role-name"], "prefill");
        assert_eq!(labels["role-template-hash"], "hash1");
        assert_eq!(labels["app"], "x");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.subdomain.as_deref(), Some("svc"));
        let env: Vec<(String, String)> = spec.containers[0]
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value.unwrap_or_default()))
            .collect();
        assert_eq!(
            env,
            [
                ("STORM_SERVICE_NAME", "svc"),
                ("ROLESET_NAME", "rs"),
                ("ROLESET_INDEX", "2"),
                ("ROLE_NAME", "prefill"),
                ("ROLE_TEMPLATE_HASH", "hash1"),
                ("A", "1"),
            ]
            .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        let owner = &pod.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("RoleSet", Some(true))
        );
    }

    #[test]
    fn pods_carry_their_roles_revision_labels_and_gang_pods_do_not() {
        let roleset: RoleSet = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "u-1",
                "annotations": {
                    "stormservice.orchestration.aibrix.ai/role-revision.prefill": "3",
                    "stormservice.orchestration.aibrix.ai/role-revision-name.prefill": "svc-7d9f",
                    "stormservice.orchestration.aibrix.ai/role-revision.decode": "4",
                }},
            "spec": {"roles": []}
        }))
        .unwrap();
        let role = |name: &str| RoleSpec {
            template: Some(template("i:1").into()),
            ..serde_json::from_value(json!({"name": name})).unwrap()
        };
        let labels = |pod: Pod| pod.metadata.labels.unwrap_or_default();
        let prefill = labels(stateless_pod(&roleset, &role("prefill"), "h"));
        assert_eq!(
            (
                prefill[LABEL_ROLE_REVISION].as_str(),
                prefill[LABEL_ROLE_REVISION_NAME].as_str()
            ),
            ("3", "svc-7d9f")
        );
        // Only what the RoleSet states: a role without a revision-name annotation gets no
        // such label, a role without annotations (a RoleSet of its own) gets none.
        let decode = labels(stateful_pod(&roleset, &role("decode"), "h", 0));
        assert_eq!(decode[LABEL_ROLE_REVISION], "4");
        assert!(!decode.contains_key(LABEL_ROLE_REVISION_NAME));
        let router = labels(stateless_pod(&roleset, &role("router"), "h"));
        assert!(!router.contains_key(LABEL_ROLE_REVISION));
        let gang = podset_for_slot(&roleset, &role("prefill"), "h", 0);
        assert!(
            !gang.labels().contains_key(LABEL_ROLE_REVISION),
            "PodSets and their pods do not carry them, as in AIBrix"
        );
    }

    #[test]
    fn the_headless_service_selects_its_pods_and_is_repaired_only_when_it_drifted() {
        let service: StormService = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": "svc", "namespace": "ns", "uid": "u-1", "labels": {"team": "a"}},
            "spec": {"selector": {"matchLabels": {"app": "svc"}},
                     "template": {"spec": {"roles": []}}}
        }))
        .unwrap();
        let rendered = headless_service(&service);
        let spec = rendered.spec.as_ref().unwrap();
        assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
        assert_eq!(spec.publish_not_ready_addresses, Some(true));
        assert_eq!(
            spec.selector.as_ref().unwrap()[LABEL_STORM_SERVICE_NAME],
            "svc"
        );
        let labels = rendered.labels();
        assert_eq!(
            (
                labels["team"].as_str(),
                labels[LABEL_STORM_SERVICE_NAME].as_str()
            ),
            ("a", "svc")
        );
        assert_eq!(rendered.owner_references()[0].uid, "u-1");
        assert_eq!(
            headless_service_repair(&CachedService::from(&rendered), "svc"),
            None,
            "as rendered"
        );

        let mut drifted = rendered.clone();
        drifted.spec.as_mut().unwrap().publish_not_ready_addresses = None;
        drifted.spec.as_mut().unwrap().ports = Some(vec![Default::default()]);
        let patch = headless_service_repair(&CachedService::from(&drifted), "svc").unwrap();
        assert_eq!(patch["spec"]["publishNotReadyAddresses"], json!(true));
        assert!(
            patch["spec"].get("ports").is_none(),
            "what squall does not keep stays"
        );
        let mut unlabelled = rendered;
        unlabelled.metadata.labels = None;
        assert!(headless_service_repair(&CachedService::from(&unlabelled), "svc").is_some());
    }

    /// Pairing keys (docs/rollouts.md#pairing).
    mod pairing {
        use serde_json::{Value, json};

        use super::super::*;

        fn spec(pairing: Value, prefill: &str, decode: &str, router: &str) -> RoleSetSpec {
            let role = |name: &str, image: &str| json!({"name": name, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}});
            serde_json::from_value(json!({
                "roles": [role("router", router), role("prefill", prefill), role("decode", decode)],
                "pairing": pairing,
            }))
            .unwrap()
        }

        fn group(protocol: Option<&str>) -> Value {
            json!([{"roles": ["prefill", "decode"], "protocol": protocol}])
        }

        #[test]
        fn the_key_follows_the_groups_templates_and_nothing_else() {
            let base = spec(group(None), "p:1", "d:1", "r:1");
            let key = |s: &RoleSetSpec, role: &str| pairing_key(s, s, role);
            let k = key(&base, "prefill");
            assert!(k.is_some());
            assert_eq!(k, key(&base, "decode"), "one key for the group");
            assert_eq!(key(&base, "router"), None, "a role outside every group");
            let router_changed = spec(group(None), "p:1", "d:1", "r:2");
            assert_eq!(
                key(&router_changed, "prefill"),
                k,
                "the router is not paired"
            );
            let decode_changed = spec(group(None), "p:1", "d:2", "r:1");
            assert_ne!(key(&decode_changed, "prefill"), k, "a partner changed");
            let reordered = spec(
                json!([{"roles": ["decode", "prefill"]}]),
                "p:1",
                "d:1",
                "r:1",
            );
            assert_eq!(
                key(&reordered, "prefill"),
                k,
                "the group's order is not a version"
            );
        }

        #[test]
        fn a_paired_roles_pods_and_podsets_carry_the_key_and_so_do_their_gangs_pods() {
            let rs: RoleSet = serde_json::from_value(json!({
                "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
                "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid"},
                "spec": {"pairing": [{"roles": ["prefill", "decode"]}], "roles": [
                    {"name": "prefill", "podGroupSize": 2,
                     "template": {"spec": {"containers": [{"name": "c", "image": "p:1"}]}}},
                    {"name": "decode",
                     "template": {"spec": {"containers": [{"name": "c", "image": "d:1"}]}}},
                    {"name": "router",
                     "template": {"spec": {"containers": [{"name": "c", "image": "r:1"}]}}}]}
            }))
            .unwrap();
            let roles = rs.spec.roles.clone().unwrap();
            let key = pairing_key(&rs.spec, &rs.spec, "prefill").unwrap();
            let keyed = |labels: &BTreeMap<String, String>| labels.get(LABEL_PAIRING_KEY).cloned();
            let podset = podset_for_slot(&rs, &roles[0], "h", 0);
            assert_eq!(keyed(podset.labels()), Some(key.clone()));
            assert_eq!(keyed(gang_pod(&podset, 1).labels()), Some(key.clone()));
            assert_eq!(
                keyed(stateless_pod(&rs, &roles[1], "h").labels()),
                Some(key)
            );
            assert_eq!(keyed(stateless_pod(&rs, &roles[2], "h").labels()), None);
        }

        #[test]
        fn a_protocol_is_the_key_across_template_changes() {
            let one = spec(group(Some("kv-v2")), "p:1", "d:1", "r:1");
            let two = spec(group(Some("kv-v2")), "p:2", "d:2", "r:1");
            assert_eq!(pairing_key(&one, &one, "prefill").as_deref(), Some("kv-v2"));
            assert_eq!(pairing_key(&two, &two, "decode").as_deref(), Some("kv-v2"));
        }

        #[test]
        fn a_stable_pod_takes_the_key_of_the_templates_it_is_rendered_from() {
            let stable = spec(Value::Null, "p:1", "d:1", "r:1");
            let canary = spec(group(None), "p:2", "d:2", "r:1");
            let stable_key = pairing_key(&canary, &stable, "prefill");
            assert!(stable_key.is_some(), "paired by the RoleSet's own groups");
            assert_ne!(stable_key, pairing_key(&canary, &canary, "prefill"));
            assert_eq!(
                stable_key,
                pairing_key(&spec(group(None), "p:1", "d:1", "r:9"), &stable, "decode"),
                "the same key for the stable pods of every role of the group"
            );
            let with_protocol = spec(group(Some("kv-v1")), "p:1", "d:1", "r:1");
            assert_eq!(
                pairing_key(&canary, &with_protocol, "prefill").as_deref(),
                Some("kv-v1"),
                "the stable revision's protocol"
            );
        }
    }
}
