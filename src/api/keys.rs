//! Label, annotation, finalizer and field-manager names — AIBrix's, so existing clusters,
//! gateways and autoscalers keep working (docs/aibrix-compatibility.md#the-same). One place for all
//! of them; each is added here by the code that first uses it.

/// Field manager of squall's writes.
pub const FIELD_MANAGER: &str = "squall";

/// StormService name, on RoleSets, PodSets and pods (the headless Service's name).
pub const LABEL_STORM_SERVICE_NAME: &str = "storm-service-name";
/// ControllerRevision name of the template a RoleSet was rendered from, on RoleSets.
pub const LABEL_STORM_SERVICE_REVISION: &str = "storm-service-revision";
/// Copy of `storm-service-revision`, on RoleSets.
pub const ANNOTATION_REVISION: &str = "stormservice.orchestration.aibrix.ai/revision";
/// Prefix of the per-role revision-number annotations on RoleSets
/// (`stormservice.orchestration.aibrix.ai/role-revision.<role>`).
pub const ANNOTATION_ROLE_REVISION_PREFIX: &str =
    "stormservice.orchestration.aibrix.ai/role-revision.";
/// StormService finalizer (its RoleSets go first).
pub const FINALIZER_STORMSERVICE: &str = "orchestration.aibrix.ai/stormservice-finalizer";

/// RoleSet name, on its pods and PodSets.
pub const LABEL_ROLESET_NAME: &str = "roleset-name";
/// Role name, on pods and PodSets.
pub const LABEL_ROLE_NAME: &str = "role-name";
/// Hash of the role's pod template, on pods and PodSets.
pub const LABEL_ROLE_TEMPLATE_HASH: &str = "role-template-hash";
/// Slot of a stateful role's pod (label and annotation).
pub const LABEL_ROLE_REPLICA_INDEX: &str =
    "stormservice.orchestration.aibrix.ai/role-replica-index";
/// Replica slot of a RoleSet within its StormService (source of `ROLESET_INDEX`).
pub const ANNOTATION_ROLESET_INDEX: &str = "stormservice.orchestration.aibrix.ai/roleset-index";

/// PodSet name, on the gang's pods.
pub const LABEL_PODSET_NAME: &str = "stormservice.orchestration.aibrix.ai/podset-name";
/// Index of a pod in its gang (0 is rank 0).
pub const LABEL_POD_GROUP_INDEX: &str = "stormservice.orchestration.aibrix.ai/pod-group-index";

/// Per-role ControllerRevision number, on pods.
pub const LABEL_ROLE_REVISION: &str = "stormservice.orchestration.aibrix.ai/role-revision";
/// Per-role ControllerRevision name, on pods.
pub const LABEL_ROLE_REVISION_NAME: &str =
    "stormservice.orchestration.aibrix.ai/role-revision-name";

/// StormService name, on its ControllerRevisions.
pub const LABEL_REVISION_OWNER: &str = "name";
/// Revision hash, on ControllerRevisions.
pub const LABEL_REVISION_HASH: &str = "controller.kubernetes.io/hash";

/// Hash an in-place update is heading to, on a pod; present while the update is in progress.
pub const ANNOTATION_IN_PLACE_TARGET_HASH: &str =
    "stormservice.orchestration.aibrix.ai/in-place-update-target-hash";
/// JSON of the imageIDs a pod's containers had before an in-place update.
pub const ANNOTATION_IN_PLACE_STATE: &str =
    "stormservice.orchestration.aibrix.ai/in-place-update-state";
/// Why an in-place update has not completed yet.
pub const ANNOTATION_IN_PLACE_PENDING_REASON: &str =
    "stormservice.orchestration.aibrix.ai/in-place-update-pending-reason";
/// Pod condition (and optional readiness gate) that is False while an in-place update runs.
pub const CONDITION_IN_PLACE_READY: &str =
    "stormservice.orchestration.aibrix.ai/in-place-update-ready";

/// Condition types squall writes on its objects' status (docs/aibrix-compatibility.md#the-same).
pub const CONDITION_READY: &str = "Ready";
/// Whether a rollout is moving (False past `progressDeadlineSeconds`).
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Whether a StormService serves: enough RoleSets serving, whatever their revision (a
/// Deployment's `Available`). `Ready` says more: the rollout is done.
pub const CONDITION_AVAILABLE: &str = "Available";
/// Whether `spec.paused` holds rollouts.
pub const CONDITION_PAUSED: &str = "Paused";
/// Whether the spec fails validation (the object is left alone).
pub const CONDITION_INVALID_SPEC: &str = "InvalidSpec";
/// Whether children cannot be created (quota, admission) or are failing.
pub const CONDITION_REPLICA_FAILURE: &str = "ReplicaFailure";
/// Whether a Service of the StormService's name belongs to someone else.
pub const CONDITION_SERVICE_CONFLICT: &str = "ServiceConflict";
/// How the canary's analysis stands: True while every metric is within its limits, False
/// when one failed (the message names it and its value), Unknown when one is inconclusive.
pub const CONDITION_CANARY_ANALYSIS: &str = "CanaryAnalysis";

/// Whether every pairing key that has a pod up has one up in each role of its group (a
/// RoleSet's condition, with `pairing`): False names the role a key waits for — a partner
/// that cannot start holds the group's rollout (docs/rollouts.md#the-status-of-a-group).
pub const CONDITION_PAIRED: &str = "Paired";

/// Pairing key of a paired role's pods and PodSets (docs/rollouts.md#pairing): pods with
/// the same key serve together. squall's own, as no AIBrix controller pairs pods.
pub const LABEL_PAIRING_KEY: &str = "pairing.squall.dev/key";
/// Pod condition, and readiness gate of a paired role's pods, that squall sets True while
/// every role of the pod's group has a pod of its key whose containers are ready
/// (docs/rollouts.md#pairing): a pod without a partner of its version is not Ready, so no
/// EndpointSlice lists it as serving.
pub const CONDITION_PAIRING_SERVABLE: &str = "pairing.squall.dev/servable";

/// When squall took a pod (or PodSet) out of traffic to drain it, RFC 3339
/// (docs/rollouts.md#drain-before-delete): the drain's clock survives an operator restart.
pub const ANNOTATION_DRAIN_STARTED: &str = "drain.squall.dev/started";
/// The drain a pod (or PodSet) was created with, JSON: a child of a role removed from the
/// spec still drains by it.
pub const ANNOTATION_DRAIN_POLICY: &str = "drain.squall.dev/policy";
/// A draining pod's requests in flight, as last read (what `squall status` shows).
pub const ANNOTATION_DRAIN_IN_FLIGHT: &str = "drain.squall.dev/in-flight";

/// PodSet finalizer (its pods go first).
pub const FINALIZER_PODSET: &str = "orchestration.aibrix.ai/podset-finalizer";
/// RoleSet finalizer (ordered deletion of its children).
pub const FINALIZER_ROLESET: &str = "orchestration.aibrix.ai/roleset-finalizer";

/// Prefix of the per-role revision annotations on RoleSets
/// (`stormservice.orchestration.aibrix.ai/role-revision-name.<role>`). Annotation names are
/// at most 63 characters, which limits role names to 44.
pub const ANNOTATION_ROLE_REVISION_NAME_PREFIX: &str =
    "stormservice.orchestration.aibrix.ai/role-revision-name.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_role_name_fits_an_annotation_name() {
        let (_, name) = ANNOTATION_ROLE_REVISION_NAME_PREFIX
            .split_once('/')
            .expect("prefixed key");
        assert_eq!(name.len() + crate::api::limits::MAX_ROLE_NAME_LEN, 63);
    }
}
