//! A headless Service as the StormService controller caches it: what its reconcile reads
//! (whether the Service is its own and whether its selection drifted:
//! `planner::render::headless_service_repair`). Ports, IPs and status are several times
//! that, and unread.

use k8s_openapi::api::core::v1::Service;
use serde::{Deserialize, Serialize};

use super::meta::{CachedMeta, Pairs};

/// A cached Service: its metadata, selector and `publishNotReadyAddresses`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CachedService {
    /// As the API server sent it, compact.
    pub metadata: CachedMeta,
    /// `spec.selector`.
    pub selector: Pairs,
    /// `spec.publishNotReadyAddresses`.
    pub publish_not_ready_addresses: Option<bool>,
}

super::meta::cached_kind!(CachedService, "Service", "", "v1", "services");

impl From<&Service> for CachedService {
    fn from(service: &Service) -> Self {
        let spec = service.spec.as_ref();
        Self {
            metadata: CachedMeta::from(&service.metadata),
            selector: spec
                .and_then(|s| s.selector.as_ref())
                .map(Pairs::from)
                .unwrap_or_default(),
            publish_not_ready_addresses: spec.and_then(|s| s.publish_not_ready_addresses),
        }
    }
}

/// Written as the Service it keeps (the cache-size metric counts its JSON).
impl Serialize for CachedService {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Spec {
            #[serde(skip_serializing_if = "Option::is_none")]
            selector: Option<std::collections::BTreeMap<String, String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            publish_not_ready_addresses: Option<bool>,
        }
        #[derive(Serialize)]
        struct Whole {
            metadata: CachedMeta,
            spec: Spec,
        }
        Whole {
            metadata: self.metadata.clone(),
            spec: Spec {
                selector: self.selector.to_map(),
                publish_not_ready_addresses: self.publish_not_ready_addresses,
            },
        }
        .serialize(serializer)
    }
}

/// Read as a Service.
impl<'de> Deserialize<'de> for CachedService {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Service::deserialize(deserializer).map(|service| Self::from(&service))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_service_keeps_its_selection_and_writes_as_a_service() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "llm", "namespace": "ns", "labels": {"storm-service-name": "llm"}},
            "spec": {"clusterIP": "None", "ports": [{"port": 8000}],
                "selector": {"storm-service-name": "llm"}, "publishNotReadyAddresses": true},
        }))
        .unwrap();
        let cached = CachedService::from(&service);
        assert_eq!(cached.selector.get("storm-service-name"), Some("llm"));
        assert_eq!(cached.publish_not_ready_addresses, Some(true));
        let text = serde_json::to_string(&cached).unwrap();
        assert!(!text.contains("8000"), "ports are not kept: {text}");
        let read: CachedService = serde_json::from_str(&text).unwrap();
        assert_eq!(read, cached);
    }
}
