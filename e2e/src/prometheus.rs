//! A real Prometheus for the canary analysis tests, and the exporter it scrapes: both on
//! loopback, both stopped when dropped.
//!
//! The exporter serves one gauge, `squall_e2e_metric{name, revision, role}`, whose values the
//! test sets per revision and role — a stand-in for the model servers' own metrics (vLLM's
//! error counters, time to first token), which pods on kwok do not serve. A value set for a
//! (name, role) without a revision is served for every revision the exporter has been told
//! of ([`Exporter::follow_revisions`]), so a test can set the canary's values before the
//! canary's revision exists. A revision followed that way is served with its namespace in the
//! `namespace` label, as a pod's series are labelled by Kubernetes service discovery: the
//! operator's endpoints scope every query to the StormService's namespace.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::operator::{cluster_dir, free_port, http_get};
use crate::workspace_root;

/// What the exporter serves.
#[derive(Default)]
struct Series {
    /// Values by (metric name, revision, role).
    by_revision: BTreeMap<(String, String, String), f64>,
    /// Values by (metric name, role), for every known revision without its own.
    by_default: BTreeMap<(String, String), f64>,
    /// The revisions known, with their namespace (empty when not known).
    revisions: BTreeMap<String, String>,
    /// Values of `squall_e2e_pod_gauge` by (name, pod).
    by_pod: BTreeMap<(String, String), f64>,
}

/// An HTTP exporter on loopback serving `squall_e2e_metric` as the test sets it.
pub struct Exporter {
    /// Where it listens.
    pub addr: SocketAddr,
    series: Arc<Mutex<Series>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    /// Starts serving (no series yet).
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().unwrap();
        let series: Arc<Mutex<Series>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (series, stop) = (series.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                            let mut request = [0u8; 4096];
                            let _ = stream.read(&mut request);
                            let body = exposition(&series.lock().unwrap());
                            let _ = write!(
                                stream,
                                "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        Self {
            addr,
            series,
            stop,
            thread: Some(thread),
        }
    }

    /// Sets `squall_e2e_metric{name, revision, role}` to `value`.
    pub fn set(&self, name: &str, revision: &str, role: &str, value: f64) {
        let mut series = self.series.lock().unwrap();
        series.revisions.entry(revision.into()).or_default();
        series
            .by_revision
            .insert((name.into(), revision.into(), role.into()), value);
    }

    /// Sets `squall_e2e_metric{name, role}` to `value` for every revision without a value
    /// of its own.
    pub fn set_for_every_revision(&self, name: &str, role: &str, value: f64) {
        self.series
            .lock()
            .unwrap()
            .by_default
            .insert((name.into(), role.into()), value);
    }

    /// Sets `squall_e2e_pod_gauge{name, pod}` to `value` (a pod's requests in flight, say).
    pub fn set_pod(&self, name: &str, pod: &str, value: f64) {
        self.series
            .lock()
            .unwrap()
            .by_pod
            .insert((name.into(), pod.into()), value);
    }

    /// Learns every ControllerRevision of `revisions` as it appears, until dropped.
    pub fn follow_revisions(
        &self,
        revisions: kube::Api<k8s_openapi::api::apps::v1::ControllerRevision>,
    ) -> tokio::task::JoinHandle<()> {
        use futures::StreamExt;
        let series = self.series.clone();
        tokio::spawn(async move {
            let events = kube::runtime::watcher(revisions, Default::default());
            let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::applied_objects(events));
            while let Some(event) = events.next().await {
                if let Ok(revision) = event {
                    let name = kube::ResourceExt::name_any(&revision);
                    let namespace = kube::ResourceExt::namespace(&revision).unwrap_or_default();
                    series.lock().unwrap().revisions.insert(name, namespace);
                }
            }
        })
    }
}

fn exposition(series: &Series) -> String {
    let mut values = series.by_revision.clone();
    for revision in series.revisions.keys() {
        for ((name, role), value) in &series.by_default {
            values
                .entry((name.clone(), revision.clone(), role.clone()))
                .or_insert(*value);
        }
    }
    let mut out = String::from("# TYPE squall_e2e_metric gauge\n");
    for ((name, revision, role), value) in values {
        let namespace = match series.revisions.get(&revision) {
            Some(namespace) if !namespace.is_empty() => format!(",namespace=\"{namespace}\""),
            _ => String::new(),
        };
        out.push_str(&format!(
            "squall_e2e_metric{{name=\"{name}\",revision=\"{revision}\",role=\"{role}\"{namespace}}} {value}\n"
        ));
    }
    out.push_str("# TYPE squall_e2e_pod_gauge gauge\n");
    for ((name, pod), value) in &series.by_pod {
        out.push_str(&format!(
            "squall_e2e_pod_gauge{{name=\"{name}\",pod=\"{pod}\"}} {value}\n"
        ));
    }
    out
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The prometheus binary `hack/build-tools.sh` unpacked (`SQUALL_PROMETHEUS` overrides).
pub fn prometheus_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("SQUALL_PROMETHEUS") {
        return path.into();
    }
    let out = Command::new(workspace_root().join("hack/build-tools.sh"))
        .arg("--print-bin")
        .output()
        .expect("hack/build-tools.sh --print-bin");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("prometheus")
}

/// A Prometheus server on loopback scraping `targets` every second, with its data in a
/// fresh folder; killed (and its folder removed) when dropped.
pub struct Prometheus {
    child: Child,
    /// Where its HTTP API listens.
    pub addr: SocketAddr,
    dir: PathBuf,
    pid_file: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus and waits until it is ready and has scraped every target once.
    /// [`free_port`] only finds a port free at that moment, so a Prometheus that exits
    /// because its port was taken meanwhile is started again on another (at most three
    /// times).
    pub fn start(name: &str, targets: &[SocketAddr]) -> Self {
        let targets: Vec<(SocketAddr, Option<&str>)> = targets.iter().map(|t| (*t, None)).collect();
        Self::start_in_namespaces(name, &targets)
    }

    /// [`Prometheus::start`], each target's series labelled `namespace` as given (as
    /// Kubernetes service discovery labels a pod's): the series of several tenants.
    pub fn start_in_namespaces(name: &str, targets: &[(SocketAddr, Option<&str>)]) -> Self {
        const ATTEMPTS: usize = 3;
        let log_path = cluster_dir().join(format!("logs/prometheus-{name}.log"));
        for attempt in 1..=ATTEMPTS {
            let mut prometheus = Self::spawn(name, targets, &log_path);
            let ready = prometheus
                .wait_until("ready", Duration::from_secs(60), |p| {
                    matches!(http_get(p.addr, "/-/ready"), Ok((200, _)))
                })
                .and_then(|()| {
                    prometheus.wait_until("every target scraped", Duration::from_secs(60), |p| {
                        p.query("count(up == 1)") == Some(targets.len() as f64)
                    })
                });
            match ready {
                Ok(()) => return prometheus,
                Err(why)
                    if attempt < ATTEMPTS
                        && std::fs::read_to_string(&log_path)
                            .is_ok_and(|log| log.contains("address already in use")) =>
                {
                    eprintln!("prometheus {name}: {why} (its port was taken); starting again");
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    fn spawn(
        name: &str,
        targets: &[(SocketAddr, Option<&str>)],
        log_path: &std::path::Path,
    ) -> Self {
        let dir = cluster_dir().join(format!("prometheus-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("prometheus folder");
        std::fs::create_dir_all(cluster_dir().join("logs")).expect("logs folder");
        let groups: String = targets
            .iter()
            .map(|(target, namespace)| match namespace {
                Some(namespace) => {
                    format!("  - targets: ['{target}']\n    labels: {{namespace: '{namespace}'}}\n")
                }
                None => format!("  - targets: ['{target}']\n"),
            })
            .collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n- job_name: e2e\n  static_configs:\n{groups}"
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(log_path).expect("prometheus log");
        let child = Command::new(prometheus_bin())
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {}: {e} (run hack/build-tools.sh)",
                    prometheus_bin().display()
                )
            });
        let pid_file = cluster_dir().join(format!("prometheus-{name}.pid"));
        std::fs::write(&pid_file, child.id().to_string()).expect("pid file");
        Self {
            child,
            addr,
            dir,
            pid_file,
        }
    }

    fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&Self) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            if let Some(status) = self.child.try_wait().expect("prometheus status") {
                return Err(format!(
                    "prometheus exited with {status} before {what}; see its log"
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!("prometheus: not {what} after {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// The one number an instant query gives, if it gives one.
    pub fn query(&self, query: &str) -> Option<f64> {
        let encoded: String = query
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let (status, body) = http_get(self.addr, &format!("/api/v1/query?query={encoded}")).ok()?;
        if status != 200 {
            return None;
        }
        let answer: serde_json::Value = serde_json::from_str(&body).ok()?;
        answer["data"]["result"][0]["value"][1]
            .as_str()
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.pid_file);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An analysis endpoint on loopback that reads every query and never answers: the slow
/// tenant's Prometheus. It counts the queries by their text and holds at most
/// [`Silent::HELD`] connections open (older ones are closed).
pub struct Silent {
    /// Where it listens.
    pub addr: SocketAddr,
    queries: Arc<Mutex<BTreeMap<String, usize>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Silent {
    /// Connections held open at most.
    pub const HELD: usize = 256;

    /// Starts listening.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().unwrap();
        let queries: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (queries, stop) = (queries.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut held = std::collections::VecDeque::new();
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((mut stream, _)) => {
                            let _ = stream.set_nonblocking(false);
                            let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                            let mut request = [0u8; 4096];
                            let read = stream.read(&mut request).unwrap_or(0);
                            let text = String::from_utf8_lossy(&request[..read]);
                            let target = text.split(' ').nth(1).unwrap_or_default().to_string();
                            *queries.lock().unwrap().entry(target).or_default() += 1;
                            held.push_back(stream);
                            if held.len() > Self::HELD {
                                held.pop_front();
                            }
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })
        };
        Self {
            addr,
            queries,
            stop,
            thread: Some(thread),
        }
    }

    /// Queries received whose request target contains `text` (percent-encoded as sent).
    pub fn queries_containing(&self, text: &str) -> usize {
        self.queries
            .lock()
            .unwrap()
            .iter()
            .filter(|(target, _)| target.contains(text))
            .map(|(_, n)| n)
            .sum()
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
