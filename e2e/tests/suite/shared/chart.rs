//! The Helm chart (docs/architecture.md#the-process), rendered offline: `helm lint --strict` and
//! `helm template` for a table of values combinations, with assertions on what each renders —
//! hardening, least privilege, webhook client configs, third-party kinds (cert-manager,
//! ServiceMonitor) that are only checked here — plus the drift tests of the webhook configurations
//! against what `squall run --local` registers, and of `manifests/install.yaml` against the chart.

use e2e::helm::{lint, template};
use e2e::workspace_root;
use serde_json::{Value, json};
use squall::api::tenancy::Tenancy;
use squall::webhook::config::{Registration, configurations};

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    let found = of_kind(docs, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
    found[0]
}

fn container(docs: &[Value]) -> &Value {
    &one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn args(docs: &[Value]) -> Vec<String> {
    container(docs)["args"]
        .as_array()
        .expect("container args")
        .iter()
        .map(|a| a.as_str().expect("string arg").to_string())
        .collect()
}

fn has_arg(docs: &[Value], arg: &str) -> bool {
    args(docs).iter().any(|a| a == arg)
}

/// Every `(apiGroup, resource, verb)` a Role or ClusterRole grants, with the role's kind,
/// namespace and name.
fn grants(docs: &[Value]) -> Vec<(String, String, String, String, String)> {
    let mut out = Vec::new();
    for role in docs
        .iter()
        .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
    {
        let kind = role["kind"].as_str().unwrap().to_string();
        let namespace = role["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = role["metadata"]["name"].as_str().unwrap().to_string();
        for rule in role["rules"].as_array().into_iter().flatten() {
            for group in rule["apiGroups"].as_array().unwrap() {
                for resource in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        out.push((
                            format!("{kind} {namespace}/{name}"),
                            group.as_str().unwrap().to_string(),
                            resource.as_str().unwrap().to_string(),
                            verb.as_str().unwrap().to_string(),
                            namespace.clone(),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn webhook_configurations(docs: &[Value]) -> Vec<&Value> {
    docs.iter()
        .filter(|d| {
            d["kind"] == "MutatingWebhookConfiguration"
                || d["kind"] == "ValidatingWebhookConfiguration"
        })
        .collect()
}

fn webhooks(docs: &[Value]) -> Vec<&Value> {
    webhook_configurations(docs)
        .into_iter()
        .flat_map(|c| c["webhooks"].as_array().unwrap())
        .collect()
}

/// Assertions every combination must meet.
fn common(docs: &[Value]) {
    // Least privilege: no wildcards; secrets and leases only in the release namespace.
    for (role, group, resource, verb, namespace) in grants(docs) {
        assert!(
            verb != "*" && resource != "*" && group != "*",
            "{role} grants a wildcard: {group}/{resource} {verb}"
        );
        // Reading AIBrix's Lease (its namespace may not exist) is the one exception.
        let aibrix_lease = role.ends_with("-aibrix-lease") && verb == "get";
        if resource == "secrets" || (resource == "leases" && !aibrix_lease) {
            assert_eq!(
                namespace, "squall-system",
                "{role} grants {resource} outside the operator's namespace"
            );
        }
    }
    for role in docs.iter().filter(|d| {
        d["kind"] == "ClusterRole"
            && d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-aibrix-lease"))
    }) {
        assert_eq!(
            role["rules"],
            json!([{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": ["aibrix-controller-manager"], "verbs": ["get"]}]),
            "AIBrix's Lease is read by name only"
        );
    }
    // No hard-coded caBundle.
    for hook in webhooks(docs) {
        assert!(
            hook["clientConfig"].get("caBundle").is_none(),
            "{} has a caBundle",
            hook["name"]
        );
    }
    assert_eq!(
        webhook_configurations(docs).len(),
        2,
        "a mutating and a validating configuration"
    );
}

/// The pod hardening of docs/architecture.md#the-process.
fn hardened(docs: &[Value]) {
    let pod = &one(docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = container(docs);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][resource].is_string(),
                "resources.{kind}.{resource} is set"
            );
        }
    }
    for (probe, path) in [
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
        ("startupProbe", "/healthz"),
    ] {
        assert_eq!(c[probe]["httpGet"]["path"], path, "{probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"], "admin",
            "{probe} on the admin port"
        );
    }
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn the_default_install_is_hardened_least_privileged_and_highly_available() {
    let out = lint(&[]);
    assert!(
        out.success,
        "helm lint --strict: {}{}",
        out.stdout, out.stderr
    );
    let docs = template(&[]).unwrap();
    common(&docs);
    hardened(&docs);
    let deployment = one(&docs, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert!(has_arg(&docs, "--leader-elect=true"));
    assert!(has_arg(&docs, "--webhook-configs=inject"));
    assert_eq!(one(&docs, "PodDisruptionBudget")["spec"]["minAvailable"], 1);
    assert!(of_kind(&docs, "ServiceMonitor").is_empty());
    assert!(of_kind(&docs, "Certificate").is_empty());

    // CRDs as templates, kept on uninstall.
    let crds = of_kind(&docs, "CustomResourceDefinition");
    assert_eq!(crds.len(), 3);
    for crd in crds {
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
    }
    // Webhooks reach the Service; the operator's own RoleSet writes skip the RoleSet hooks.
    for hook in webhooks(&docs) {
        assert_eq!(hook["clientConfig"]["service"]["name"], "squall-webhook");
        assert_eq!(
            hook["clientConfig"]["service"]["namespace"],
            "squall-system"
        );
        assert!(hook.get("namespaceSelector").is_none());
    }
    // The Service the API server calls carries the webhook port only; the admin port is
    // reachable through its own Service, and the NetworkPolicy opens the webhook port and the
    // admin port (to the monitoring namespace) and nothing else.
    let webhook_service = of_kind(&docs, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "squall-webhook")
        .expect("the webhook Service");
    assert_eq!(
        webhook_service["spec"]["ports"],
        json!([{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}])
    );
    let policy = one(&docs, "NetworkPolicy");
    assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    let ports: Vec<&Value> = rules.iter().map(|r| &r["ports"][0]["port"]).collect();
    assert_eq!(ports, [&json!("webhook"), &json!("admin")]);
    assert_eq!(
        rules[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    // Cluster-wide: the workload rules sit in a ClusterRole.
    let grants = grants(&docs);
    let granted = |role_kind: &str, resource: &str, verb: &str| {
        grants
            .iter()
            .any(|(role, _, r, v, _)| role.starts_with(role_kind) && r == resource && v == verb)
    };
    assert!(granted("ClusterRole", "pods", "create"));
    assert!(granted("ClusterRole", "rolesets", "delete"));
    assert!(!granted("ClusterRole", "secrets", "get"));
    // Users with `edit` can promote and abort: patch on stormservices/status, aggregated.
    let edit = of_kind(&docs, "ClusterRole")
        .into_iter()
        .find(|r| {
            r["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
                && r["rules"].as_array().unwrap().iter().any(|rule| {
                    rule["resources"] == json!(["stormservices/status"])
                        && rule["verbs"].as_array().unwrap().contains(&json!("patch"))
                })
        })
        .is_some();
    assert!(
        edit,
        "an aggregate-to-edit ClusterRole grants patch on stormservices/status"
    );
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn a_namespace_list_scopes_rbac_watches_and_webhooks() {
    let values = ["namespaces={team-a,team-b}"];
    assert!(lint(&values).success);
    let docs = template(&values).unwrap();
    common(&docs);
    assert!(has_arg(&docs, "--namespaces=team-a,team-b"));
    let workload: Vec<_> = grants(&docs)
        .into_iter()
        .filter(|(_, _, resource, _, _)| resource == "pods")
        .collect();
    let namespaces: std::collections::BTreeSet<_> = workload.iter().map(|g| g.4.as_str()).collect();
    assert_eq!(
        namespaces.into_iter().collect::<Vec<_>>(),
        ["team-a", "team-b"],
        "pods are granted by Roles in the listed namespaces only: {workload:?}"
    );
    for hook in webhooks(&docs) {
        assert_eq!(
            hook["namespaceSelector"],
            json!({"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                "operator": "In", "values": ["team-a", "team-b"]}]})
        );
    }
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn a_url_points_every_webhook_outside_the_cluster_and_names_its_host_in_the_certificate() {
    let values = ["webhook.url=https://127.0.0.1:9443"];
    assert!(lint(&values).success);
    let docs = template(&values).unwrap();
    common(&docs);
    assert!(has_arg(&docs, "--extra-san=127.0.0.1"));
    for hook in webhooks(&docs) {
        let url = hook["clientConfig"]["url"].as_str().unwrap();
        assert!(url.starts_with("https://127.0.0.1:9443/"), "{url}");
        assert!(hook["clientConfig"].get("service").is_none());
    }
}

/// The chart's webhooks and the ones `squall run --local` registers are the same webhooks
/// (names, paths, rules, policies, the operator's exclusion) — one drifting from the other
/// would make the chart-installed webhooks behave differently from the tested ones.
// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn the_chart_webhooks_match_the_registered_ones() {
    let docs = template(&["webhook.url=https://127.0.0.1:9443"]).unwrap();
    let (mutating, validating) = configurations(&Registration {
        name: "squall".into(),
        base_url: "https://127.0.0.1:9443".into(),
        failure_policy: "Fail".into(),
        exclude_user: Some("system:serviceaccount:squall-system:squall".into()),
    });
    for (kind, registered) in [
        (
            "MutatingWebhookConfiguration",
            serde_json::to_value(&mutating).unwrap(),
        ),
        (
            "ValidatingWebhookConfiguration",
            serde_json::to_value(&validating).unwrap(),
        ),
    ] {
        let rendered = one(&docs, kind);
        assert_eq!(rendered["metadata"]["name"], registered["metadata"]["name"]);
        assert_eq!(
            rendered["webhooks"], registered["webhooks"],
            "{kind}: chart (left) and `squall run --local` (right) differ"
        );
    }
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn external_certificates_come_from_cert_manager() {
    let values = [
        "certificates.mode=external",
        "certificates.certManager.enabled=true",
    ];
    assert!(lint(&values).success);
    let docs = template(&values).unwrap();
    common(&docs);
    hardened(&docs);
    let certificate = one(&docs, "Certificate");
    let issuer = one(&docs, "Issuer");
    assert_eq!(
        certificate["spec"]["issuerRef"]["name"],
        issuer["metadata"]["name"]
    );
    assert_eq!(
        certificate["spec"]["dnsNames"],
        json!([
            "squall-webhook.squall-system.svc",
            "squall-webhook.squall-system.svc.cluster.local"
        ])
    );
    let secret = certificate["spec"]["secretName"].as_str().unwrap();
    let pod = &one(&docs, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], secret);
    assert!(has_arg(&docs, "--cert-mode=external"));
    assert!(has_arg(&docs, "--webhook-configs=none"));
    for config in webhook_configurations(&docs) {
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "squall-system/squall-webhook"
        );
    }
    // cert-manager owns the certificate: no Secret or webhook-configuration access.
    for (role, _, resource, verb, _) in grants(&docs) {
        assert!(
            resource != "secrets" && !resource.ends_with("webhookconfigurations"),
            "{role} grants {resource} {verb} in external mode"
        );
    }

    // An existing issuer replaces the chart's own.
    let docs = template(&[
        "certificates.mode=external",
        "certificates.certManager.enabled=true",
        "certificates.certManager.issuerRef.name=corp-ca",
        "certificates.certManager.issuerRef.kind=ClusterIssuer",
    ])
    .unwrap();
    assert!(of_kind(&docs, "Issuer").is_empty());
    assert_eq!(
        one(&docs, "Certificate")["spec"]["issuerRef"],
        json!({"name": "corp-ca", "kind": "ClusterIssuer"})
    );
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn optional_parts_switch_on_and_off() {
    type Check = fn(&[Value]);
    let table: [(&[&str], Check); 7] = [
        (&["metrics.serviceMonitor.enabled=true"], |docs| {
            let monitor = one(docs, "ServiceMonitor");
            assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
            // The monitor selects the metrics Service, the only one with the admin port.
            let selected: Vec<&Value> = of_kind(docs, "Service")
                .into_iter()
                .filter(|s| {
                    monitor["spec"]["selector"]["matchLabels"]
                        .as_object()
                        .unwrap()
                        .iter()
                        .all(|(k, v)| &s["metadata"]["labels"][k] == v)
                })
                .collect();
            assert_eq!(selected.len(), 1);
            assert_eq!(selected[0]["spec"]["ports"][0]["name"], "metrics");
        }),
        (&["networkPolicy.enabled=false"], |docs| {
            assert!(of_kind(docs, "NetworkPolicy").is_empty());
        }),
        (&["crds.install=false"], |docs| {
            assert!(of_kind(docs, "CustomResourceDefinition").is_empty());
        }),
        (&["podDisruptionBudget.enabled=false"], |docs| {
            assert!(of_kind(docs, "PodDisruptionBudget").is_empty());
        }),
        (&["rbac.create=false"], |docs| {
            assert!(of_kind(docs, "ClusterRole").is_empty() && of_kind(docs, "Role").is_empty());
        }),
        (
            &[
                "serviceAccount.create=false",
                "serviceAccount.name=platform-sa",
            ],
            |docs| {
                assert!(of_kind(docs, "ServiceAccount").is_empty());
                let pod = &one(docs, "Deployment")["spec"]["template"]["spec"];
                assert_eq!(pod["serviceAccountName"], "platform-sa");
                for hook in webhooks(docs)
                    .into_iter()
                    .filter(|h| h["name"].as_str().unwrap().contains("roleset"))
                {
                    assert_eq!(
                        hook["matchConditions"][0]["expression"],
                        "request.userInfo.username != \"system:serviceaccount:squall-system:platform-sa\""
                    );
                }
            },
        ),
        (
            &["leaderElection.enabled=false", "replicaCount=1"],
            |docs| {
                assert!(has_arg(docs, "--leader-elect=false"));
                assert_eq!(one(docs, "Deployment")["spec"]["replicas"], 1);
            },
        ),
    ];
    for (values, check) in table {
        let out = lint(values);
        assert!(
            out.success,
            "helm lint {values:?}: {}{}",
            out.stdout, out.stderr
        );
        let docs = template(values).unwrap_or_else(|e| panic!("helm template {values:?}: {e}"));
        common(&docs);
        check(&docs);
    }
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn analysis_endpoints_become_the_operators_configuration() {
    let values = [
        "analysis.prometheus[0].name=default",
        "analysis.prometheus[0].address=http://127.0.0.1:9090",
        "analysis.prometheus[0].timeout=5s",
        "analysis.prometheus[0].bearerTokenSecret.name=prometheus-token",
        "analysis.prometheus[0].bearerTokenSecret.key=token",
        "analysis.prometheus[0].bearerTokenOverHttp=true",
        "analysis.prometheus[0].tenancy=none",
        "analysis.prometheus[1].name=secure",
        "analysis.prometheus[1].namespaceLabel=kube_namespace",
        "analysis.prometheus[1].address=https://127.0.0.1:9091/prometheus",
        "analysis.prometheus[1].caBundle=PEM",
    ];
    let out = lint(&values);
    assert!(out.success, "helm lint: {}{}", out.stdout, out.stderr);
    let docs = template(&values).expect("helm template");
    common(&docs);
    let config_map = of_kind(&docs, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "squall-analysis")
        .expect("the analysis ConfigMap");
    // What the operator reads is what `squall run --analysis-config` accepts.
    let config = squall::controller::analysis::AnalysisConfig::parse(
        config_map["data"]["config.yaml"].as_str().unwrap(),
    )
    .expect("the rendered configuration parses");
    let names: Vec<&str> = config.prometheus.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["default", "secure"]);
    assert_eq!(config.prometheus[0].timeout.as_deref(), Some("5s"));
    assert!(
        config.prometheus[0].bearer_token_over_http,
        "the opt-in is passed on"
    );
    assert_eq!(
        config.prometheus[1].ca_file.as_deref(),
        Some("/etc/squall/analysis/secure-ca.crt")
    );
    let tenancy: Vec<Tenancy> = config.endpoints().into_iter().map(|e| e.tenancy).collect();
    assert_eq!(
        tenancy,
        [
            Tenancy::AsWritten,
            Tenancy::Namespace {
                label: "kube_namespace".into()
            }
        ],
        "each endpoint's tenancy is passed on; scoped to the namespace unless set to none"
    );
    assert_eq!(config_map["data"]["secure-ca.crt"], "PEM\n");
    assert!(has_arg(
        &docs,
        "--analysis-config=/etc/squall/analysis/config.yaml"
    ));
    let pod = &one(&docs, "Deployment")["spec"]["template"];
    assert!(
        pod["metadata"]["annotations"]["checksum/analysis"].is_string(),
        "a configuration change rolls the pods"
    );
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "analysis")
        .expect("the analysis volume");
    assert_eq!(volume["configMap"]["name"], "squall-analysis");
    let mount = container(&docs)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "analysis")
        .expect("the analysis mount");
    assert_eq!(mount["mountPath"], "/etc/squall/analysis");
    // The bearer token's Secret, by name, read-only, in the operator's namespace only.
    let token_rules: Vec<(String, Value)> = of_kind(&docs, "Role")
        .into_iter()
        .chain(of_kind(&docs, "ClusterRole"))
        .flat_map(|role| {
            let at = format!(
                "{} {}",
                role["kind"].as_str().unwrap(),
                role["metadata"]["namespace"].as_str().unwrap_or("")
            );
            role["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| {
                    r["resourceNames"]
                        .as_array()
                        .is_some_and(|n| n.contains(&json!("prometheus-token")))
                })
                .map(move |r| (at.clone(), r.clone()))
        })
        .collect();
    assert_eq!(token_rules.len(), 1, "{token_rules:?}");
    assert_eq!(token_rules[0].0, "Role squall-system");
    assert_eq!(token_rules[0].1["verbs"], json!(["get"]));
    assert_eq!(
        token_rules[0].1["resourceNames"],
        json!(["prometheus-token"])
    );

    let plain = template(&[]).expect("helm template");
    assert!(
        of_kind(&plain, "ConfigMap")
            .iter()
            .all(|c| c["metadata"]["name"] != "squall-analysis")
    );
    assert!(
        !args(&plain)
            .iter()
            .any(|a| a.starts_with("--analysis-config"))
    );
}

// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn bad_values_are_refused_naming_the_field() {
    for (value, field) in [
        ("webhook.failurePolicy=Sometimes", "/webhook/failurePolicy"),
        ("webhook.url=http://127.0.0.1:9443", "/webhook/url"),
        ("certificates.mode=acme", "/certificates/mode"),
        ("webhook.port=70000", "/webhook/port"),
        ("namespaces={Team_A}", "/namespaces/0"),
        ("replicaCount=0", "/replicaCount"),
        (
            "leaderElection.leaseDuration=soon",
            "/leaderElection/leaseDuration",
        ),
        (
            "analysis.prometheus[0].tenancy=everyone",
            "/analysis/prometheus/0/tenancy",
        ),
        (
            "analysis.prometheus[0].namespaceLabel=__name__",
            "/analysis/prometheus/0/namespaceLabel",
        ),
        ("unknownKey=1", "unknownKey"),
    ] {
        let error = template(&[value]).expect_err(value);
        assert!(
            error.contains(field),
            "`--set {value}`: the error names {field}: {error}"
        );
    }
}

/// `manifests/install.yaml` is the chart rendered with its defaults, behind a Namespace, for
/// `kubectl apply` users. `UPDATE_MANIFESTS=1` regenerates it.
// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn the_install_manifest_is_the_rendered_chart() {
    let e2e::helm::HelmOutput {
        success,
        stdout,
        stderr,
    } = e2e::helm::helm(&[
        "template",
        "squall",
        e2e::helm::chart_dir().to_str().unwrap(),
        "--namespace",
        "squall-system",
    ]);
    assert!(success, "{stderr}");
    let expected = format!(
        "# squall's install manifest: `helm template squall charts/squall --namespace squall-system`\n\
         # behind its Namespace. Generated by `make manifests`; do not edit.\n\
         apiVersion: v1\nkind: Namespace\nmetadata:\n  name: squall-system\n{stdout}"
    );
    let path = workspace_root().join("manifests/install.yaml");
    if std::env::var("UPDATE_MANIFESTS").as_deref() == Ok("1") {
        std::fs::write(&path, &expected).unwrap();
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == expected,
        "manifests/install.yaml is stale: run `make manifests`"
    );
}

/// Versioning (README "Versioning"): the image tag defaults to the chart's appVersion, which
/// is the crate's version, and the CHANGELOG has a section for it.
// kind-compatible: no kubelet emulation, no process control, no loopback operator
#[test]
#[ignore = "needs helm from hack/build-tools.sh (make test)"]
fn app_version_image_tag_and_changelog_follow_the_crate_version() {
    let version = env!("CARGO_PKG_VERSION");
    let chart = std::fs::read_to_string(e2e::helm::chart_dir().join("Chart.yaml")).unwrap();
    assert!(
        chart
            .lines()
            .any(|l| l == format!("appVersion: \"{version}\"")),
        "Chart.yaml appVersion is {version}"
    );
    let docs = template(&[]).unwrap();
    assert_eq!(
        container(&docs)["image"],
        format!("ghcr.io/squall-operator/squall:{version}")
    );
    let changelog = std::fs::read_to_string(workspace_root().join("CHANGELOG.md")).unwrap();
    assert!(
        changelog
            .lines()
            .any(|l| l.starts_with(&format!("## [{version}]"))),
        "CHANGELOG.md has a section for {version}"
    );
}
