use super::*;
use crate::serve::respond::respond;
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_ENCODING, USER_AGENT};
use http::StatusCode;
use http_body_util::BodyExt;
use std::io::{Read, Write};

/// A kept document goes out as the upstream sent it: one gzip-encoded and larger than
/// the compression threshold, to a client that accepts gzip and asks for indented output,
/// is neither compressed again nor indented.
#[tokio::test]
async fn a_kept_document_is_sent_as_the_upstream_sent_it() {
    // JSON that stays larger than the threshold gzipped.
    let mut json = String::from("{\"paths\":{");
    let mut x: u64 = 1;
    for i in 0..40_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        json += &format!("\"/p{i}\":\"{x:016x}\",");
    }
    json += "\"/\":\"\"}}";
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(1));
    enc.write_all(json.as_bytes()).unwrap();
    let gz = bytes::Bytes::from(enc.finish().unwrap());
    assert!(gz.len() as u64 > compress::THRESHOLD, "{}", gz.len());

    let req = Request::get("/openapi/v2")
        .header(ACCEPT, "application/json")
        .header(ACCEPT_ENCODING, "gzip")
        .header(USER_AGENT, "curl/8.5.0")
        .body(())
        .unwrap();
    let asked = Asked::of(&req);
    assert!(asked.pretty && asked.gzip);
    let key = DocKey::of(&req).unwrap();
    let kept = Arc::new(LastDiscovery::default());
    let mut upstream = respond(StatusCode::OK, "application/json", crate::body::full(gz.clone()));
    upstream.headers_mut().insert(CONTENT_ENCODING, http::HeaderValue::from_static("gzip"));
    let _ = kept.keep(key.clone(), upstream).into_body().collect().await.unwrap();

    let (sent, bytes) = shaped(kept.answer(&key).expect("kept"), Source::Kept, &asked, &compress::Encodes::new(4));
    assert_eq!(bytes, Some(gz.len() as u64));
    assert_eq!(sent.headers().get_all(CONTENT_ENCODING).iter().count(), 1);
    assert_eq!(sent.headers().get(CONTENT_ENCODING).unwrap(), "gzip");
    let got = sent.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(got, gz, "the upstream's bytes");
    let mut decoded = String::new();
    flate2::read::GzDecoder::new(&got[..]).read_to_string(&mut decoded).unwrap();
    assert_eq!(decoded, json, "decoded once, the document");
}
