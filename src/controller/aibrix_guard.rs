//! The guard that keeps squall and AIBrix's controller-manager from fighting over one pod.
//! AIBrix's controller reconciles every StormService, RoleSet and PodSet in the cluster, so
//! while it holds its leader Lease every one of them is AIBrix-managed: squall leaves them
//! alone (an event on each, a log line, the `squall_aibrix_controller_active` gauge) and
//! takes over once the Lease is released or expires — and steps back again if AIBrix returns.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::planner::lease::{Observation, held_until, observe};

/// How often the Lease is read: AIBrix's controller-manager retries its election every 2 s,
/// so a returning AIBrix is seen about as fast as it can start reconciling, and a held Lease
/// is seen expire within one read of its local expiry.
const READ_PERIOD: Duration = Duration::from_secs(2);
/// Failed reads in a row after which the guard reports itself degraded (`/readyz`).
const PERSISTENT_FAILURES: u32 = 3;

/// Where AIBrix's controller-manager keeps its leader Lease (`--leader-election-namespace`,
/// `--leader-election-id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AibrixLease {
    /// Its namespace (AIBrix's default: `aibrix-system`).
    pub namespace: String,
    /// Its name (AIBrix's default: `aibrix-controller-manager`).
    pub name: String,
}

impl AibrixLease {
    /// AIBrix's defaults.
    pub const DEFAULT: &str = "aibrix-system/aibrix-controller-manager";

    /// `NAMESPACE/NAME`, or `none` for no guard (no AIBrix in this cluster).
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        if text == "none" {
            return Ok(None);
        }
        match text.split_once('/') {
            Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => {
                Ok(Some(Self {
                    namespace: namespace.into(),
                    name: name.into(),
                }))
            }
            _ => Err(format!(
                "{text:?}: expected NAMESPACE/NAME (AIBrix's is {}) or none",
                Self::DEFAULT
            )),
        }
    }
}

impl std::fmt::Display for AibrixLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Who holds AIBrix's Lease, as last read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// The holder's identity (AIBrix's pod, by default).
    pub identity: String,
    /// When, by the local clock, the Lease expires unless its record changes.
    pub until: Instant,
}

/// The guard's view of AIBrix's Lease, shared by every controller.
pub struct AibrixGuard {
    lease: AibrixLease,
    state: watch::Receiver<Option<Holder>>,
}

impl AibrixGuard {
    /// A guard over `lease`, with the future that keeps reading it (run it alongside the
    /// controllers). Until the first read the Lease counts as held: nothing is reconciled on
    /// a guess. It goes free only on a read: while reads fail, what was last read stands.
    pub fn new(
        client: kube::Client,
        lease: AibrixLease,
        metrics: Arc<Metrics>,
    ) -> (
        Arc<Self>,
        impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        let unknown = Holder {
            identity: "unknown (not read yet)".into(),
            until: Instant::now(),
        };
        let (tx, rx) = watch::channel(Some(unknown));
        let guard = Arc::new(Self {
            lease: lease.clone(),
            state: rx,
        });
        (guard, watch_lease(client, lease, metrics, tx))
    }

    /// The Lease it guards.
    pub fn lease(&self) -> &AibrixLease {
        &self.lease
    }

    /// Who holds AIBrix's Lease, as last read, if anyone.
    pub fn held(&self) -> Option<Holder> {
        self.state.borrow().clone()
    }

    /// Ticks each time the Lease is seen free after being held: every object is reconciled
    /// then (what was left alone meanwhile).
    pub fn released(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.state.clone(), |mut state| async move {
            loop {
                state.changed().await.ok()?;
                if state.borrow_and_update().is_none() {
                    return Some(((), state));
                }
            }
        })
    }
}

/// Reads the Lease every [`READ_PERIOD`], timing it by when its record was seen change.
async fn watch_lease(
    client: kube::Client,
    lease: AibrixLease,
    metrics: Arc<Metrics>,
    state: watch::Sender<Option<Holder>>,
) {
    let api: Api<Lease> = Api::namespaced(client, &lease.namespace);
    let mut forbidden_said = false;
    let mut observed: Option<Observation> = None;
    let mut failures = 0_u32;
    let mut every = tokio::time::interval(READ_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let read = match api.get_opt(&lease.name).await {
            Ok(found) => Ok(found),
            // Not allowed to read it: said loudly, and squall runs (the chart grants the read;
            // `--aibrix-lease=none` says there is no AIBrix to wait for).
            Err(kube::Error::Api(status)) if status.code == 403 => {
                if !std::mem::replace(&mut forbidden_said, true) {
                    tracing::error!(%lease, message = %status.message,
                        "cannot read AIBrix's Lease; assuming AIBrix's controller-manager is not running");
                }
                Ok(None)
            }
            Err(error) => Err(error),
        };
        let found = match read {
            Ok(found) => found,
            Err(error) => {
                failures = failures.saturating_add(1);
                metrics.aibrix_lease_read_failed();
                tracing::warn!(%lease, %error, failures, "reading AIBrix's Lease failed; keeping what was last read");
                if failures >= PERSISTENT_FAILURES {
                    metrics.set_degraded(
                        "aibrix-guard",
                        Some(format!(
                            "reading AIBrix's Lease {lease} failed {failures} times in a row \
                             (last: {error}); the controllers keep what was last read"
                        )),
                    );
                }
                continue;
            }
        };
        if std::mem::take(&mut failures) >= PERSISTENT_FAILURES {
            tracing::info!(%lease, "AIBrix's Lease is readable again");
        }
        metrics.set_degraded("aibrix-guard", None);
        let now = Instant::now();
        observed = observe(observed.as_ref(), found.as_ref(), now);
        match observed.as_ref().and_then(|o| held_until(o, now)) {
            Some((identity, until)) => {
                let changed = state.borrow().as_ref().map(|h| &h.identity) != Some(&identity);
                if changed {
                    tracing::warn!(%lease, holder = %identity,
                        "AIBrix's controller-manager holds its Lease: squall does not reconcile until it is released or expires");
                }
                metrics.set_aibrix_controller_active(true);
                publish(&state, Some(Holder { identity, until }));
            }
            None => {
                if state.borrow().is_some() {
                    tracing::info!(%lease, "AIBrix's Lease is free: squall reconciles");
                }
                metrics.set_aibrix_controller_active(false);
                publish(&state, None);
            }
        }
    }
}

/// Tells the controllers only what changed: every change of a free Lease's state would
/// reconcile every object (`released`), and a free Lease is read every 2 s.
fn publish(state: &watch::Sender<Option<Holder>>, now: Option<Holder>) {
    state.send_if_modified(|current| {
        let changed = *current != now;
        *current = now;
        changed
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_read_free_again_reconciles_nothing_more() {
        let (tx, rx) = watch::channel(Some(Holder {
            identity: "aibrix-0".into(),
            until: Instant::now(),
        }));
        let guard = AibrixGuard {
            lease: AibrixLease::parse(AibrixLease::DEFAULT).unwrap().unwrap(),
            state: rx,
        };
        let released = guard.released();
        futures::pin_mut!(released);
        publish(&tx, None);
        assert_eq!(
            futures::StreamExt::next(&mut released).await,
            Some(()),
            "freed: reconcile all"
        );
        // Read free again and again: nothing to tell.
        publish(&tx, None);
        publish(&tx, None);
        let next = futures::StreamExt::next(&mut released);
        assert!(
            futures::FutureExt::now_or_never(next).is_none(),
            "no second reconcile-all for a Lease that stayed free"
        );
    }

    #[test]
    fn the_lease_is_named_namespace_slash_name_or_none() {
        assert_eq!(
            AibrixLease::parse(AibrixLease::DEFAULT),
            Ok(Some(AibrixLease {
                namespace: "aibrix-system".into(),
                name: "aibrix-controller-manager".into()
            }))
        );
        assert_eq!(AibrixLease::parse("none"), Ok(None));
        for bad in ["aibrix-controller-manager", "/x", "x/", ""] {
            let error = AibrixLease::parse(bad).unwrap_err();
            assert!(error.contains("NAMESPACE/NAME"), "{error}");
        }
    }
}
