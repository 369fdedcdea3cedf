//! The certificate manager loop: keeps the stored certificates current (per [`plan`]),
//! publishes them to the TLS server, and keeps `caBundle` injected into the webhook
//! configurations — at start-up, on every watch event on them (repairing GitOps re-applies
//! that blank it), and every injection period.

use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::pki::{self, Bundle, Parsed};
use crate::policy::{Action, Lifetimes, plan};
use crate::store::{Store, StoreError, Stored};

/// Manager errors that stop the loop (everything else is retried).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Building certificates failed.
    #[error(transparent)]
    Pki(#[from] pki::Error),
}

/// What the TLS server and the readiness check need.
#[derive(Clone, Debug, Default)]
pub struct CertState {
    /// The certificates being served.
    pub current: Option<Arc<Parsed>>,
    /// The `caBundle` both webhook configurations carry (None until they agree, or when no
    /// configurations are managed or read).
    pub injected_bundle: Option<String>,
    /// Why the stored certificates cannot be used or repaired, when that is so (`/readyz`
    /// says it).
    pub problem: Option<String>,
}

/// Which webhook configurations carry `caBundle`, and who owns them
/// (`--webhook-configs=inject|register|none`).
pub enum Configs {
    /// Patch `caBundle` into configurations someone else created (the Helm chart).
    Inject {
        /// API client.
        client: Client,
        /// Name of the MutatingWebhookConfiguration.
        mutating: String,
        /// Name of the ValidatingWebhookConfiguration.
        validating: String,
    },
    /// Create or update these configurations, with `caBundle` filled in (local mode).
    Register {
        /// API client.
        client: Client,
        /// Desired mutating configuration (without `caBundle`).
        mutating: Box<MutatingWebhookConfiguration>,
        /// Desired validating configuration (without `caBundle`).
        validating: Box<ValidatingWebhookConfiguration>,
    },
    /// Leave configurations alone (external mode: cert-manager's cainjector owns them).
    None,
}

impl Configs {
    /// The client and the names of the managed configurations (None: none managed).
    fn targets(&self) -> Option<(&Client, String, String)> {
        match self {
            Configs::None => None,
            Configs::Inject {
                client,
                mutating,
                validating,
            } => Some((client, mutating.clone(), validating.clone())),
            Configs::Register {
                client,
                mutating,
                validating,
            } => Some((
                client,
                mutating.metadata.name.clone().unwrap_or_default(),
                validating.metadata.name.clone().unwrap_or_default(),
            )),
        }
    }
}

/// Where certificates come from.
pub enum Source {
    /// squall issues and renews them (`self-signed` mode).
    SelfSigned {
        /// Where they are stored.
        store: Store,
        /// Names the serving certificate must carry.
        sans: Vec<String>,
        /// Lifetimes and the injection period.
        lifetimes: Lifetimes,
    },
    /// Files mounted from a Secret (e.g. by cert-manager): only watched and reloaded.
    External {
        /// The mounted directory (`tls.crt`, `tls.key`, optional `ca.crt`).
        dir: std::path::PathBuf,
        /// How often the files are re-read.
        poll: Duration,
    },
}

/// Runs until `shutdown` turns true, publishing into `state`.
pub async fn run(
    source: Source,
    configs: Configs,
    state: watch::Sender<CertState>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut wakeups = wakeup_stream(&source, &configs);
    let mut two_ca_since: Option<OffsetDateTime> = None;
    // Consecutive passes that wrote: each waits longer before looking again, so a store that
    // does not take (or a policy that never settles) is never written in a tight loop.
    let mut writes_in_a_row: u32 = 0;
    loop {
        let now = OffsetDateTime::now_utc();
        let mut problem = None;
        let (current, next_check) = match &source {
            Source::SelfSigned {
                store,
                sans,
                lifetimes,
            } => match reconcile(store, sans, *lifetimes, now, two_ca_since).await {
                Ok((current, wrote, next)) => {
                    writes_in_a_row = if wrote { writes_in_a_row + 1 } else { 0 };
                    let next = match writes_in_a_row {
                        0 => next,
                        n => next.max(now + write_backoff(n)),
                    };
                    (current, next)
                }
                Err(StoreError::Conflict) => continue, // someone else wrote: reload at once
                Err(e @ StoreError::Foreign(_)) => {
                    // Nothing to repair: wait for the Secret to change (its watch wakes us).
                    problem = Some(e.to_string());
                    (state.borrow().current.clone(), now + FOREIGN_RECHECK)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "certificate store unavailable; retrying");
                    (state.borrow().current.clone(), now + Duration::from_secs(2))
                }
            },
            Source::External { dir, poll } => (load_external(dir).await, now + *poll),
        };
        if state.borrow().problem != problem {
            if let Some(problem) = &problem {
                tracing::error!(%problem, "webhook certificates");
            }
            state.send_modify(|s| s.problem = problem.clone());
        }
        if let Some(current) = &current {
            let changed = state
                .borrow()
                .current
                .as_ref()
                .is_none_or(|old| old.bundle != current.bundle);
            if changed {
                tracing::info!(
                    serial = %current.serving.serial,
                    not_after = %current.serving.validity.not_after,
                    cas = current.cas.len(),
                    "serving certificate loaded"
                );
                state.send_modify(|s| s.current = Some(current.clone()));
            }
        }
        let injected = match (&current, &source) {
            (Some(current), Source::SelfSigned { .. }) => {
                inject(&configs, &current.bundle.ca_crt).await
            }
            _ => read_injected(&configs).await,
        };
        // With no configurations to wait for (`none`), clients trust what is stored.
        let carried = match &configs {
            Configs::None => current.as_ref().map(|c| c.bundle.ca_crt.clone()),
            _ => injected.clone(),
        };
        two_ca_since = match (&carried, &current) {
            (Some(bundle), Some(current))
                if current.cas.len() == 2 && *bundle == current.bundle.ca_crt =>
            {
                Some(two_ca_since.unwrap_or(now))
            }
            _ => None,
        };
        state.send_if_modified(|s| {
            let changed = s.injected_bundle != injected;
            s.injected_bundle = injected.clone();
            changed
        });

        let period = match &source {
            Source::SelfSigned { lifetimes, .. } => lifetimes.injection_period,
            Source::External { poll, .. } => *poll,
        };
        let wait = (next_check - OffsetDateTime::now_utc())
            .try_into()
            .unwrap_or(Duration::ZERO)
            .min(period);
        // After a write, its own watch event must not bring the next pass forward: the
        // back-off holds (capped by the injection period, which must keep its pace).
        let backing_off = writes_in_a_row > 0;
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = wakeups.next(), if !backing_off => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            return Ok(());
        }
    }
}

/// How long after the `n`th pass in a row that wrote the next pass comes: 1 s, doubling,
/// at most a minute.
fn write_backoff(n: u32) -> Duration {
    Duration::from_secs(1 << n.saturating_sub(1).min(6)).min(Duration::from_secs(60))
}

/// How often a Secret squall did not make is looked at again (its watch wakes the loop
/// sooner when it changes).
const FOREIGN_RECHECK: Duration = Duration::from_secs(60);

/// One pass of the self-signed policy: load, decide, write; returns what is current, whether
/// this pass wrote, and when to look again.
///
/// A bundle that does not read back whole is repaired part by part: a serving certificate or
/// key that is missing, garbled, mismatched or not signed by the stored CA is re-issued from
/// that CA (`caBundle` and every client's trust stay as they are); only a broken CA part
/// (`ca.crt`, or a `ca.key` that is not the newest CA's) starts over.
async fn reconcile(
    store: &Store,
    sans: &[String],
    lifetimes: Lifetimes,
    now: OffsetDateTime,
    two_ca_since: Option<OffsetDateTime>,
) -> Result<(Option<Arc<Parsed>>, bool, OffsetDateTime), StoreError> {
    let stored = store.load().await?;
    let mut repaired_serving = None;
    let parsed = match &stored {
        Some(s) => match Parsed::from_bundle(s.bundle.clone()) {
            Ok(p) => Some(p),
            Err(e) if e.is_serving_part() => {
                tracing::warn!(error = %e, "the serving certificate is unusable; re-issuing it from the stored CA");
                repaired_serving = Some(
                    repair_serving(&s.bundle, sans, lifetimes, now)
                        .map_err(|e| StoreError::Invalid(e.to_string()))?,
                );
                None
            }
            Err(e) => {
                tracing::warn!(error = %e, "the stored CA is unusable; issuing new certificates");
                None
            }
        },
        None => None,
    };
    let (action, next) = match repaired_serving {
        Some(bundle) => (Action::RenewServing, bundle),
        None => {
            let decision = plan(now, parsed.as_ref(), sans, lifetimes, two_ca_since);
            let next = match (decision.action.clone(), parsed) {
                (Action::Wait, Some(p)) => {
                    return Ok((Some(Arc::new(p)), false, decision.recheck_at));
                }
                (Action::Wait, None) => unreachable!("plan creates when nothing usable is stored"),
                (action, parsed) => next_bundle(&action, parsed.as_ref(), sans, lifetimes, now)
                    .map_err(|e| StoreError::Invalid(e.to_string()))?,
            };
            (decision.action, next)
        }
    };
    tracing::info!(?action, "webhook certificates");
    let written: Stored = match &stored {
        None => store.create(&next).await?,
        Some(s) => store.update(&next, &s.version).await?,
    };
    let parsed =
        Parsed::from_bundle(written.bundle).map_err(|e| StoreError::Invalid(e.to_string()))?;
    Ok((Some(Arc::new(parsed)), true, now))
}

/// `bundle` with a new serving certificate from its (sound) newest CA.
fn repair_serving(
    bundle: &Bundle,
    sans: &[String],
    lifetimes: Lifetimes,
    now: OffsetDateTime,
) -> Result<Bundle, pki::Error> {
    let (cas, _) = pki::read_cas(bundle)?;
    let newest = cas.last().expect("read_cas returns a CA");
    let (tls_crt, tls_key) =
        pki::issue_serving(&newest.pem, &bundle.ca_key, sans, now, lifetimes.serving)?;
    Ok(Bundle {
        tls_crt,
        tls_key,
        ..bundle.clone()
    })
}

/// The bundle after `action`.
fn next_bundle(
    action: &Action,
    parsed: Option<&Parsed>,
    sans: &[String],
    lifetimes: Lifetimes,
    now: OffsetDateTime,
) -> Result<Bundle, pki::Error> {
    let serve = |ca_crt: &str, ca_key: &str| {
        pki::issue_serving(ca_crt, ca_key, sans, now, lifetimes.serving)
    };
    Ok(match (action, parsed) {
        (Action::RenewServing | Action::SwitchToNewCa, Some(p)) => {
            let (tls_crt, tls_key) = serve(&p.newest_ca().pem, &p.bundle.ca_key)?;
            let retire_old_ca_after = match action {
                Action::SwitchToNewCa => Some(p.serving.validity.not_after),
                _ => p.bundle.retire_old_ca_after,
            };
            Bundle {
                tls_crt,
                tls_key,
                retire_old_ca_after,
                ..p.bundle.clone()
            }
        }
        (Action::StartCaRotation, Some(p)) => {
            let (new_crt, new_key) = pki::new_ca(now, lifetimes.ca)?;
            Bundle {
                ca_crt: format!("{}{}", p.newest_ca().pem, new_crt),
                ca_key: new_key,
                retire_old_ca_after: None,
                ..p.bundle.clone()
            }
        }
        (Action::DropOldCa, Some(p)) => Bundle {
            ca_crt: p.newest_ca().pem.clone(),
            retire_old_ca_after: None,
            ..p.bundle.clone()
        },
        _ => {
            let (ca_crt, ca_key) = pki::new_ca(now, lifetimes.ca)?;
            let (tls_crt, tls_key) = serve(&ca_crt, &ca_key)?;
            Bundle {
                ca_crt,
                ca_key,
                tls_crt,
                tls_key,
                retire_old_ca_after: None,
            }
        }
    })
}

async fn load_external(dir: &std::path::Path) -> Option<Arc<Parsed>> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    let (tls_crt, tls_key) = match (read(crate::store::TLS_CRT), read(crate::store::TLS_KEY)) {
        (Ok(c), Ok(k)) => (c, k),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(dir = %dir.display(), error = %e, "external certificate files unreadable");
            return None;
        }
    };
    // ca.crt is optional in a mounted Secret; without it the serving chain is trusted as is.
    let ca_crt = read(crate::store::CA_CRT).unwrap_or_else(|_| tls_crt.clone());
    let bundle = Bundle {
        ca_crt,
        ca_key: String::new(), // the issuer keeps it
        tls_crt,
        tls_key,
        retire_old_ca_after: None,
    };
    match Parsed::from_mounted(bundle) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "external certificate files unusable");
            None
        }
    }
}

/// Makes both configurations carry `ca_bundle`; returns the bundle they agree on afterwards.
async fn inject(configs: &Configs, ca_bundle: &str) -> Option<String> {
    let bytes = ByteString(ca_bundle.as_bytes().to_vec());
    let result = match configs {
        Configs::None => return None,
        Configs::Inject {
            client,
            mutating,
            validating,
        } => {
            let m = inject_one(Api::all(client.clone()), mutating, &bytes, mutating_slots).await;
            match m {
                Ok(()) => {
                    inject_one(
                        Api::all(client.clone()),
                        validating,
                        &bytes,
                        validating_slots,
                    )
                    .await
                }
                Err(e) => Err(e),
            }
        }
        Configs::Register {
            client,
            mutating,
            validating,
        } => register(client, mutating, validating, &bytes).await,
    };
    if let Err(e) = result {
        return warn_none("registering webhook configurations", e);
    }
    read_injected(configs).await
}

fn mutating_slots(c: &mut MutatingWebhookConfiguration) -> Vec<&mut Option<ByteString>> {
    c.webhooks
        .iter_mut()
        .flatten()
        .map(|w| &mut w.client_config.ca_bundle)
        .collect()
}

fn validating_slots(c: &mut ValidatingWebhookConfiguration) -> Vec<&mut Option<ByteString>> {
    c.webhooks
        .iter_mut()
        .flatten()
        .map(|w| &mut w.client_config.ca_bundle)
        .collect()
}

/// Injects into one existing configuration (absent ones are left to their owner).
async fn inject_one<K>(
    api: Api<K>,
    name: &str,
    bytes: &ByteString,
    slots: fn(&mut K) -> Vec<&mut Option<ByteString>>,
) -> kube::Result<()>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(mut config) = api.get_opt(name).await? else {
        return Ok(());
    };
    if set_bundle(slots(&mut config).into_iter(), bytes) {
        api.replace(name, &PostParams::default(), &config).await?;
    }
    Ok(())
}

/// Sets every `caBundle`; true when something changed.
fn set_bundle<'a>(
    slots: impl Iterator<Item = &'a mut Option<ByteString>>,
    bytes: &ByteString,
) -> bool {
    let mut changed = false;
    for slot in slots {
        if slot.as_ref() != Some(bytes) {
            *slot = Some(bytes.clone());
            changed = true;
        }
    }
    changed
}

async fn register(
    client: &Client,
    mutating: &MutatingWebhookConfiguration,
    validating: &ValidatingWebhookConfiguration,
    bytes: &ByteString,
) -> kube::Result<()> {
    let mut m = mutating.clone();
    set_bundle(mutating_slots(&mut m).into_iter(), bytes);
    upsert(Api::all(client.clone()), m).await?;
    let mut v = validating.clone();
    set_bundle(validating_slots(&mut v).into_iter(), bytes);
    upsert(Api::all(client.clone()), v).await
}

/// Creates `desired`, or replaces the stored object when it differs.
async fn upsert<K>(api: Api<K>, mut desired: K) -> kube::Result<()>
where
    K: Resource
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + PartialEq,
{
    let name = desired.meta().name.clone().unwrap_or_default();
    match api.get_opt(&name).await? {
        None => api
            .create(&PostParams::default(), &desired)
            .await
            .map(|_| ()),
        Some(existing) => {
            desired.meta_mut().resource_version = existing.meta().resource_version.clone();
            let mut comparable = existing.clone();
            *comparable.meta_mut() = desired.meta().clone();
            if comparable == desired {
                return Ok(());
            }
            api.replace(&name, &PostParams::default(), &desired)
                .await
                .map(|_| ())
        }
    }
}

/// The `caBundle` both configurations carry, when every webhook of both agrees.
async fn read_injected(configs: &Configs) -> Option<String> {
    let (client, m_name, v_name) = configs.targets()?;
    let m = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(&m_name)
        .await
        .ok()??;
    let v = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(&v_name)
        .await
        .ok()??;
    let bundles: Vec<Option<&ByteString>> = m
        .webhooks
        .iter()
        .flatten()
        .map(|w| w.client_config.ca_bundle.as_ref())
        .chain(
            v.webhooks
                .iter()
                .flatten()
                .map(|w| w.client_config.ca_bundle.as_ref()),
        )
        .collect();
    let first = (*bundles.first()?)?;
    bundles
        .iter()
        .all(|b| *b == Some(first))
        .then(|| String::from_utf8_lossy(&first.0).into_owned())
}

fn warn_none<T>(what: &str, e: impl std::fmt::Display) -> Option<T> {
    tracing::warn!(error = %e, "{what} failed; retrying");
    None
}

/// Events that should trigger a pass before the timer: changes to the stored Secret (other
/// replicas' writes) and to the webhook configurations (a blanked `caBundle`).
fn wakeup_stream(
    source: &Source,
    configs: &Configs,
) -> std::pin::Pin<Box<dyn Stream<Item = ()> + Send>> {
    let mut streams: Vec<std::pin::Pin<Box<dyn Stream<Item = ()> + Send>>> = Vec::new();
    if let Source::SelfSigned {
        store: Store::Secret { api, name },
        ..
    } = source
    {
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        streams.push(Box::pin(
            watcher((**api).clone(), config)
                .default_backoff()
                .map(|_| ()),
        ));
    }
    let Some((client, m, v)) = configs.targets() else {
        return if streams.is_empty() {
            Box::pin(futures::stream::pending())
        } else {
            Box::pin(futures::stream::select_all(streams))
        };
    };
    let by_name = |n: &str| watcher::Config::default().fields(&format!("metadata.name={n}"));
    streams.push(Box::pin(
        watcher(
            Api::<MutatingWebhookConfiguration>::all(client.clone()),
            by_name(&m),
        )
        .default_backoff()
        .map(|_| ()),
    ));
    streams.push(Box::pin(
        watcher(
            Api::<ValidatingWebhookConfiguration>::all(client.clone()),
            by_name(&v),
        )
        .default_backoff()
        .map(|_| ()),
    ));
    Box::pin(futures::stream::select_all(streams))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lifetimes() -> Lifetimes {
        Lifetimes {
            ca: Duration::from_secs(3600),
            serving: Duration::from_secs(600),
            injection_period: Duration::from_secs(2),
        }
    }

    fn temp_store(tag: &str) -> (std::path::PathBuf, Store) {
        let dir = std::env::temp_dir().join(format!("webhook-certs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (dir.clone(), Store::Dir(dir))
    }

    /// Issue 14 (5): a broken serving part is re-issued from the stored CA — `ca.crt` (the
    /// `caBundle` every client trusts) is untouched — and the next pass waits.
    #[tokio::test]
    async fn a_broken_serving_certificate_is_reissued_from_the_stored_ca() {
        let (dir, store) = temp_store("repair");
        let sans = vec!["127.0.0.1".to_string()];
        let now = OffsetDateTime::now_utc();
        let (first, wrote, _) = reconcile(&store, &sans, lifetimes(), now, None)
            .await
            .unwrap();
        assert!(wrote);
        let ca = first.unwrap().bundle.ca_crt.clone();
        for (file, contents) in [
            (
                "tls.crt",
                "-----BEGIN CERTIFICATE-----\ngarbled\n-----END CERTIFICATE-----\n",
            ),
            ("tls.key", ""),
        ] {
            std::fs::write(dir.join(file), contents).unwrap();
            let (repaired, wrote, _) = reconcile(&store, &sans, lifetimes(), now, None)
                .await
                .unwrap();
            assert!(wrote, "{file} repaired");
            assert_eq!(repaired.unwrap().bundle.ca_crt, ca, "{file}: the CA stays");
            let (_, wrote, _) = reconcile(&store, &sans, lifetimes(), now, None)
                .await
                .unwrap();
            assert!(!wrote, "{file}: settled after one write");
        }
        // A missing file is a broken part too.
        std::fs::remove_file(dir.join("tls.key")).unwrap();
        let (repaired, _, _) = reconcile(&store, &sans, lifetimes(), now, None)
            .await
            .unwrap();
        assert_eq!(repaired.unwrap().bundle.ca_crt, ca);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_in_a_row_back_off_to_a_minute() {
        let waits: Vec<u64> = (1..=9).map(|n| write_backoff(n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }
}
