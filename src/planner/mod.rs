//! Pure rollout decisions: given a spec and the observed children, what to create, delete or
//! update. No I/O, so every decision is unit- and property-tested.

pub mod availability;
pub mod lease;
pub mod pairing;
pub mod podgroup;
pub mod podset;
pub mod render;
pub mod requeue;
pub mod revision;
pub mod roleset;
pub mod serving;
pub mod status;
pub mod stormservice;

/// Most children (pods, PodSets or RoleSets) one pass creates for one role or StormService,
/// as the ReplicaSet controller's `burstReplicas`: a large scale-out fills up over several
/// passes, each bounded in time and memory, and a quota refusal stops it early.
pub const MAX_CREATES_PER_PASS: u32 = 500;
