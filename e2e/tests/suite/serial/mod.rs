//! Disruptive tests: each starts its own operator (or stops, restarts or replaces
//! something every test shares), so they run one at a time.

mod admission;
mod analysis;
mod availability;
mod certificates;
mod chart;
mod cutover;
mod drain;
mod faults;
mod gang;
mod image;
mod leader_election;
mod stormservice;
