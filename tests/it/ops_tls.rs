//! Operations: certificate rotation under load. kache serves a certificate from files
//! (`--tls-cert-file`, `--tls-private-key-file`) and verifies client certificates against
//! `--client-ca-file`; while clients read through it without pause, over new connections
//! and kept-alive ones, the files are replaced in place the way a naive writer does (the
//! certificate, then its key: for a moment they do not match) and the client CA bundle gains
//! a second CA. No request fails; new handshakes present the new certificate and accept
//! client certificates of the new CA, without a restart.

use crate::support::auth::{tls_config, ClientCa, SecureKache, SecureSim, Who};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A serving CA and leaves it signs for 127.0.0.1.
struct ServingCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl ServingCa {
    fn new() -> ServingCa {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "rotation-test-serving-ca");
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = p.self_signed(&key).unwrap();
        ServingCa { pem: cert.pem(), issuer: Issuer::new(p, key) }
    }

    /// (certificate PEM, key PEM, certificate DER).
    fn leaf(&self) -> (String, String, Vec<u8>) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, "kache");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }
}

type Https = Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Full<Bytes>>;

fn client(ca_pem: &str, who: Who<'_>) -> Https {
    let https =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls_config(ca_pem, &who)).https_only().enable_all_versions().build();
    Client::builder(TokioExecutor::new()).build(https)
}

/// One GET; the status, or what went wrong.
async fn get(c: &Https, url: &str) -> Result<u16, String> {
    let req = http::Request::get(url).header("accept", "application/json").body(Full::new(Bytes::new())).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), c.request(req)).await.map_err(|_| "no answer in 30 s".to_string())?;
    let resp = resp.map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await.map_err(|e| format!("body: {e}"))?;
    Ok(status)
}

/// The certificate a fresh handshake is presented.
async fn presented(addr: std::net::SocketAddr, ca_pem: &str) -> Vec<u8> {
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config(ca_pem, &Who::Nobody)));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.expect("handshake");
    tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_without_a_failed_request() {
    let sim = SecureSim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (cert_file, key_file, ca_file) = (dir.path().join("tls.crt"), dir.path().join("tls.key"), dir.path().join("client-ca.crt"));
    let serving = ServingCa::new();
    let (c1, k1, der1) = serving.leaf();
    std::fs::write(&cert_file, &c1).unwrap();
    std::fs::write(&key_file, &k1).unwrap();
    // Client certificates of the simulator's CA are accepted from the start; those of a
    // second CA only once the bundle holds it.
    std::fs::write(&ca_file, &sim.ca.pem).unwrap();
    let second = ClientCa::new();
    let alice_x = sim.ca.issue("alice", &["devs"]);
    let alice_y = second.issue("alice", &["devs"]);
    let (cf, kf, caf) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap(), ca_file.to_str().unwrap());
    let kache = SecureKache::start(&sim, &["--tls-cert-file", cf, "--tls-private-key-file", kf, "--client-ca-file", caf]).await;
    let url = format!("{}/api/v1/namespaces/a/pods?resourceVersion=0", kache.serving.url);
    assert_eq!(presented(kache.serving.addr, &serving.pem).await, der1);

    // Readers: two open a new connection (a new handshake) per request, two keep theirs.
    let (stop, ok, failed) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)), Arc::new(Mutex::new(Vec::<String>::new())));
    let mut readers = Vec::new();
    for fresh in [true, true, false, false] {
        let (stop, ok, failed, url, ca) = (stop.clone(), ok.clone(), failed.clone(), url.clone(), serving.pem.clone());
        let (cert, key) = alice_x.clone();
        readers.push(tokio::spawn(async move {
            let mut kept = client(&ca, Who::Cert(cert.clone(), key.clone()));
            while !stop.load(Ordering::SeqCst) {
                if fresh {
                    kept = client(&ca, Who::Cert(cert.clone(), key.clone()));
                }
                match get(&kept, &url).await {
                    Ok(200) => {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    other => failed.lock().unwrap().push(format!("fresh={fresh}: {other:?}")),
                }
            }
        }));
    }
    let at_least = |n: u64| {
        let ok = ok.clone();
        async move {
            let target = ok.load(Ordering::SeqCst) + n;
            crate::support::eventually(120, 20, || {
                let got = ok.load(Ordering::SeqCst);
                std::future::ready(if got >= target { Ok(()) } else { Err(format!("{got} of {target} reads done")) })
            })
            .await
        }
    };
    at_least(40).await;

    // A client of the second CA is refused before its CA is in the bundle.
    let y = client(&serving.pem, Who::Cert(alice_y.0.clone(), alice_y.1.clone()));
    assert!(get(&y, &url).await.is_err(), "a client certificate of an unknown CA fails the handshake");

    // Rotate in place, as a naive writer does: the certificate, then its key, then the CA bundle.
    let (c2, k2, der2) = serving.leaf();
    std::fs::write(&cert_file, &c2).unwrap();
    std::fs::write(&key_file, &k2).unwrap();
    std::fs::write(&ca_file, format!("{}{}", sim.ca.pem, second.pem)).unwrap();
    crate::support::eventually(30, 50, || async {
        let now = presented(kache.serving.addr, &serving.pem).await;
        let y_ok = get(&client(&serving.pem, Who::Cert(alice_y.0.clone(), alice_y.1.clone())), &url).await;
        if now == der2 && y_ok == Ok(200) {
            Ok(())
        } else {
            Err(format!("new certificate presented: {}, second CA's client: {y_ok:?}", now == der2))
        }
    })
    .await;
    // Reads go on over the new certificate, then the readers stop.
    at_least(40).await;
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.unwrap();
    }
    let failed = failed.lock().unwrap().clone();
    let done = ok.load(Ordering::SeqCst);
    eprintln!("rotation under load: {done} reads, {} failed", failed.len());
    assert!(failed.is_empty(), "{} of {} reads failed: {:?}", failed.len(), done + failed.len() as u64, &failed[..failed.len().min(5)]);
}
