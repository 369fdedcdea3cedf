//! The `aibrix-live` scenarios of `../shared/conformance/`: every object AIBrix's own
//! controller-manager left for one StormService, recreated in a test namespace as the starting
//! state of a cut-over — owners first, each dependent's `ownerReferences` re-pointed to its
//! owner's new UID, `status` written through the subresource.

use std::collections::BTreeMap;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::Value;

use crate::shared::{documents, shared_dir};

/// One loaded scenario: the objects as created, by `kind/name`.
pub struct Scenario {
    /// The StormService's name.
    pub stormservice: String,
    /// `kind/name` → UID in the test namespace.
    pub uids: BTreeMap<String, String>,
}

fn resource(kind: &str) -> ApiResource {
    let gvk = match kind {
        "StormService" | "RoleSet" | "PodSet" => {
            GroupVersionKind::gvk("orchestration.aibrix.ai", "v1alpha1", kind)
        }
        "ControllerRevision" => GroupVersionKind::gvk("apps", "v1", kind),
        other => GroupVersionKind::gvk("", "v1", other),
    };
    let plural = match kind {
        "Pod" => "pods".to_string(),
        "Service" => "services".to_string(),
        other => format!("{}s", other.to_lowercase()),
    };
    ApiResource::from_gvk_with_plural(&gvk, &plural)
}

/// Creates scenario `name` (`aibrix-live/<name>.yaml`) in `namespace`; `None` without the
/// shared conformance data.
pub async fn load(client: &Client, namespace: &str, name: &str) -> Option<Scenario> {
    let file = shared_dir()?.join(format!("conformance/aibrix-live/{name}.yaml"));
    let mut uids: BTreeMap<String, String> = BTreeMap::new();
    let mut stormservice = String::new();
    for mut doc in documents(&file) {
        let kind = doc["kind"]
            .as_str()
            .expect("every object has a kind")
            .to_string();
        let object_name = doc["metadata"]["name"].as_str().unwrap().to_string();
        let meta = doc["metadata"].as_object_mut().unwrap();
        for dropped in ["uid", "resourceVersion", "creationTimestamp", "generation"] {
            meta.remove(dropped);
        }
        meta.insert("namespace".into(), Value::String(namespace.into()));
        if let Some(owners) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for owner in owners {
                let key = format!(
                    "{}/{}",
                    owner["kind"].as_str().unwrap(),
                    owner["name"].as_str().unwrap()
                );
                let uid = uids.get(&key).unwrap_or_else(|| {
                    panic!("{name}: {kind}/{object_name}'s owner {key} comes first")
                });
                owner["uid"] = Value::String(uid.clone());
            }
        }
        if kind == "Service" && doc["spec"]["clusterIP"] != "None" {
            // Cluster IPs are the other cluster's (a headless Service keeps its `None`).
            if let Some(spec) = doc["spec"].as_object_mut() {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
        }
        let status = doc.as_object_mut().unwrap().remove("status");
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &resource(&kind));
        let object: DynamicObject = serde_json::from_value(doc).unwrap();
        let created = api
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{name}: creating {kind}/{object_name}: {e}"));
        if let Some(status) = status.filter(|_| kind != "Pod" && kind != "Service") {
            api.patch_status(
                &object_name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: status of {kind}/{object_name}: {e}"));
        }
        if kind == "StormService" {
            stormservice = object_name.clone();
        }
        uids.insert(
            format!("{kind}/{object_name}"),
            created.metadata.uid.expect("created objects have a UID"),
        );
    }
    Some(Scenario { stormservice, uids })
}
