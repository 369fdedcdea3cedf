//! PodGroups for gang scheduling: which scheduler a `schedulingStrategy` names, the PodGroup
//! it asks for and how pods join it. A RoleSet-level strategy asks for one PodGroup named
//! after the RoleSet, a role-level strategy (PodSet roles only) one per PodSet named after
//! the PodSet; each is owned by what it is named after, so garbage collection removes it too.
//! The spec fields are the strategy's own, as AIBrix copies them; `minMember`, when the user
//! leaves it out (or at 0), is the number of pods that must run together.

use std::time::Duration;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use kube::core::DynamicObject;
use serde_json::{Value, json};

use crate::api::RoleSetSpec;
use crate::api::common::SchedulingStrategy;
use crate::api::podgroup::{
    KEY_GODEL_POD_GROUP_NAME, KEY_VOLCANO_GROUP_NAME, LABEL_COSCHEDULING_POD_GROUP, PODGROUP_KIND,
    Scheduler,
};

/// What a strategy asks of its scheduler: the PodGroup's spec (before `minMember` is
/// filled in).
#[derive(Clone, Debug, PartialEq)]
pub struct GangRequest {
    /// The scheduler.
    pub scheduler: Scheduler,
    /// The PodGroup's spec, the strategy's fields as they are named in the PodGroup.
    pub spec: serde_json::Map<String, Value>,
}

/// The scheduler and PodGroup spec a strategy asks for; `None` when it names none (more than
/// one is denied at admission; the first of [`Scheduler::ALL`] would win here).
pub fn requested(strategy: &SchedulingStrategy) -> Option<GangRequest> {
    let (scheduler, spec) = if let Some(s) = &strategy.coscheduling_scheduling_strategy {
        (Scheduler::Coscheduling, serde_json::to_value(s))
    } else if let Some(s) = &strategy.volcano_scheduling_strategy {
        (Scheduler::Volcano, serde_json::to_value(s))
    } else if let Some(s) = &strategy.godel_scheduling_strategy {
        (Scheduler::Godel, serde_json::to_value(s))
    } else {
        return None;
    };
    let Ok(Value::Object(spec)) = spec else {
        unreachable!("a strategy serializes as an object")
    };
    Some(GangRequest { scheduler, spec })
}

/// Who a PodGroup is for: its owner (whose name it takes) and the label that ties it to
/// that owner.
#[derive(Clone, Debug)]
pub struct GangOwner<'a> {
    /// Namespace of the owner and the PodGroup.
    pub namespace: &'a str,
    /// Controller reference to the RoleSet or PodSet (its name is the PodGroup's).
    pub owner: OwnerReference,
    /// `roleset-name` or `…/podset-name`, with the owner's name as value.
    pub owner_label: &'static str,
}

/// The PodGroup a gang of `members` pods asks for.
pub fn desired(request: &GangRequest, owner: &GangOwner<'_>, members: i32) -> DynamicObject {
    let mut spec = request.spec.clone();
    let min_member = spec.get("minMember").and_then(Value::as_i64).unwrap_or(0);
    if min_member <= 0 {
        spec.insert("minMember".into(), json!(members));
    }
    let name = owner.owner.name.clone();
    DynamicObject {
        types: Some(kube::core::TypeMeta {
            api_version: format!(
                "{}/{}",
                request.scheduler.group(),
                request.scheduler.version()
            ),
            kind: PODGROUP_KIND.into(),
        }),
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(owner.namespace.into()),
            labels: Some(BTreeMap::from([(owner.owner_label.into(), name)])),
            owner_references: Some(vec![owner.owner.clone()]),
            ..ObjectMeta::default()
        },
        data: json!({ "spec": spec }),
    }
}

/// Whether an observed PodGroup's spec differs from the desired one in a field squall sets
/// (fields a scheduler defaults, such as Volcano's `queue`, are left alone when unset).
pub fn needs_update(desired: &DynamicObject, observed: &DynamicObject) -> bool {
    let (Some(want), observed) = (desired.data["spec"].as_object(), &observed.data["spec"]) else {
        return false;
    };
    want.iter()
        .any(|(field, value)| observed.get(field) != Some(value))
}

/// A PodGroup's state as `squall status` prints it: its phase and how many members its
/// scheduler has placed against `minMember` (coscheduling counts `scheduled`; Volcano and
/// Gödel report `running`).
pub fn gang_state(scheduler: Scheduler, name: &str, spec: &Value, status: &Value) -> String {
    let placed_field = match scheduler {
        Scheduler::Coscheduling => "scheduled",
        Scheduler::Volcano | Scheduler::Godel => "running",
    };
    let number = |v: &Value| {
        v.as_i64()
            .map_or_else(|| "-".to_string(), |n| n.to_string())
    };
    format!(
        "gang {name} ({}): phase {}  {placed_field} {}/{}",
        scheduler.group(),
        status["phase"].as_str().unwrap_or("-"),
        number(&status[placed_field]),
        number(&spec["minMember"]),
    )
}

/// The pods of a RoleSet-level gang: every pod of every role (a multi-node role's replicas
/// are gangs of `podGroupSize` pods).
pub fn roleset_gang_size(spec: &RoleSetSpec) -> i32 {
    spec.roles
        .iter()
        .flatten()
        .map(|role| {
            role.replicas_or_default()
                .saturating_mul(role.pod_group_size_or_default().max(1))
        })
        .fold(0, i32::saturating_add)
}

/// Labels and annotations that make a pod (or a PodSet, whose pods inherit its labels) a
/// member of the PodGroup `group`: every scheduler's keys, as AIBrix writes them, so a
/// service moved between schedulers keeps its members.
pub fn member_keys(group: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let labels = [
        LABEL_COSCHEDULING_POD_GROUP,
        KEY_VOLCANO_GROUP_NAME,
        KEY_GODEL_POD_GROUP_NAME,
    ];
    let annotations = [KEY_VOLCANO_GROUP_NAME, KEY_GODEL_POD_GROUP_NAME];
    let of = |keys: &[&str]| {
        keys.iter()
            .map(|k| ((*k).to_string(), group.to_string()))
            .collect()
    };
    (of(&labels), of(&annotations))
}

/// Where a gang's PodGroup stands after a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gang {
    /// No strategy: pods are scheduled one by one.
    NotRequested,
    /// The scheduler's PodGroup CRD is not served: pods are created without the gang
    /// guarantee (as AIBrix does), and the owner says so.
    Unserved(Scheduler),
    /// The PodGroup is not in the cache yet: its pods wait for it.
    Waiting,
    /// The PodGroup is there, as the strategy asks: its pods may be created.
    Ready,
    /// A PodGroup of the owner's name is controlled by someone else: it is left alone, and
    /// the gang's pods wait rather than join it.
    Foreign(Scheduler),
}

/// How soon an owner whose PodGroup name is taken by a foreign PodGroup is looked at again:
/// that PodGroup's changes reach its own owner, not this one.
const FOREIGN_RECHECK: Duration = Duration::from_secs(30);

impl Gang {
    /// Whether the gang's pods are held back this pass.
    pub fn holds_pods(self) -> bool {
        matches!(self, Gang::Waiting | Gang::Foreign(_))
    }

    /// When a gang that holds its pods back is looked at again.
    pub fn recheck(self) -> Option<Duration> {
        match self {
            Gang::Waiting => Some(GANG_WAIT),
            Gang::Foreign(_) => Some(FOREIGN_RECHECK),
            Gang::NotRequested | Gang::Unserved(_) | Gang::Ready => None,
        }
    }

    /// What the owner's status says of a foreign PodGroup `name`.
    pub fn foreign_message(scheduler: Scheduler, name: &str) -> String {
        format!(
            "{} PodGroup {name} exists and is not controlled by this owner; squall leaves it \
             alone and creates no gang pod. Delete or rename it to let squall create its own.",
            scheduler.group()
        )
    }
}

/// How soon an owner whose PodGroup is not in the cache yet is looked at again (its pods
/// wait for it).
const GANG_WAIT: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::{
        CoschedulingSchedulingStrategy, GodelSchedulingStrategy, VolcanoSchedulingStrategy,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn owner() -> GangOwner<'static> {
        GangOwner {
            namespace: "ns",
            owner: OwnerReference {
                api_version: "orchestration.aibrix.ai/v1alpha1".into(),
                kind: "RoleSet".into(),
                name: "svc-abc12".into(),
                uid: "u1".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
            owner_label: "roleset-name",
        }
    }

    #[test]
    fn each_scheduler_gets_its_own_podgroup_with_the_strategy_fields() {
        let cosched = SchedulingStrategy {
            coscheduling_scheduling_strategy: Some(CoschedulingSchedulingStrategy {
                min_member: Some(3),
                min_resources: Some(BTreeMap::from([(
                    "nvidia.com/gpu".into(),
                    Quantity("8".into()),
                )])),
                schedule_timeout_seconds: Some(60),
            }),
            ..SchedulingStrategy::default()
        };
        let request = requested(&cosched).unwrap();
        let group = desired(&request, &owner(), 8);
        assert_eq!(
            group.types.as_ref().unwrap().api_version,
            "scheduling.x-k8s.io/v1alpha1"
        );
        assert_eq!(group.metadata.name.as_deref(), Some("svc-abc12"));
        assert_eq!(group.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            group.metadata.labels.as_ref().unwrap()["roleset-name"],
            "svc-abc12"
        );
        assert_eq!(
            group.metadata.owner_references.as_ref().unwrap()[0].uid,
            "u1"
        );
        assert_eq!(
            group.data["spec"],
            json!({"minMember": 3, "minResources": {"nvidia.com/gpu": "8"}, "scheduleTimeoutSeconds": 60})
        );

        let volcano = SchedulingStrategy {
            volcano_scheduling_strategy: Some(VolcanoSchedulingStrategy {
                queue: Some("gpu".into()),
                min_task_member: Some(BTreeMap::from([("decode".into(), 2)])),
                ..VolcanoSchedulingStrategy::default()
            }),
            ..SchedulingStrategy::default()
        };
        let group = desired(&requested(&volcano).unwrap(), &owner(), 4);
        assert_eq!(
            group.types.as_ref().unwrap().api_version,
            "scheduling.volcano.sh/v1beta1"
        );
        assert_eq!(
            group.data["spec"],
            json!({"minMember": 4, "queue": "gpu", "minTaskMember": {"decode": 2}})
        );

        let godel = SchedulingStrategy {
            godel_scheduling_strategy: Some(GodelSchedulingStrategy {
                min_member: Some(0),
                application: Some("llm".into()),
                ..GodelSchedulingStrategy::default()
            }),
            ..SchedulingStrategy::default()
        };
        let group = desired(&requested(&godel).unwrap(), &owner(), 2);
        assert_eq!(
            group.types.as_ref().unwrap().api_version,
            "scheduling.godel.kubewharf.io/v1alpha1"
        );
        assert_eq!(
            group.data["spec"],
            json!({"minMember": 2, "application": "llm"})
        );

        assert_eq!(requested(&SchedulingStrategy::default()), None);
    }

    #[test]
    fn only_a_changed_field_that_squall_sets_asks_for_an_update() {
        let strategy = SchedulingStrategy {
            volcano_scheduling_strategy: Some(VolcanoSchedulingStrategy::default()),
            ..SchedulingStrategy::default()
        };
        let want = desired(&requested(&strategy).unwrap(), &owner(), 4);
        let mut seen = want.clone();
        // Volcano defaults the queue; squall did not set one.
        seen.data["spec"]["queue"] = json!("default");
        assert!(!needs_update(&want, &seen));
        seen.data["spec"]["minMember"] = json!(3);
        assert!(needs_update(&want, &seen));
    }

    #[test]
    fn gang_state_reads_each_schedulers_count() {
        let spec = json!({"minMember": 4});
        assert_eq!(
            gang_state(
                Scheduler::Coscheduling,
                "g",
                &spec,
                &json!({"phase": "Scheduled", "scheduled": 4})
            ),
            "gang g (scheduling.x-k8s.io): phase Scheduled  scheduled 4/4"
        );
        assert_eq!(
            gang_state(
                Scheduler::Volcano,
                "g",
                &spec,
                &json!({"phase": "Inqueue", "running": 1})
            ),
            "gang g (scheduling.volcano.sh): phase Inqueue  running 1/4"
        );
        assert_eq!(
            gang_state(Scheduler::Godel, "g", &spec, &Value::Null),
            "gang g (scheduling.godel.kubewharf.io): phase -  running -/4"
        );
    }

    #[test]
    fn a_roleset_gang_counts_every_pod() {
        let spec: RoleSetSpec = serde_json::from_value(json!({"roles": [
            {"name": "router"},
            {"name": "prefill", "replicas": 2},
            {"name": "decode", "replicas": 3, "podGroupSize": 4},
        ]}))
        .unwrap();
        assert_eq!(roleset_gang_size(&spec), 1 + 2 + 12);
    }

    #[test]
    fn members_carry_every_schedulers_keys() {
        let (labels, annotations) = member_keys("g");
        assert_eq!(labels.len(), 3);
        assert_eq!(labels[LABEL_COSCHEDULING_POD_GROUP], "g");
        assert_eq!(annotations[KEY_GODEL_POD_GROUP_NAME], "g");
        assert_eq!(annotations[KEY_VOLCANO_GROUP_NAME], "g");
    }
}
