//! Pairing keys (docs/rollouts.md#pairing) on the local control plane (shared operator): the
//! pods of a pairing group's roles carry one key, a change to a role outside the group keeps
//! it, and a change to a role of the group gives the whole group a new key — the unchanged
//! role's pods without a restart.

use std::collections::BTreeMap;
use std::time::Duration;

use e2e::roles::{role_of, roleset, settled};
use e2e::{TestNamespace, client, install_crds, wait_for, wait_for_all};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use squall::api::RoleSet;
use squall::api::keys::LABEL_PAIRING_KEY;

const TIMEOUT: Duration = Duration::from_secs(120);

/// Role → (pod UID, pairing key) of the live pods, one pod per role.
type Keys = BTreeMap<String, (String, Option<String>)>;

fn keys(pods: &[Pod]) -> Keys {
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            (
                role_of(p),
                (
                    p.uid().unwrap_or_default(),
                    p.labels().get(LABEL_PAIRING_KEY).cloned(),
                ),
            )
        })
        .collect()
}

/// The pods once one per role is left and the paired ones are keyed alike.
async fn keyed_alike(pods: &Api<Pod>, what: &str) -> Keys {
    let settled = wait_for_all(pods, what, TIMEOUT, |pods| {
        let now = keys(pods);
        let key = |role: &str| now.get(role).map(|(_, key)| key);
        pods.len() == 3
            && now.len() == 3
            && key("prefill").is_some()
            && key("prefill") == key("decode")
    })
    .await
    .unwrap();
    keys(&settled)
}

/// Sets role `index`'s image and waits for the RoleSet to settle at `generation` with every
/// paired pod keyed alike.
async fn set_image(
    rolesets: &Api<RoleSet>,
    pods: &Api<Pod>,
    index: usize,
    image: &str,
    generation: i64,
) -> Keys {
    let path = format!("/spec/roles/{index}/template/spec/containers/0/image");
    rolesets
        .patch(
            "rs",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace", "path": path, "value": image}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    wait_for(
        rolesets,
        "rs",
        &format!("RoleSet rs Ready at generation {generation}"),
        TIMEOUT,
        |rs| settled(rs, generation),
    )
    .await
    .unwrap();
    keyed_alike(
        pods,
        &format!("paired pods keyed alike at generation {generation}"),
    )
    .await
}

#[tokio::test]
#[ignore = "needs the local control plane and the shared operator (make test)"]
async fn a_pairing_groups_pods_share_a_key_that_follows_the_groups_templates_only() {
    install_crds();
    let client = client().await;
    let ns = TestNamespace::create(&client, "pairing").await;
    let rolesets: Api<RoleSet> = Api::namespaced(client.clone(), ns.name());
    let pods: Api<Pod> = Api::namespaced(client, ns.name());
    let mut rs = roleset(
        "rs",
        &[
            ("router", 1, None),
            ("prefill", 1, None),
            ("decode", 1, None),
        ],
        "engine:1",
    );
    rs.spec.pairing = serde_json::from_value(json!([{"roles": ["prefill", "decode"]}])).unwrap();
    rolesets.create(&PostParams::default(), &rs).await.unwrap();
    wait_for(&rolesets, "rs", "RoleSet rs Ready", TIMEOUT, |rs| {
        settled(rs, 1)
    })
    .await
    .unwrap();
    let first = keyed_alike(&pods, "paired pods keyed alike").await;
    assert_eq!(first.len(), 3, "{first:?}");
    let key = first["prefill"]
        .1
        .clone()
        .expect("the prefill pod is keyed");
    assert_eq!(
        first["decode"].1.as_deref(),
        Some(key.as_str()),
        "{first:?}"
    );
    assert_eq!(
        first["router"].1, None,
        "the router is not paired: {first:?}"
    );
    // The API server kept the field: the CRD serves it.
    let stored = rolesets.get("rs").await.unwrap();
    assert_eq!(stored.spec.pairing.map(|p| p.len()), Some(1));

    let router_changed = set_image(&rolesets, &pods, 0, "router:2", 2).await;
    assert_ne!(
        router_changed["router"].0, first["router"].0,
        "the router rolled"
    );
    for role in ["prefill", "decode"] {
        assert_eq!(
            router_changed[role], first[role],
            "{role}: the same pod, the same key"
        );
    }

    let decode_changed = set_image(&rolesets, &pods, 2, "engine:2", 3).await;
    let new_key = decode_changed["decode"].1.clone().expect("keyed");
    assert_ne!(new_key, key, "a role of the group changed: a new key");
    assert_ne!(
        decode_changed["decode"].0, first["decode"].0,
        "decode rolled"
    );
    assert_eq!(
        decode_changed["prefill"],
        (first["prefill"].0.clone(), Some(new_key)),
        "prefill's pod takes the new key without a restart"
    );
}
