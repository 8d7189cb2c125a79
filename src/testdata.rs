//! Test support: the real kube-apiserver's answers captured by `tools/capture_fidelity.py`
//! into `testdata/fidelity/` (request, status, Content-Type, body bytes), the expected
//! values of the fidelity tests; and those of `tools/capture_crd_fixtures.sh` (custom
//! resources' CRDs, objects, Tables and metadata views) in `tests/golden/crd/`.

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
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/fidelity");
    let read = |ext: &str| std::fs::read(format!("{dir}/{name}.{ext}")).unwrap_or_else(|e| panic!("{name}.{ext}: {e}"));
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
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/fidelity");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".req").map(str::to_string))
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names.into_iter().map(|n| (n.clone(), capture(&n))).collect()
}

/// The file `name` of `tests/golden/crd/`.
pub(crate) fn crd_golden(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/golden/crd/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
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
