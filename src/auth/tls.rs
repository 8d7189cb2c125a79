//! TLS serving for kache and the simulator (rustls with the ring provider): a serving
//! certificate loaded from PEM files or generated at start (a fresh CA and a leaf signed by
//! it, the CA handed to clients in the kubeconfig), optional client certificates verified
//! against a CA bundle, the identity (CN, O) of a verified client certificate, the
//! apiserver's `--tls-min-version` and `--tls-cipher-suites` (Go's names), and [`Reloading`]:
//! the files read again when they change (cert-manager rotates them in place), each new
//! connection handed the configuration built from the last complete, consistent set.

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server configuration each new connection is handed; swapped whole when the
/// certificate files change (connections already open keep theirs).
pub type TlsConfig = Arc<arc_swap::ArcSwap<ServerConfig>>;

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

/// TLS versions and cipher suites served, as the apiserver's `--tls-min-version` and
/// `--tls-cipher-suites` choose them. The default is Go's: TLS 1.2 and 1.3, every suite
/// kache implements.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// TLS 1.3 only (`VersionTLS13`); otherwise 1.2 and 1.3.
    pub tls13_only: bool,
    /// The TLS 1.2 suites allowed; empty: all of them. TLS 1.3 suites are not configurable
    /// (as in Go and so the apiserver: their names are accepted and change nothing).
    pub tls12_suites: Vec<SupportedCipherSuite>,
    /// Whether `--tls-cipher-suites` was given (and so `tls12_suites` is the whole list).
    pub suites_given: bool,
}

/// The suites Go's crypto/tls implements and the apiserver accepts, that rustls does not
/// (CBC, RC4, 3DES, static RSA key exchange): refused by name rather than "unknown".
const GO_ONLY_SUITES: &[&str] = &[
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
];

/// Go's names of the TLS 1.3 suites (rustls calls them `TLS13_...`).
const TLS13_SUITES: &[&str] = &["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"];

/// The TLS 1.2 suites kache serves, by Go's names (which are the IANA names), with the
/// legacy short ChaCha names the apiserver also accepts.
fn tls12_suite(name: &str) -> Option<SupportedCipherSuite> {
    use rustls::crypto::ring::cipher_suite as cs;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

impl Policy {
    /// The policy of `--tls-min-version` (`VersionTLS12`, `VersionTLS13`; empty: 1.2) and
    /// `--tls-cipher-suites` (Go's names). Err: (the flag, what is wrong).
    pub fn parse(min_version: &str, suites: &[String]) -> Result<Policy, (&'static str, String)> {
        let tls13_only = match min_version {
            "" | "VersionTLS12" => false,
            "VersionTLS13" => true,
            "VersionTLS10" | "VersionTLS11" => {
                return Err(("--tls-min-version", "kache serves TLS 1.2 and 1.3 only (rustls implements no older version)".into()))
            }
            _ => return Err(("--tls-min-version", "unknown TLS version: one of VersionTLS12, VersionTLS13".into())),
        };
        let mut tls12_suites = Vec::new();
        for name in suites.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            if let Some(s) = tls12_suite(name) {
                tls12_suites.push(s);
            } else if TLS13_SUITES.contains(&name) {
                // Not configurable, as in Go.
            } else if GO_ONLY_SUITES.contains(&name) {
                return Err(("--tls-cipher-suites", format!("{name} is not implemented by kache (rustls): {}", Self::supported())));
            } else {
                return Err(("--tls-cipher-suites", format!("Cipher suite {name} not supported or doesn't exist: {}", Self::supported())));
            }
        }
        let suites_given = suites.iter().any(|s| !s.trim().is_empty());
        Ok(Policy { tls13_only, tls12_suites, suites_given })
    }

    fn supported() -> String {
        let names = [
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ];
        format!("supported: {} (and the TLS 1.3 suites, which are always on)", names.join(", "))
    }

    /// The ring provider restricted to this policy's suites, and the versions served.
    fn provider(&self) -> (rustls::crypto::CryptoProvider, Vec<&'static SupportedProtocolVersion>) {
        let mut provider = rustls::crypto::ring::default_provider();
        let given = &self.tls12_suites;
        provider.cipher_suites.retain(|s| match s {
            SupportedCipherSuite::Tls13(_) => true,
            SupportedCipherSuite::Tls12(_) => !self.suites_given || given.iter().any(|g| g.suite() == s.suite()),
        });
        // A list naming no TLS 1.2 suite leaves TLS 1.2 nothing to offer, as in Go.
        let tls12 = !self.tls13_only && provider.cipher_suites.iter().any(|s| matches!(s, SupportedCipherSuite::Tls12(_)));
        let versions = if tls12 { vec![&rustls::version::TLS13, &rustls::version::TLS12] } else { vec![&rustls::version::TLS13] };
        (provider, versions)
    }
}

/// A rustls server config for `cert`, offering HTTP/2 and HTTP/1.1; with `client_ca`, client
/// certificates are requested and verified against it, but not required (token clients
/// present none). Used by the simulator (kache serves through [`Reloading`]).
#[cfg_attr(not(feature = "sim"), allow(dead_code))]
pub fn server_config(cert: &ServingCert, client_ca: Option<&[CertificateDer<'static>]>) -> Result<Arc<ServerConfig>, TlsError> {
    server_config_with(cert, client_ca, &Policy::default())
}

/// [`server_config`] with the versions and suites of `policy`.
pub fn server_config_with(
    cert: &ServingCert,
    client_ca: Option<&[CertificateDer<'static>]>,
    policy: &Policy,
) -> Result<Arc<ServerConfig>, TlsError> {
    let (provider, versions) = policy.provider();
    let provider = Arc::new(provider);
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
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

/// The files a [`Reloading`] configuration is built from.
#[derive(Debug, Clone, Default)]
pub struct Files {
    /// `--tls-cert-file` and `--tls-private-key-file`; `None`: a generated certificate.
    pub cert_key: Option<(PathBuf, PathBuf)>,
    /// `--client-ca-file`.
    pub client_ca: Option<PathBuf>,
}

/// The bytes of every file, as last read.
type Contents = Vec<Vec<u8>>;

/// A server configuration rebuilt when its certificate, key or client CA files change, as
/// the apiserver's dynamic serving and client-CA content does: cert-manager and the kubelet
/// replace a Secret's files in place. A set of files that does not load (a key that does
/// not match its certificate because only one was replaced yet, a half-written file, a
/// file missing for a moment) is skipped, and the last good configuration stays in use
/// until a later check finds a consistent set.
pub struct Reloading {
    files: Files,
    /// The certificate used when `files.cert_key` is `None`.
    generated: Option<ServingCert>,
    policy: Policy,
    current: TlsConfig,
    seen: Mutex<Contents>,
}

impl Reloading {
    /// Load `files` (or serve `generated`) with `policy`. Fails as start-up does on a file
    /// that cannot be used.
    pub fn new(files: Files, generated: Option<ServingCert>, policy: Policy) -> Result<Arc<Reloading>, TlsError> {
        let contents = Self::read(&files).map_err(|(path, e)| file_error(&path, e))?;
        let config = Self::build(&files, generated.as_ref(), &policy)?;
        Ok(Arc::new(Reloading { files, generated, policy, current: Arc::new(arc_swap::ArcSwap::new(config)), seen: Mutex::new(contents) }))
    }

    /// What new connections are handed.
    pub fn config(&self) -> TlsConfig {
        self.current.clone()
    }

    fn read(files: &Files) -> Result<Contents, (PathBuf, std::io::Error)> {
        let paths = files.cert_key.iter().flat_map(|(c, k)| [c, k]).chain(files.client_ca.iter());
        paths.map(|p| std::fs::read(p).map_err(|e| (p.clone(), e))).collect()
    }

    fn build(files: &Files, generated: Option<&ServingCert>, policy: &Policy) -> Result<Arc<ServerConfig>, TlsError> {
        let loaded;
        let cert = match (&files.cert_key, generated) {
            (Some((cert, key)), _) => {
                loaded = ServingCert::load(cert, key)?;
                &loaded
            }
            (None, Some(g)) => g,
            (None, None) => return Err(TlsError::Config("no serving certificate".into())),
        };
        let client_ca = files.client_ca.as_deref().map(load_certs).transpose()?;
        server_config_with(cert, client_ca.as_deref(), policy)
    }

    /// Read the files again; when they changed and load, hand new connections the new
    /// configuration. Ok(true) when it was swapped; Err when they changed but do not load
    /// (the last good configuration stays).
    pub fn check(&self) -> Result<bool, TlsError> {
        let contents = Self::read(&self.files).map_err(|(path, e)| file_error(&path, e))?;
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == contents {
            return Ok(false);
        }
        let config = Self::build(&self.files, self.generated.as_ref(), &self.policy)?;
        // Built from what was read just before: a file replaced in between is read again
        // (and found different) at the next check.
        self.current.store(config);
        *seen = contents;
        Ok(true)
    }

    /// Check the files every `every` for as long as the process runs; log each reload, and
    /// a set of files that does not load once until it changes again.
    pub fn watch(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut failing: Option<String> = None;
            loop {
                tick.tick().await;
                let files = this.files.clone();
                let me = this.clone();
                let result = tokio::task::spawn_blocking(move || me.check()).await;
                match result {
                    Ok(Ok(true)) => {
                        failing = None;
                        tracing::info!(cert = ?files.cert_key.as_ref().map(|c| c.0.display().to_string()), client_ca = ?files.client_ca.as_ref().map(|p| p.display().to_string()), "TLS files changed: new connections get the new certificates");
                    }
                    Ok(Ok(false)) => failing = None,
                    Ok(Err(e)) => {
                        let why = e.to_string();
                        if failing.as_deref() != Some(why.as_str()) {
                            tracing::warn!(error = %why, "TLS files changed but do not load (yet): still serving the previous ones");
                            failing = Some(why);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "TLS file check failed"),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_serves_and_identities_parse() {
        crate::upstream::install_crypto_provider();
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

    /// A leaf `issuer` signs for 127.0.0.1: (certificate PEM, key PEM).
    fn issued(issuer: &Issuer<'static, KeyPair>) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        leaf.distinguished_name.push(DnType::CommonName, "kache");
        let cert = leaf.signed_by(&key, issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(p, key))
    }

    #[test]
    fn reloads_a_consistent_set_and_keeps_the_last_good_one_meanwhile() {
        crate::upstream::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, client_ca) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("ca.crt"));
        let (ca_pem, issuer) = ca("serving-ca");
        let (c1, k1) = issued(&issuer);
        std::fs::write(&cert, &c1).unwrap();
        std::fs::write(&key, &k1).unwrap();
        std::fs::write(&client_ca, &ca_pem).unwrap();
        let files = Files { cert_key: Some((cert.clone(), key.clone())), client_ca: Some(client_ca.clone()) };
        let r = Reloading::new(files, None, Policy::default()).unwrap();
        let first = r.config().load_full();
        assert!(!r.check().unwrap(), "unchanged files: nothing to do");
        assert!(Arc::ptr_eq(&first, &r.config().load_full()));

        // The certificate is replaced before its key: the pair does not match yet.
        let (c2, k2) = issued(&issuer);
        std::fs::write(&cert, &c2).unwrap();
        assert!(r.check().is_err(), "a certificate without its key does not load");
        assert!(Arc::ptr_eq(&first, &r.config().load_full()), "the last good configuration stays");
        // Half a key file does not load either.
        std::fs::write(&key, &k2[..k2.len() / 2]).unwrap();
        assert!(r.check().is_err());
        assert!(Arc::ptr_eq(&first, &r.config().load_full()));
        std::fs::write(&key, &k2).unwrap();
        assert!(r.check().unwrap(), "the new pair loads");
        let second = r.config().load_full();
        assert!(!Arc::ptr_eq(&first, &second));
        // A client CA bundle that gains a CA is a change too; an empty one does not load.
        let (other_ca, _) = ca("other-client-ca");
        std::fs::write(&client_ca, format!("{ca_pem}{other_ca}")).unwrap();
        assert!(r.check().unwrap());
        std::fs::write(&client_ca, "").unwrap();
        assert!(r.check().is_err());
        std::fs::remove_file(&client_ca).unwrap();
        assert!(r.check().is_err(), "a file missing for a moment keeps the last good configuration");
        assert!(!Arc::ptr_eq(&second, &r.config().load_full()));
    }

    #[test]
    fn tls_versions_and_suites_by_the_apiservers_names() {
        let p = Policy::parse("VersionTLS12", &[]).unwrap();
        assert!(!p.tls13_only && !p.suites_given);
        let (provider, versions) = p.provider();
        assert_eq!(versions.len(), 2);
        assert_eq!(provider.cipher_suites.len(), rustls::crypto::ring::default_provider().cipher_suites.len());

        let p = Policy::parse("VersionTLS13", &[]).unwrap();
        assert_eq!(p.provider().1.len(), 1, "TLS 1.3 only");

        let names = ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_string(), "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305".to_string()];
        let p = Policy::parse("", &names).unwrap();
        let (provider, versions) = p.provider();
        assert_eq!(versions.len(), 2);
        let tls12: Vec<_> =
            provider.cipher_suites.iter().filter(|s| matches!(s, SupportedCipherSuite::Tls12(_))).map(|s| s.suite()).collect();
        assert!(tls12.contains(&rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256));
        assert!(tls12.contains(&rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256));
        assert_eq!(tls12.len(), 2);
        // TLS 1.3 names are accepted and change nothing (as in Go); naming no TLS 1.2 suite
        // leaves TLS 1.2 nothing to offer.
        let p = Policy::parse("VersionTLS12", &["TLS_AES_128_GCM_SHA256".to_string()]).unwrap();
        assert_eq!(p.provider().1.len(), 1);

        for (min, suites, flag) in [
            ("VersionTLS10", vec![], "--tls-min-version"),
            ("TLS12", vec![], "--tls-min-version"),
            ("", vec!["TLS_RSA_WITH_AES_128_CBC_SHA".to_string()], "--tls-cipher-suites"),
            ("", vec!["TLS_FOO".to_string()], "--tls-cipher-suites"),
        ] {
            let err = Policy::parse(min, &suites).unwrap_err();
            assert_eq!(err.0, flag, "{min} {suites:?}: {}", err.1);
        }
        // Served with the policy: a config builds for each.
        crate::upstream::install_crypto_provider();
        let c = ServingCert::self_signed(&ServingCert::hosts_for("127.0.0.1:0"), "kache").unwrap();
        for p in [Policy::parse("VersionTLS13", &[]).unwrap(), Policy::parse("", &names).unwrap()] {
            server_config_with(&c, None, &p).unwrap();
        }
    }
}
