//! The forms the controllers' caches keep objects in: lean where a full decode costs many
//! times its JSON (a pod, a revision's data), and shared where thousands of objects carry
//! the same value (a revision's pod templates), or nearly (a role's pods' specs).

pub mod meta;
pub mod packed;
pub mod pod;
pub mod revision;
pub mod service;
pub mod shared;
