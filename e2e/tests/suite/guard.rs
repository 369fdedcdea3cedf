//! The loopback guard (docs/architecture.md#loopback-only), run last by `make test`: nothing
//! configured in the cluster makes the API server dial a non-loopback address, and no process the
//! harness started has a connection to one.

use std::net::IpAddr;

use e2e::client;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

fn loopback_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[tokio::test]
#[ignore = "needs the local control plane (make test)"]
async fn cluster_configuration_is_loopback_only() {
    let client = client().await;
    let mut violations = Vec::new();
    let check =
        |what: String, url: Option<&String>, service: bool, violations: &mut Vec<String>| {
            if service {
                violations.push(format!("{what}: uses a service reference"));
            }
            if let Some(url) = url.filter(|u| !loopback_url(u)) {
                violations.push(format!("{what}: url {url} is not loopback"));
            }
        };
    for config in Api::<MutatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        for hook in config.webhooks.iter().flatten() {
            check(
                format!("mutating webhook {}/{}", config.name_any(), hook.name),
                hook.client_config.url.as_ref(),
                hook.client_config.service.is_some(),
                &mut violations,
            );
        }
    }
    for config in Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        for hook in config.webhooks.iter().flatten() {
            check(
                format!("validating webhook {}/{}", config.name_any(), hook.name),
                hook.client_config.url.as_ref(),
                hook.client_config.service.is_some(),
                &mut violations,
            );
        }
    }
    for svc in Api::<APIService>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if svc.spec.as_ref().is_some_and(|s| s.service.is_some()) {
            violations.push(format!(
                "APIService {} is served by a Service",
                svc.name_any()
            ));
        }
    }
    for crd in Api::<CustomResourceDefinition>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        if let Some(webhook) = crd
            .spec
            .conversion
            .as_ref()
            .and_then(|c| c.webhook.as_ref())
        {
            let config = webhook.client_config.as_ref();
            check(
                format!("CRD {} conversion webhook", crd.name_any()),
                config.and_then(|c| c.url.as_ref()),
                config.is_some_and(|c| c.service.is_some()),
                &mut violations,
            );
        }
    }
    assert!(
        violations.is_empty(),
        "non-loopback configuration:\n{}",
        violations.join("\n")
    );
}

/// PIDs recorded by `e2e/cluster.sh` and the operator launchers in the cluster folder.
fn harness_pids() -> Vec<(String, u32)> {
    let dir = e2e::operator::cluster_dir();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "pid") {
            let pid = std::fs::read_to_string(&path)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            pids.push((
                path.file_stem().unwrap().to_string_lossy().into_owned(),
                pid,
            ));
        }
    }
    assert!(
        pids.len() >= 5,
        "expected the control plane's pid files in {}",
        dir.display()
    );
    pids
}

#[test]
#[ignore = "needs the local control plane (make test)"]
fn harness_processes_have_only_loopback_peers() {
    let pids = harness_pids();
    let (connections, violations) = e2e::network::connections_of(&pids);
    assert!(
        connections > 0,
        "no connections found for {pids:?}; is ss allowed to see them?"
    );
    assert!(
        violations.is_empty(),
        "non-loopback connections:\n{}",
        violations.join("\n")
    );
}

#[test]
fn loopback_urls() {
    assert!(loopback_url("https://127.0.0.1:8443/validate"));
    assert!(loopback_url("https://[::1]:8443/x"));
    assert!(loopback_url("https://localhost:1/x"));
    assert!(!loopback_url("https://10.96.0.1:443/x"));
    assert!(!loopback_url("https://squall.squall-system.svc:443/x"));
    assert!(!loopback_url("http://127.0.0.1:80/x"));
}
