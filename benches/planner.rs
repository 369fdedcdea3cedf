//! Planner throughput (criterion): how many rollout decisions per second squall's pure
//! planners make for a 3-role StormService with 100 replicas, mid-rollout — the StormService
//! planner over 100 RoleSets (replica mode), and the RoleSet planner over 3 roles of 100
//! pods each (pooled mode). The baseline, measured in the same run, clones the same input:
//! the cost of merely handing the planner its data.
//!
//! Run with `make bench` (or `cargo bench --bench planner`).

use std::collections::{BTreeMap, BTreeSet};
use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use squall::api::budget::Fenceposts;
use squall::api::{RoleSetUpdateStrategy, StormServiceUpdateStrategyType};
use squall::planner::roleset::roles::{self, PodView, RoleInput};
use squall::planner::stormservice::replicas::{self, RoleSetView, ServiceInput};

const REPLICAS: u32 = 100;

/// 100 RoleSets, 40 already on the update revision, one of the old ones terminating.
fn service_input() -> ServiceInput {
    let rolesets = (0..REPLICAS)
        .map(|i| RoleSetView {
            name: format!("llm-{i:03}"),
            updated: i < 40,
            index: Some(i),
            ready: i != 40,
            terminating: i == 41,
        })
        .collect();
    ServiceInput {
        desired: REPLICAS,
        budgets: Fenceposts {
            max_surge: 10,
            max_unavailable: 10,
            raised_to_one: false,
        },
        strategy: StormServiceUpdateStrategyType::RollingUpdate,
        paused: false,
        two_revisions: true,
        rolesets,
        pending_creates: Vec::new(),
        pending_deletes: BTreeSet::new(),
        max_updated: None,
        in_place_unavailable: 0,
    }
}

/// Three roles of 100 pods; the first role is half rolled, the others not started.
fn role_inputs() -> Vec<RoleInput> {
    ["router", "prefill", "decode"]
        .iter()
        .enumerate()
        .map(|(r, name)| RoleInput {
            name: (*name).to_string(),
            desired: REPLICAS,
            budgets: Fenceposts {
                max_surge: 5,
                max_unavailable: 5,
                raised_to_one: false,
            },
            target_hash: "new".into(),
            pods: (0..REPLICAS)
                .map(|i| PodView {
                    name: format!("{name}-{i:03}"),
                    hash: if r == 0 && i < 50 { "new" } else { "old" }.into(),
                    running: true,
                    terminating: false,
                    ready: i % 17 != 3,
                    available: i % 17 != 3,
                    available_at: None,
                    gated: false,
                    created: i64::from(i),
                    slot: None,
                    in_place_target: None,
                    in_place_pending: None,
                    draining: None,
                })
                .collect(),
            stateful: false,
            pending_creates: 0,
            pending_stable_creates: 0,
            partition: 0,
            stable_hash: None,
            pending_slots: BTreeSet::new(),
            pending_deletes: BTreeSet::new(),
            in_place: false,
            ineligible: BTreeMap::new(),
            warm: false,
        })
        .collect()
}

fn planners(c: &mut Criterion) {
    let service = service_input();
    let roles = role_inputs();
    let sequence = [0, 1, 2];
    let mut group = c.benchmark_group("planner");
    group.bench_function("baseline: clone the StormService input", |b| {
        b.iter(|| black_box(service.clone()))
    });
    group.bench_function("StormService plan, 100 RoleSets mid-rollout", |b| {
        b.iter(|| black_box(replicas::plan(black_box(&service))))
    });
    group.bench_function("baseline: clone the RoleSet input", |b| {
        b.iter(|| black_box(roles.clone()))
    });
    group.bench_function("RoleSet plan, 3 roles x 100 pods mid-rollout", |b| {
        b.iter(|| {
            black_box(roles::plan(
                RoleSetUpdateStrategy::Sequential,
                black_box(&roles),
                &sequence,
                &[],
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, planners);
criterion_main!(benches);
