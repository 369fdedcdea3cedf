//! Where the certificates live: a Secret in the operator's namespace (shared by every
//! replica; writes are guarded by `resourceVersion`) or a directory (`squall run --local`,
//! and the files an `external` Secret mount provides).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::pki::Bundle;

/// Secret keys and file names (docs/certificates.md).
pub const CA_CRT: &str = "ca.crt";
/// The newest CA's key.
pub const CA_KEY: &str = "ca.key";
/// The serving certificate.
pub const TLS_CRT: &str = "tls.crt";
/// The serving certificate's key.
pub const TLS_KEY: &str = "tls.key";
/// Annotation (Secret) / file (directory) holding [`Bundle::retire_old_ca_after`].
pub const RETIRE_OLD_CA_AFTER: &str = "squall.dev/retire-old-ca-after";
const RETIRE_FILE: &str = "retire-old-ca-after";
const VERSION_FILE: &str = "version";

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Someone else wrote first (AlreadyExists or a stale `resourceVersion`): reload.
    #[error("the stored certificates changed concurrently")]
    Conflict,
    /// The stored data is incomplete or malformed.
    #[error("stored certificates are unusable: {0}")]
    Invalid(String),
    /// The Secret holds a certificate but no CA: made by hand (`kubectl create secret tls`)
    /// or by another tool. Self-signed mode does not overwrite what it did not write.
    #[error(
        "Secret {0} has tls.crt but neither ca.crt nor ca.key: it was not made by squall's \
         self-signed mode, which leaves it alone. Delete it to let squall issue its own \
         certificates, or serve it with --cert-mode external"
    )]
    Foreign(String),
    /// Reading or writing files failed.
    #[error("certificate directory: {0}")]
    Io(#[from] std::io::Error),
    /// The API request failed.
    #[error("certificate Secret: {0}")]
    Kube(#[from] kube::Error),
}

/// A bundle and the version it was read at (for guarded updates).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The certificates.
    pub bundle: Bundle,
    /// `resourceVersion` (Secret) or the version counter (directory).
    pub version: String,
}

/// A certificate store.
pub enum Store {
    /// A Secret `name` in `namespace`.
    Secret {
        /// Secrets of the operator's namespace.
        api: Box<Api<Secret>>,
        /// `<release>-webhook-tls`.
        name: String,
    },
    /// A directory with one file per key.
    Dir(PathBuf),
}

impl Store {
    /// The current bundle, if one is stored.
    pub async fn load(&self) -> Result<Option<Stored>, StoreError> {
        match self {
            Store::Secret { api, name } => {
                let Some(secret) = api.get_opt(name).await? else {
                    return Ok(None);
                };
                let data = secret.data.unwrap_or_default();
                if !data.contains_key(CA_CRT)
                    && !data.contains_key(CA_KEY)
                    && data.contains_key(TLS_CRT)
                {
                    return Err(StoreError::Foreign(name.clone()));
                }
                // A missing or garbled key reads as empty: the part it belongs to fails to
                // parse and is repaired, and only that part.
                let text = |key: &str| -> Result<String, StoreError> {
                    Ok(data
                        .get(key)
                        .and_then(|bytes| String::from_utf8(bytes.0.clone()).ok())
                        .unwrap_or_default())
                };
                let retire = secret
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(RETIRE_OLD_CA_AFTER))
                    .map(|t| parse_time(t))
                    .transpose()?;
                Ok(Some(Stored {
                    bundle: Bundle {
                        ca_crt: text(CA_CRT)?,
                        ca_key: text(CA_KEY)?,
                        tls_crt: text(TLS_CRT)?,
                        tls_key: text(TLS_KEY)?,
                        retire_old_ca_after: retire,
                    },
                    version: secret.metadata.resource_version.unwrap_or_default(),
                }))
            }
            Store::Dir(dir) => {
                let version = match tokio::fs::read_to_string(dir.join(VERSION_FILE)).await {
                    Ok(v) => v.trim().to_string(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
                let read = |key: &'static str| tokio::fs::read_to_string(dir.join(key));
                let retire = match read(RETIRE_FILE).await {
                    Ok(t) => Some(parse_time(t.trim())?),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(e) => return Err(e.into()),
                };
                // As for the Secret: a missing file reads as empty and its part is repaired.
                let file = |key: &'static str| async move {
                    match read(key).await {
                        Ok(text) => Ok(text),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                        Err(e) => Err(StoreError::from(e)),
                    }
                };
                Ok(Some(Stored {
                    bundle: Bundle {
                        ca_crt: file(CA_CRT).await?,
                        ca_key: file(CA_KEY).await?,
                        tls_crt: file(TLS_CRT).await?,
                        tls_key: file(TLS_KEY).await?,
                        retire_old_ca_after: retire,
                    },
                    version,
                }))
            }
        }
    }

    /// Stores the first bundle; [`StoreError::Conflict`] when one already exists (adopt it).
    pub async fn create(&self, bundle: &Bundle) -> Result<Stored, StoreError> {
        match self {
            Store::Secret { api, name } => {
                let secret = to_secret(name, bundle, None);
                match api.create(&PostParams::default(), &secret).await {
                    Ok(created) => Ok(stored_from(bundle, created)),
                    Err(kube::Error::Api(e)) if e.code == 409 => Err(StoreError::Conflict),
                    Err(e) => Err(e.into()),
                }
            }
            Store::Dir(dir) => {
                if tokio::fs::try_exists(dir.join(VERSION_FILE)).await? {
                    return Err(StoreError::Conflict);
                }
                write_dir(dir, bundle, 1).await
            }
        }
    }

    /// Replaces the bundle read at `version`; [`StoreError::Conflict`] when it changed since.
    pub async fn update(&self, bundle: &Bundle, version: &str) -> Result<Stored, StoreError> {
        match self {
            Store::Secret { api, name } => {
                let secret = to_secret(name, bundle, Some(version.to_string()));
                match api.replace(name, &PostParams::default(), &secret).await {
                    Ok(replaced) => Ok(stored_from(bundle, replaced)),
                    Err(kube::Error::Api(e)) if e.code == 409 => Err(StoreError::Conflict),
                    Err(e) => Err(e.into()),
                }
            }
            Store::Dir(dir) => {
                let current = self.load().await?.map(|s| s.version);
                if current.as_deref() != Some(version) {
                    return Err(StoreError::Conflict);
                }
                let next = version.parse::<u64>().unwrap_or(0) + 1;
                write_dir(dir, bundle, next).await
            }
        }
    }
}

fn to_secret(name: &str, bundle: &Bundle, resource_version: Option<String>) -> Secret {
    let data: BTreeMap<String, ByteString> = [
        (CA_CRT, &bundle.ca_crt),
        (CA_KEY, &bundle.ca_key),
        (TLS_CRT, &bundle.tls_crt),
        (TLS_KEY, &bundle.tls_key),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            resource_version,
            annotations: bundle
                .retire_old_ca_after
                .map(|t| [(RETIRE_OLD_CA_AFTER.to_string(), format_time(t))].into()),
            labels: Some(
                [(
                    "app.kubernetes.io/component".to_string(),
                    "webhook-tls".to_string(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}

fn stored_from(bundle: &Bundle, secret: Secret) -> Stored {
    Stored {
        bundle: bundle.clone(),
        version: secret.metadata.resource_version.unwrap_or_default(),
    }
}

/// Writes every file (each atomically), the version file last. The directory is private to
/// this user (0700, created so, and refused when it is a symlink, another user's, or open to
/// others) and each file is created afresh with mode 0600 (`O_EXCL`, which never follows a
/// symlink), then renamed into place.
async fn write_dir(dir: &Path, bundle: &Bundle, version: u64) -> Result<Stored, StoreError> {
    private_dir(dir)?;
    let write = |name: &str, contents: String| {
        let path = dir.join(name);
        let tmp = dir.join(format!(".{name}.tmp"));
        async move {
            tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                match std::fs::remove_file(&tmp) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&tmp)?;
                file.write_all(contents.as_bytes())?;
                file.sync_all()?;
                std::fs::rename(&tmp, &path)
            })
            .await
            .map_err(std::io::Error::other)?
        }
    };
    write(CA_KEY, bundle.ca_key.clone()).await?;
    write(TLS_KEY, bundle.tls_key.clone()).await?;
    write(CA_CRT, bundle.ca_crt.clone()).await?;
    write(TLS_CRT, bundle.tls_crt.clone()).await?;
    match bundle.retire_old_ca_after {
        Some(t) => write(RETIRE_FILE, format_time(t)).await?,
        None => match tokio::fs::remove_file(dir.join(RETIRE_FILE)).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        },
    }
    write(VERSION_FILE, version.to_string()).await?;
    Ok(Stored {
        bundle: bundle.clone(),
        version: version.to_string(),
    })
}

/// Creates `dir` (and missing parents) with mode 0700, or checks that the existing one is a
/// real directory of this user that nobody else can enter.
fn private_dir(dir: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
            Ok(())
        }
        Err(e) => Err(e.into()),
        Ok(meta) => {
            let refuse = |why: &str| {
                Err(StoreError::Invalid(format!(
                    "certificate directory {}: {why}; choose another --cert-dir",
                    dir.display()
                )))
            };
            if meta.file_type().is_symlink() || !meta.is_dir() {
                return refuse("not a directory (a symlink is not followed)");
            }
            if meta.uid() != current_uid()? {
                return refuse("owned by another user");
            }
            if meta.permissions().mode() & 0o077 != 0 {
                return refuse("open to other users (mode must be 0700)");
            }
            Ok(())
        }
    }
}

/// This process's effective user id: the owner of `/proc/self` (std has no `geteuid`).
fn current_uid() -> Result<u32, StoreError> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self")?.uid())
}

fn format_time(t: OffsetDateTime) -> String {
    t.format(&Rfc3339)
        .expect("RFC 3339 formats every OffsetDateTime")
}

fn parse_time(s: &str) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::parse(s, &Rfc3339)
        .map_err(|e| StoreError::Invalid(format!("{RETIRE_OLD_CA_AFTER} {s:?}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(tag: &str) -> Bundle {
        Bundle {
            ca_crt: format!("ca-{tag}"),
            ca_key: format!("ca-key-{tag}"),
            tls_crt: format!("tls-{tag}"),
            tls_key: format!("tls-key-{tag}"),
            retire_old_ca_after: None,
        }
    }

    #[tokio::test]
    async fn directory_store_creates_once_and_guards_updates() {
        let dir = std::env::temp_dir().join(format!("webhook-certs-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::Dir(dir.clone());
        assert!(store.load().await.unwrap().is_none());

        let first = store.create(&bundle("a")).await.unwrap();
        assert!(matches!(
            store.create(&bundle("b")).await,
            Err(StoreError::Conflict)
        ));
        assert_eq!(store.load().await.unwrap().unwrap(), first);

        let mut next = bundle("c");
        next.retire_old_ca_after =
            Some(OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap());
        let second = store.update(&next, &first.version).await.unwrap();
        assert_ne!(second.version, first.version);
        assert!(matches!(
            store.update(&bundle("d"), &first.version).await,
            Err(StoreError::Conflict)
        ));
        assert_eq!(store.load().await.unwrap().unwrap().bundle, next);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Issue 14 (5): keys are written 0600 into a 0700 directory, and a directory that is a
    /// symlink or open to others is refused rather than written into.
    #[tokio::test]
    async fn the_directory_store_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let base =
            std::env::temp_dir().join(format!("webhook-certs-private-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("nested/certs");
        let store = Store::Dir(dir.clone());
        store.create(&bundle("a")).await.unwrap();
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        for file in [CA_KEY, TLS_KEY, CA_CRT, TLS_CRT, VERSION_FILE] {
            assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
        }

        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let through_link = Store::Dir(link);
        assert!(matches!(
            through_link.update(&bundle("b"), "1").await,
            Err(StoreError::Invalid(m)) if m.contains("symlink")
        ));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(matches!(
            store.update(&bundle("b"), "1").await,
            Err(StoreError::Invalid(m)) if m.contains("open to other users")
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
