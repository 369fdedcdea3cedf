//! Publishing events: what every controller and the caches tell users about their objects.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};

use crate::metrics::Metrics;

/// Publishes `event` about `regarding`, counted as `controller`'s write. A failure is logged,
/// never returned: events are informative.
pub async fn publish_event(
    events: &Recorder,
    metrics: &Metrics,
    controller: &str,
    event: &Event,
    regarding: &ObjectReference,
) {
    match events.publish(event, regarding).await {
        Ok(()) => metrics.api_write(controller, "create", "events"),
        Err(error) => {
            tracing::warn!(%error, reason = %event.reason, "publishing an event failed")
        }
    }
}
