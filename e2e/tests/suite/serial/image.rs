//! The container image `make image` builds (hack/image.sh: the Dockerfile on local stand-ins of
//! its bases), started the way the chart's Deployment starts it: the installed Deployment's
//! args, env, user, read-only root filesystem, dropped capabilities and probes, the chart
//! ServiceAccount's token where a pod has it (in-cluster configuration), on loopback with
//! `--network host`. It becomes ready, answers `kubectl apply` through the chart's webhook
//! configurations, reconciles a StormService, and exits on SIGTERM within the pod's grace
//! period. The image itself matches the chart's pod spec (entrypoint, user, ports) and holds no
//! shell.
//!
//! Serial: it runs the controllers of its own operator.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::helm::{chart_dir, helm, template};
use e2e::operator::{cluster_dir, counter_sum, free_port, http_get};
use e2e::roles::{stormservice, stormservice_settled};
use e2e::{TestNamespace, client, install_crds, kubectl, wait_for, workspace_root};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSecurityContext, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use squall::api::StormService;

const RELEASE: &str = "squall-image";
const NAMESPACE: &str = "squall-image-system";
const CONTAINER: &str = "squall-image-e2e";
const TIMEOUT: Duration = Duration::from_secs(120);
/// Where a pod finds its ServiceAccount's token, CA and namespace.
const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// A pod's termination grace period when its spec sets none (the API server's default).
const DEFAULT_GRACE_SECONDS: i64 = 30;
/// The container fields this test turns into podman flags (`image`: the local image stands
/// for the chart's repository and tag, as `e2e/kind.sh` sets them; `imagePullPolicy`: it is
/// present, so `IfNotPresent` is podman's `--pull never`); a field the chart adds
/// beyond these and [`NOT_CARRIED_OVER`] fails the test until it is carried over too.
const CARRIED_OVER: [&str; 10] = [
    "name",
    "image",
    "args",
    "env",
    "ports",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "securityContext",
    "imagePullPolicy",
];
/// Container fields without an equivalent here, and why.
const NOT_CARRIED_OVER: [(&str, &str); 3] = [
    (
        "resources",
        "CPU and memory limits need cgroup control, which podman lacks on this machine",
    ),
    (
        "terminationMessagePath",
        "an API server default; squall writes no termination message",
    ),
    (
        "terminationMessagePolicy",
        "an API server default, as above",
    ),
];

/// The image under test: `SQUALL_IMAGE`, as `hack/image.sh` names it.
fn image() -> String {
    std::env::var("SQUALL_IMAGE").unwrap_or_else(|_| "localhost/squall:dev".into())
}

/// Runs podman through `hack/podman.sh`: (success, stdout, stderr).
fn podman(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(workspace_root().join("hack/podman.sh"))
        .args(args)
        .output()
        .expect("hack/podman.sh runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn podman_ok(args: &[&str]) -> String {
    let (ok, stdout, stderr) = podman(args);
    assert!(ok, "podman {args:?}: {stderr}");
    stdout
}

/// The image's configuration (`podman image inspect`), after checking the image exists.
fn image_config() -> Value {
    let (exists, _, _) = podman(&["image", "exists", &image()]);
    assert!(exists, "image {} missing: run `make image`", image());
    let inspected: Value =
        serde_json::from_str(&podman_ok(&["image", "inspect", &image()])).unwrap();
    inspected[0]["Config"].clone()
}

/// A container, removed when dropped (stopped first if it still runs).
struct Started(String);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "5", &self.0]);
    }
}

/// The one Deployment of a rendered chart, and its pod spec's first container.
fn deployment_of(docs: &[Value]) -> (Value, Container) {
    let deployments: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Deployment").collect();
    assert_eq!(deployments.len(), 1, "the chart renders one Deployment");
    let container = deployments[0]["spec"]["template"]["spec"]["containers"][0].clone();
    (
        deployments[0].clone(),
        serde_json::from_value(container).unwrap(),
    )
}

/// The port and path a probe's `httpGet` asks, its port resolved through the container's
/// named ports.
fn http_target(container: &Container, probe: Option<&Probe>, which: &str) -> (u16, String) {
    let probe = probe
        .and_then(|p| p.http_get.as_ref())
        .unwrap_or_else(|| panic!("the chart's {which} probe is an httpGet"));
    let port = match &probe.port {
        IntOrString::Int(n) => *n,
        IntOrString::String(name) => {
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("probe port {name} is one of the container's ports"))
                .container_port
        }
    };
    (
        u16::try_from(port).unwrap(),
        probe.path.clone().unwrap_or_else(|| "/".into()),
    )
}

/// The container's probes by name.
fn probes(container: &Container) -> [(&'static str, Option<&Probe>); 3] {
    [
        ("startup", container.startup_probe.as_ref()),
        ("readiness", container.readiness_probe.as_ref()),
        ("liveness", container.liveness_probe.as_ref()),
    ]
}

/// The image's configuration is the chart's pod spec: the chart sets no command (the
/// image's entrypoint runs its args), runs as the image's user, and exposes the image's
/// ports; the image holds the binary and no shell.
#[test]
#[ignore = "needs the image (make image) and helm (make test)"]
fn the_image_matches_the_charts_pod_spec_and_has_no_shell() {
    let config = image_config();
    let docs = template(&[]).expect("the chart renders with its defaults");
    let (deployment, container) = deployment_of(&docs);

    assert_eq!(
        container.command, None,
        "the chart sets no command: the image's entrypoint runs"
    );
    assert_eq!(config["Entrypoint"], json!(["/usr/local/bin/squall"]));
    assert_eq!(
        container
            .args
            .as_ref()
            .and_then(|a| a.first())
            .map(String::as_str),
        Some("run")
    );

    let pod_security: PodSecurityContext =
        serde_json::from_value(deployment["spec"]["template"]["spec"]["securityContext"].clone())
            .unwrap();
    let chart_user = format!(
        "{}:{}",
        pod_security.run_as_user.expect("the chart sets runAsUser"),
        pod_security
            .run_as_group
            .expect("the chart sets runAsGroup")
    );
    assert_eq!(config["User"], json!(chart_user), "image user = chart user");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_ne!(pod_security.run_as_user, Some(0));

    let chart_ports: BTreeSet<String> = container
        .ports
        .iter()
        .flatten()
        .map(|p| {
            format!(
                "{}/{}",
                p.container_port,
                p.protocol.as_deref().unwrap_or("TCP").to_lowercase()
            )
        })
        .collect();
    let image_ports: BTreeSet<String> = config["ExposedPorts"]
        .as_object()
        .expect("the image exposes its ports")
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        image_ports, chart_ports,
        "image EXPOSE = chart containerPorts"
    );
    for (which, probe) in probes(&container) {
        let (port, _) = http_target(&container, probe, which);
        assert!(
            chart_ports.contains(&format!("{port}/tcp")),
            "the {which} probe's port {port} is exposed"
        );
    }

    // The filesystem, as a container of the image has it.
    let created = podman_ok(&["create", "--pull", "never", &image()]);
    let id = created.trim().to_string();
    let _container = Started(id.clone());
    let tarball = cluster_dir().join("image-filesystem.tar");
    podman_ok(&["export", "--output", tarball.to_str().unwrap(), &id]);
    let listing = Command::new("tar")
        .arg("-tvf")
        .arg(&tarball)
        .output()
        .expect("tar lists the export");
    let _ = std::fs::remove_file(&tarball);
    assert!(
        listing.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&listing.stderr)
    );
    let listing = String::from_utf8_lossy(&listing.stdout);
    let paths: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    let shells: Vec<&&str> = paths
        .iter()
        .filter(|p| {
            let name = p
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or_default();
            matches!(
                name,
                "sh" | "bash" | "dash" | "ash" | "zsh" | "ksh" | "mksh" | "busybox"
            )
        })
        .collect();
    assert!(shells.is_empty(), "the image holds a shell: {shells:?}");
    let binary = listing
        .lines()
        .find(|l| l.ends_with(" usr/local/bin/squall") || l.ends_with(" ./usr/local/bin/squall"))
        .unwrap_or_else(|| panic!("the image holds /usr/local/bin/squall"));
    assert!(
        binary.starts_with("-rwxr-xr-x"),
        "squall is executable by every user: {binary}"
    );
    let (ran, _, stderr) = podman(&[
        "run",
        "--rm",
        "--pull",
        "never",
        "--network",
        "none",
        "--entrypoint",
        "/bin/sh",
        &image(),
        "-c",
        "true",
    ]);
    assert!(!ran, "a shell started in the image");
    assert!(
        stderr.contains("/bin/sh")
            && (stderr.contains("no such file") || stderr.contains("not found")),
        "podman names the missing shell: {stderr}"
    );
}

/// The chart installed for a process on loopback, as `e2e/operator.sh` installs it: webhooks
/// by `url:` to `webhook_port`, both servers bound to 127.0.0.1; uninstalled when dropped.
struct Release;

impl Release {
    fn install(webhook_port: u16, admin_port: u16) -> Self {
        let values = [
            "crds.install=false".to_string(),
            "bindAddress=127.0.0.1".to_string(),
            format!("webhook.port={webhook_port}"),
            format!("admin.port={admin_port}"),
            format!("webhook.url=https://127.0.0.1:{webhook_port}"),
            "logging.format=plain".to_string(),
        ];
        let chart = chart_dir();
        let mut args = vec![
            "upgrade",
            "--install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--wait",
            "--timeout",
            "120s",
        ];
        for value in &values {
            args.extend(["--set", value.as_str()]);
        }
        let out = helm(&args);
        assert!(out.success, "helm install: {}{}", out.stdout, out.stderr);
        Release
    }
}

impl Drop for Release {
    /// Uninstalls, then deletes the namespace and the certificate Secret squall made in it.
    fn drop(&mut self) {
        let _ = helm(&[
            "uninstall",
            RELEASE,
            "-n",
            NAMESPACE,
            "--wait",
            "--timeout",
            "60s",
        ]);
        // Waited for: a second run's install cannot use a terminating namespace.
        kubectl(
            &[
                "delete",
                "namespace",
                NAMESPACE,
                "--timeout=60s",
                "--ignore-not-found",
            ],
            None,
        );
    }
}

/// What a pod of the release is given: its ServiceAccount's token (bound to the pod), the
/// cluster CA from the namespace's `kube-root-ca.crt`, and its namespace, in a folder to be
/// mounted at the standard path; readable by the container's user as in a pod.
async fn service_account_files(client: &kube::Client, pod: &str) -> PathBuf {
    let token = kubectl(
        &[
            "create",
            "token",
            RELEASE,
            "-n",
            NAMESPACE,
            "--duration=1h",
            "--bound-object-kind=Pod",
            &format!("--bound-object-name={pod}"),
        ],
        None,
    );
    assert!(token.success, "token request: {}", token.stderr);
    let ca: ConfigMap = Api::namespaced(client.clone(), NAMESPACE)
        .get("kube-root-ca.crt")
        .await
        .expect("kube-controller-manager publishes kube-root-ca.crt");
    let ca = ca
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .expect("ca.crt");
    let dir = cluster_dir().join("image-serviceaccount");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (file, content) in [
        ("token", token.stdout.trim()),
        ("ca.crt", ca.as_str()),
        ("namespace", NAMESPACE),
    ] {
        std::fs::write(dir.join(file), content).unwrap();
    }
    dir
}

/// The API server as a pod reaches it: `KUBERNETES_SERVICE_HOST` and `_PORT` (here the
/// loopback address the test's own kubeconfig names).
struct ApiServer {
    host: String,
    port: u16,
}

async fn api_server() -> ApiServer {
    let config = kube::Config::infer().await.expect("KUBECONFIG");
    let url = &config.cluster_url;
    ApiServer {
        host: url.host().expect("the API server's host").to_string(),
        port: url.port_u16().unwrap_or(443),
    }
}

/// `podman run` flags for `container` of `deployment`'s pod `pod`: its args and env (field
/// references resolved for the pod), user, security context, in-cluster API access.
fn run_flags(
    deployment: &Deployment,
    container: &Container,
    pod: &str,
    api: &ApiServer,
    sa_dir: &std::path::Path,
) -> Vec<String> {
    let as_json = serde_json::to_value(container).unwrap();
    let unknown: Vec<&String> = as_json
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| {
            !CARRIED_OVER.contains(&k.as_str())
                && !NOT_CARRIED_OVER.iter().any(|(field, _)| field == k)
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "container fields this test does not carry over: {unknown:?}"
    );
    let pod_spec = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let pod_security = pod_spec.security_context.clone().unwrap_or_default();
    let security = container.security_context.clone().unwrap_or_default();
    let mut flags: Vec<String> = vec![
        "run".into(),
        "--detach".into(),
        "--name".into(),
        CONTAINER.into(),
        "--pull".into(),
        "never".into(),
        "--network".into(),
        "host".into(),
        "--log-driver".into(),
        "k8s-file".into(),
        "--log-opt".into(),
        format!("path={}", log_path()),
    ];
    let user = security
        .run_as_user
        .or(pod_security.run_as_user)
        .expect("runAsUser");
    let group = security
        .run_as_group
        .or(pod_security.run_as_group)
        .expect("runAsGroup");
    flags.extend(["--user".into(), format!("{user}:{group}")]);
    if security.read_only_root_filesystem == Some(true) {
        // No tmpfs over /tmp, /run, /var/tmp either: a pod has none.
        flags.extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
    }
    if security.allow_privilege_escalation == Some(false) {
        flags.extend(["--security-opt".into(), "no-new-privileges".into()]);
    }
    for cap in security
        .capabilities
        .as_ref()
        .and_then(|c| c.drop.as_ref())
        .into_iter()
        .flatten()
    {
        flags.extend(["--cap-drop".into(), cap.to_lowercase()]);
    }
    for env in container.env.iter().flatten() {
        let value = match (&env.value, &env.value_from) {
            (Some(value), _) => value.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => pod.to_string(),
                Some("metadata.namespace") => NAMESPACE.to_string(),
                other => panic!("env {} from {other:?}: not carried over", env.name),
            },
            (None, None) => String::new(),
        };
        flags.extend(["--env".into(), format!("{}={value}", env.name)]);
    }
    flags.extend([
        "--env".into(),
        format!("KUBERNETES_SERVICE_HOST={}", api.host),
        "--env".into(),
        format!("KUBERNETES_SERVICE_PORT={}", api.port),
        "--volume".into(),
        format!("{}:{SERVICE_ACCOUNT_DIR}:ro", sa_dir.display()),
        image(),
    ]);
    flags.extend(container.args.iter().flatten().cloned());
    flags
}

/// Waits until `GET http://127.0.0.1:port/path` answers 200 within `bound`, while the
/// container runs.
fn wait_for_probe(port: u16, path: &str, bound: Duration) {
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + bound;
    let mut last = String::new();
    while Instant::now() < deadline {
        match http_get(addr, path) {
            Ok((200, _)) => return,
            Ok((status, body)) => last = format!("{status} {body}"),
            Err(e) => last = e.to_string(),
        }
        let state = podman_ok(&["inspect", "--format", "{{.State.Status}}", CONTAINER]);
        assert_eq!(
            state.trim(),
            "running",
            "the container stopped; see {}",
            log_path()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!(
        "{path} on port {port} not 200 within {bound:?}: {last}; see {}",
        log_path()
    );
}

/// The container's log (podman's k8s-file driver), beside the other components' logs.
fn log_path() -> String {
    cluster_dir()
        .join("logs/squall-image.log")
        .display()
        .to_string()
}

/// A probe's bound: `periodSeconds × failureThreshold` (what the kubelet allows).
fn probe_bound(probe: Option<&Probe>) -> Duration {
    let probe = probe.expect("the probe is set");
    let period = probe.period_seconds.unwrap_or(10);
    let failures = probe.failure_threshold.unwrap_or(3);
    Duration::from_secs(u64::try_from(period * failures).unwrap())
}

fn lease_holder(lease: Option<&Lease>) -> Option<String> {
    lease?
        .spec
        .as_ref()?
        .holder_identity
        .clone()
        .filter(|h| !h.is_empty())
}

#[tokio::test]
#[ignore = "needs the local control plane and the image (make test)"]
async fn the_image_serves_and_reconciles_as_the_charts_deployment_and_stops_on_sigterm() {
    install_crds();
    image_config();
    let client = client().await;
    let (webhook_port, admin_port) = (free_port(), free_port());
    let _release = Release::install(webhook_port, admin_port);

    // The Deployment as installed, and one of its (kwok) pods whose identity the container takes.
    let deployment = Api::<Deployment>::namespaced(client.clone(), NAMESPACE)
        .get(RELEASE)
        .await
        .expect("the release's Deployment");
    let pod_spec = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .clone()
        .unwrap();
    let container = pod_spec.containers[0].clone();
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
        .await
        .unwrap();
    let pod = pods
        .items
        .first()
        .and_then(|p| p.metadata.name.clone())
        .expect("a pod of the release");
    let sa_dir = service_account_files(&client, &pod).await;
    let flags = run_flags(&deployment, &container, &pod, &api_server().await, &sa_dir);
    let _ = podman(&["rm", "--force", CONTAINER]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    podman_ok(&flags);
    let _started = Started(CONTAINER.into());
    let pid: u32 = podman_ok(&["inspect", "--format", "{{.State.Pid}}", CONTAINER])
        .trim()
        .parse()
        .expect("the container's process id");

    // Started, then ready, within the probes' bounds; alive.
    for (which, probe) in probes(&container) {
        let (port, path) = http_target(&container, probe, which);
        wait_for_probe(port, &path, probe_bound(probe));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65532"; 4],
        "the process runs as 65532: {uid}"
    );

    // The chart's webhook configurations reach the container: a valid object admitted with
    // its defaults, an invalid one denied naming the field.
    let ns = TestNamespace::create(&client, "image").await;
    let manifest = json!({
        "apiVersion": "orchestration.aibrix.ai/v1alpha1", "kind": "StormService",
        "metadata": {"name": "defaults"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "defaults"}},
            "updateStrategy": {"canary": {"steps": [{"setWeight": 50}, {"pause": {}}]}},
            "template": {"metadata": {"labels": {"app": "defaults"}}, "spec": {"roles": [
                {"name": "prefill", "template": {"spec": {"containers": [{"name": "c", "image": "i:1"}]}}}
            ]}}
        }
    });
    let out = e2e::apply(ns.name(), &manifest.to_string());
    assert!(
        out.success,
        "a valid StormService is admitted: {}",
        out.stderr
    );
    let api: Api<StormService> = Api::namespaced(client.clone(), ns.name());
    let stored = serde_json::to_value(api.get("defaults").await.unwrap()).unwrap();
    assert_eq!(
        stored["spec"]["template"]["spec"]["roles"][0]["upgradeOrder"], 0,
        "defaulted"
    );
    assert_eq!(
        stored["spec"]["updateStrategy"]["canary"]["steps"][2],
        json!({"setWeight": 100}),
        "the final step appended"
    );
    let mut invalid = manifest.clone();
    invalid["metadata"]["name"] = json!("invalid");
    invalid["spec"]["updateStrategy"]["canary"]["steps"] =
        json!([{"setWeight": 50}, {"setWeight": 20}]);
    let out = kubectl(
        &["apply", "-n", ns.name(), "-f", "-"],
        Some(&invalid.to_string()),
    );
    assert!(!out.success, "a decreasing canary weight is denied");
    assert!(
        out.stderr.contains("denied the request")
            && out
                .stderr
                .contains("spec.updateStrategy.canary.steps[1].setWeight"),
        "the denial names the field: {}",
        out.stderr
    );
    let admin = format!("127.0.0.1:{admin_port}").parse().unwrap();
    assert!(
        counter_sum(
            admin,
            "squall_admission_requests_total",
            &["verdict=\"denied\""]
        ) >= 1.0,
        "the container's webhook server answered the denial"
    );

    // Its controllers reconcile, holding the Lease as the pod.
    let ready = stormservice(
        "ready",
        2,
        json!({"type": "RollingUpdate"}),
        &[("decode", 1)],
    );
    api.create(&PostParams::default(), &ready).await.unwrap();
    wait_for(&api, "ready", "Ready", TIMEOUT, |ss| {
        stormservice_settled(ss, None)
    })
    .await
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease = format!("{RELEASE}-controllers");
    assert_eq!(
        lease_holder(leases.get_opt(&lease).await.unwrap().as_ref()),
        Some(pod.clone())
    );
    let (connections, violations) = e2e::network::connections_of(&[("squall-image".into(), pid)]);
    assert!(
        connections > 0,
        "the container's connections are visible to ss"
    );
    assert!(
        violations.is_empty(),
        "non-loopback connections: {violations:?}"
    );

    // SIGTERM: a graceful exit (code 0, the Lease released) within the pod's grace period.
    let grace = pod_spec
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    podman_ok(&["kill", "--signal", "TERM", CONTAINER]);
    let deadline = Instant::now() + Duration::from_secs(u64::try_from(grace).unwrap());
    let exited = loop {
        let state = podman_ok(&[
            "inspect",
            "--format",
            "{{.State.Status}} {{.State.ExitCode}}",
            CONTAINER,
        ]);
        let mut fields = state.split_whitespace();
        if fields.next() == Some("exited") {
            break fields.next().map(str::to_string);
        }
        assert!(
            Instant::now() < deadline,
            "still {state} {grace} s after SIGTERM; see {}",
            log_path()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        exited.as_deref(),
        Some("0"),
        "exit code after SIGTERM; see {}",
        log_path()
    );
    assert_ne!(
        lease_holder(leases.get_opt(&lease).await.unwrap().as_ref()),
        Some(pod),
        "the Lease is released on the way out"
    );
}
