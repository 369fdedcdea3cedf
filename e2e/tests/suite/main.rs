//! squall's e2e suite against a real kube-apiserver, as one test binary (one link step),
//! grouped by how its tests may run:
//! - `serial`: disruptive tests (kills, failover, certificate rotation, an API server
//!   restart, the chart's lifecycle), each starting its own operator — run one at a time,
//!   before the others (`make test`: `--test-threads=1`, one topic after another);
//! - `shared`: ordinary tests against the one shared operator (`e2e/operator.sh`);
//! - `guard`: the loopback guard, run last: nothing the suite set up dials off loopback.
//!
//! `hack/test.sh` schedules the groups by module path (`serial::faults::`, `shared::`,
//! `guard::`), never by file name; a new topic is a module in its group.

mod guard;
mod serial;
mod shared;
