//! What the three controllers share, as one kit: the [`owner::Owner`] trait each owner kind
//! implements (its name, finalizer and child kinds) with the one reconcile wrapper over it,
//! ordered deletion and the counted writes to children ([`children`]), the per-controller
//! [`context::Context`] (events, failures, the status writer), the expectations of creates
//! and deletes not yet observed, the errors, and the runner that starts the controllers.

pub mod children;
pub mod context;
pub mod error;
pub mod expectations;
pub mod owner;
pub mod runner;
pub mod status_writer;
