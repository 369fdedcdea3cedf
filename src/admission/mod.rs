//! What the webhooks, the controllers and `squall lint` ask of an object before they act on
//! it (docs/admission.md): its views read straight from the JSON (`view`, and `scan`, the
//! fast path's strict reader), the rules that accept or refuse it (`validation`, one set for
//! all three callers), the defaults the mutating webhook adds (`defaulting`) and the webhooks
//! that ask (`hook`). Pure: no
//! I/O, and nothing from the layers above. The CRD types and the values they share with
//! this (limits, defaults, durations) stay in `api`.

pub mod defaulting;
pub mod hook;
pub mod scan;
pub mod validation;
pub mod view;
