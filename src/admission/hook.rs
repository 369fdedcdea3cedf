//! The four admission webhooks squall serves: what each admits, its name and path. Plain data,
//! shared by the webhook server, its registration and the metrics.

use super::validation::OwnedKind;

/// One admission webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    /// Defaults (and sidecar injection) for StormServices.
    MutateStormService,
    /// Validation of StormServices.
    ValidateStormService,
    /// Defaults for RoleSets.
    MutateRoleSet,
    /// Validation of RoleSets.
    ValidateRoleSet,
}

impl Hook {
    /// Every webhook.
    pub const ALL: [Hook; 4] = [
        Hook::MutateStormService,
        Hook::ValidateStormService,
        Hook::MutateRoleSet,
        Hook::ValidateRoleSet,
    ];

    /// The URL path (AIBrix's where AIBrix has one).
    pub fn path(self) -> &'static str {
        match self {
            Hook::MutateStormService => "/mutate-orchestration-aibrix-ai-v1alpha1-stormservice",
            Hook::ValidateStormService => "/validate-orchestration-aibrix-ai-v1alpha1-stormservice",
            Hook::MutateRoleSet => "/mutate-orchestration-aibrix-ai-v1alpha1-roleset",
            Hook::ValidateRoleSet => "/validate-orchestration-aibrix-ai-v1alpha1-roleset",
        }
    }

    /// The webhook's name in its configuration; denials start with it.
    pub fn name(self) -> &'static str {
        match self {
            Hook::MutateStormService => "mstormservice.squall.dev",
            Hook::ValidateStormService => "vstormservice.squall.dev",
            Hook::MutateRoleSet => "mroleset.squall.dev",
            Hook::ValidateRoleSet => "vroleset.squall.dev",
        }
    }

    /// The kind it admits.
    pub fn kind(self) -> &'static str {
        match self {
            Hook::MutateStormService | Hook::ValidateStormService => "StormService",
            Hook::MutateRoleSet | Hook::ValidateRoleSet => "RoleSet",
        }
    }

    /// The resource (plural) it admits.
    pub fn resource(self) -> &'static str {
        match self {
            Hook::MutateStormService | Hook::ValidateStormService => "stormservices",
            Hook::MutateRoleSet | Hook::ValidateRoleSet => "rolesets",
        }
    }

    /// Its position in [`Hook::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The kind it admits, as validation names it.
    pub fn owned_kind(self) -> OwnedKind {
        match self {
            Hook::MutateStormService | Hook::ValidateStormService => OwnedKind::StormService,
            Hook::MutateRoleSet | Hook::ValidateRoleSet => OwnedKind::RoleSet,
        }
    }

    /// Whether it is a mutating webhook.
    pub fn is_mutating(self) -> bool {
        matches!(self, Hook::MutateStormService | Hook::MutateRoleSet)
    }

    /// Label value for metrics: `mutate` or `validate`.
    pub fn operation(self) -> &'static str {
        if self.is_mutating() {
            "mutate"
        } else {
            "validate"
        }
    }
}
