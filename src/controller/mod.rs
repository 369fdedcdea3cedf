//! Reconcile loops for StormService, RoleSet and PodSet (kube-rs runtime). They treat absent
//! fields exactly as their defaults (`crate::api` accessors) and refuse to roll objects that
//! fail `crate::api::validation` (condition `InvalidSpec`).
