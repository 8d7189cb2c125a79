//! Test support: the one loader of the repository's `testdata/` tree, captures of a real
//! kube-apiserver v1.36.2 (see `testdata/README.md`):
//! - `golden/`: requests and answers in JSON and protobuf (`NAME.req`, `.meta`, `.body`);
//! - `fidelity/`: answers to odd queries (`tools/capture_fidelity.py`): request, status,
//!   Content-Type, body bytes, the expected values of the fidelity tests;
//! - `crd/`: custom resources' CRDs, objects, Tables and metadata views
//!   (`tools/capture_crd_fixtures.sh`);
//! - `table-watch/`: Table watches (`tools/capture_table_watch.sh`);
//! - `tables/`: per-kind Tables (`tools/capture_table_fixtures.py`).
//!
//! Nothing here reads outside the repository. The integration tests include this file too
//! (`tests/it/support`), so both kinds of test read fixtures one way.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository's `testdata/` directory.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// The bytes of `testdata/{rel}`; panics naming the file when it cannot be read.
pub(crate) fn read(rel: &str) -> Vec<u8> {
    let path = root().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the files in `testdata/{dir}`, sorted.
pub(crate) fn names(dir: &str) -> Vec<String> {
    let path = root().join(dir);
    let mut names: Vec<String> = std::fs::read_dir(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// The capture file `name` of `testdata/golden/` (e.g. `01-get-pod.json.body`).
pub(crate) fn golden(name: &str) -> Vec<u8> {
    read(&format!("golden/{name}"))
}

/// One captured request and the apiserver's answer.
pub(crate) struct Capture {
    /// The request path with its query.
    pub path: String,
    /// Request headers sent (besides the token).
    pub headers: Vec<(String, String)>,
    /// HTTP status code.
    pub code: u16,
    /// The answer's Content-Type.
    pub content_type: String,
    /// The body bytes.
    pub body: Vec<u8>,
}

impl Capture {
    /// The query string of the request.
    pub fn query(&self) -> Option<&str> {
        self.path.split_once('?').map(|(_, q)| q)
    }

    /// The body as text (JSON captures).
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("a text body")
    }
}

/// The capture `name`.
pub(crate) fn capture(name: &str) -> Capture {
    let read = |ext: &str| read(&format!("fidelity/{name}.{ext}"));
    let req = String::from_utf8(read("req")).unwrap();
    let mut lines = req.lines();
    let path = lines.next().and_then(|l| l.strip_prefix("GET ")).expect("a GET request line").to_string();
    let headers = lines.filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let meta = String::from_utf8(read("meta")).unwrap();
    let mut meta = meta.lines();
    let code = meta.next().and_then(|l| l.parse().ok()).expect("a status code");
    let content_type = meta.next().and_then(|l| l.strip_prefix("Content-Type: ")).unwrap_or("").to_string();
    Capture { path, headers, code, content_type, body: read("body") }
}

/// Every capture whose name starts with `prefix`, sorted by name.
pub(crate) fn captures(prefix: &str) -> Vec<(String, Capture)> {
    let names: Vec<String> = names("fidelity")
        .into_iter()
        .filter_map(|n| n.strip_suffix(".req").map(str::to_string))
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.into_iter().map(|n| (n.clone(), capture(&n))).collect()
}

/// The file `name` of `testdata/crd/`.
pub(crate) fn crd_golden(name: &str) -> Vec<u8> {
    read(&format!("crd/{name}"))
}

/// The file `name` of `testdata/table-watch/`: one JSON watch event a line.
pub(crate) fn table_watch(name: &str) -> Vec<u8> {
    read(&format!("table-watch/{name}"))
}

/// A body with every relative time (a JSON string like `"5d"`, `"2m17s"`) replaced by
/// `"T"`: they count from the moment of the answer.
pub(crate) fn timeless(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('"') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let end = rest.find('"').unwrap_or(rest.len());
        let text = &rest[..end];
        let relative = !text.is_empty()
            && text.ends_with(['s', 'm', 'h', 'd', 'y'])
            && text.split_inclusive(['s', 'm', 'h', 'd', 'y']).all(|p| p.len() > 1 && p[..p.len() - 1].bytes().all(|c| c.is_ascii_digit()));
        out.push_str(if relative { "T" } else { text });
        if end < rest.len() {
            out.push('"');
            rest = &rest[end + 1..];
        } else {
            rest = "";
        }
    }
    out.push_str(rest);
    out
}
