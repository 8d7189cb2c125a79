//! The upstream client's protocols, against a TLS server that offers HTTP/2 and HTTP/1.1 as a
//! kube-apiserver does.

use super::*;
use crate::auth::tls::{server_config, ServingCert};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use std::sync::Mutex;

/// A TLS server offering both protocols (ALPN) that answers `{}` and records the protocol of
/// each request; its URL and the CA it is signed by.
async fn recording() -> (String, String, Arc<Mutex<Vec<(String, http::Version)>>>) {
    let cert = ServingCert::self_signed(&["127.0.0.1".to_string()], "upstream").unwrap();
    let tls = tokio_rustls::TlsAcceptor::from(server_config(&cert, None).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (tls, log) = (tls.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(stream) = tls.accept(tcp).await else { return };
                let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                    log.lock().unwrap().push((req.uri().to_string(), req.version()));
                    async { Ok::<_, std::convert::Infallible>(Response::new(body::full(b"{}".to_vec()))) }
                });
                let server = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                let _ = server.serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    (url, cert.ca_pem, seen)
}

#[tokio::test]
async fn kaches_lists_of_whole_collections_ride_http1_and_its_other_calls_http2() {
    let (url, ca_pem, seen) = recording().await;
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap().to_vec()]);
    let up = Upstream::new(&config).unwrap();
    for (path, class) in [("/api/v1/pods", Class::Bulk), ("/api/v1/pods?limit=1", Class::Own), ("/api/v1/nodes", Class::Bulk)] {
        let resp = up.get_in(path, "application/json", class).await.unwrap();
        assert_eq!(resp.status(), 200);
        http_body_util::BodyExt::collect(resp.into_body()).await.unwrap();
    }
    let seen: Vec<(String, http::Version)> = seen.lock().unwrap().clone();
    let paths: Vec<(&str, http::Version)> = seen.iter().map(|(u, v)| (u.trim_start_matches(&url), *v)).collect();
    assert_eq!(
        paths,
        vec![
            ("/api/v1/pods", http::Version::HTTP_11),
            ("/api/v1/pods?limit=1", http::Version::HTTP_2),
            ("/api/v1/nodes", http::Version::HTTP_11)
        ]
    );
}
