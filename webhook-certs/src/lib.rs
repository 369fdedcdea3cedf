//! Self-managed TLS certificates for squall's admission webhooks (docs/certificates.md).
//!
//! - [`pki`]: CA and serving certificates (rcgen) and what is read back from them;
//! - [`policy`]: the pure decision "given the stored certificates, the time and what the
//!   webhook configurations carry, what to do next" — creation, serving renewal at 2/3 of
//!   the lifetime, and CA rotation with the two-CA bundle protocol;
//! - [`manager`]: the loop that applies the policy, publishes the certificates to the TLS
//!   server and injects `caBundle` into the webhook configurations;
//! - [`store`]: where the certificates live — a Secret (any replica creates or renews it,
//!   guarded by `resourceVersion`) or, for `squall run --local`, a directory.
#![forbid(unsafe_code)]

pub mod manager;
pub mod pki;
pub mod policy;
pub mod store;

pub use pki::{Bundle, Parsed, Validity};
pub use policy::{Action, Decision, Lifetimes, plan};
