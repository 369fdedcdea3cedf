//! The gang's PodGroup, written: made what the gang's scheduling strategy asks, when its
//! scheduler's CRD is served (the PodGroup caches, `cache::podgroups`, say so), and left alone
//! when another controls it.

use kube::api::{Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::cache::podgroups::Lookup;
use super::kit::context::Context;
use super::kit::error::Error;
use crate::api::common::SchedulingStrategy;
use crate::planner::podgroup::{self as plan, Gang, GangOwner};

/// Makes the PodGroup of `owner`'s gang of `members` pods what `strategy` asks (created, or
/// its spec updated), publishing `PodGroupSynced` or `PodGroupFailed`. Only a PodGroup whose
/// controller reference is `owner` (by UID) is patched: one of the same name that another
/// controls — a tenant's in the same namespace, or a predecessor's — is reported once per
/// generation (`PodGroupConflict`) and left as it is.
pub async fn sync<K>(
    ctx: &Context,
    owner: &K,
    owner_label: &'static str,
    strategy: Option<&SchedulingStrategy>,
    members: i32,
) -> Result<Gang, Error>
where
    K: Resource<DynamicType = ()>,
{
    let Some(request) = strategy.and_then(plan::requested) else {
        return Ok(Gang::NotRequested);
    };
    let (Some(owner_ref), Some(namespace)) = (
        owner.controller_owner_ref(&()),
        owner.meta().namespace.as_deref(),
    ) else {
        return Ok(Gang::NotRequested);
    };
    let name = owner.name_any();
    let desired = plan::desired(
        &request,
        &GangOwner {
            namespace,
            owner: owner_ref,
            owner_label,
        },
        members,
    );
    let scheduler = request.scheduler;
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &scheduler.api_resource());
    let written = match ctx.caches.podgroups.lookup(scheduler, namespace, &name) {
        Lookup::NotServed => return Ok(Gang::Unserved(scheduler)),
        Lookup::Starting => return Ok(Gang::Waiting),
        Lookup::Absent => api
            .create(&PostParams::default(), &desired)
            .await
            .map(|_| "create"),
        Lookup::Found {
            controller: uid, ..
        } if uid != owner.uid() => {
            if ctx.once_per_generation(owner, "podgroup conflict") {
                ctx.warn(
                    owner,
                    "PodGroupConflict",
                    "SyncPodGroup",
                    Gang::foreign_message(scheduler, &name),
                )
                .await;
            }
            return Ok(Gang::Foreign(scheduler));
        }
        Lookup::Found { spec, .. } => {
            let observed = DynamicObject {
                data: json!({ "spec": spec }),
                ..desired.clone()
            };
            if !plan::needs_update(&desired, &observed) {
                return Ok(Gang::Ready);
            }
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": desired.data["spec"]})),
            )
            .await
            .map(|_| "patch")
        }
    };
    match written {
        Ok(verb) => {
            ctx.wrote(verb, "podgroups");
            ctx.publish(
                owner,
                None,
                "PodGroupSynced",
                "SyncPodGroup",
                format!("{} PodGroup {name} synced", scheduler.group()),
            )
            .await;
            Ok(Gang::Ready)
        }
        // Made meanwhile (by an earlier pass the cache does not show yet).
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Gang::Waiting),
        Err(error) => {
            ctx.warn(
                owner,
                "PodGroupFailed",
                "SyncPodGroup",
                format!("{} PodGroup {name}: {error}", scheduler.group()),
            )
            .await;
            Err(error.into())
        }
    }
}
