//! StormService ControllerRevisions (docs/rollouts.md#replica-and-pooled-mode,
//! docs/aibrix-compatibility.md): the data format, its hash and name, and reading a role's stable
//! template back (`controller::revision` writes them).
//!
//! `data` is `{"spec":{"template":{…, "$patch":"replace"}}}` — the StormService's RoleSet
//! template **without role `replicas`**, so scaling a role (what the pooled-mode autoscaler
//! does) never creates a revision. It is stored as canonical JSON (sorted keys), so equal
//! templates give byte-equal data and equal hashes.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::ResourceExt;
#[cfg(test)]
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use super::render::{SAFE_ALPHABET, canonical_json};
use crate::api::RoleSetTemplateSpec;
use crate::api::cached::shared::Shared;

/// Length of the hash suffix of a revision name.
const HASH_LEN: usize = 6;
/// Longest owner-name prefix of a revision name (upstream's limit).
const NAME_PREFIX_LIMIT: usize = 223;
/// Collisions tried before giving up on a name.
pub const MAX_COLLISIONS: u32 = 16;

/// Why a revision could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RevisionError {
    /// The revision's data is not a StormService template.
    #[error("ControllerRevision {name}: data is not a StormService template: {reason}")]
    Malformed {
        /// Revision name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The revision's template has no such role.
    #[error("ControllerRevision {name} has no role {role}")]
    NoSuchRole {
        /// Revision name.
        name: String,
        /// Role asked for.
        role: String,
    },
    /// Every candidate name was taken by revisions with other data.
    #[error("ControllerRevision names for {owner} collide {MAX_COLLISIONS} times")]
    Collisions {
        /// Owner name.
        owner: String,
    },
}

/// The revision data of a StormService template: the template without role replicas.
pub fn revision_data(template: &RoleSetTemplateSpec) -> Value {
    let mut template = serde_json::to_value(template).expect("a RoleSet template serializes");
    if let Some(roles) = template
        .pointer_mut("/spec/roles")
        .and_then(Value::as_array_mut)
    {
        for role in roles.iter_mut().filter_map(Value::as_object_mut) {
            role.remove("replicas");
        }
    }
    if let Value::Object(map) = &mut template {
        map.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": template}})
}

/// The revision hash: FNV-32 over the canonical data followed by the decimal collision count,
/// written as six characters of the safe alphabet.
pub fn revision_hash(data: &Value, collision_count: u32) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    let bytes = canonical_json(data).into_bytes();
    let probe = collision_count.to_string().into_bytes();
    for byte in bytes.iter().chain(&probe) {
        hash = hash.wrapping_mul(0x0100_0193);
        hash ^= u32::from(*byte);
    }
    // Base 27 over the safe alphabet: six characters keep 27^6 ≈ 3.9e8 values, where cutting
    // the decimal digits to six (upstream) would drop the low digits that the collision
    // count moves.
    let mut rest = hash;
    let mut encoded = [0u8; HASH_LEN];
    for slot in encoded.iter_mut().rev() {
        *slot = SAFE_ALPHABET[(rest % SAFE_ALPHABET.len() as u32) as usize];
        rest /= SAFE_ALPHABET.len() as u32;
    }
    String::from_utf8(encoded.to_vec()).expect("the safe alphabet is ASCII")
}

/// `<owner name, cut to 223 characters>-<hash>`.
pub fn revision_name(owner: &str, hash: &str) -> String {
    let prefix: String = owner.chars().take(NAME_PREFIX_LIMIT).collect();
    format!("{prefix}-{hash}")
}

/// Whether `revision` holds `template` (role replicas aside) byte for byte: squall's own
/// revisions, stored as canonical JSON.
pub fn holds(revision: &ControllerRevision, template: &RoleSetTemplateSpec) -> bool {
    let data = canonical_json(&revision_data(template));
    revision
        .data
        .as_ref()
        .is_some_and(|stored| canonical_json(&stored.0) == data)
}

/// Whether `revision` holds `template` as squall reads it: byte for byte ([`holds`]), or — a
/// revision another controller wrote; AIBrix's carries role replicas and Go's encoding of
/// empty fields — once the template it stores is read into squall's types. Taking over from
/// AIBrix keeps what was made from such a revision.
pub fn holds_as_read(revision: &ControllerRevision, template: &RoleSetTemplateSpec) -> bool {
    if holds(revision, template) {
        return true;
    }
    let Ok(held) = template_of(revision) else {
        return false;
    };
    let (mut held, mut wanted) = (revision_data(&held), revision_data(template));
    without_empty_objects(&mut held);
    without_empty_objects(&mut wanted);
    canonical_json(&held) == canonical_json(&wanted)
}

/// Drops the `{}` Go's JSON encoding writes for empty structs it cannot omit
/// (`disruptionTolerance: {}`, `resources: {}`): they mean what absence means — except an
/// `emptyDir: {}`, which makes a volume what it is.
fn without_empty_objects(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|key, v| key == "emptyDir" || v.as_object().is_none_or(|o| !o.is_empty()));
            for (key, v) in map.iter_mut() {
                if key != "emptyDir" {
                    without_empty_objects(v);
                }
            }
            // A struct holding only empty structs is empty in turn.
            map.retain(|key, v| key == "emptyDir" || v.as_object().is_none_or(|o| !o.is_empty()));
        }
        Value::Array(items) => items.iter_mut().for_each(without_empty_objects),
        _ => {}
    }
}

/// The collision count that named `revision`: the status copy of the count can lag behind
/// (a status write lost to a conflict), and it must never go back below a count in use.
pub fn collision_count_of(revision: &ControllerRevision) -> Option<u32> {
    let data = &revision.data.as_ref()?.0;
    let name = revision.name_any();
    (0..MAX_COLLISIONS).find(|&count| name.ends_with(&format!("-{}", revision_hash(data, count))))
}

/// The StormService template a revision holds (without role replicas).
pub fn template_of(revision: &ControllerRevision) -> Result<RoleSetTemplateSpec, RevisionError> {
    let name = revision.name_any();
    let malformed = |reason: String| RevisionError::Malformed {
        name: name.clone(),
        reason,
    };
    let data = revision
        .data
        .as_ref()
        .ok_or_else(|| malformed("no data".into()))?;
    let template = data
        .0
        .pointer("/spec/template")
        .ok_or_else(|| malformed("no spec.template".into()))?;
    let mut template = template.clone();
    if let Value::Object(map) = &mut template {
        map.remove("$patch");
    }
    serde_json::from_value(template).map_err(|e| malformed(e.to_string()))
}

/// The pod template of `role` held by a revision.
pub fn role_template(
    revision: &ControllerRevision,
    role: &str,
) -> Result<PodTemplateSpec, RevisionError> {
    let name = revision.name_any();
    template_of(revision)?
        .spec
        .and_then(|s| s.roles)
        .into_iter()
        .flatten()
        .find(|r| r.name == role)
        .map(|r| r.template.map(Shared::into_inner).unwrap_or_default())
        .ok_or_else(|| RevisionError::NoSuchRole {
            name: name.clone(),
            role: role.to_string(),
        })
}

/// Where the update revision comes from (docs/rollouts.md#replica-and-pooled-mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpdateRevision {
    /// The newest revision, `history[i]`, holds the template: it is reused.
    Newest(usize),
    /// An older one, `history[index]`, holds it — a rollback: it becomes the newest,
    /// renumbered `revision`.
    Rollback {
        /// Its place in the history.
        index: usize,
        /// Its new number.
        revision: i64,
    },
    /// None holds it: a revision numbered `revision` is written.
    Create {
        /// The new revision's number.
        revision: i64,
    },
    /// The newest revision is another controller's (AIBrix's, at a cut-over) and holds the
    /// template as squall reads it: squall writes the template in its own format under the
    /// same number, `revision` — the same place in the history.
    Adopt {
        /// The number they share.
        revision: i64,
    },
}

/// Orders a StormService's revisions oldest first: by number, then creation, then name.
pub fn sort_history(history: &mut [ControllerRevision]) {
    history.sort_by(|a, b| {
        (a.revision, &a.metadata.creation_timestamp, a.name_any()).cmp(&(
            b.revision,
            &b.metadata.creation_timestamp,
            b.name_any(),
        ))
    });
}

/// Where the update revision of `template` comes from, over `history` sorted oldest first.
pub fn update_revision(
    history: &[ControllerRevision],
    template: &RoleSetTemplateSpec,
) -> UpdateRevision {
    let next = history.last().map_or(1, |r| r.revision.saturating_add(1));
    match history.iter().rposition(|r| holds(r, template)) {
        Some(i) if i + 1 == history.len() => UpdateRevision::Newest(i),
        Some(index) => UpdateRevision::Rollback {
            index,
            revision: next,
        },
        None => match history.last() {
            // Another controller's: its name is not squall's hash of its data.
            Some(newest)
                if collision_count_of(newest).is_none() && holds_as_read(newest, template) =>
            {
                UpdateRevision::Adopt {
                    revision: newest.revision,
                }
            }
            _ => UpdateRevision::Create { revision: next },
        },
    }
}

/// The other controller's revision `update` takes the place of, when this pass is the
/// cut-over: the first revision squall writes (or adopts) over a newest revision whose name
/// is not squall's hash of its data. None for a revision reused or rolled back to.
pub fn cut_over_from(history: &[ControllerRevision], update: UpdateRevision) -> Option<String> {
    match update {
        UpdateRevision::Create { .. } | UpdateRevision::Adopt { .. } => history
            .last()
            .filter(|newest| collision_count_of(newest).is_none())
            .map(ResourceExt::name_any),
        UpdateRevision::Newest(_) | UpdateRevision::Rollback { .. } => None,
    }
}

/// The revision RoleSets come from — the stored `currentRevision` while the history holds
/// it, else `update` — and the stored name when that revision is gone (and is not the
/// update's).
pub fn current_revision(
    history: &[ControllerRevision],
    stored: Option<&str>,
    update: &ControllerRevision,
) -> (ControllerRevision, Option<String>) {
    let Some(stored) = stored else {
        return (update.clone(), None);
    };
    match history
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(stored))
    {
        Some(found) => (found.clone(), None),
        None if update.metadata.name.as_deref() == Some(stored) => (update.clone(), None),
        None => (update.clone(), Some(stored.to_string())),
    }
}

/// The revisions to delete: the oldest beyond `limit` of those nothing uses (`in_use`: the
/// current and update revisions and every RoleSet's).
pub fn expired_revisions(
    history: &[ControllerRevision],
    in_use: &BTreeSet<String>,
    limit: usize,
) -> Vec<String> {
    let unused: Vec<String> = history
        .iter()
        .map(ResourceExt::name_any)
        .filter(|name| !in_use.contains(name))
        .collect();
    let excess = unused.len().saturating_sub(limit);
    unused.into_iter().take(excess).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RoleSetSpec, RoleSpec};
    use k8s_openapi::apimachinery::pkg::runtime::RawExtension;

    fn template(replicas: i32, image: &str) -> RoleSetTemplateSpec {
        let role: RoleSpec = serde_json::from_value(json!({
            "name": "decode",
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "main", "image": image}]}},
        }))
        .unwrap();
        RoleSetTemplateSpec {
            metadata: None,
            spec: Some(RoleSetSpec {
                roles: Some(vec![role].into()),
                ..RoleSetSpec::default()
            }),
        }
    }

    #[test]
    fn role_replicas_do_not_change_the_revision() {
        let one = revision_data(&template(1, "v1"));
        let five = revision_data(&template(5, "v1"));
        assert_eq!(one, five);
        assert_eq!(revision_hash(&one, 0), revision_hash(&five, 0));
        assert_ne!(
            revision_hash(&one, 0),
            revision_hash(&revision_data(&template(1, "v2")), 0)
        );
        assert_eq!(one["spec"]["template"]["$patch"], "replace");
    }

    /// A revision as AIBrix's controller writes it: the template with role replicas, Go's
    /// `{}` for empty structs and `creationTimestamp: null`, named by a hash squall does not
    /// reproduce.
    fn aibrix_revision(number: i64, image: &str, volume: serde_json::Value) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some("llm-5b74cf".into()),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(json!({"spec": {"template": {
                "$patch": "replace",
                "metadata": {"creationTimestamp": null},
                "spec": {"roles": [{
                    "name": "decode", "replicas": 3, "disruptionTolerance": {},
                    "updateStrategy": {},
                    "template": {"metadata": {"creationTimestamp": null}, "spec": {
                        "containers": [{"name": "main", "image": image, "resources": {}}],
                        "volumes": volume,
                    }},
                }]},
            }}}))),
            revision: number,
        }
    }

    fn with_volume(volume: serde_json::Value) -> RoleSetTemplateSpec {
        let mut template = template(1, "v1");
        let role = &mut template.spec.as_mut().unwrap().roles.as_mut().unwrap()[0];
        role.template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .volumes = serde_json::from_value(volume).unwrap();
        template
    }

    #[test]
    fn aibrixs_newest_revision_holding_the_template_is_taken_over_in_its_place() {
        let no_volumes = json!([]);
        let history = [aibrix_revision(4, "v1", no_volumes.clone())];
        let wanted = with_volume(no_volumes);
        assert!(!holds(&history[0], &wanted), "not byte for byte");
        assert!(holds_as_read(&history[0], &wanted));
        assert_eq!(
            update_revision(&history, &wanted),
            UpdateRevision::Adopt { revision: 4 }
        );
        // A template AIBrix's revision does not hold rolls as any change does.
        assert_eq!(
            update_revision(&history, &template(1, "v2")),
            UpdateRevision::Create { revision: 5 }
        );
    }

    #[test]
    fn squalls_own_revisions_are_never_taken_over() {
        // A template that differs from squall's newest revision only by an empty struct is
        // a new revision, never a second one under the same number.
        let data = revision_data(&template(1, "v1"));
        let ours = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name("llm", &revision_hash(&data, 0))),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(data)),
            revision: 2,
        };
        let mut with_empty = template(1, "v1");
        with_empty.spec.as_mut().unwrap().roles.as_mut().unwrap()[0].disruption_tolerance =
            Some(Default::default());
        assert!(holds_as_read(&ours, &with_empty));
        assert_eq!(
            update_revision(&[ours], &with_empty),
            UpdateRevision::Create { revision: 3 }
        );
    }

    #[test]
    fn an_empty_dir_is_never_read_away_as_an_empty_struct() {
        let scratch = json!([{"name": "scratch", "emptyDir": {}}]);
        let revision = aibrix_revision(1, "v1", scratch.clone());
        assert!(holds_as_read(&revision, &with_volume(scratch)));
        // The same volume without a source is another template.
        let sourceless = json!([{"name": "scratch"}]);
        assert!(!holds_as_read(&revision, &with_volume(sourceless)));
    }

    #[test]
    fn hashes_are_six_safe_characters_and_move_with_the_collision_count() {
        let data = revision_data(&template(1, "v1"));
        let hash = revision_hash(&data, 0);
        assert_eq!(hash.len(), HASH_LEN);
        assert!(hash.bytes().all(|b| SAFE_ALPHABET.contains(&b)));
        assert_ne!(hash, revision_hash(&data, 1));
        // Golden: a change here renames every revision (a breaking change).
        assert_eq!(hash, "fvvdj6");
    }

    #[test]
    fn the_collision_count_reads_back_from_the_revision_name() {
        let data = revision_data(&template(1, "v1"));
        let named = |count| ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name("llm", &revision_hash(&data, count))),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(data.clone())),
            revision: 1,
        };
        assert_eq!(collision_count_of(&named(0)), Some(0));
        assert_eq!(collision_count_of(&named(3)), Some(3));
        let renamed = ControllerRevision {
            metadata: ObjectMeta {
                name: Some("llm-zzzzzz".into()),
                ..ObjectMeta::default()
            },
            ..named(0)
        };
        assert_eq!(collision_count_of(&renamed), None);
    }

    #[test]
    fn the_cut_over_is_the_first_revision_written_over_another_controllers() {
        let data = revision_data(&template(1, "v1"));
        let ours = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name("llm", &revision_hash(&data, 0))),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(data.clone())),
            revision: 1,
        };
        let theirs = ControllerRevision {
            metadata: ObjectMeta {
                name: Some("llm-6d8f9c7b5".into()),
                ..ObjectMeta::default()
            },
            ..ours.clone()
        };
        let create = UpdateRevision::Create { revision: 2 };
        let adopt = UpdateRevision::Adopt { revision: 1 };
        assert_eq!(
            cut_over_from(std::slice::from_ref(&theirs), create),
            Some("llm-6d8f9c7b5".into())
        );
        assert_eq!(
            cut_over_from(std::slice::from_ref(&theirs), adopt),
            Some("llm-6d8f9c7b5".into())
        );
        assert_eq!(
            cut_over_from(std::slice::from_ref(&ours), create),
            None,
            "ours already"
        );
        assert_eq!(
            cut_over_from(&[], create),
            None,
            "a first revision takes over nothing"
        );
        let history = [theirs, ours];
        assert_eq!(cut_over_from(&history, create), None, "past the cut-over");
        assert_eq!(cut_over_from(&history, UpdateRevision::Newest(1)), None);
        assert_eq!(
            cut_over_from(
                &history,
                UpdateRevision::Rollback {
                    index: 0,
                    revision: 3
                }
            ),
            None
        );
    }

    #[test]
    fn names_keep_the_hash_and_cut_long_owners() {
        assert_eq!(revision_name("llm", "abcdef"), "llm-abcdef");
        let long = "x".repeat(300);
        let name = revision_name(&long, "abcdef");
        assert_eq!(name.len(), NAME_PREFIX_LIMIT + 1 + HASH_LEN);
        assert!(name.ends_with("-abcdef"));
    }

    #[test]
    fn a_role_template_reads_back_from_the_data() {
        let revision = ControllerRevision {
            metadata: ObjectMeta {
                name: Some("llm-abcdef".into()),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(revision_data(&template(2, "v1")))),
            revision: 1,
        };
        let pod = role_template(&revision, "decode").unwrap();
        let image = pod.spec.unwrap().containers[0].image.clone();
        assert_eq!(image.as_deref(), Some("v1"));
        let missing = role_template(&revision, "prefill").unwrap_err();
        assert_eq!(
            missing.to_string(),
            "ControllerRevision llm-abcdef has no role prefill"
        );
        let empty = ControllerRevision {
            data: None,
            ..revision
        };
        assert!(matches!(
            role_template(&empty, "decode"),
            Err(RevisionError::Malformed { .. })
        ));
    }

    fn revision(name: &str, number: i64, template: &RoleSetTemplateSpec) -> ControllerRevision {
        ControllerRevision {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            data: Some(k8s_openapi::apimachinery::pkg::runtime::RawExtension(
                revision_data(template),
            )),
            revision: number,
        }
    }

    #[test]
    fn the_update_revision_is_reused_rolled_back_to_or_created() {
        let (one, two, three) = (
            template(1, "engine:1"),
            template(1, "engine:2"),
            template(1, "engine:3"),
        );
        let mut history = vec![revision("b", 2, &two), revision("a", 1, &one)];
        sort_history(&mut history);
        assert_eq!(history[0].name_any(), "a", "oldest first");
        assert_eq!(update_revision(&history, &two), UpdateRevision::Newest(1));
        assert_eq!(
            update_revision(&history, &template(5, "engine:2")),
            UpdateRevision::Newest(1),
            "role replicas are no new revision"
        );
        assert_eq!(
            update_revision(&history, &one),
            UpdateRevision::Rollback {
                index: 0,
                revision: 3
            }
        );
        assert_eq!(
            update_revision(&history, &three),
            UpdateRevision::Create { revision: 3 }
        );
        assert_eq!(
            update_revision(&[], &three),
            UpdateRevision::Create { revision: 1 }
        );
    }

    #[test]
    fn the_current_revision_is_the_stored_one_while_it_exists() {
        let (one, two) = (template(1, "engine:1"), template(1, "engine:2"));
        let history = vec![revision("a", 1, &one), revision("b", 2, &two)];
        let update = &history[1];
        let (current, missing) = current_revision(&history, Some("a"), update);
        assert_eq!((current.name_any(), missing), ("a".to_string(), None));
        let (current, missing) = current_revision(&history, None, update);
        assert_eq!((current.name_any(), missing), ("b".to_string(), None));
        let (current, missing) = current_revision(&history, Some("gone"), update);
        assert_eq!(
            (current.name_any(), missing),
            ("b".to_string(), Some("gone".to_string()))
        );
        let fresh = revision("c", 3, &template(1, "engine:3"));
        let (current, missing) = current_revision(&history, Some("c"), &fresh);
        assert_eq!(
            (current.name_any(), missing),
            ("c".to_string(), None),
            "a revision written this pass is not missing"
        );
    }

    proptest::proptest! {
        /// History truncation never deletes a revision in use, deletes the oldest unused ones
        /// first, and keeps `limit` unused ones when there are that many.
        #[test]
        fn expired_revisions_are_the_oldest_unused_beyond_the_limit(
            used in proptest::collection::vec(proptest::bool::ANY, 0..20),
            limit in 0usize..8,
        ) {
            let t = template(1, "engine:1");
            let history: Vec<ControllerRevision> = (0..used.len())
                .map(|i| revision(&format!("r{i:02}"), i as i64, &t))
                .collect();
            let in_use: BTreeSet<String> = used
                .iter()
                .enumerate()
                .filter(|(_, u)| **u)
                .map(|(i, _)| format!("r{i:02}"))
                .collect();
            let expired = expired_revisions(&history, &in_use, limit);
            let unused = used.len() - in_use.len();
            proptest::prop_assert_eq!(expired.len(), unused.saturating_sub(limit));
            proptest::prop_assert!(expired.iter().all(|n| !in_use.contains(n)));
            let mut sorted = expired.clone();
            sorted.sort();
            proptest::prop_assert_eq!(&sorted, &expired, "oldest first");
            let kept_unused = history
                .iter()
                .map(ResourceExt::name_any)
                .filter(|n| !in_use.contains(n) && !expired.contains(n));
            for kept in kept_unused {
                proptest::prop_assert!(expired.iter().all(|e| e < &kept), "{} kept over a newer one", kept);
            }
        }
    }
}
