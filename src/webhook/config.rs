//! The webhook configurations squall registers in `--webhook-configs=register` mode (local
//! runs): `url:` client configs, CREATE and UPDATE of the main resource, v1 reviews, no side
//! effects (docs/certificates.md#modes).

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use kube::api::ObjectMeta;

use crate::admission::hook::Hook;
use crate::api::{GROUP, VERSION};

/// Settings of the registered configurations.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Name of both configurations.
    pub name: String,
    /// Base URL, e.g. `https://127.0.0.1:9443`.
    pub base_url: String,
    /// `Fail` (default) or `Ignore`.
    pub failure_policy: String,
    /// A user whose RoleSet writes skip the RoleSet webhooks (the operator's own identity).
    pub exclude_user: Option<String>,
}

fn rules(hook: Hook) -> Vec<RuleWithOperations> {
    vec![RuleWithOperations {
        api_groups: Some(vec![GROUP.into()]),
        api_versions: Some(vec![VERSION.into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec![hook.resource().into()]),
        scope: Some("Namespaced".into()),
    }]
}

fn client_config(reg: &Registration, hook: Hook) -> WebhookClientConfig {
    WebhookClientConfig {
        url: Some(format!("{}{}", reg.base_url, hook.path())),
        ..WebhookClientConfig::default()
    }
}

fn match_conditions(reg: &Registration, hook: Hook) -> Option<Vec<MatchCondition>> {
    let user = reg
        .exclude_user
        .as_ref()
        .filter(|_| hook.kind() == "RoleSet")?;
    Some(vec![MatchCondition {
        name: "exclude-squall-operator".into(),
        expression: format!("request.userInfo.username != {user:?}"),
    }])
}

/// The mutating and validating configurations for `reg`.
pub fn configurations(
    reg: &Registration,
) -> (MutatingWebhookConfiguration, ValidatingWebhookConfiguration) {
    let meta = ObjectMeta {
        name: Some(reg.name.clone()),
        labels: Some(
            [(
                "app.kubernetes.io/managed-by".to_string(),
                "squall".to_string(),
            )]
            .into(),
        ),
        ..ObjectMeta::default()
    };
    let mutating = Hook::ALL
        .into_iter()
        .filter(|h| h.is_mutating())
        .map(|hook| MutatingWebhook {
            name: hook.name().into(),
            client_config: client_config(reg, hook),
            rules: Some(rules(hook)),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some(reg.failure_policy.clone()),
            timeout_seconds: Some(10),
            match_policy: Some("Equivalent".into()),
            reinvocation_policy: Some("Never".into()),
            match_conditions: match_conditions(reg, hook),
            ..MutatingWebhook::default()
        })
        .collect();
    let validating = Hook::ALL
        .into_iter()
        .filter(|h| !h.is_mutating())
        .map(|hook| ValidatingWebhook {
            name: hook.name().into(),
            client_config: client_config(reg, hook),
            rules: Some(rules(hook)),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some(reg.failure_policy.clone()),
            timeout_seconds: Some(10),
            match_policy: Some("Equivalent".into()),
            match_conditions: match_conditions(reg, hook),
            ..ValidatingWebhook::default()
        })
        .collect();
    (
        MutatingWebhookConfiguration {
            metadata: meta.clone(),
            webhooks: Some(mutating),
        },
        ValidatingWebhookConfiguration {
            metadata: meta,
            webhooks: Some(validating),
        },
    )
}
