//! The PodGroups of the gang schedulers squall works with (scheduler-plugins' coscheduling,
//! Volcano, Gödel): their API coordinates, the keys that make a pod a member, and a cached
//! PodGroup typed by its scheduler, so each kind has a shared cache like every other child.
//! squall reads only their metadata and spec; what their schedulers write is theirs.

use std::borrow::Cow;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A gang scheduler squall makes PodGroups for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheduler {
    /// scheduler-plugins' coscheduling plugin (`scheduling.x-k8s.io/v1alpha1`).
    Coscheduling,
    /// Volcano (`scheduling.volcano.sh/v1beta1`).
    Volcano,
    /// Gödel (`scheduling.godel.kubewharf.io/v1alpha1`).
    Godel,
}

/// Kind of every scheduler's PodGroup.
pub const PODGROUP_KIND: &str = "PodGroup";
/// Plural of every scheduler's PodGroup.
pub const PODGROUP_PLURAL: &str = "podgroups";

impl Scheduler {
    /// Every scheduler.
    pub const ALL: [Scheduler; 3] = [
        Scheduler::Coscheduling,
        Scheduler::Volcano,
        Scheduler::Godel,
    ];

    /// Its PodGroup's API group.
    pub fn group(self) -> &'static str {
        match self {
            Scheduler::Coscheduling => "scheduling.x-k8s.io",
            Scheduler::Volcano => "scheduling.volcano.sh",
            Scheduler::Godel => "scheduling.godel.kubewharf.io",
        }
    }

    /// The PodGroup version squall writes (the one AIBrix writes).
    pub fn version(self) -> &'static str {
        match self {
            Scheduler::Coscheduling | Scheduler::Godel => "v1alpha1",
            Scheduler::Volcano => "v1beta1",
        }
    }

    /// Name of its PodGroup CRD (`podgroups.<group>`): the PodGroup is made only when it
    /// exists.
    pub fn crd_name(self) -> String {
        format!("{PODGROUP_PLURAL}.{}", self.group())
    }

    /// Its PodGroup as a dynamic API resource.
    pub fn api_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group(), self.version(), PODGROUP_KIND),
            PODGROUP_PLURAL,
        )
    }

    /// The `schedulingStrategy` field that names it.
    pub fn strategy_field(self) -> &'static str {
        match self {
            Scheduler::Coscheduling => "coschedulingSchedulingStrategy",
            Scheduler::Volcano => "volcanoSchedulingStrategy",
            Scheduler::Godel => "godelSchedulingStrategy",
        }
    }
}

/// Which schedulers' PodGroup CRDs the cluster serves, as last looked up. `Unknown` where
/// nothing looked, or no lookup has answered yet (`squall lint`, a webhook whose lookups are
/// refused): nothing is said about a CRD then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodGroupCrds {
    /// Not looked up.
    #[default]
    Unknown,
    /// Looked up: one bit per served scheduler (its position in [`Scheduler::ALL`]).
    Known(u8),
}

impl PodGroupCrds {
    /// Known to serve exactly `served`.
    pub fn known(served: impl IntoIterator<Item = Scheduler>) -> Self {
        Self::Known(served.into_iter().fold(0, |bits, s| bits | s.bit()))
    }

    /// Whether `scheduler`'s CRD is known to be served.
    pub fn serves(self, scheduler: Scheduler) -> bool {
        matches!(self, Self::Known(bits) if bits & scheduler.bit() != 0)
    }

    /// Whether `scheduler`'s CRD is known to be missing.
    pub fn lacks(self, scheduler: Scheduler) -> bool {
        matches!(self, Self::Known(bits) if bits & scheduler.bit() == 0)
    }

    /// Whether any scheduler's CRD is known to be missing.
    pub fn lacks_any(self) -> bool {
        Scheduler::ALL.into_iter().any(|s| self.lacks(s))
    }
}

impl Scheduler {
    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// Pod label naming a scheduler-plugins PodGroup.
pub const LABEL_COSCHEDULING_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// Pod label and annotation naming a Volcano PodGroup.
pub const KEY_VOLCANO_GROUP_NAME: &str = "scheduling.k8s.io/group-name";
/// Pod label and annotation naming a Gödel PodGroup.
pub const KEY_GODEL_POD_GROUP_NAME: &str = "godel.bytedance.com/pod-group-name";

/// A scheduler, as a type (the caches are typed).
pub trait SchedulerKind: Clone + Default + std::fmt::Debug + Send + Sync + 'static {
    /// Which one.
    const SCHEDULER: Scheduler;
}

/// [`Scheduler::Coscheduling`] as a type.
#[derive(Clone, Copy, Debug, Default)]
pub struct CoschedulingKind;
/// [`Scheduler::Volcano`] as a type.
#[derive(Clone, Copy, Debug, Default)]
pub struct VolcanoKind;
/// [`Scheduler::Godel`] as a type.
#[derive(Clone, Copy, Debug, Default)]
pub struct GodelKind;

impl SchedulerKind for CoschedulingKind {
    const SCHEDULER: Scheduler = Scheduler::Coscheduling;
}
impl SchedulerKind for VolcanoKind {
    const SCHEDULER: Scheduler = Scheduler::Volcano;
}
impl SchedulerKind for GodelKind {
    const SCHEDULER: Scheduler = Scheduler::Godel;
}

/// A PodGroup of scheduler `S`, as cached: metadata, spec and status as the API server sent
/// them.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct PodGroup<S> {
    /// As the API server sent it.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The spec (squall compares the fields it sets).
    #[serde(default)]
    pub spec: Value,
    /// What the scheduler reports (phase, scheduled members).
    #[serde(default)]
    pub status: Value,
    #[serde(skip)]
    scheduler: PhantomData<S>,
}

impl<S: SchedulerKind> kube::Resource for PodGroup<S> {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        PODGROUP_KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        S::SCHEDULER.group().into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        S::SCHEDULER.version().into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        format!("{}/{}", S::SCHEDULER.group(), S::SCHEDULER.version()).into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PODGROUP_PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn crd_names_and_resources() {
        assert_eq!(
            Scheduler::Volcano.crd_name(),
            "podgroups.scheduling.volcano.sh"
        );
        let resource = Scheduler::Godel.api_resource();
        assert_eq!(resource.plural, "podgroups");
        assert_eq!(
            resource.api_version,
            "scheduling.godel.kubewharf.io/v1alpha1"
        );
        assert_eq!(
            PodGroup::<VolcanoKind>::api_version(&()),
            "scheduling.volcano.sh/v1beta1"
        );
        assert_eq!(
            PodGroup::<CoschedulingKind>::group(&()),
            "scheduling.x-k8s.io"
        );
    }

    #[test]
    fn crds_known_missing_only_after_a_lookup() {
        let unknown = PodGroupCrds::default();
        assert!(!unknown.lacks_any());
        assert!(!unknown.serves(Scheduler::Volcano));
        let some = PodGroupCrds::known([Scheduler::Volcano, Scheduler::Godel]);
        assert!(some.serves(Scheduler::Volcano) && some.serves(Scheduler::Godel));
        assert!(some.lacks(Scheduler::Coscheduling) && some.lacks_any());
        assert!(!PodGroupCrds::known(Scheduler::ALL).lacks_any());
    }

    #[test]
    fn a_podgroup_is_read_as_the_api_server_sends_it() {
        let group: PodGroup<GodelKind> = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.godel.kubewharf.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"minMember": 2}, "status": {"phase": "Scheduled"}
        }))
        .unwrap();
        assert_eq!(group.metadata.name.as_deref(), Some("g"));
        assert_eq!(group.spec["minMember"], 2);
        assert_eq!(group.status["phase"], "Scheduled");
    }
}
