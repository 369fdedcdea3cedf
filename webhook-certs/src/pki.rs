//! Certificates: a CA, serving certificates it signs, and what is read back from stored PEM.

use std::net::IpAddr;
use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

const CA_CRT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const TLS_CRT: &str = "tls.crt";
const TLS_KEY: &str = "tls.key";

/// Certificates are backdated by this much so peers with slow clocks accept them at once.
pub const CLOCK_SKEW_BACKDATE: Duration = Duration::from_secs(3600);

/// Errors building or reading certificates.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// rcgen could not build or sign a certificate.
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Stored PEM is not a certificate squall can use.
    #[error("reading {what}: {detail}")]
    Parse {
        /// Which part of the bundle.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// When a certificate is valid, and when it is renewed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// When the certificate becomes valid: issue time backdated for clock skew.
    pub not_before: OffsetDateTime,
    /// When the certificate expires.
    pub not_after: OffsetDateTime,
}

impl Validity {
    /// Validity of a certificate issued at `now` for `lifetime` (counted from `now`, not
    /// from the backdated `notBefore`).
    pub fn issued_at(now: OffsetDateTime, lifetime: Duration) -> Self {
        Self {
            not_before: now - CLOCK_SKEW_BACKDATE,
            not_after: now + lifetime,
        }
    }

    /// When the certificate was issued (`notBefore` without the backdate).
    pub fn issued(&self) -> OffsetDateTime {
        self.not_before + CLOCK_SKEW_BACKDATE
    }

    /// When to renew: at 2/3 of the lifetime between issue and expiry.
    pub fn renew_at(&self) -> OffsetDateTime {
        let issued = self.issued();
        issued + (self.not_after - issued) * 2 / 3
    }

    /// Whether the certificate is past its expiry at `now`.
    pub fn expired(&self, now: OffsetDateTime) -> bool {
        now >= self.not_after
    }
}

/// The stored form (docs/certificates.md): the Secret keys `ca.crt` (at most two CA certificates,
/// oldest first), `ca.key` (key of the newest CA), `tls.crt`, `tls.key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// PEM of the trusted CAs, oldest first; the value injected as `caBundle`.
    pub ca_crt: String,
    /// PEM private key of the newest CA.
    pub ca_key: String,
    /// PEM serving certificate.
    pub tls_crt: String,
    /// PEM private key of the serving certificate.
    pub tls_key: String,
    /// During a CA rotation: the old CA may be dropped from `ca.crt` after this time (the
    /// expiry of the last serving certificate it signed).
    pub retire_old_ca_after: Option<OffsetDateTime>,
}

/// One CA certificate of the bundle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaInfo {
    /// PEM of this certificate alone.
    pub pem: String,
    /// Subject, e.g. `CN=squall-webhook-ca-1800000000`.
    pub subject: String,
    /// Validity.
    pub validity: Validity,
}

/// The serving certificate, as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServingInfo {
    /// Subject of the CA that signed it.
    pub issuer: String,
    /// Serial number, hex.
    pub serial: String,
    /// Validity.
    pub validity: Validity,
    /// DNS and IP subject alternative names.
    pub sans: Vec<String>,
}

/// A bundle with its certificates read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// The stored bundle.
    pub bundle: Bundle,
    /// Its CAs, oldest first.
    pub cas: Vec<CaInfo>,
    /// Its serving certificate.
    pub serving: ServingInfo,
}

impl Parsed {
    /// Reads the certificates of a bundle and checks that its parts fit together: the CA key
    /// is the newest CA's, the serving key is the serving certificate's, and the serving
    /// certificate is signed by one of the CAs. The error names the first part that does
    /// not ([`Error::is_serving_part`] tells whether the CAs themselves are sound).
    pub fn from_bundle(bundle: Bundle) -> Result<Self, Error> {
        Self::read(bundle, true)
    }

    /// Reads certificates mounted from elsewhere (`external` mode: no CA key, and `ca.crt`
    /// may be absent): the serving key must be the serving certificate's; who signed it is
    /// for the clients' `caBundle` to judge.
    pub fn from_mounted(bundle: Bundle) -> Result<Self, Error> {
        Self::read(bundle, false)
    }

    fn read(bundle: Bundle, own_ca: bool) -> Result<Self, Error> {
        let (cas, ca_ders) = if own_ca {
            read_cas(&bundle)?
        } else {
            read_ca_certs(&bundle)?
        };
        let der = decode(&bundle.tls_crt, TLS_CRT)?;
        let (_, cert) = X509Certificate::from_der(&der).map_err(|e| parse_error(TLS_CRT, e))?;
        let serving = ServingInfo {
            issuer: cert.issuer().to_string(),
            serial: cert.raw_serial_as_string(),
            validity: validity_of(&cert),
            sans: sans_of(&cert),
        };
        key_matches(&bundle.tls_key, &cert, TLS_KEY, "tls.crt")?;
        let signed = !own_ca
            || ca_ders.iter().any(|der| {
                X509Certificate::from_der(der).is_ok_and(|(_, ca)| {
                    ca.subject() == cert.issuer()
                        && cert.verify_signature(Some(ca.public_key())).is_ok()
                })
            });
        if !signed {
            return Err(parse_error(TLS_CRT, "is not signed by a CA in ca.crt"));
        }
        Ok(Self {
            bundle,
            cas,
            serving,
        })
    }

    /// The newest CA (the one whose key is stored).
    pub fn newest_ca(&self) -> &CaInfo {
        self.cas.last().expect("a parsed bundle has a CA")
    }
}

/// The CAs of a bundle, checked on their own (1 or 2 certificates, the key the newest's),
/// with their DER: what a broken serving certificate is re-issued from.
pub fn read_cas(bundle: &Bundle) -> Result<(Vec<CaInfo>, Vec<Vec<u8>>), Error> {
    let (cas, ders) = read_ca_certs(bundle)?;
    let (_, newest) = X509Certificate::from_der(ders.last().expect("one CA"))
        .map_err(|e| parse_error(CA_CRT, e))?;
    key_matches(&bundle.ca_key, &newest, CA_KEY, "the newest CA")?;
    Ok((cas, ders))
}

/// The 1 or 2 CA certificates of `ca.crt`, with their DER.
fn read_ca_certs(bundle: &Bundle) -> Result<(Vec<CaInfo>, Vec<Vec<u8>>), Error> {
    let mut cas = Vec::new();
    let mut ders = Vec::new();
    for pem in pem_blocks(&bundle.ca_crt) {
        let der = decode(&pem, CA_CRT)?;
        let (_, cert) = X509Certificate::from_der(&der).map_err(|e| parse_error(CA_CRT, e))?;
        cas.push(CaInfo {
            subject: cert.subject().to_string(),
            validity: validity_of(&cert),
            pem,
        });
        ders.push(der);
    }
    if cas.is_empty() || cas.len() > 2 {
        return Err(Error::Parse {
            what: CA_CRT,
            detail: format!("holds {} certificates; expected 1 or 2", cas.len()),
        });
    }
    Ok((cas, ders))
}

/// Whether `key_pem` is the private key of `cert`.
fn key_matches(
    key_pem: &str,
    cert: &X509Certificate<'_>,
    what: &'static str,
    of: &str,
) -> Result<(), Error> {
    let key = KeyPair::from_pem(key_pem).map_err(|e| parse_error(what, e))?;
    if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
        return Err(parse_error(what, format!("is not the key of {of}")));
    }
    Ok(())
}

impl Error {
    /// Whether the problem lies in the serving certificate or its key only — the CAs are
    /// sound, so only the serving certificate needs re-issuing (`caBundle` stays).
    pub fn is_serving_part(&self) -> bool {
        matches!(self, Error::Parse { what, .. } if *what == TLS_CRT || *what == TLS_KEY)
    }
}

/// A SAN in one spelling: IP addresses as Rust formats them (`FE80::1` → `fe80::1`), DNS
/// names in lowercase without a trailing dot — so a name given differently from how it reads
/// back from a certificate never looks like a change.
pub fn canonical_san(san: &str) -> String {
    match san.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => san.trim_end_matches('.').to_ascii_lowercase(),
    }
}

/// A new CA, valid from `now` for `lifetime`: `(certificate PEM, key PEM)`. The subject
/// names the issue time, so two CAs of a rotation are told apart.
pub fn new_ca(now: OffsetDateTime, lifetime: Duration) -> Result<(String, String), Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name = ca_name(now);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let validity = Validity::issued_at(now, lifetime);
    params.not_before = validity.not_before;
    params.not_after = validity.not_after;
    params.serial_number = Some(serial(now));
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A serving certificate for `sans` (DNS names or IP addresses), signed by the CA whose
/// certificate and key are given: `(certificate PEM, key PEM)`.
pub fn issue_serving(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    sans: &[String],
    now: OffsetDateTime,
    lifetime: Duration,
) -> Result<(String, String), Error> {
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| parse_error("ca.key", e))?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        sans.first().map_or("squall-webhook", String::as_str),
    );
    params.distinguished_name = name;
    let mut canonical: Vec<String> = sans.iter().map(|s| canonical_san(s)).collect();
    canonical.dedup();
    params.subject_alt_names = canonical
        .iter()
        .map(|san| match san.parse::<IpAddr>() {
            Ok(ip) => Ok(SanType::IpAddress(ip)),
            Err(_) => san.clone().try_into().map(SanType::DnsName),
        })
        .collect::<Result<_, _>>()?;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let validity = Validity::issued_at(now, lifetime);
    params.not_before = validity.not_before;
    params.not_after = validity.not_after;
    params.serial_number = Some(serial(now));
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn ca_name(now: OffsetDateTime) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        format!("squall-webhook-ca-{}", now.unix_timestamp_nanos()),
    );
    name
}

/// A serial unique per issue: the issue time in nanoseconds plus a per-process counter.
fn serial(now: OffsetDateTime) -> SerialNumber {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = vec![0x01]; // positive, never starts with 0
    bytes.extend_from_slice(&now.unix_timestamp_nanos().to_be_bytes()[4..]);
    bytes.extend_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_be_bytes()[4..]);
    SerialNumber::from_slice(&bytes)
}

fn validity_of(cert: &X509Certificate<'_>) -> Validity {
    Validity {
        not_before: cert.validity().not_before.to_datetime(),
        not_after: cert.validity().not_after.to_datetime(),
    }
}

fn sans_of(cert: &X509Certificate<'_>) -> Vec<String> {
    cert.extensions()
        .iter()
        .filter_map(|ext| match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => Some(&san.general_names),
            _ => None,
        })
        .flatten()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            GeneralName::IPAddress(bytes) => match bytes.len() {
                4 => Some(IpAddr::from(<[u8; 4]>::try_from(*bytes).ok()?).to_string()),
                16 => Some(IpAddr::from(<[u8; 16]>::try_from(*bytes).ok()?).to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The PEM blocks of a concatenation of PEM certificates.
pub fn pem_blocks(pem: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    pem.split_inclusive(END)
        .filter(|block| block.contains(END))
        .map(|block| format!("{}\n", block.trim()))
        .collect()
}

fn decode(pem: &str, what: &'static str) -> Result<Vec<u8>, Error> {
    let (_, parsed) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| parse_error(what, e))?;
    Ok(parsed.contents)
}

fn parse_error(what: &'static str, detail: impl std::fmt::Display) -> Error {
    Error::Parse {
        what,
        detail: detail.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    #[test]
    fn renews_at_two_thirds_of_the_lifetime_not_counting_the_backdate() {
        let v = Validity::issued_at(now(), Duration::from_secs(300));
        assert_eq!(v.not_before, now() - time::Duration::hours(1));
        assert_eq!(v.not_after, now() + time::Duration::seconds(300));
        assert_eq!(v.renew_at(), now() + time::Duration::seconds(200));
    }

    #[test]
    fn issued_certificates_read_back() {
        let (ca_crt, ca_key) = new_ca(now(), Duration::from_secs(3600)).unwrap();
        let sans = vec![
            "squall.squall-system.svc".to_string(),
            "127.0.0.1".to_string(),
        ];
        let (tls_crt, tls_key) =
            issue_serving(&ca_crt, &ca_key, &sans, now(), Duration::from_secs(60)).unwrap();
        let parsed = Parsed::from_bundle(Bundle {
            ca_crt,
            ca_key,
            tls_crt,
            tls_key,
            retire_old_ca_after: None,
        })
        .unwrap();
        assert_eq!(parsed.cas.len(), 1);
        assert_eq!(parsed.serving.issuer, parsed.cas[0].subject);
        assert_eq!(parsed.serving.sans, sans);
        assert_eq!(
            parsed.serving.validity,
            Validity::issued_at(now(), Duration::from_secs(60))
        );
        assert_eq!(
            parsed.cas[0].validity.not_before,
            now() - time::Duration::hours(1),
            "backdated for clock skew"
        );
    }

    #[test]
    fn serials_are_distinct() {
        let (ca_crt, ca_key) = new_ca(now(), Duration::from_secs(3600)).unwrap();
        let serial = || {
            let (crt, key) = issue_serving(
                &ca_crt,
                &ca_key,
                &["a".into()],
                now(),
                Duration::from_secs(60),
            )
            .unwrap();
            Parsed::from_bundle(Bundle {
                ca_crt: ca_crt.clone(),
                ca_key: ca_key.clone(),
                tls_crt: crt,
                tls_key: key,
                retire_old_ca_after: None,
            })
            .unwrap()
            .serving
            .serial
        };
        assert_ne!(serial(), serial());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let bundle = Bundle {
            ca_crt: "not a certificate".into(),
            ca_key: String::new(),
            tls_crt: String::new(),
            tls_key: String::new(),
            retire_old_ca_after: None,
        };
        assert!(matches!(
            Parsed::from_bundle(bundle),
            Err(Error::Parse { what: "ca.crt", .. })
        ));
    }

    fn issued(ca: &(String, String)) -> (String, String) {
        issue_serving(&ca.0, &ca.1, &["a".into()], now(), Duration::from_secs(60)).unwrap()
    }

    /// Issue 14 (5): parts that do not fit together are found, and told apart by where the
    /// problem lies — the serving part (re-issued alone) or the CA part.
    #[test]
    fn mismatched_parts_are_found_and_told_apart() {
        let ca = new_ca(now(), Duration::from_secs(3600)).unwrap();
        let other_ca = new_ca(now(), Duration::from_secs(3600)).unwrap();
        let (tls_crt, tls_key) = issued(&ca);
        let good = Bundle {
            ca_crt: ca.0.clone(),
            ca_key: ca.1.clone(),
            tls_crt: tls_crt.clone(),
            tls_key: tls_key.clone(),
            retire_old_ca_after: None,
        };
        assert!(Parsed::from_bundle(good.clone()).is_ok());
        let serving_problems = [
            Bundle {
                tls_key: issued(&ca).1,
                ..good.clone()
            },
            Bundle {
                tls_crt: issued(&other_ca).0,
                tls_key: String::new(),
                ..good.clone()
            },
            {
                let (crt, key) = issued(&other_ca);
                Bundle {
                    tls_crt: crt,
                    tls_key: key,
                    ..good.clone()
                }
            },
            Bundle {
                tls_crt: "-----BEGIN CERTIFICATE-----\ngarbled\n-----END CERTIFICATE-----\n".into(),
                ..good.clone()
            },
            Bundle {
                tls_crt: String::new(),
                ..good.clone()
            },
        ];
        for (i, bundle) in serving_problems.into_iter().enumerate() {
            let error = Parsed::from_bundle(bundle).unwrap_err();
            assert!(error.is_serving_part(), "case {i}: {error}");
            assert!(read_cas(&good).is_ok());
        }
        for (i, bundle) in [
            Bundle {
                ca_key: other_ca.1.clone(),
                ..good.clone()
            },
            Bundle {
                ca_crt: String::new(),
                ..good.clone()
            },
            Bundle {
                ca_key: String::new(),
                ..good
            },
        ]
        .into_iter()
        .enumerate()
        {
            let error = Parsed::from_bundle(bundle).unwrap_err();
            assert!(!error.is_serving_part(), "case {i}: {error}");
        }
    }
}
