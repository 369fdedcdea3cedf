//! StormService ControllerRevisions (AIBRIX-REFERENCE §2.2.1, SPEC §1): the data format, its
//! hash and name, and reading a role's stable template back (`controller::revision` writes
//! them).
//!
//! `data` is `{"spec":{"template":{…, "$patch":"replace"}}}` — the StormService's RoleSet
//! template **without role `replicas`**, so scaling a role (what the pooled-mode autoscaler
//! does) never creates a revision. It is stored as canonical JSON (sorted keys), so equal
//! templates give byte-equal data and equal hashes.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::ResourceExt;
#[cfg(test)]
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use super::render::{SAFE_ALPHABET, canonical_json};
use crate::api::RoleSetTemplateSpec;

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

/// Whether `revision` holds `template` (role replicas aside).
pub fn holds(revision: &ControllerRevision, template: &RoleSetTemplateSpec) -> bool {
    let data = revision_data(template);
    revision
        .data
        .as_ref()
        .is_some_and(|d| canonical_json(&d.0) == canonical_json(&data))
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
        .map(|r| r.template.unwrap_or_default())
        .ok_or_else(|| RevisionError::NoSuchRole {
            name: name.clone(),
            role: role.to_string(),
        })
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
                roles: Some(vec![role]),
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
}
