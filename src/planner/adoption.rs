//! Adoption: children labelled with another template hash — AIBrix's, after a cut-over; its
//! hashes are computed differently — that already are what their role would create now keep
//! running under squall's hash instead of being replaced. The RoleSet pass adopts what this
//! finds; `squall adopt --dry-run` prints it beforehand.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::ResourceExt;

use super::in_place::adoptable;
use super::render::{podset_for_slot, role_revision_labels, template_hash};
use super::revision::{UpdateRevision, sort_history, update_revision};
use super::roleset_pass::{RoleChildren, desired_pod, of_role, role_children};
use crate::api::keys::{
    LABEL_ROLE_TEMPLATE_HASH, LABEL_STORM_SERVICE_NAME, LABEL_STORM_SERVICE_REVISION,
};
use crate::api::pod::CachedPod;
use crate::api::{
    PodSet, RoleSet, RoleSetTemplateSpec, RoleSpec, StormService, StormServiceUpdateStrategyType,
};

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
    let by_name: BTreeMap<&str, &CachedPod> = of_role(pods, &role.name)
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
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
        let raw = cached.spec.as_deref().map_or("", |s| s.get());
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
    let uid = live.uid();
    let owned = |meta: &kube::api::ObjectMeta| {
        meta.owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
    };
    let pods: Vec<Arc<CachedPod>> = pods
        .iter()
        .filter(|p| owned(&p.metadata))
        .cloned()
        .collect();
    let podsets: Vec<Arc<PodSet>> = podsets
        .iter()
        .filter(|p| owned(&p.metadata))
        .cloned()
        .collect();
    let roles: Vec<&RoleSpec> = target.spec.roles.iter().flatten().collect();
    role_children(&target, &pods, &podsets)
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

/// Pods of a plain-pod role on `target_hash` whose role-revision labels are not the
/// RoleSet's per-role annotations (pods AIBrix labelled, adopted before the RoleSet moved to
/// squall's revision; or a revision renumbered by a rollback): relabelled, nothing else.
pub fn stale_revision_labels(
    roleset: &RoleSet,
    role: &RoleSpec,
    children: &RoleChildren,
    target_hash: &str,
    pods: &[Arc<CachedPod>],
) -> Vec<String> {
    if children.gang {
        return Vec::new();
    }
    let wanted = role_revision_labels(roleset, &role.name);
    if wanted.is_empty() {
        return Vec::new();
    }
    of_role(pods, &role.name)
        .filter(|pod| {
            pod.metadata.deletion_timestamp.is_none()
                && pod
                    .labels()
                    .get(LABEL_ROLE_TEMPLATE_HASH)
                    .map(String::as_str)
                    == Some(target_hash)
                && wanted
                    .iter()
                    .any(|(key, value)| pod.labels().get(key) != Some(value))
        })
        .map(ResourceExt::name_any)
        .collect()
}
