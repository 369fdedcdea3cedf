//! Tenants as the API server sees them: a user with `edit` in one namespace (plus the
//! AIBrix kinds, as the chart's aggregated role grants them), impersonated by the test, so
//! what a tenant test writes is exactly what such a tenant is allowed to write.

use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Client;
use kube::api::{Api, PostParams};

/// A client acting as user `user`, who has `edit` in `namespace` and may write every AIBrix
/// kind there, their status included. `extra` adds rules (what some admins grant more).
pub async fn tenant(admin: &Client, namespace: &str, user: &str, extra: Vec<PolicyRule>) -> Client {
    let mut rules = vec![PolicyRule {
        api_groups: Some(vec!["orchestration.aibrix.ai".into()]),
        resources: Some(vec!["*".into()]),
        verbs: vec!["*".into()],
        ..PolicyRule::default()
    }];
    rules.extend(extra);
    let role = Role {
        metadata: kube::api::ObjectMeta {
            name: Some(format!("{user}-aibrix")),
            ..Default::default()
        },
        rules: Some(rules),
    };
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the tenant's Role");
    let bindings = Api::<RoleBinding>::namespaced(admin.clone(), namespace);
    for (name, kind) in [
        ("edit", "ClusterRole"),
        (&format!("{user}-aibrix")[..], "Role"),
    ] {
        let binding = RoleBinding {
            metadata: kube::api::ObjectMeta {
                name: Some(format!("{user}-{name}")),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: kind.into(),
                name: name.into(),
            },
            subjects: Some(vec![Subject {
                kind: "User".into(),
                api_group: Some("rbac.authorization.k8s.io".into()),
                name: user.into(),
                ..Subject::default()
            }]),
        };
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .expect("bind the tenant's roles");
    }
    let mut config = kube::Config::infer().await.expect("a kubeconfig");
    config.auth_info.impersonate = Some(user.into());
    Client::try_from(config).expect("a tenant client")
}
