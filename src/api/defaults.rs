//! The values an absent field means. The typed API's `_or_default` readers, the admission
//! views and the mutating webhook's patch (`defaulting`) all take them from here, so what the
//! webhook writes and what a controller assumes for an object it never saw are one value.

/// Default StormService `spec.replicas` and role `replicas`.
pub const DEFAULT_REPLICAS: i32 = 1;
/// Default StormService `spec.revisionHistoryLimit`.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i32 = 10;
/// Default StormService `spec.progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i32 = 600;
/// A role's `upgradeOrder` when absent (written by the mutating webhook).
pub const DEFAULT_UPGRADE_ORDER: i32 = 0;
/// A role's `podGroupSize` when absent: one pod per replica.
pub const DEFAULT_POD_GROUP_SIZE: i32 = 1;
