//! Starting and stopping squall operators for tests: `squall run --local` on free loopback
//! ports, its PID recorded in the cluster folder (so the loopback guard covers it) while it
//! runs, its log in the cluster folder's `logs/`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{kubectl, workspace_root};

/// The folder `e2e/cluster.sh` keeps its state in.
pub fn cluster_dir() -> PathBuf {
    std::env::var_os("SQUALL_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/e2e-cluster"))
}

/// The squall binary under test (`SQUALL_BIN`, default `target/debug/squall`).
pub fn squall_bin() -> PathBuf {
    std::env::var_os("SQUALL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target/debug/squall"))
}

/// Runs the squall CLI with `args`: its exit code, and its standard output and error.
pub fn squall(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(squall_bin())
        .args(args)
        .output()
        .expect("squall runs");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// What the shared operator started by `e2e/operator.sh` has logged so far.
pub fn shared_operator_log() -> String {
    let path = cluster_dir().join("logs/squall.log");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the shared operator's log {}: {e}", path.display()))
}

/// The admin address of the shared operator started by `e2e/operator.sh`.
pub fn shared_operator_admin() -> SocketAddr {
    let env = std::fs::read_to_string(cluster_dir().join("operator.env"))
        .expect("the shared operator is running (e2e/operator.sh start)");
    env.lines()
        .find_map(|l| l.strip_prefix("SQUALL_ADMIN_ADDR="))
        .and_then(|a| a.trim().parse().ok())
        .expect("operator.env names SQUALL_ADMIN_ADDR")
}

/// The sum of a counter family in the operator's `/metrics`, over the series whose labels
/// contain every `label="value"` pair in `labels`.
pub fn counter_sum(admin: SocketAddr, name: &str, labels: &[&str]) -> f64 {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "/metrics: {body}");
    body.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|kv| l.contains(kv)))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// The write requests (create, update, patch, delete) the controllers named in
/// `controllers` have sent, by `verb resource` — from `squall_api_requests_total`, which the
/// client layer counts, so finalizer patches and writes the API server refused are included.
pub fn write_requests(
    admin: SocketAddr,
    controllers: &[&str],
) -> std::collections::BTreeMap<String, f64> {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "/metrics: {body}");
    let label = |line: &str, key: &str| -> Option<String> {
        let start = line.find(&format!("{key}=\""))? + key.len() + 2;
        let end = start + line[start..].find('"')?;
        Some(line[start..end].to_string())
    };
    let mut writes = std::collections::BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| l.starts_with("squall_api_requests_total{"))
    {
        let (Some(controller), Some(verb), Some(resource)) = (
            label(line, "controller"),
            label(line, "verb"),
            label(line, "resource"),
        ) else {
            continue;
        };
        let write = matches!(
            verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        );
        if !write || !controllers.contains(&controller.as_str()) {
            continue;
        }
        if let Some(value) = line
            .rsplit_once(' ')
            .and_then(|(_, v)| v.parse::<f64>().ok())
        {
            *writes.entry(format!("{verb} {resource}")).or_insert(0.0) += value;
        }
    }
    writes
}

/// A running `squall run --local`.
pub struct Operator {
    child: Child,
    /// Name of its webhook configurations (and of its state files).
    pub release: String,
    /// The HTTPS webhook server.
    pub webhook_addr: SocketAddr,
    /// The admin server.
    pub admin_addr: SocketAddr,
    /// Its certificate directory (`--cert-dir`).
    pub cert_dir: PathBuf,
    pid_file: PathBuf,
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A plain HTTP/1.0 GET on loopback: `(status, body)`.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}

impl Operator {
    /// Starts `squall run --local` with `extra` flags and waits until `/readyz` is green.
    pub fn start(release: &str, extra: &[&str]) -> Self {
        Self::started(|| Self::spawn(release, "--local", extra))
    }

    /// Spawns with `spawn` until the operator is ready. [`free_port`] only finds a port
    /// free at that moment: an outgoing connection may take it as its source port before the
    /// operator binds it, so an operator that exits because a port was taken is started
    /// again, on fresh ports (at most three times).
    fn started(spawn: impl Fn() -> Self) -> Self {
        const ATTEMPTS: usize = 3;
        for attempt in 1..=ATTEMPTS {
            let mut operator = spawn();
            match operator.ready_within(Duration::from_secs(60)) {
                Ok(()) => return operator,
                Err(exited)
                    if attempt < ATTEMPTS && operator.log().contains("Address already in use") =>
                {
                    eprintln!(
                        "operator {}: {exited} (a port was taken); starting again",
                        operator.release
                    );
                }
                Err(why) => panic!("{why}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// Starts one replica of an in-cluster style deployment: certificates in the Secret
    /// `<release>-webhook-tls` of `namespace` (shared by every replica), `--webhook-configs`
    /// `configs` (`none` or `inject`), `127.0.0.1` added to the serving certificate's names.
    pub fn start_replica(
        release: &str,
        namespace: &str,
        replica: usize,
        configs: &str,
        extra: &[&str],
    ) -> Self {
        Self::started(|| Self::start_replica_unready(release, namespace, replica, configs, extra))
    }

    /// [`Operator::start_replica`] without waiting for `/readyz`.
    pub fn start_replica_unready(
        release: &str,
        namespace: &str,
        replica: usize,
        configs: &str,
        extra: &[&str],
    ) -> Self {
        let mut args = vec![
            "--namespace",
            namespace,
            "--webhook-configs",
            configs,
            "--extra-san",
            "127.0.0.1",
        ];
        args.extend_from_slice(extra);
        Self::spawn(
            &format!("{release}-{replica}"),
            &format!("--release={release}"),
            &args,
        )
    }

    fn spawn(instance: &str, mode: &str, extra: &[&str]) -> Self {
        let release = instance;
        let dir = cluster_dir();
        std::fs::create_dir_all(dir.join("logs")).expect("cluster logs folder");
        let cert_dir = dir.join(format!("operator-{release}-certs"));
        let _ = std::fs::remove_dir_all(&cert_dir);
        // A caller may choose the webhook address (`--webhook-bind=ADDR`, e.g. one port
        // shared by replicas with `--reuse-port`).
        let chosen = extra
            .iter()
            .find_map(|a| a.strip_prefix("--webhook-bind="))
            .map(|a| a.parse::<SocketAddr>().expect("--webhook-bind=ADDR"));
        let webhook_addr =
            chosen.unwrap_or_else(|| format!("127.0.0.1:{}", free_port()).parse().unwrap());
        let admin_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.join(format!("logs/squall-{release}.log")))
            .expect("operator log");
        // Test operators exercise webhooks and certificates; the shared operator
        // (e2e/operator.sh) is the one running controllers, unless a serial test asks for them.
        let mut args: Vec<String> = ["run", mode, "--log-format", "plain"]
            .iter()
            .map(ToString::to_string)
            .collect();
        if !extra.iter().any(|a| a.starts_with("--controllers")) {
            args.push("--controllers=false".into());
        }
        if mode == "--local" {
            args.extend(["--release".to_string(), release.to_string()]);
        }
        if chosen.is_none() {
            args.extend(["--webhook-bind".into(), webhook_addr.to_string()]);
        }
        args.extend(["--admin-bind".into(), admin_addr.to_string()]);
        if mode == "--local" && !extra.contains(&"--cert-dir") {
            args.extend(["--cert-dir".into(), cert_dir.display().to_string()]);
        }
        args.extend(extra.iter().map(ToString::to_string));
        let child = Command::new(squall_bin())
            .args(&args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting {}: {e} (run `cargo build --bin squall`)",
                    squall_bin().display()
                )
            });
        let pid_file = dir.join(format!("squall-{release}.pid"));
        std::fs::write(&pid_file, child.id().to_string()).expect("pid file");
        Self {
            child,
            release: release.to_string(),
            webhook_addr,
            admin_addr,
            cert_dir,
            pid_file,
        }
    }

    /// Waits until `/readyz` answers 200.
    pub fn wait_ready(&mut self, timeout: Duration) {
        if let Err(why) = self.ready_within(timeout) {
            panic!("{why}");
        }
    }

    /// Waits until `/readyz` answers 200; why not, when the process exits or the time is up.
    fn ready_within(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("operator status") {
                return Err(format!(
                    "operator {} exited with {status}; see its log in {}",
                    self.release,
                    cluster_dir().join("logs").display()
                ));
            }
            match http_get(self.admin_addr, "/readyz") {
                Ok((200, _)) => return Ok(()),
                Ok((status, body)) => last = format!("{status} {body}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "operator {} not ready after {timeout:?}: last /readyz: {last}",
            self.release
        ))
    }

    /// Its log file.
    pub fn log(&self) -> String {
        std::fs::read_to_string(cluster_dir().join(format!("logs/squall-{}.log", self.release)))
            .unwrap_or_default()
    }

    /// The operator's PID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for the process to exit by itself; its exit status, or `None`
    /// while it still runs.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("operator status") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, then up to `timeout` for the operator to exit by itself; its exit status, or
    /// `None` while it still runs.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(sent.is_ok_and(|s| s.success()), "SIGTERM to {pid}");
        self.wait_exit(timeout)
    }

    /// SIGKILL: the operator dies without any shutdown step (its configurations are then
    /// removed as on every drop).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    /// SIGTERM, up to 10 s for a graceful exit, then SIGKILL; its webhook configurations
    /// are removed so the API server stops calling a server that is gone.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.pid_file);
        kubectl(
            &[
                "delete",
                "mutatingwebhookconfiguration,validatingwebhookconfiguration",
                &self.release,
                "--ignore-not-found",
            ],
            None,
        );
    }
}
