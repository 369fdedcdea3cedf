//! TLS probes of the webhook server and the loopback-only connection check
//! (docs/architecture.md#loopback-only).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

/// Opens a fresh TLS connection to `addr`, verifying the server against `ca_bundle_pem`
/// for `server_name`; returns the serial number (hex) of the certificate it presented.
pub async fn served_serial(
    addr: SocketAddr,
    ca_bundle_pem: &str,
    server_name: &str,
) -> Result<String, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let tcp = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let tls = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
    )
    .await
    .map_err(|_| "handshake timed out".to_string())?
    .map_err(|e| format!("handshake: {e}"))?;
    let (_, session) = tls.get_ref();
    let leaf = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .ok_or("no peer certificate")?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).map_err(|e| e.to_string())?;
    Ok(cert.raw_serial_as_string())
}

/// TCP connections (from `ss -tnp`) of the given processes, and those whose peer is not a
/// loopback address.
pub fn connections_of(pids: &[(String, u32)]) -> (usize, Vec<String>) {
    let out = std::process::Command::new("ss")
        .args(["-tnpH"])
        .output()
        .expect("ss runs");
    assert!(
        out.status.success(),
        "ss failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let mut count = 0;
    let mut violations = Vec::new();
    for line in table.lines() {
        let Some((name, _)) = pids
            .iter()
            .find(|(_, pid)| line.contains(&format!("pid={pid},")))
        else {
            continue;
        };
        count += 1;
        let peer = line.split_whitespace().nth(4).unwrap_or_default();
        let host = peer
            .rsplit_once(':')
            .map_or(peer, |(h, _)| h)
            .trim_matches(['[', ']']);
        let host = host.strip_prefix("::ffff:").unwrap_or(host);
        if !host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()) {
            violations.push(format!("{name}: {line}"));
        }
    }
    (count, violations)
}
