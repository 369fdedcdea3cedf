//! Pure rollout decisions: given a spec and the observed children, what to create, delete or
//! update. No I/O, so every decision is unit- and property-tested.

pub mod budget;
pub mod canary;
pub mod in_place;
pub mod podset;
pub mod roleset;
pub mod stormservice;
