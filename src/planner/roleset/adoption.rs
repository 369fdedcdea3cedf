//! Adoption: children labelled with another template hash — AIBrix's, after a cut-over; its
//! hashes are computed differently — that already are what their role would create now keep
//! running under squall's hash instead of being replaced. The RoleSet pass adopts what this
//! finds; `squall adopt --dry-run` prints it beforehand.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::children::{RoleChildren, desired_pod, of_role, role_children};
use super::in_place::adoptable;
use crate::api::cached::meta::Labelled;
use crate::api::cached::pod::CachedPod;
use crate::api::keys::{
    LABEL_PAIRING_KEY, LABEL_ROLE_TEMPLATE_HASH, LABEL_STORM_SERVICE_NAME,
    LABEL_STORM_SERVICE_REVISION,
};
use crate::api::{
    PodSet, RoleSet, RoleSetTemplateSpec, RoleSpec, StormService, StormServiceUpdateStrategyType,
    controlled_by,
};
use crate::planner::availability::Availability;
use crate::planner::render::{pairing_key, podset_for_slot, role_revision_labels, template_hash};
use crate::planner::revision::{UpdateRevision, sort_history, update_revision};

/// The children of a role labelled with another template hash that already are what the
/// role would create now ([`adoptable`]): pods, or the PodSets of a multi-node role. Their
/// views count them as updated from this pass on. Children the role's partition keeps on its
/// stable template, pods being updated in place and pods whose spec lacks one of the
/// template's images (a rollout's usual case, told apart without decoding the spec) are not
/// looked at.
pub fn adopt(
    roleset: &RoleSet,
    role: &RoleSpec,
    children: &mut RoleChildren,
    stable_hash: Option<&str>,
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
) -> Vec<String> {
    if children.gang {
        return adopt_podsets(roleset, role, children, stable_hash, podsets);
    }
    let template = role.template.clone().unwrap_or_default();
    let target_hash = template_hash(&template);
    let images: Vec<String> = template
        .spec
        .iter()
        .flat_map(|spec| &spec.containers)
        .filter_map(|c| c.image.as_ref())
        .map(|image| serde_json::to_string(image).expect("a string serializes"))
        .collect();
    let by_name: BTreeMap<&str, &CachedPod> =
        of_role(pods, &role.name).map(|p| (p.name(), p)).collect();
    let mut adopted = Vec::new();
    for view in children.children.iter_mut().filter(|v| {
        v.hash != target_hash
            && Some(v.hash.as_str()) != stable_hash
            && !v.terminating
            && v.running
            && v.in_place_target.is_none()
    }) {
        let Some(cached) = by_name.get(view.name.as_str()) else {
            continue;
        };
        let raw = cached.spec_text().unwrap_or_default();
        if !images.iter().all(|image| raw.contains(image.as_str())) {
            continue;
        }
        let Ok(pod) = cached.to_pod() else { continue };
        if adoptable(&pod, &desired_pod(roleset, role, &target_hash, &pod)) {
            view.hash.clone_from(&target_hash);
            adopted.push(view.name.clone());
        }
    }
    adopted
}

/// [`adopt`] for a multi-node role: a PodSet is what the role would create when its gang
/// size and its pod template — compared as pods, with the same tolerance — are.
fn adopt_podsets(
    roleset: &RoleSet,
    role: &RoleSpec,
    children: &mut RoleChildren,
    stable_hash: Option<&str>,
    podsets: &[Arc<PodSet>],
) -> Vec<String> {
    let target_hash = template_hash(&role.template.clone().unwrap_or_default());
    let as_pod = |template: &PodTemplateSpec| Pod {
        metadata: template.metadata.clone().unwrap_or_default(),
        spec: template.spec.clone(),
        status: None,
    };
    let mut adopted = Vec::new();
    for view in children
        .children
        .iter_mut()
        .filter(|v| v.hash != target_hash && Some(v.hash.as_str()) != stable_hash && !v.terminating)
    {
        let (Some(live), Some(slot)) = (
            podsets
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(&view.name)),
            view.slot,
        ) else {
            continue;
        };
        let mut desired = podset_for_slot(roleset, role, &target_hash, slot).spec;
        // A gang's pods get their subdomain from the PodSet's StormService label, whatever
        // its template says (`gang_pod`), so a template without one is the same gang.
        let named = live
            .labels()
            .get(LABEL_STORM_SERVICE_NAME)
            .is_some_and(|s| !s.is_empty());
        if let Some(spec) = desired.template.spec.as_mut().filter(|_| named) {
            spec.subdomain = live
                .spec
                .template
                .spec
                .as_ref()
                .and_then(|s| s.subdomain.clone());
        }
        if live.spec.pod_group_size == desired.pod_group_size
            && adoptable(&as_pod(&live.spec.template), &as_pod(&desired.template))
        {
            view.hash.clone_from(&target_hash);
            adopted.push(view.name.clone());
        }
    }
    adopted
}

/// What taking over a StormService would do to one of its RoleSets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleSetFate {
    /// The RoleSet.
    pub name: String,
    /// Kept (its revision holds the template, or `InPlaceUpdate` moves it in place), or
    /// replaced with every child.
    pub kept: bool,
    /// By role, in spec order, for a kept RoleSet.
    pub roles: Vec<RoleFate>,
}

/// What taking over would do to the children of one role of a kept RoleSet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoleFate {
    /// Role name.
    pub role: String,
    /// Already on squall's template hash.
    pub current: Vec<String>,
    /// Relabelled, not restarted.
    pub adopted: Vec<String>,
    /// Different from the template: replaced, within the role's budgets.
    pub replaced: Vec<String>,
}

/// What taking over a StormService would do (`squall adopt --dry-run`): the revision kept,
/// if any, and each RoleSet's fate — the same decisions the controllers make, on the same
/// observations. Scaling to a changed replica count comes on top.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CutOverPlan {
    /// The existing revision that holds the template (squall keeps it), or `None`: squall
    /// writes a new one and the template rolls.
    pub revision: Option<String>,
    /// Its RoleSets, by name.
    pub rolesets: Vec<RoleSetFate>,
}

/// Predicts the take-over of `service` from its revisions, RoleSets and their children.
pub fn predict(
    service: &StormService,
    history: &[ControllerRevision],
    rolesets: &[RoleSet],
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
) -> CutOverPlan {
    let mut history = history.to_vec();
    sort_history(&mut history);
    let template = &service.spec.template;
    let revision = match update_revision(&history, template) {
        UpdateRevision::Newest(i) | UpdateRevision::Rollback { index: i, .. } => {
            Some(history[i].name_any())
        }
        UpdateRevision::Adopt { .. } => history.last().map(ResourceExt::name_any),
        UpdateRevision::Create { .. } => None,
    };
    let in_place =
        service.spec.update_strategy_type() == StormServiceUpdateStrategyType::InPlaceUpdate;
    let fates = rolesets
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(|live| {
            let on_revision = revision.is_some()
                && live.labels().get(LABEL_STORM_SERVICE_REVISION) == revision.as_ref();
            let kept = in_place || on_revision;
            let roles = if kept {
                roles_of(live, template, pods, podsets)
            } else {
                Vec::new()
            };
            RoleSetFate {
                name: live.name_any(),
                kept,
                roles,
            }
        })
        .collect();
    CutOverPlan {
        revision,
        rolesets: fates,
    }
}

/// The fate of each role's children of `live`, once its spec is the template's.
fn roles_of(
    live: &RoleSet,
    template: &RoleSetTemplateSpec,
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
) -> Vec<RoleFate> {
    let target = RoleSet {
        spec: template.spec.clone().unwrap_or_default(),
        ..live.clone()
    };
    let uid = live.metadata.uid.as_deref();
    let pods: Vec<Arc<CachedPod>> = pods
        .iter()
        .filter(|p| uid.is_some() && p.metadata.controller_uid() == uid)
        .cloned()
        .collect();
    let podsets: Vec<Arc<PodSet>> = podsets
        .iter()
        .filter(|p| controlled_by(&p.metadata, &live.metadata))
        .cloned()
        .collect();
    let roles: Vec<&RoleSpec> = target.spec.roles.iter().flatten().collect();
    // Adoption compares templates; when children are available does not matter to it.
    role_children(&target, &pods, &podsets, Availability::default())
        .into_iter()
        .zip(roles)
        .map(|(mut children, role)| {
            let target_hash = template_hash(&role.template.clone().unwrap_or_default());
            let live_children: Vec<(String, String)> = children
                .children
                .iter()
                .filter(|v| !v.terminating)
                .map(|v| (v.name.clone(), v.hash.clone()))
                .collect();
            let adopted = adopt(&target, role, &mut children, None, &pods, &podsets);
            let mut fate = RoleFate {
                role: role.name.clone(),
                adopted,
                ..RoleFate::default()
            };
            for (name, hash) in live_children {
                if hash == target_hash {
                    fate.current.push(name);
                } else if !fate.adopted.contains(&name) {
                    fate.replaced.push(name);
                }
            }
            fate
        })
        .collect()
}

/// Children of a role on `target_hash` whose version labels are not what the RoleSet says
/// now — a plain-pod role's pods whose role-revision labels are not the RoleSet's per-role
/// annotations (pods AIBrix labelled, adopted before the RoleSet moved to squall's revision;
/// a revision renumbered by a rollback), and any child, pod or a multi-node role's PodSet,
/// whose pairing key is not its group's (a partner's template changed, or the group did):
/// relabelled with [`relabel_patch`], nothing else.
pub fn stale_revision_labels(
    roleset: &RoleSet,
    role: &RoleSpec,
    children: &RoleChildren,
    target_hash: &str,
    pods: &[Arc<CachedPod>],
    podsets: &[Arc<PodSet>],
) -> Vec<String> {
    let key = pairing_key(&roleset.spec, &roleset.spec, &role.name);
    let on_target = |child: &dyn Labelled, deleting: bool| {
        !deleting && child.label(LABEL_ROLE_TEMPLATE_HASH) == Some(target_hash)
    };
    let keyed_apart = |child: &dyn Labelled| child.label(LABEL_PAIRING_KEY) != key.as_deref();
    if children.gang {
        return of_role(podsets, &role.name)
            .filter(|podset| {
                on_target(*podset, podset.metadata.deletion_timestamp.is_some())
                    && keyed_apart(*podset)
            })
            .map(ResourceExt::name_any)
            .collect();
    }
    let wanted = role_revision_labels(roleset, &role.name);
    of_role(pods, &role.name)
        .filter(|pod| {
            on_target(*pod, pod.is_deleting())
                && (keyed_apart(*pod)
                    || wanted
                        .iter()
                        .any(|(key, value)| pod.labels().get(key) != Some(value.as_str())))
        })
        .map(|pod| pod.name().to_string())
        .collect()
}

/// The merge patch of [`stale_revision_labels`]' children: the role-revision labels (a
/// PodSet does not carry them) and the pairing key, removed from a role no longer paired.
pub fn relabel_patch(roleset: &RoleSet, role: &str, gang: bool) -> Value {
    let mut labels = serde_json::Map::new();
    if !gang {
        labels.extend(
            role_revision_labels(roleset, role)
                .into_iter()
                .map(|(key, value)| (key, Value::String(value))),
        );
    }
    labels.insert(
        LABEL_PAIRING_KEY.into(),
        pairing_key(&roleset.spec, &roleset.spec, role).map_or(Value::Null, Value::String),
    );
    json!({"metadata": {"labels": labels}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::keys::LABEL_ROLE_TEMPLATE_HASH;
    use crate::planner::render::stateless_pod;
    use serde_json::json;

    fn roleset(image: &str) -> RoleSet {
        serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid",
                "labels": {"storm-service-name": "llm"}},
            "spec": {"roles": [{"name": "decode", "replicas": 2,
                "template": {"spec": {"containers": [{"name": "engine", "image": image}]}}}]}
        }))
        .unwrap()
    }

    /// A pod of `rs` as another controller made it from `image`: its own hash label, and
    /// what the API server fills in.
    fn alien_pod(rs: &RoleSet, name: &str, image: &str) -> Arc<CachedPod> {
        let role = &roleset(image).spec.roles.unwrap()[0];
        let mut pod = stateless_pod(rs, role, "aibrix-hash");
        pod.metadata.name = Some(name.into());
        pod.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_ROLE_TEMPLATE_HASH.into(), "7d9885".into());
        let spec = pod.spec.as_mut().unwrap();
        spec.restart_policy = Some("Always".into());
        spec.node_name = Some("kwok-node-0".into());
        spec.containers[0].image_pull_policy = Some("IfNotPresent".into());
        Arc::new(CachedPod::from_pod(&pod))
    }

    #[test]
    fn a_paired_roles_pods_on_its_template_take_its_key_and_lose_it_unpaired() {
        let mut rs = roleset("engine:1");
        rs.spec.roles.as_mut().unwrap().push(
            serde_json::from_value(json!({"name": "prefill",
                "template": {"spec": {"containers": [{"name": "engine", "image": "p:1"}]}}}))
            .unwrap(),
        );
        let role = rs.spec.roles.as_ref().unwrap()[0].clone();
        let target = template_hash(role.template.as_ref().unwrap());
        let pod = |rs: &RoleSet, name: &str, hash: &str| {
            let mut pod = stateless_pod(rs, &role, hash);
            pod.metadata.name = Some(name.into());
            Arc::new(CachedPod::from_pod(&pod))
        };
        let stale = |rs: &RoleSet, pods: &[Arc<CachedPod>]| {
            let children = role_children(rs, pods, &[], Availability::default()).remove(0);
            stale_revision_labels(rs, &role, &children, &target, pods, &[])
        };
        // Made before the group was.
        let unkeyed = [
            pod(&rs, "rs-decode-a", &target),
            pod(&rs, "rs-decode-old", "old"),
        ];
        rs.spec.pairing =
            serde_json::from_value(json!([{"roles": ["decode", "prefill"]}])).unwrap();
        assert_eq!(
            stale(&rs, &unkeyed),
            ["rs-decode-a"],
            "a pod on the target takes the key; one on another template keeps what it has"
        );
        let key = pairing_key(&rs.spec, &rs.spec, "decode").unwrap();
        assert_eq!(
            relabel_patch(&rs, "decode", false)["metadata"]["labels"][LABEL_PAIRING_KEY],
            json!(key)
        );
        let keyed = [pod(&rs, "rs-decode-b", &target)];
        assert!(stale(&rs, &keyed).is_empty(), "keyed already");
        let mut unpaired = rs.clone();
        unpaired.spec.pairing = None;
        assert_eq!(stale(&unpaired, &keyed), ["rs-decode-b"]);
        assert_eq!(
            relabel_patch(&unpaired, "decode", true),
            json!({"metadata": {"labels": {LABEL_PAIRING_KEY: null}}}),
            "the key goes; a PodSet carries no role-revision labels"
        );
    }

    #[test]
    fn a_pod_that_already_is_the_template_is_adopted_and_counts_as_updated() {
        let rs = roleset("engine:1");
        let pods = vec![
            alien_pod(&rs, "rs-decode-a", "engine:1"),
            alien_pod(&rs, "rs-decode-b", "engine:0"),
        ];
        let role = &rs.spec.roles.as_ref().unwrap()[0];
        let mut children = role_children(&rs, &pods, &[], Availability::default()).remove(0);
        let adopted = adopt(&rs, role, &mut children, None, &pods, &[]);
        assert_eq!(adopted, ["rs-decode-a"], "the other runs another image");
        let target = template_hash(role.template.as_ref().unwrap());
        let hashes: Vec<(&str, bool)> = children
            .children
            .iter()
            .map(|v| (v.name.as_str(), v.hash == target))
            .collect();
        assert_eq!(hashes, [("rs-decode-a", true), ("rs-decode-b", false)]);
    }

    #[test]
    fn pods_the_partition_keeps_on_the_stable_template_are_not_looked_at() {
        let rs = roleset("engine:1");
        let pods = vec![alien_pod(&rs, "rs-decode-a", "engine:1")];
        let role = &rs.spec.roles.as_ref().unwrap()[0];
        let mut children = role_children(&rs, &pods, &[], Availability::default()).remove(0);
        assert!(adopt(&rs, role, &mut children, Some("7d9885"), &pods, &[]).is_empty());
    }

    #[test]
    fn the_prediction_keeps_rolesets_in_place_and_names_each_pods_fate() {
        let mut service: StormService = serde_json::from_value(json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
            "metadata": {"name": "llm", "namespace": "ns", "uid": "ss-uid"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "llm"}},
                "updateStrategy": {"type": "InPlaceUpdate"},
                "template": {"metadata": {"labels": {"app": "llm"}}, "spec": {"roles": [
                    {"name": "decode", "replicas": 2, "template": {"spec": {"containers": [
                        {"name": "engine", "image": "engine:1"}]}}}]}}}
        }))
        .unwrap();
        let mut rs = roleset("engine:1");
        rs.metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(LABEL_STORM_SERVICE_REVISION.into(), "llm-aibrix".into());
        let owner = json!([{"apiVersion": "orchestration.aibrix.ai/v1alpha1",
            "kind": "RoleSet", "name": "rs", "uid": "rs-uid", "controller": true}]);
        let owned = |pod: Arc<CachedPod>| {
            let mut pod = (*pod).clone();
            let owners: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> =
                serde_json::from_value(owner.clone()).unwrap();
            pod.metadata.owner_references = owners.iter().map(Into::into).collect();
            Arc::new(pod)
        };
        let pods = vec![
            owned(alien_pod(&rs, "rs-decode-a", "engine:1")),
            owned(alien_pod(&rs, "rs-decode-b", "engine:0")),
        ];
        let plan = predict(&service, &[], &[rs.clone()], &pods, &[]);
        assert_eq!(plan.revision, None, "no revision holds the template");
        assert_eq!(
            plan.rolesets,
            [RoleSetFate {
                name: "rs".into(),
                kept: true,
                roles: vec![RoleFate {
                    role: "decode".into(),
                    current: vec![],
                    adopted: vec!["rs-decode-a".into()],
                    replaced: vec!["rs-decode-b".into()],
                }],
            }]
        );
        // Replica mode replaces a RoleSet whose revision does not hold the template.
        service.spec.update_strategy =
            serde_json::from_value(json!({"type": "RollingUpdate"})).unwrap();
        let plan = predict(&service, &[], &[rs], &pods, &[]);
        assert!(!plan.rolesets[0].kept && plan.rolesets[0].roles.is_empty());
    }
}
