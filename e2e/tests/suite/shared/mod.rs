//! Ordinary tests, against the one shared operator: each works in a namespace of its own.

mod admission;
mod canary;
mod chart;
mod control_plane;
mod drain;
mod operator_install;
mod pairing;
mod podset;
mod roleset;
mod roleset_in_place;
mod roleset_partition;
mod roleset_writes;
mod stormservice;
mod tenancy;
mod warm_abort;
