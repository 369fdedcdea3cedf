//! What a reconcile can fail with, and how soon it is tried again.

use std::time::Duration;

use kube::runtime::finalizer;

/// Reconcile errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
    /// Adding or removing a finalizer failed.
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<finalizer::Error<Error>>),
    /// A ControllerRevision could not be used.
    #[error(transparent)]
    Revision(#[from] crate::planner::revision::RevisionError),
    /// Waiting for children to go away (retried soon).
    #[error("waiting: {0}")]
    Waiting(String),
    /// Waiting for children to drain before they go (docs/rollouts.md#drain-before-delete),
    /// back after this long at the latest.
    #[error("waiting for children to drain")]
    Draining(std::time::Duration),
    /// The API server refused to create a child (quota, admission, validation); reported
    /// on the owner as `ReplicaFailure` and retried with backoff.
    #[error("creating a child was refused: {0}")]
    Refused(String),
}

impl Error {
    /// The error of the reconcile itself, out of the finalizer wrapper every reconcile runs
    /// in (so a `Waiting` cleanup is told from a failure).
    pub fn root(&self) -> &Error {
        match self {
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e.root(),
                _ => self,
            },
            _ => self,
        }
    }
}

impl Error {
    /// Whether the error says an object the reconcile acted on is already gone (a child
    /// deleted meanwhile, the object itself after its finalizer went, or its namespace being
    /// deleted): its watch event brings the next reconcile, so this one is done — not a
    /// failure to retry.
    pub fn is_gone(&self) -> bool {
        let api_status = match self {
            Error::Kube(kube::Error::Api(status)) => Some(status),
            Error::Finalizer(inner) => match inner.as_ref() {
                finalizer::Error::AddFinalizer(kube::Error::Api(status))
                | finalizer::Error::RemoveFinalizer(kube::Error::Api(status)) => Some(status),
                finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => {
                    return e.is_gone();
                }
                _ => None,
            },
            _ => None,
        };
        api_status.is_some_and(|status| status.code == 404 || namespace_terminating(status))
    }
}

/// Whether the API server refused a write because the namespace is being deleted (it takes
/// every object in it along; nothing is left to reconcile).
fn namespace_terminating(status: &kube::core::Status) -> bool {
    status.code == 403
        && status
            .details
            .as_ref()
            .is_some_and(|d| d.causes.iter().any(|c| c.reason == "NamespaceTerminating"))
}

/// The message of an API error that refuses a create for good until something changes
/// (quota, admission, validation) — a conflict or a transport error is not one.
pub fn refusal(error: &kube::Error) -> Option<String> {
    match error {
        kube::Error::Api(status)
            if status.code != 409 && status.code < 500 && !namespace_terminating(status) =>
        {
            Some(status.message.clone())
        }
        _ => None,
    }
}

/// How long to wait before retrying an object whose reconcile failed `failures` times in a
/// row: doubling from 1 s up to 5 minutes, so a persistent error (RBAC, a quota, a webhook
/// that is down) is not hammered, while a one-off failure is retried after a second. A watch
/// event for the object still reconciles it sooner.
pub fn retry_delay(failures: u32) -> Duration {
    const FIRST: Duration = Duration::from_secs(1);
    const MAX: Duration = Duration::from_secs(300);
    FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
        .min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_cleanup_is_told_apart_inside_the_finalizer_wrapper() {
        let wrapped = Error::Finalizer(Box::new(finalizer::Error::CleanupFailed(Error::Waiting(
            "pods".into(),
        ))));
        assert!(matches!(wrapped.root(), Error::Waiting(_)));
        let refused = Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(Error::Refused(
            "quota".into(),
        ))));
        assert!(matches!(refused.root(), Error::Refused(_)));
    }

    #[test]
    fn a_child_or_owner_already_gone_ends_the_reconcile_instead_of_failing_it() {
        let status = |code| {
            kube::Error::Api(
                kube::core::Status::failure("gone", "NotFound")
                    .with_code(code)
                    .boxed(),
            )
        };
        let removal = Error::Finalizer(Box::new(finalizer::Error::RemoveFinalizer(status(404))));
        assert!(removal.is_gone());
        let inside = Error::Finalizer(Box::new(finalizer::Error::ApplyFailed(Error::Kube(
            status(404),
        ))));
        assert!(inside.is_gone());
        assert!(!Error::Kube(status(409)).is_gone());
        let mut terminating =
            kube::core::Status::failure("being terminated", "Forbidden").with_code(403);
        assert!(!Error::Kube(kube::Error::Api(terminating.clone().boxed())).is_gone());
        terminating.details = Some(
            serde_json::from_value(serde_json::json!({
                "causes": [{"reason": "NamespaceTerminating", "message": "being terminated"}]
            }))
            .unwrap(),
        );
        let terminating = kube::Error::Api(terminating.boxed());
        assert_eq!(refusal(&terminating), None, "not a refusal to report");
        assert!(Error::Kube(terminating).is_gone());
        assert!(!Error::Kube(status(500)).is_gone());
        assert!(!Error::Waiting("pods".into()).is_gone());
    }

    #[test]
    fn retries_double_from_one_second_up_to_five_minutes() {
        let delays: Vec<u64> = (1..=11).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(300));
        assert_eq!(retry_delay(0), Duration::from_secs(1));
    }
}
