//! Children as the controllers see and write them: the ones an owner controls in the caches,
//! the one counted way to write them ([`Writes`]: a create with its call site's conflict
//! policy, patches, deletes guarded by UID), and the steps of ordered deletion by kind.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use super::error::{Error, refusal};
use super::expectations::cache_settles;
use crate::api::cached::meta::WithCachedMeta;
use crate::api::cached::pod::CachedPod;
use crate::api::keys::{
    CONDITION_PAIRING_SERVABLE, LABEL_PAIRING_KEY, LABEL_PODSET_NAME, LABEL_ROLESET_NAME,
};
use crate::api::{PodSet, RoleSet, controlled_by};
use crate::controller::cache::{Cache, Cached};

/// The children `cache` holds of `owner` (controlled by its UID, so a namesake that was
/// deleted and recreated does not inherit them).
pub fn owned_children<K: Cached, O: kube::Resource>(cache: &Cache<K>, owner: &O) -> Vec<Arc<K>> {
    owner
        .meta()
        .uid
        .as_deref()
        .map(|uid| {
            let namespace = owner.meta().namespace.as_deref().unwrap_or_default();
            cache.owned_by(namespace, uid)
        })
        .unwrap_or_default()
}

/// The owner of kind `O` a child's change is for: its controller, in its namespace (what
/// `Controller::owns` maps a child to, for a child the cache keeps compact).
pub fn controlling_owner<O: Resource<DynamicType = ()>, C: WithCachedMeta>(
    child: &C,
) -> Option<ObjectRef<O>> {
    let meta = child.cached_meta();
    let owner = meta.controller()?;
    (owner.kind.as_str() == O::kind(&()) && owner.api_version.as_str() == O::api_version(&()))
        .then(|| ObjectRef::new(&owner.name).within(meta.namespace()))
}

/// The RoleSet a gated gang's pod changes matter to, beside its PodSet: its serving gate
/// opens when its containers turn ready, which the PodSet's status does not show (it counts
/// Ready). Pods a PodSet controls that carry a pairing key or declare the serving gate only;
/// the RoleSet is named by the pod's label, in the pod's namespace.
pub fn gated_gang_owner(pod: &CachedPod) -> Option<ObjectRef<RoleSet>> {
    let labels = pod.labels();
    if !labels.contains_key(LABEL_PODSET_NAME) {
        return None;
    }
    if !labels.contains_key(LABEL_PAIRING_KEY)
        && !pod.has_readiness_gate(CONDITION_PAIRING_SERVABLE)
    {
        return None;
    }
    let by_podset = pod.metadata.controlled_by_kind(&PodSet::kind(&()));
    let roleset = labels.get(LABEL_ROLESET_NAME)?;
    by_podset.then(|| ObjectRef::new(roleset).within(pod.namespace()))
}

/// The UIDs of `children`, by name: every delete names the object it means by UID too.
pub fn uids<'a, K: kube::runtime::reflector::Lookup + 'a>(
    children: impl IntoIterator<Item = &'a K>,
) -> HashMap<String, String> {
    children
        .into_iter()
        .filter_map(|c| Some((c.name()?.into_owned(), c.uid()?.into_owned())))
        .collect()
}

/// What a create does when the child's name is taken (409 Conflict): said at every call
/// site, because it depends on how the name was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnConflict {
    /// A generated name: a conflict is an error, retried with backoff.
    Fail,
    /// A name of the child's own (a slot's pod, a gang index's pod, a revision's hash, the
    /// headless Service): a conflict is [`Created::Exists`] — made by an earlier pass the
    /// cache does not show yet, or somebody else's to look at.
    Exists,
}

/// What a create did.
#[derive(Clone, Debug, PartialEq)]
pub enum Created<K> {
    /// Made by this request: the object as stored.
    New(K),
    /// The name was taken ([`OnConflict::Exists`]).
    Exists,
    /// The API server refuses it until something changes (quota, admission, validation):
    /// its message, for the owner's status.
    Refused(String),
}

/// One controller's writes to objects of kind `K` in one namespace: every request that the
/// API server accepts is counted under the controller, with `K`'s resource name.
pub struct Writes<'a, K> {
    api: Api<K>,
    ctx: &'a Context,
    /// The owner's expectations key.
    owner: String,
    /// Whether the owner is being deleted: its children's deletions are then evidence for
    /// ordered deletion ([`super::expectations::cache_settles`]).
    owner_going: bool,
}

impl<'a, K> Writes<'a, K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    /// Writes in `owner`'s namespace (every child lives in its owner's).
    pub fn beside(ctx: &'a Context, owner: &impl kube::Resource) -> Self {
        let namespace = owner.meta().namespace.as_deref().unwrap_or_default();
        Self {
            api: Api::namespaced(ctx.client.clone(), namespace),
            ctx,
            owner: Context::key(owner),
            owner_going: owner.meta().deletion_timestamp.is_some(),
        }
    }

    /// Reads `name` (a create's conflict, looked at).
    pub async fn get(&self, name: &str) -> Result<Option<K>, Error> {
        Ok(self.api.get_opt(name).await?)
    }

    fn resource() -> String {
        K::plural(&()).into_owned()
    }

    /// Creates `child`; a conflict is decided by `on_conflict`, a refusal is returned for
    /// the owner's status.
    pub async fn create(&self, child: &K, on_conflict: OnConflict) -> Result<Created<K>, Error> {
        self.ctx
            .expectations
            .creating(&self.owner, &Self::resource());
        match self.api.create(&PostParams::default(), child).await {
            Ok(created) => {
                self.ctx.wrote("create", &Self::resource());
                Ok(Created::New(created))
            }
            Err(kube::Error::Api(status))
                if status.code == 409 && on_conflict == OnConflict::Exists =>
            {
                Ok(Created::Exists)
            }
            Err(error) => match refusal(&error) {
                Some(message) => Ok(Created::Refused(message)),
                None => Err(error.into()),
            },
        }
    }

    /// Patches `name`.
    pub async fn patch<P: serde::Serialize + std::fmt::Debug>(
        &self,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<K, Error> {
        let patched = self.api.patch(name, &PatchParams::default(), patch).await?;
        self.ctx.wrote("patch", &Self::resource());
        Ok(patched)
    }

    /// Patches the status of `name`.
    pub async fn patch_status<P: serde::Serialize + std::fmt::Debug>(
        &self,
        name: &str,
        patch: &Patch<P>,
    ) -> Result<K, Error> {
        let patched = self
            .api
            .patch_status(name, &PatchParams::default(), patch)
            .await?;
        self.ctx
            .wrote("patch", &format!("{}/status", Self::resource()));
        Ok(patched)
    }

    /// Deletes the child `name` if it is still the object with `uid` (already gone, or
    /// replaced by a namesake, is fine: the child meant is gone). A child squall has not
    /// observed (no UID) is never deleted: the name alone could be anyone's object.
    pub async fn delete(&self, name: &str, uid: Option<&String>) -> Result<(), Error> {
        let Some(uid) = uid else {
            tracing::debug!(%name, resource = %Self::resource(), "not deleted: not observed as a child");
            return Ok(());
        };
        let params = kube::api::DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..kube::api::DeleteParams::background()
        };
        match self.api.delete(name, &params).await {
            Ok(answer) => {
                self.ctx.wrote("delete", &Self::resource());
                let version = answer
                    .left()
                    .and_then(|child| child.meta().resource_version.as_deref()?.parse().ok());
                if let (true, Some(version)) = (self.owner_going, version) {
                    self.ctx.expectations.deleted_while_going(
                        &self.owner,
                        &Self::resource(),
                        version,
                    );
                }
                Ok(())
            }
            // 409: the precondition failed, the name now holds another object.
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A child as ordered deletion sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Going {
    /// Its name.
    pub name: String,
    /// Its UID (the delete's precondition).
    pub uid: String,
    /// Whether it is already going away.
    pub terminating: bool,
}

impl Going {
    fn of(meta: &kube::api::ObjectMeta) -> Self {
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            terminating: meta.deletion_timestamp.is_some(),
        }
    }
}

/// What ordered deletion needs of cached children.
pub fn going<K: Cached>(children: &[Arc<K>]) -> Vec<Going> {
    children
        .iter()
        .map(|c| Going {
            name: c.name().unwrap_or_default().into_owned(),
            uid: c.uid().unwrap_or_default().into_owned(),
            terminating: c.is_deleting(),
        })
        .collect()
}

/// The children of kind `K` the API server itself still holds of `owner`: those carrying
/// `label` = the owner's name, controlled by its UID.
///
/// Ordered deletion asks this once the cache shows none left but cannot vouch for it
/// ([`ChildKind::settled`]), because the next step — the finalizer's removal — cannot be
/// undone, and a cache can lag: a child created just before its watch re-listed (after an
/// API-server restart) would outlive its owner until the garbage collector found it. One LIST
/// of a label, read from etcd — the fresh read Kubernetes' controllers make before an
/// adoption they cannot take back.
pub async fn live_children<K>(
    ctx: &Context,
    owner: &impl kube::Resource,
    label: &str,
) -> Result<Vec<Going>, Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let meta = owner.meta();
    let api: Api<K> = Api::namespaced(
        ctx.client.clone(),
        meta.namespace.as_deref().unwrap_or_default(),
    );
    let selector = format!("{label}={}", meta.name.as_deref().unwrap_or_default());
    let listed = api
        .list_metadata(&kube::api::ListParams::default().labels(&selector))
        .await?;
    Ok(listed
        .items
        .iter()
        .filter(|child| controlled_by(&child.metadata, meta))
        .map(|child| Going::of(&child.metadata))
        .collect())
}

/// A step of ordered deletion: deletes each of `owner`'s `children` (of kind `K`) not yet
/// going away, once — a delete issued and not yet seen by the cache is not sent again (until
/// [`super::expectations::EXPECTATION_TIMEOUT`]), however many events reconcile the owner meanwhile.
pub async fn delete_remaining<K>(
    ctx: &Context,
    owner: &impl kube::Resource,
    children: &[Going],
) -> Result<(), Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    if children.is_empty() {
        return Ok(());
    }
    let key = Context::key(owner);
    let role = format!("cleanup/{}", K::plural(&()));
    let pending = ctx.expectations.observe(
        &key,
        &role,
        children.iter().map(|c| (c.name.clone(), c.terminating)),
    );
    let writes = Writes::<K>::beside(ctx, owner);
    for child in children
        .iter()
        .filter(|c| !c.terminating && !pending.deletes.contains(&c.name))
    {
        writes.delete(&child.name, Some(&child.uid)).await?;
        ctx.expectations.expect_delete(&key, &role, &child.name);
    }
    Ok(())
}

/// A kind of child an owner's deletion waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChildKind {
    /// A StormService's RoleSets.
    RoleSets,
    /// A RoleSet's PodSets (multi-node roles).
    PodSets,
    /// A RoleSet's or a PodSet's pods.
    Pods,
}

impl ChildKind {
    /// How a count of them is said.
    pub fn noun(self) -> &'static str {
        match self {
            Self::RoleSets => "RoleSets",
            Self::PodSets => "PodSets",
            Self::Pods => "pods",
        }
    }

    /// `owner`'s children of this kind in the caches.
    pub fn cached(self, ctx: &Context, owner: &impl kube::Resource) -> Vec<Going> {
        let caches = &ctx.caches;
        match self {
            Self::RoleSets => going(&owned_children(&caches.rolesets, owner)),
            Self::PodSets => going(&owned_children(&caches.podsets, owner)),
            Self::Pods => going(&owned_children(&caches.pods, owner)),
        }
    }

    /// Whether the caches showing none of `owner`'s children of this kind can be believed
    /// without asking the API server.
    pub fn settled(self, ctx: &Context, owner: &impl kube::Resource) -> bool {
        let caches = &ctx.caches;
        let (ready, seen, resource) = match self {
            Self::RoleSets => (
                caches.rolesets.is_ready(),
                caches.rolesets.seen_version(),
                RoleSet::plural(&()),
            ),
            Self::PodSets => (
                caches.podsets.is_ready(),
                caches.podsets.seen_version(),
                PodSet::plural(&()),
            ),
            Self::Pods => (
                caches.pods.is_ready(),
                caches.pods.seen_version(),
                Pod::plural(&()),
            ),
        };
        let (created_here, deleted_at) = ctx
            .expectations
            .deletion_evidence(&Context::key(owner), &resource);
        cache_settles(ready, seen, created_here, deleted_at)
    }

    /// `owner`'s children of this kind the API server holds.
    pub async fn live(
        self,
        ctx: &Context,
        owner: &impl kube::Resource,
        label: &str,
    ) -> Result<Vec<Going>, Error> {
        match self {
            Self::RoleSets => live_children::<RoleSet>(ctx, owner, label).await,
            Self::PodSets => live_children::<PodSet>(ctx, owner, label).await,
            Self::Pods => live_children::<Pod>(ctx, owner, label).await,
        }
    }

    /// Deletes those of `children` not yet going away.
    pub async fn delete_remaining(
        self,
        ctx: &Context,
        owner: &impl kube::Resource,
        children: &[Going],
    ) -> Result<(), Error> {
        match self {
            Self::RoleSets => delete_remaining::<RoleSet>(ctx, owner, children).await,
            Self::PodSets => delete_remaining::<PodSet>(ctx, owner, children).await,
            Self::Pods => delete_remaining::<Pod>(ctx, owner, children).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::kit::context::unreachable_context;

    #[test]
    fn a_paired_gang_pods_change_reaches_its_roleset_and_nothing_else_does() {
        let pod = |labels: serde_json::Value, owner: &str| {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "d-0-0", "namespace": "team", "labels": labels,
                    "ownerReferences": [{"apiVersion": "orchestration.aibrix.ai/v1alpha1",
                        "kind": owner, "name": "d-0", "uid": "u", "controller": true}]},
            }))
            .unwrap();
            Arc::new(CachedPod::from_pod(&pod))
        };
        let gang = serde_json::json!({LABEL_PAIRING_KEY: "k", LABEL_PODSET_NAME: "d-0",
            LABEL_ROLESET_NAME: "rs"});
        assert_eq!(
            gated_gang_owner(&pod(gang.clone(), "PodSet")),
            Some(ObjectRef::new("rs").within("team"))
        );
        // A RoleSet's own pod reaches it as its child; an unpaired gang's pod does not.
        assert_eq!(gated_gang_owner(&pod(gang, "RoleSet")), None);
        let unpaired = serde_json::json!({LABEL_PODSET_NAME: "d-0", LABEL_ROLESET_NAME: "rs"});
        assert_eq!(gated_gang_owner(&pod(unpaired, "PodSet")), None);
    }

    #[tokio::test]
    async fn a_delete_that_failed_is_sent_again_by_the_next_pass() {
        let ctx = unreachable_context();
        let owner: RoleSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "RoleSet",
            "metadata": {"name": "rs", "namespace": "ns", "uid": "rs-uid"}, "spec": {}
        }))
        .unwrap();
        let children = vec![Going {
            name: "rs-decode-a".into(),
            uid: "pod-uid".into(),
            terminating: false,
        }];
        let sent = delete_remaining::<Pod>(&ctx, &owner, &children).await;
        assert!(sent.is_err(), "the request failed");
        let pending =
            ctx.expectations
                .observe("rs-uid", "cleanup/pods", [("rs-decode-a".into(), false)]);
        assert!(
            pending.deletes.is_empty(),
            "a failed delete is not awaited: {:?}",
            pending.deletes
        );
    }
}
