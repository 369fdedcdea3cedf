//! Writing StormService ControllerRevisions; their data, hash and name are decided in
//! [`crate::planner::revision`].

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::Value;

use super::kit::children::{Created, OnConflict, Writes};
use super::kit::error::Error;
use crate::api::RoleSetTemplateSpec;
use crate::api::keys::{LABEL_REVISION_HASH, LABEL_REVISION_OWNER};
use crate::planner::render::canonical_json;
use crate::planner::revision::{
    MAX_COLLISIONS, RevisionError, revision_data, revision_hash, revision_name,
};

/// Writes the revision of `template` owned by `owner` with `revision` as its number, or
/// returns the existing revision with the same data. A name taken by other data is retried
/// with the next collision count (returned beside the revision).
pub async fn write_revision<K>(
    writes: &Writes<'_, ControllerRevision>,
    owner: &K,
    template: &RoleSetTemplateSpec,
    revision: i64,
    mut collision_count: u32,
) -> Result<(ControllerRevision, u32), Error>
where
    K: Resource<DynamicType = ()>,
{
    let data = revision_data(template);
    let canonical: Value =
        serde_json::from_str(&canonical_json(&data)).expect("canonical JSON parses");
    let owner_name = owner.meta().name.clone().unwrap_or_default();
    for _ in 0..MAX_COLLISIONS {
        let hash = revision_hash(&data, collision_count);
        let candidate = ControllerRevision {
            metadata: ObjectMeta {
                name: Some(revision_name(&owner_name, &hash)),
                namespace: owner.meta().namespace.clone(),
                labels: Some(
                    [
                        (LABEL_REVISION_OWNER.to_string(), owner_name.clone()),
                        (LABEL_REVISION_HASH.to_string(), hash.clone()),
                    ]
                    .into(),
                ),
                owner_references: owner.controller_owner_ref(&()).map(|r| vec![r]),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(canonical.clone())),
            revision,
        };
        // A revision's name is its hash: taken is the same revision, or a collision.
        match writes.create(&candidate, OnConflict::Exists).await? {
            Created::New(created) => return Ok((created, collision_count)),
            Created::Exists => {
                let existing = writes.get(&candidate.name_any()).await?;
                if let Some(existing) =
                    existing.filter(|e| e.data.as_ref().map(|d| &d.0) == Some(&canonical))
                {
                    return Ok((existing, collision_count));
                }
                collision_count += 1;
            }
            Created::Refused(message) => return Err(Error::Refused(message)),
        }
    }
    Err(RevisionError::Collisions { owner: owner_name }.into())
}
