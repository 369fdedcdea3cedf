//! API clients that count what they send: every request to the API server — reads included —
//! is a `squall_api_requests_total{controller,verb,resource}` sample, so the operator's load
//! on the API server is visible (and benchmarked), not only its writes.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use tower::{Layer, Service};

use crate::metrics::Metrics;

/// A client labelled `controller` (a controller's name, `cache`, `certs`, `lease`, `cli`).
pub fn counted(
    config: kube::Config,
    metrics: Arc<Metrics>,
    controller: &'static str,
) -> Result<kube::Client, kube::Error> {
    let layer = CountLayer {
        metrics,
        controller,
    };
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

/// Counts each request by verb and resource.
#[derive(Clone)]
struct CountLayer {
    metrics: Arc<Metrics>,
    controller: &'static str,
}

impl<S> Layer<S> for CountLayer {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Counted<S> {
    inner: S,
    layer: CountLayer,
}

impl<S, B> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (verb, resource) = classify(request.method(), request.uri());
        self.layer
            .metrics
            .api_request(self.layer.controller, verb, &resource);
        self.inner.call(request)
    }
}

/// The Kubernetes verb and resource (`pods`, `rolesets/status`) of a request.
fn classify(method: &Method, uri: &Uri) -> (&'static str, String) {
    let segments: Vec<&str> = uri.path().split('/').filter(|s| !s.is_empty()).collect();
    // /api/v1/... or /apis/<group>/<version>/...
    let rest = match segments.first() {
        Some(&"api") => segments.get(2..),
        Some(&"apis") => segments.get(3..),
        _ => None,
    }
    .unwrap_or_default();
    // A namespaced path names its namespace first (`/namespaces` alone is the resource).
    let rest = match rest {
        ["namespaces", _, _, ..] => &rest[2..],
        _ => rest,
    };
    let (resource, named) = match rest {
        [] => ("other".to_string(), false),
        [resource] => (resource.to_string(), false),
        [resource, _] => (resource.to_string(), true),
        [resource, _, sub, ..] => (format!("{resource}/{sub}"), true),
    };
    let watch = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(method: Method, uri: &str) -> (&'static str, String) {
        classify(&method, &uri.parse().unwrap())
    }

    #[test]
    fn requests_are_told_apart_by_verb_and_resource() {
        let cases = [
            (
                Method::GET,
                "/api/v1/namespaces/ns/pods?labelSelector=a",
                "list",
                "pods",
            ),
            (
                Method::GET,
                "/api/v1/pods?watch=true&resourceVersion=1",
                "watch",
                "pods",
            ),
            (Method::GET, "/api/v1/namespaces/ns/pods/p", "get", "pods"),
            (Method::POST, "/api/v1/namespaces/ns/pods", "create", "pods"),
            (
                Method::PATCH,
                "/api/v1/namespaces/ns/pods/p/status",
                "patch",
                "pods/status",
            ),
            (
                Method::DELETE,
                "/api/v1/namespaces/ns/pods/p",
                "delete",
                "pods",
            ),
            (
                Method::PATCH,
                "/apis/orchestration.aibrix.ai/v1alpha1/namespaces/ns/rolesets/r/status",
                "patch",
                "rolesets/status",
            ),
            (
                Method::GET,
                "/apis/orchestration.aibrix.ai/v1alpha1/stormservices?watch=1",
                "watch",
                "stormservices",
            ),
            (Method::GET, "/api/v1/namespaces", "list", "namespaces"),
            (Method::GET, "/api/v1/namespaces/ns", "get", "namespaces"),
            (
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l",
                "update",
                "leases",
            ),
            (Method::GET, "/version", "list", "other"),
        ];
        for (method, uri, verb, resource) in cases {
            assert_eq!(of(method, uri), (verb, resource.to_string()), "{uri}");
        }
    }
}
