//! `squall run`: the operator process — the HTTPS webhook server, the admin server, the
//! certificate manager, and the controllers (started once `/readyz` is green).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tokio::net::TcpListener;
use tokio::sync::watch;
use webhook_certs::Lifetimes;
use webhook_certs::manager::{CertState, Configs, Source};
use webhook_certs::store::Store;

use crate::admin::{self, Readiness};
use crate::api::podgroup::PodGroupCrds;
use crate::controller::aibrix_guard::AibrixLease;
use crate::controller::analysis::{AnalysisConfig, Providers};
use crate::metrics::Metrics;
use crate::server::{self, CertResolver};
use crate::webhook::config::{Registration, configurations};

/// Flags of `squall run` (each also settable through its environment variable).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Run outside a cluster against a loopback API server: webhooks on 127.0.0.1,
    /// certificates in a directory, webhook configurations registered with `url:`.
    #[arg(long)]
    local: bool,
    /// Address of the HTTPS webhook server [default: 0.0.0.0:9443; 127.0.0.1:9443 with
    /// --local].
    #[arg(long, env = "SQUALL_WEBHOOK_BIND")]
    webhook_bind: Option<SocketAddr>,
    /// Address of the plain-HTTP admin server (/healthz, /readyz, /metrics) [default:
    /// 0.0.0.0:8080; 127.0.0.1:8080 with --local].
    #[arg(long, env = "SQUALL_ADMIN_BIND")]
    admin_bind: Option<SocketAddr>,
    /// `self-signed`: squall issues, stores and rotates certificates; `external`: serve
    /// the files mounted in --cert-dir (e.g. by cert-manager) and reload them on change.
    #[arg(long, env = "SQUALL_CERT_MODE", value_enum, default_value_t = CertMode::SelfSigned)]
    cert_mode: CertMode,
    /// Certificate directory: the store in --local mode, the mounted files in external mode.
    #[arg(long, env = "SQUALL_CERT_DIR")]
    cert_dir: Option<PathBuf>,
    /// `inject` caBundle into configurations the chart created; `register` them (default
    /// with --local); `none` (default in external mode).
    #[arg(long, env = "SQUALL_WEBHOOK_CONFIGS", value_enum)]
    webhook_configs: Option<WebhookConfigs>,
    /// Namespace of the operator (its certificate Secret lives here).
    #[arg(long, env = "POD_NAMESPACE", default_value = "squall-system")]
    namespace: String,
    /// Release name: the Secret is `<release>-webhook-tls`, the configurations `<release>`.
    #[arg(long, env = "SQUALL_RELEASE", default_value = "squall")]
    release: String,
    /// Service in front of the webhook server (its DNS names go into the certificate).
    #[arg(long, env = "SQUALL_SERVICE", default_value = "squall-webhook")]
    service: String,
    /// CA lifetime (`87600h`, `90s`, or seconds).
    #[arg(long, env = "SQUALL_CA_LIFETIME", default_value = "87600h", value_parser = parse_duration)]
    ca_lifetime: Duration,
    /// Serving certificate lifetime.
    #[arg(long, env = "SQUALL_SERVING_LIFETIME", default_value = "8760h", value_parser = parse_duration)]
    serving_lifetime: Duration,
    /// How often caBundle is re-injected.
    #[arg(long, env = "SQUALL_INJECTION_PERIOD", default_value = "60s", value_parser = parse_duration)]
    injection_period: Duration,
    /// failurePolicy of registered webhooks.
    #[arg(long, env = "SQUALL_FAILURE_POLICY", default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    failure_policy: String,
    /// Extra names (DNS or IP) for the serving certificate, e.g. when webhook
    /// configurations reach the server through a `url:`.
    #[arg(long = "extra-san", env = "SQUALL_EXTRA_SANS", value_delimiter = ',')]
    extra_sans: Vec<String>,
    /// A username whose RoleSet writes skip the RoleSet webhooks (the operator's identity).
    #[arg(long, env = "SQUALL_EXCLUDE_USER")]
    exclude_user: Option<String>,
    /// Run the reconcile loops (they start once `/readyz` is green).
    #[arg(long, env = "SQUALL_CONTROLLERS", default_value_t = true, action = clap::ArgAction::Set)]
    controllers: bool,
    /// Reconcile only while holding the Lease (--lease-name) in --namespace, so one
    /// of several replicas reconciles (all serve webhooks). Default: true, false with --local
    /// (a single process).
    #[arg(long, env = "SQUALL_LEADER_ELECT", action = clap::ArgAction::Set)]
    leader_elect: Option<bool>,
    /// Name of the controllers' Lease; default `<release>-controllers`.
    #[arg(long, env = "SQUALL_LEASE_NAME")]
    lease_name: Option<String>,
    /// How long a Lease holds without renewal before another replica takes over.
    #[arg(long, env = "SQUALL_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// AIBrix's controller-manager Lease (`NAMESPACE/NAME`): while AIBrix holds it, squall
    /// reconciles nothing, so two controllers never act on one pod. `none`: no AIBrix here.
    #[arg(long, env = "SQUALL_AIBRIX_LEASE", default_value = AibrixLease::DEFAULT,
        value_parser = parse_aibrix_lease)]
    aibrix_lease: GuardedBy,
    /// Namespaces the controllers serve (comma-separated); empty: every namespace.
    #[arg(long, env = "SQUALL_NAMESPACES", value_delimiter = ',')]
    namespaces: Vec<String>,
    /// The canary analysis providers (a YAML file of Prometheus endpoints, which the Helm
    /// chart renders from its values); without it, analysis steps find no endpoint and
    /// are inconclusive.
    #[arg(long, env = "SQUALL_ANALYSIS_CONFIG")]
    analysis_config: Option<PathBuf>,
    /// Set SO_REUSEPORT on the webhook socket, so several processes on one host can serve
    /// webhooks on the same port (the kernel spreads connections among them).
    #[arg(long, env = "SQUALL_REUSE_PORT")]
    reuse_port: bool,
    /// Log format.
    #[arg(long, env = "SQUALL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    log_format: LogFormat,
}

/// The `--aibrix-lease` value: AIBrix's Lease, or none.
#[derive(Clone, Debug)]
struct GuardedBy(Option<AibrixLease>);

fn parse_aibrix_lease(text: &str) -> Result<GuardedBy, String> {
    AibrixLease::parse(text).map(GuardedBy)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CertMode {
    SelfSigned,
    External,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum WebhookConfigs {
    Inject,
    Register,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Json,
    Plain,
}

/// A positive duration flag (`90s`, `5m`, `8760h`, or seconds).
pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::api::duration::parse_duration(s)
        .filter(|secs| *secs > 0)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is not a positive duration such as 90s, 5m, 8760h"))
}

/// Runs the operator until SIGTERM or SIGINT.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let settings = Settings::try_from(&args)?;
    init_logging(settings.log_format);
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(serve(settings))
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Plain => builder.init(),
    }
}

/// What `squall run` does, decided from its flags alone: [`serve`] only starts it.
#[derive(Debug, PartialEq)]
pub struct Settings {
    /// Run outside a cluster: loopback only, certificates in a directory.
    local: bool,
    webhook_bind: SocketAddr,
    admin_bind: SocketAddr,
    reuse_port: bool,
    /// What happens to the webhook configurations.
    configs: WebhookConfigs,
    /// Names in the serving certificate.
    sans: Vec<String>,
    /// The name `/readyz` verifies the served certificate for.
    server_name: String,
    certs: Certs,
    lifetimes: Lifetimes,
    /// Release: names the configurations, the Secret and the Lease.
    release: String,
    /// The operator's namespace.
    namespace: String,
    failure_policy: String,
    exclude_user: Option<String>,
    /// Whether the controllers run, and under which Lease.
    controllers: Option<Controllers>,
    /// The analysis providers' configuration file.
    analysis_config: Option<PathBuf>,
    log_format: LogFormat,
}

/// Where the certificates come from.
#[derive(Debug, PartialEq)]
enum Certs {
    /// Mounted files, reloaded on change.
    External(PathBuf),
    /// Issued by squall and kept in a directory.
    SelfSignedInDir(PathBuf),
    /// Issued by squall and kept in this Secret of the operator's namespace.
    SelfSignedInSecret(String),
}

/// How the controllers run.
#[derive(Debug, PartialEq)]
struct Controllers {
    election: Option<Election>,
    namespaces: Vec<String>,
    aibrix_lease: Option<AibrixLease>,
}

/// The in-cluster default binds: every interface, behind the pod network.
const CLUSTER_WEBHOOK_BIND: &str = "0.0.0.0:9443";
const CLUSTER_ADMIN_BIND: &str = "0.0.0.0:8080";
/// The --local default binds: the API server calls the webhooks by a loopback `url:`.
const LOCAL_WEBHOOK_BIND: &str = "127.0.0.1:9443";
const LOCAL_ADMIN_BIND: &str = "127.0.0.1:8080";

impl TryFrom<&RunArgs> for Settings {
    type Error = anyhow::Error;

    fn try_from(args: &RunArgs) -> anyhow::Result<Self> {
        let (webhook_default, admin_default) = if args.local {
            (LOCAL_WEBHOOK_BIND, LOCAL_ADMIN_BIND)
        } else {
            (CLUSTER_WEBHOOK_BIND, CLUSTER_ADMIN_BIND)
        };
        let webhook_bind = args
            .webhook_bind
            .unwrap_or_else(|| webhook_default.parse().expect("a socket address"));
        let admin_bind = args
            .admin_bind
            .unwrap_or_else(|| admin_default.parse().expect("a socket address"));
        let configs = args
            .webhook_configs
            .unwrap_or(match (args.local, args.cert_mode) {
                (_, CertMode::External) => WebhookConfigs::None,
                (true, _) => WebhookConfigs::Register,
                (false, _) => WebhookConfigs::Inject,
            });
        let (mut sans, server_name) = if args.local {
            if !webhook_bind.ip().is_loopback() {
                bail!("--local serves webhooks on loopback only; --webhook-bind is {webhook_bind}");
            }
            let ip = webhook_bind.ip().to_string();
            (vec![ip.clone(), "localhost".to_string()], ip)
        } else {
            let svc = format!("{}.{}.svc", args.service, args.namespace);
            (vec![svc.clone(), format!("{svc}.cluster.local")], svc)
        };
        sans.extend(args.extra_sans.iter().cloned());
        if configs == WebhookConfigs::Register && !webhook_bind.ip().is_loopback() {
            bail!(
                "--webhook-configs=register points the API server at this process by `url:`, \
                 which needs a loopback --webhook-bind (it is {webhook_bind})"
            );
        }
        let certs = match (args.cert_mode, &args.cert_dir, args.local) {
            (CertMode::External, Some(dir), _) => Certs::External(dir.clone()),
            (CertMode::External, None, _) => bail!("--cert-mode=external needs --cert-dir"),
            (CertMode::SelfSigned, Some(dir), _) => Certs::SelfSignedInDir(dir.clone()),
            (CertMode::SelfSigned, None, true) => {
                Certs::SelfSignedInDir(local_cert_dir(&args.release))
            }
            (CertMode::SelfSigned, None, false) => {
                Certs::SelfSignedInSecret(format!("{}-webhook-tls", args.release))
            }
        };
        let controllers = args.controllers.then(|| Controllers {
            election: args.leader_elect.unwrap_or(!args.local).then(|| Election {
                lease: args
                    .lease_name
                    .clone()
                    .unwrap_or_else(|| format!("{}-controllers", args.release)),
                namespace: args.namespace.clone(),
                duration: args.lease_duration,
            }),
            namespaces: args.namespaces.clone(),
            aibrix_lease: args.aibrix_lease.0.clone(),
        });
        Ok(Settings {
            local: args.local,
            webhook_bind,
            admin_bind,
            reuse_port: args.reuse_port,
            configs,
            sans,
            server_name,
            certs,
            lifetimes: Lifetimes {
                ca: args.ca_lifetime,
                serving: args.serving_lifetime,
                injection_period: args.injection_period,
            },
            release: args.release.clone(),
            namespace: args.namespace.clone(),
            failure_policy: args.failure_policy.clone(),
            exclude_user: args.exclude_user.clone(),
            controllers,
            analysis_config: args.analysis_config.clone(),
            log_format: args.log_format,
        })
    }
}

/// How long a shutdown waits for the controllers to stop: well inside the 30 s a pod is given
/// by default between SIGTERM and SIGKILL, leaving time to deregister and release the Lease.
const CONTROLLERS_STOP_BOUND: Duration = Duration::from_secs(15);

/// Starts every task `settings` asks for and runs until SIGTERM or SIGINT — or until the
/// controllers stop with an error. Either way the same shutdown follows: servers drained,
/// controllers stopped (releasing the Lease), registered configurations removed.
async fn serve(settings: Settings) -> anyhow::Result<()> {
    let config = kube::Config::infer()
        .await
        .context("loading the kubeconfig")?;
    let metrics = Arc::new(Metrics::default());
    let client = crate::client::counted(config.clone(), metrics.clone(), "certs")
        .context("building the API client")?;
    let webhook_listener = bind_webhook(settings.webhook_bind, settings.reuse_port)
        .with_context(|| format!("binding the webhook server to {}", settings.webhook_bind))?;
    let webhook_addr = webhook_listener.local_addr()?;
    let admin_listener = TcpListener::bind(settings.admin_bind)
        .await
        .with_context(|| format!("binding the admin server to {}", settings.admin_bind))?;
    let admin_addr = admin_listener.local_addr()?;
    let configs = webhook_configs(&settings, &config, &client, webhook_addr).await?;
    let source = cert_source(&settings, &client);

    let providers = Arc::new(analysis_providers(
        settings.analysis_config.as_deref(),
        &config,
        &metrics,
        &settings.namespace,
    )?);
    let resolver = Arc::new(CertResolver::default());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (certs_tx, certs_rx) = watch::channel(CertState::default());
    let manager = tokio::spawn(webhook_certs::manager::run(
        source,
        configs,
        certs_tx,
        shutdown_rx.clone(),
    ));
    let publisher = tokio::spawn(publish_certificates(
        certs_rx.clone(),
        resolver.clone(),
        metrics.clone(),
    ));
    // Which gang schedulers' PodGroups can be made: the webhooks warn of the others, the
    // controllers make PodGroups for these.
    let (crds_tx, crds_rx) = watch::channel(PodGroupCrds::Unknown);
    let crd_lookup = tokio::spawn(crate::controller::cache::podgroups::look_for_crds(
        crate::client::counted(config.clone(), metrics.clone(), "crds")
            .context("building the API client")?,
        crds_tx,
    ));
    let webhooks = tokio::spawn(server::serve_tls(
        webhook_listener,
        server::tls_config(resolver),
        server::webhook_router(
            metrics.clone(),
            crds_rx.clone(),
            providers.endpoints().into(),
        ),
        shutdown_rx.clone(),
    ));
    let readiness = Readiness {
        certs: certs_rx,
        webhook_addr,
        server_name: settings.server_name.clone(),
        own_bundle: settings.configs == WebhookConfigs::None,
    };
    let admin_router = admin::router(metrics.clone(), readiness.clone());
    let mut admin_shutdown = shutdown_rx.clone();
    let admin = tokio::spawn(async move {
        axum::serve(admin_listener, admin_router)
            .with_graceful_shutdown(async move {
                let _ = admin_shutdown.changed().await;
            })
            .await
    });
    tracing::info!(%webhook_addr, %admin_addr, local = settings.local, "squall serving");
    let mut controllers = settings.controllers.map(|controllers| {
        let (config, metrics, stop) = (config.clone(), metrics.clone(), shutdown_rx.clone());
        tokio::spawn(async move {
            // The controllers start only once the webhooks are verifiably reachable.
            let mut stopped = stop.clone();
            while readiness.check().await.is_err() {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                    _ = stopped.changed() => return Ok(()),
                }
            }
            tracing::info!("ready: the served certificate verifies against the injected caBundle");
            run_controllers(config, metrics, controllers, crds_rx, providers, stop).await
        })
    });

    // One way down, whatever brings it.
    let failed = tokio::select! {
        () = wait_for_signal() => None,
        Some(result) = async {
            match controllers.as_mut() {
                Some(task) => Some(task.await),
                None => std::future::pending().await,
            }
        } => {
            controllers = None;
            Some(match result {
                Ok(Ok(())) => anyhow::anyhow!("the controllers stopped"),
                Ok(Err(error)) => error,
                Err(panic) => anyhow::anyhow!("the controllers failed: {panic}"),
            })
        }
    };
    match &failed {
        None => tracing::info!("shutting down"),
        Some(error) => tracing::error!(%error, "controllers stopped; shutting down"),
    }
    let _ = shutdown_tx.send(true);
    let _ = tokio::join!(webhooks, admin);
    if let Some(controllers) = controllers {
        // Reconciles in flight finish their step; one that hangs does not hold the process
        // past the pod's termination grace period.
        let abort = controllers.abort_handle();
        if tokio::time::timeout(CONTROLLERS_STOP_BOUND, controllers)
            .await
            .is_err()
        {
            tracing::warn!(bound = ?CONTROLLERS_STOP_BOUND, "controllers did not stop in time; cancelled");
            abort.abort();
        }
    }
    publisher.abort();
    crd_lookup.abort();
    if settings.configs == WebhookConfigs::Register {
        // A registration pointing at a stopped local server would block every apply.
        deregister(&client, &settings.release).await;
    }
    let managed = manager.await;
    if let Some(error) = failed {
        return Err(error);
    }
    match managed {
        Ok(Ok(())) | Err(_) => Ok(()),
        Ok(Err(e)) => Err(e.into()),
    }
}

/// What the certificate manager does with the webhook configurations.
async fn webhook_configs(
    settings: &Settings,
    config: &kube::Config,
    client: &kube::Client,
    webhook_addr: SocketAddr,
) -> anyhow::Result<Configs> {
    Ok(match settings.configs {
        WebhookConfigs::None => Configs::None,
        WebhookConfigs::Inject => Configs::Inject {
            client: client.clone(),
            mutating: settings.release.clone(),
            validating: settings.release.clone(),
        },
        WebhookConfigs::Register => {
            // Registered configurations point the API server at this process by `url:`,
            // which only a loopback API server may be given.
            if !is_loopback_host(config.cluster_url.host()) {
                bail!(
                    "--webhook-configs=register needs a loopback API server; the kubeconfig's is {}",
                    config.cluster_url
                );
            }
            let exclude_user = match &settings.exclude_user {
                Some(user) => Some(user.clone()),
                None => own_username(client).await,
            };
            let (mutating, validating) = configurations(&Registration {
                name: settings.release.clone(),
                base_url: format!("https://{webhook_addr}"),
                failure_policy: settings.failure_policy.clone(),
                exclude_user,
            });
            Configs::Register {
                client: client.clone(),
                mutating: Box::new(mutating),
                validating: Box::new(validating),
            }
        }
    })
}

/// Where the certificate manager gets its certificates.
fn cert_source(settings: &Settings, client: &kube::Client) -> Source {
    let store = match &settings.certs {
        Certs::External(dir) => {
            return Source::External {
                dir: dir.clone(),
                poll: Duration::from_secs(1),
            };
        }
        Certs::SelfSignedInDir(dir) => Store::Dir(dir.clone()),
        Certs::SelfSignedInSecret(name) => Store::Secret {
            api: Box::new(Api::<Secret>::namespaced(
                client.clone(),
                &settings.namespace,
            )),
            name: name.clone(),
        },
    };
    Source::SelfSigned {
        store,
        sans: settings.sans.clone(),
        lifetimes: settings.lifetimes,
    }
}

/// The username the API server knows this process by (a SelfSubjectReview): its own RoleSet
/// writes then skip the RoleSet webhooks, which only ever re-check what the controller wrote.
/// Without it (an API server that refuses the review) every write still goes through them.
async fn own_username(client: &kube::Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    match reviews
        .create(
            &kube::api::PostParams::default(),
            &SelfSubjectReview::default(),
        )
        .await
    {
        Ok(review) => review.status?.user_info?.username,
        Err(error) => {
            tracing::warn!(%error, "could not learn this process's username; its RoleSet writes go through the webhooks");
            None
        }
    }
}

/// Where `--local` keeps its certificates without `--cert-dir`: a directory of this user's
/// (`$XDG_RUNTIME_DIR`, else `~/.local/state`), never a shared, predictable `/tmp` path. The
/// store creates it 0700 and refuses one that others can enter.
fn local_cert_dir(release: &str) -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("squall").join(release).join("certs")
}

/// The webhook listener, with SO_REUSEPORT when asked for.
fn bind_webhook(addr: SocketAddr, reuse_port: bool) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if reuse_port {
        socket.set_reuseport(true)?;
    }
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The analysis providers the configuration file names (none without one); a file that
/// does not parse stops the start with its error.
fn analysis_providers(
    path: Option<&std::path::Path>,
    config: &kube::Config,
    metrics: &Arc<Metrics>,
    namespace: &str,
) -> anyhow::Result<Providers> {
    let Some(path) = path else {
        return Ok(Providers::default());
    };
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --analysis-config {}", path.display()))?;
    let analysis = AnalysisConfig::parse(&text)?;
    let client = crate::client::counted(config.clone(), metrics.clone(), "analysis")?;
    let providers = Providers::from_config(&analysis, Some(client), namespace)?;
    tracing::info!(endpoints = ?providers.endpoints(), "canary analysis providers");
    Ok(providers)
}

/// Where the controllers' Lease lives.
#[derive(Debug, PartialEq)]
struct Election {
    lease: String,
    namespace: String,
    duration: Duration,
}

/// Runs the controllers until `stop` — with an election, only while holding the Lease. Losing
/// it cancels the controllers mid-reconcile and is an error: the process exits and its
/// restart campaigns again, so two replicas never reconcile at once.
async fn run_controllers(
    config: kube::Config,
    metrics: Arc<Metrics>,
    controllers: Controllers,
    podgroup_crds: watch::Receiver<PodGroupCrds>,
    providers: Arc<Providers>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let Controllers {
        election,
        namespaces,
        aibrix_lease,
    } = controllers;
    let namespaces = namespaces.as_slice();
    let Some(election) = election else {
        tracing::info!("starting controllers (no leader election)");
        metrics.set_leader(true);
        crate::controller::kit::runner::run(
            config,
            metrics,
            namespaces,
            aibrix_lease,
            podgroup_crds,
            providers,
            async move {
                let _ = stop.changed().await;
            },
        )
        .await?;
        return Ok(());
    };
    let identity =
        std::env::var("POD_NAME").unwrap_or_else(|_| format!("squall-{}", std::process::id()));
    let seconds = election.duration.as_secs().max(2);
    let client = crate::client::counted(config.clone(), metrics.clone(), "lease")?;
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client, &election.lease)
        .with_namespace(&election.namespace)
        .with_identity(&identity)
        .with_duration(seconds)
        .with_grace((seconds / 3).max(1))
        .build()
        .await
        .with_context(|| format!("the Lease {}/{}", election.namespace, election.lease))?;
    let (mut leader, lease_task) = manager.watch().await;
    tracing::info!(lease = %election.lease, namespace = %election.namespace, %identity, "campaigning for the Lease");
    while !*leader.borrow_and_update() {
        tokio::select! {
            changed = leader.changed() => changed.context("the lease manager stopped")?,
            _ = stop.changed() => return Ok(()),
        }
    }
    tracing::info!(lease = %election.lease, %identity, "leading: starting controllers");
    metrics.set_leader(true);
    let mut watch_leader = leader.clone();
    let lost = async move {
        while *watch_leader.borrow_and_update() {
            if watch_leader.changed().await.is_err() {
                break;
            }
        }
    };
    // Losing the Lease drops the controllers at once — every reconcile in flight is
    // cancelled at its next await, so no write starts after the loss is seen. (A graceful
    // stop would let them finish, writing for up to a reconcile's length as a non-leader.)
    let controllers = crate::controller::kit::runner::run(
        config,
        metrics.clone(),
        namespaces,
        aibrix_lease,
        podgroup_crds,
        providers,
        async move {
            let _ = stop.changed().await;
        },
    );
    let lost_lease = tokio::select! {
        result = controllers => { result?; false }
        () = lost => true,
    };
    metrics.set_leader(false);
    // Dropping the receiver releases the Lease for the next replica.
    drop(leader);
    let _ = lease_task.await;
    if lost_lease {
        bail!("lost the Lease {}", election.lease);
    }
    Ok(())
}

/// Removes the webhook configurations `--webhook-configs=register` created.
async fn deregister(client: &kube::Client, name: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    let params = kube::api::DeleteParams::default();
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .delete(name, &params)
        .await;
    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .delete(name, &params)
        .await;
    for result in [mutating.map(|_| ()), validating.map(|_| ())] {
        match result {
            Ok(()) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => tracing::warn!(error = %e, "removing the webhook configurations failed"),
        }
    }
    tracing::info!(name, "webhook configurations removed");
}

/// Serves every certificate the manager publishes from the next handshake on.
async fn publish_certificates(
    mut certs: watch::Receiver<CertState>,
    resolver: Arc<CertResolver>,
    metrics: Arc<Metrics>,
) {
    let mut served: Option<String> = None;
    loop {
        let current = certs.borrow_and_update().current.clone();
        if let Some(current) = current
            && served.as_deref() != Some(&current.bundle.tls_crt)
        {
            match resolver.publish(&current.bundle.tls_crt, &current.bundle.tls_key) {
                Ok(()) => {
                    served = Some(current.bundle.tls_crt.clone());
                    metrics.cert_expiry(current.serving.validity.not_after.unix_timestamp());
                }
                Err(e) => tracing::error!(error = %e, "cannot serve the published certificate"),
            }
        }
        if certs.changed().await.is_err() {
            return;
        }
    }
}

/// Whether an API server host is a loopback address (`--local` registers webhooks only then).
fn is_loopback_host(host: Option<&str>) -> bool {
    host.is_some_and(|h| {
        h == "localhost"
            || h.trim_matches(['[', ']'])
                .parse::<IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        run: RunArgs,
    }

    /// The settings of `squall run ARGS` (environment variables aside).
    fn settings(args: &[&str]) -> anyhow::Result<Settings> {
        let command = Command::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .expect("flags parse");
        Settings::try_from(&command.run)
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn in_a_cluster_squall_binds_every_interface_injects_and_campaigns() {
        let s = settings(&["--namespace=ops", "--release=sq"]).unwrap();
        assert_eq!(
            (s.webhook_bind, s.admin_bind),
            (addr("0.0.0.0:9443"), addr("0.0.0.0:8080"))
        );
        assert_eq!(s.configs, WebhookConfigs::Inject);
        assert_eq!(
            s.sans,
            [
                "squall-webhook.ops.svc",
                "squall-webhook.ops.svc.cluster.local"
            ]
        );
        assert_eq!(s.server_name, "squall-webhook.ops.svc");
        assert_eq!(s.certs, Certs::SelfSignedInSecret("sq-webhook-tls".into()));
        let controllers = s.controllers.unwrap();
        assert_eq!(
            controllers.election,
            Some(Election {
                lease: "sq-controllers".into(),
                namespace: "ops".into(),
                duration: Duration::from_secs(15),
            })
        );
    }

    #[test]
    fn local_binds_loopback_by_default_registers_and_runs_alone() {
        let s = settings(&["--local", "--release=dev"]).unwrap();
        assert_eq!(
            (s.webhook_bind, s.admin_bind),
            (addr("127.0.0.1:9443"), addr("127.0.0.1:8080"))
        );
        assert_eq!(s.configs, WebhookConfigs::Register);
        assert_eq!(s.sans, ["127.0.0.1", "localhost"]);
        assert_eq!(s.certs, Certs::SelfSignedInDir(local_cert_dir("dev")));
        assert_eq!(s.controllers.unwrap().election, None);
        // A chosen loopback address and certificate directory are kept.
        let s = settings(&["--local", "--webhook-bind=127.0.0.2:1", "--cert-dir=/c"]).unwrap();
        assert_eq!(s.sans[0], "127.0.0.2");
        assert_eq!(s.certs, Certs::SelfSignedInDir("/c".into()));
    }

    #[test]
    fn local_refuses_a_webhook_bind_off_loopback() {
        let error = settings(&["--local", "--webhook-bind=0.0.0.0:9443"]).unwrap_err();
        assert!(error.to_string().contains("loopback only"), "{error}");
        let error =
            settings(&["--webhook-configs=register", "--webhook-bind=10.0.0.1:9443"]).unwrap_err();
        assert!(
            error.to_string().contains("loopback --webhook-bind"),
            "{error}"
        );
    }

    #[test]
    fn external_certificates_need_their_directory_and_register_nothing() {
        let error = settings(&["--cert-mode=external"]).unwrap_err();
        assert!(error.to_string().contains("--cert-dir"), "{error}");
        let s = settings(&["--cert-mode=external", "--cert-dir=/mnt"]).unwrap();
        assert_eq!(s.certs, Certs::External("/mnt".into()));
        assert_eq!(s.configs, WebhookConfigs::None);
    }

    #[test]
    fn explicit_choices_win_over_the_mode_defaults() {
        let s = settings(&[
            "--local",
            "--webhook-configs=none",
            "--leader-elect=true",
            "--lease-name=mine",
            "--extra-san=squall.example",
        ])
        .unwrap();
        assert_eq!(s.configs, WebhookConfigs::None);
        assert_eq!(s.sans.last().map(String::as_str), Some("squall.example"));
        let election = s.controllers.unwrap().election.unwrap();
        assert_eq!(election.lease, "mine");
        let s = settings(&["--controllers=false", "--leader-elect=false"]).unwrap();
        assert_eq!(s.controllers, None);
        let s = settings(&["--leader-elect=false", "--namespaces=a,b"]).unwrap();
        let controllers = s.controllers.unwrap();
        assert_eq!(
            (controllers.election, controllers.namespaces),
            (None, vec!["a".to_string(), "b".to_string()])
        );
    }

    #[test]
    fn only_loopback_api_servers_count_as_local() {
        for host in ["127.0.0.1", "127.3.4.5", "[::1]", "::1", "localhost"] {
            assert!(is_loopback_host(Some(host)), "{host}");
        }
        for host in [
            "10.96.0.1",
            "192.168.1.10",
            "kubernetes.default.svc",
            "[2001:db8::1]",
            "localhost.example.com",
        ] {
            assert!(!is_loopback_host(Some(host)), "{host}");
        }
        assert!(!is_loopback_host(None));
    }

    #[test]
    fn durations_take_the_pause_grammar_and_must_be_positive() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(
            parse_duration("87600h"),
            Ok(Duration::from_secs(87600 * 3600))
        );
        assert_eq!(parse_duration("5"), Ok(Duration::from_secs(5)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("1d").is_err());
    }
}
