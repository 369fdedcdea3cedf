//! Reconcile loops (kube-rs runtime). They treat absent fields exactly as their defaults
//! (`crate::api` accessors), refuse to roll objects that fail `crate::admission::validation`, and
//! keep expectations so a lagging view never causes duplicate children
//! (docs/architecture.md#one-reconcile).

pub mod aibrix_guard;
pub mod analysis;
pub mod cache;
pub mod events;
pub mod kit;
pub mod podgroups;
pub mod podset;
pub mod revision;
pub mod roleset;
#[cfg(test)]
mod scenarios;
pub mod stormservice;

/// The wall clock, read once at the start of a reconcile and handed to everything the pass
/// decides or stamps (status times, pause ends, deadlines, in-place conditions): one pass
/// sees one "now", and this is the only place in the controllers that reads it
/// (`tests/architecture.rs` keeps it so).
pub fn wall_clock() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}
