//! The `orchestration.aibrix.ai/v1alpha1` API: types, defaulting and validation.
//! Pure code only — no I/O — so the webhook, the controllers and `squall lint` share it.

pub mod analysis;
pub mod borrowed;
pub mod bounded_status;
pub mod budget;
pub mod cached;
pub mod common;
pub mod condition;
pub mod defaults;
pub mod drain;
pub mod duration;
pub mod keys;
pub mod limits;
pub mod podgroup;
pub mod podset;
pub mod roleset;
pub mod schema;
pub mod stormservice;
pub mod tenancy;

pub use common::*;
pub use podset::*;
pub use roleset::*;
pub use stormservice::*;

/// API group of all three kinds.
pub const GROUP: &str = "orchestration.aibrix.ai";
/// The only served and stored version.
pub const VERSION: &str = "v1alpha1";
