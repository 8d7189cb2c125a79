//! TLS serving for kache and the simulator (rustls with the ring provider): a serving
//! certificate loaded from PEM files or generated at start (a fresh CA and a leaf signed by
//! it, the CA handed to clients in the kubeconfig), optional client certificates verified
//! against a CA bundle, and the identity (CN, O) of a verified client certificate.

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// Generating the self-signed certificate failed.
    #[error("cannot generate a serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// rustls refused the certificate, key or client CA.
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The identity in a verified client certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    /// Subject common name: the user name.
    pub common_name: String,
    /// Subject organizations: the groups.
    pub organizations: Vec<String>,
}

impl CertIdentity {
    /// The subject of a DER certificate; `None` if it does not parse or has no CN. A subject
    /// with several CNs names its last, as Go's `pkix.Name` (what the apiserver reads) keeps
    /// the last of each single-valued attribute.
    pub fn from_der(der: &[u8]) -> Option<CertIdentity> {
        let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
        let subject = cert.subject();
        let common_name = subject.iter_common_name().last()?.as_str().ok()?.to_string();
        let organizations = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_string)).collect();
        (!common_name.is_empty()).then_some(CertIdentity { common_name, organizations })
    }
}

/// A serving certificate chain and key, and the PEM certificate clients should trust.
#[derive(Debug)]
pub struct ServingCert {
    /// Leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// The leaf's private key.
    pub key: PrivateKeyDer<'static>,
    /// PEM of the certificate to put in clients' `certificate-authority-data`: the generated
    /// CA, or the last certificate of a loaded chain.
    pub ca_pem: String,
}

fn file_error(path: &Path, message: impl ToString) -> TlsError {
    TlsError::File { path: path.display().to_string(), message: message.to_string() }
}

/// Every certificate in a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in the file"));
    }
    Ok(certs)
}

fn pem(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

impl ServingCert {
    /// Load a PEM chain (leaf first) and its PEM private key.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<ServingCert, TlsError> {
        let chain = load_certs(cert_file)?;
        let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| file_error(key_file, e))?;
        let ca_pem = chain.last().map(|c| pem(c)).unwrap_or_default();
        Ok(ServingCert { chain, key, ca_pem })
    }

    /// Generate a CA and a serving certificate it signs, valid for `hosts` (DNS names or IP
    /// addresses).
    pub fn self_signed(hosts: &[String], name: &str) -> Result<ServingCert, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, format!("{name}-ca@{}", uuid::Uuid::new_v4().simple()));
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(hosts.to_vec())?;
        leaf.distinguished_name.push(DnType::CommonName, name);
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok(ServingCert {
            chain: vec![cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            ca_pem: ca_cert.pem(),
        })
    }

    /// The hosts a self-signed certificate for `listen` should name: localhost, the loopback
    /// addresses, and the listen address itself unless it is unspecified.
    pub fn hosts_for(listen: &str) -> Vec<String> {
        let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "::1"].iter().map(|s| s.to_string()).collect();
        if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
            let ip = addr.ip().to_string();
            if !addr.ip().is_unspecified() && !hosts.contains(&ip) {
                hosts.push(ip);
            }
        }
        hosts
    }
}

/// A rustls server config for `cert`, offering HTTP/2 and HTTP/1.1; with `client_ca`, client
/// certificates are requested and verified against it, but not required (token clients
/// present none).
pub fn server_config(cert: &ServingCert, client_ca: Option<&[CertificateDer<'static>]>) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match client_ca {
        Some(cas) => {
            let mut roots = RootCertStore::empty();
            for c in cas {
                roots.add(c.clone()).map_err(|e| TlsError::Config(format!("client CA: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(format!("client CA: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(cert.chain.clone(), cert.key.clone_key()).map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_serves_and_identities_parse() {
        crate::serve::upstream::install_crypto_provider();
        let c = ServingCert::self_signed(&ServingCert::hosts_for("127.0.0.1:0"), "kache").unwrap();
        assert!(c.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        server_config(&c, None).unwrap();
        let ca = CertificateDer::pem_slice_iter(c.ca_pem.as_bytes()).collect::<Result<Vec<_>, _>>().unwrap();
        server_config(&c, Some(&ca)).unwrap();
        let id = CertIdentity::from_der(&c.chain[0]).unwrap();
        assert_eq!(id, CertIdentity { common_name: "kache".into(), organizations: vec![] });
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "alice");
        p.distinguished_name.push(DnType::OrganizationName, "readers");
        let k = KeyPair::generate().unwrap();
        let der = p.self_signed(&k).unwrap();
        let id = CertIdentity::from_der(der.der()).unwrap();
        assert_eq!((id.common_name.as_str(), id.organizations), ("alice", vec!["readers".to_string()]));
        // Two CNs: the apiserver (Go's pkix.Name) takes the last.
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "system:anonymous-looking");
        p.distinguished_name.push(DnType::OrganizationName, "g1");
        p.distinguished_name.push(DnType::CustomDnType(vec![2, 5, 4, 3]), "mallory");
        p.distinguished_name.push(DnType::CustomDnType(vec![2, 5, 4, 10]), "g2");
        let der = p.self_signed(&k).unwrap();
        let id = CertIdentity::from_der(der.der()).unwrap();
        assert_eq!((id.common_name.as_str(), id.organizations), ("mallory", vec!["g1".to_string(), "g2".to_string()]));
    }
}
