//! Memory under a hostile status (issue 32): a tenant stores a megabyte
//! `canaryStatus.canaryRevision` on its StormService, every 500 ms (the controller replaces
//! it each time), while that StormService's canary analyses a query made only of
//! `{{revision.canary}}` placeholders, the query that once expanded into hundreds of MB, and
//! another namespace's StormService rolls a canary to its end.
//!
//! The same run measures a baseline first: a fresh `squall run` with controllers, the same
//! two StormServices and the same analysis, nobody writing the status. Each run reports the
//! operator's peak RSS (VmHWM from the moment the tenant's canary analyses until the other
//! namespace's canary has completed), its CPU seconds over that span, and the worst
//! `/healthz` latency (probed every 100 ms); the hostile run as ratios to the baseline.
//! The analysis endpoint is one that never answers, so the victim's canary stays in its
//! analysis for the whole run.
//!
//! Needs the local control plane (`make bench` starts it). Loopback only. Prints a Markdown
//! table and writes it to `target/bench/hostile_status.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use e2e::operator::{Operator, cluster_dir, http_get};
use e2e::process::{PEAK_RSS_BOUND_MIB, reset_peak, usage};
use e2e::prometheus::Silent;
use e2e::roles::{set_role_image, stormservice, stormservice_settled};
use e2e::{StatusBoundsLifted, TestNamespace, client, install_crds, wait_for, write_status};
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;
use squall::api::StormService;

const TIMEOUT: Duration = Duration::from_secs(180);
const PLACEHOLDER: &str = "{{revision.canary}}";
/// How often the tenant writes its megabyte status, and how many times: both runs span at
/// least these periods, so their CPU is over comparable time.
const WRITE_EVERY: Duration = Duration::from_millis(500);
const WRITES: usize = 20;

/// What one run measured.
struct Run {
    written: usize,
    /// From the other canary's image change to its end.
    other_canary: Duration,
    peak_mib: f64,
    cpu_seconds: f64,
    worst_healthz: Duration,
    healthz_failures: u64,
}

/// Starts an operator measuring with `analysis_config`, brings the tenant's canary into its
/// analysis and the other namespace's StormService up, then rolls the other one's canary to
/// its end while (when `hostile`) the tenant writes its megabyte status [`WRITES`] times.
async fn run(client: &kube::Client, label: &str, analysis_config: &str, hostile: bool) -> Run {
    let tenant = TestNamespace::create(client, &format!("{label}-tenant")).await;
    let other = TestNamespace::create(client, &format!("{label}-other")).await;
    let resource = ApiResource::erase::<StormService>(&());
    let raw: Api<DynamicObject> = Api::namespaced_with(client.clone(), tenant.name(), &resource);
    let victims: Api<StormService> = Api::namespaced(client.clone(), tenant.name());
    let bystanders: Api<StormService> = Api::namespaced(client.clone(), other.name());
    let query = PLACEHOLDER.repeat(squall::api::analysis::MAX_QUERY_BYTES / PLACEHOLDER.len());
    let placeholders = json!({"name": "placeholders", "initialDelay": "1s", "interval": "1s",
        "count": 100, "successCondition": "result < 1", "inconclusiveLimit": 100,
        "provider": {"prometheus": {"query": query}}});
    let victim = stormservice(
        "victim",
        2,
        json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1, "canary": {"steps": [
            {"setWeight": 50}, {"analysis": {"metrics": [placeholders]}}, {"setWeight": 100}]}}),
        &[("decode", 1)],
    );
    let bystander = stormservice(
        "llm",
        2,
        json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 1, "canary": {"steps": [
            {"setWeight": 50}, {"pause": {"duration": "2s"}}, {"setWeight": 100}]}}),
        &[("decode", 1)],
    );
    victims
        .create(&PostParams::default(), &victim)
        .await
        .unwrap();
    bystanders
        .create(&PostParams::default(), &bystander)
        .await
        .unwrap();
    let operator = Operator::start(
        &format!("bench-status-{label}"),
        &[
            "--controllers=true",
            "--webhook-configs",
            "none",
            analysis_config,
        ],
    );
    let pid = operator.pid();
    for (api, name) in [(&victims, "victim"), (&bystanders, "llm")] {
        wait_for(api, name, "settled", TIMEOUT, |ss| {
            stormservice_settled(ss, None)
        })
        .await
        .unwrap();
    }
    set_role_image(&victims, "victim", 0, "engine:2").await;
    wait_for(&victims, "victim", "the canary analysing", TIMEOUT, |ss| {
        ss.and_then(|s| s.status.as_ref()?.canary_status.as_ref()?.analysis.as_ref())
            .is_some()
    })
    .await
    .unwrap();

    reset_peak(pid);
    let (cpu_before, _) = usage(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let worst_micros = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let prober = {
        let (stop, worst, failures) = (stop.clone(), worst_micros.clone(), failures.clone());
        let admin = operator.admin_addr;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                if !matches!(http_get(admin, "/healthz"), Ok((200, _))) {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                worst.fetch_max(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let writer = {
        let raw = raw.clone();
        let megabyte = "r".repeat(1 << 20);
        tokio::spawn(async move {
            let mut written = 0;
            for _ in 0..WRITES {
                if hostile {
                    write_status(
                        &raw,
                        "victim",
                        json!({"canaryStatus": {"canaryRevision": megabyte}}),
                    )
                    .await;
                    written += 1;
                }
                tokio::time::sleep(WRITE_EVERY).await;
            }
            written
        })
    };
    let rolled = Instant::now();
    set_role_image(&bystanders, "llm", 0, "engine:2").await;
    let completed = wait_for(
        &bystanders,
        "llm",
        "the other namespace's canary completed",
        TIMEOUT,
        |ss| {
            stormservice_settled(ss, Some(2))
                && ss
                    .and_then(|s| s.status.as_ref())
                    .is_some_and(|s| s.updated_ready_replicas == 2)
        },
    )
    .await;
    let other_canary = rolled.elapsed();
    let written = writer.await.unwrap();
    stop.store(true, Ordering::Relaxed);
    prober.join().unwrap();
    let (cpu_after, peak_mib) = usage(pid);
    completed.unwrap_or_else(|why| panic!("{label}: {why}"));
    drop(operator);
    Run {
        written,
        other_canary,
        peak_mib,
        cpu_seconds: cpu_after - cpu_before,
        worst_healthz: Duration::from_micros(worst_micros.load(Ordering::Relaxed)),
        healthz_failures: failures.load(Ordering::Relaxed),
    }
}

#[tokio::main]
async fn main() {
    install_crds();
    // squall's CRD bounds status; one installed before it did lets a tenant store anything.
    let _lifted = StatusBoundsLifted::install();
    let client = client().await;
    let silent = Silent::start();
    let config = cluster_dir().join("analysis-bench-status.yaml");
    std::fs::write(
        &config,
        format!(
            "prometheus:\n- name: default\n  address: http://{}\n  timeout: 2s\n",
            silent.addr
        ),
    )
    .expect("analysis config");
    let analysis_config = format!("--analysis-config={}", config.display());

    println!("baseline: nobody writes the status ...");
    let baseline = run(&client, "baseline", &analysis_config, false).await;
    println!("hostile: a megabyte status every {WRITE_EVERY:?} ...");
    let hostile = run(&client, "hostile", &analysis_config, true).await;

    let row = |load: &str, run: &Run| {
        format!(
            "| {load} | {} | {:.1} s | {:.0} MiB | {:.2}× | {:.1} s | {:.2}× | {:.0} ms{} |",
            run.written,
            run.other_canary.as_secs_f64(),
            run.peak_mib,
            run.peak_mib / baseline.peak_mib,
            run.cpu_seconds,
            run.cpu_seconds / baseline.cpu_seconds.max(0.01),
            run.worst_healthz.as_secs_f64() * 1000.0,
            if run.healthz_failures > 0 {
                format!(" ({} failed)", run.healthz_failures)
            } else {
                String::new()
            }
        )
    };
    let table = format!(
        "Hostile status (`e2e/benches/hostile_status.rs`, `squall run` with controllers on the local control plane; a tenant's StormService analyses a query of {} `{PLACEHOLDER}` placeholders while another namespace's StormService rolls a canary to its end; peak RSS is VmHWM and CPU the operator's, from the tenant's analysis starting until the other canary completed and {WRITES} periods of {WRITE_EVERY:?} passed; the baseline is the same run with nobody writing the status; `/healthz` probed every 100 ms; bound {PEAK_RSS_BOUND_MIB:.0} MiB):\n\n\
         | load | megabyte statuses written | other namespace's canary, image change to completed | peak RSS | vs baseline | operator CPU | vs baseline | worst /healthz |\n|---|---|---|---|---|---|---|---|\n{}\n{}\n",
        squall::api::analysis::MAX_QUERY_BYTES / PLACEHOLDER.len(),
        row("baseline: the status untouched", &baseline),
        row(
            &format!("a 1 MiB `canaryStatus.canaryRevision` every {WRITE_EVERY:?}, {WRITES} times"),
            &hostile
        ),
    );
    println!("{table}");
    let out = e2e::workspace_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("hostile_status.md"), &table).unwrap();
    let _ = std::fs::remove_file(&config);
    for (load, run) in [("baseline", &baseline), ("hostile", &hostile)] {
        assert!(
            run.peak_mib < PEAK_RSS_BOUND_MIB,
            "{load}: peak RSS {:.0} MiB, bound {PEAK_RSS_BOUND_MIB} MiB",
            run.peak_mib
        );
        assert!(
            run.worst_healthz < Duration::from_secs(1) && run.healthz_failures == 0,
            "{load}: /healthz took {:?} at worst, {} failed",
            run.worst_healthz,
            run.healthz_failures
        );
    }
    assert_eq!(
        hostile.written, WRITES,
        "the tenant's megabyte statuses were stored"
    );
}
