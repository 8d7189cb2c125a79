//! Tables of custom resources: a CRD's `additionalPrinterColumns` for the served version
//! (or, without any, the apiserver's default `Age` column), after the implicit `Name`.
//!
//! What the apiserver does (apiextensions-apiserver's table convertor, v1.36): each column's
//! `jsonPath` is a client-go JSONPath template `{<path>}` evaluated with missing keys
//! allowed; a cell is the first value found, or `null` when there is none or the evaluation
//! fails. By the column's type:
//! - `string`: a string as is; a map or list as compact JSON (keys sorted, Go's escaping);
//!   a number as Go's `%v` prints it; a boolean as `true`/`false`; JSON `null` as
//!   `<no value>`.
//! - `integer`: an integer, or a non-integer number truncated; anything else `null`.
//! - `number`: any number as a float; anything else `null`.
//! - `boolean`: a boolean; anything else `null`.
//! - `date`: a string as the time since it (like Age), `<unknown>` for an empty or zero
//!   time, `<invalid>` when it is not RFC 3339; anything else `null`.
//!
//! Column paths kache evaluates: fields (`.a.b`, `['a.b']`), list indexes (`[0]`, `[-1]`),
//! `[*]` and `.*`, and filters `[?(@.a.b)]`, `[?(@.a=="x")]`, `[?(@.a!="x")]`. A CRD with
//! any other path (slices, unions, recursive descent, number comparisons, escapes) is not
//! printed by kache: its Tables pass through.

use super::{time, Cells, Writer};
use serde_json::Value;
use std::sync::OnceLock;

/// A CRD's compiled printer columns for one version.
#[derive(Debug, PartialEq, Eq)]
pub struct CustomColumns {
    /// `columnDefinitions` as the apiserver writes them (compact JSON array).
    definitions: Box<[u8]>,
    columns: Box<[Column]>,
}

#[derive(Debug, PartialEq, Eq)]
struct Column {
    ty: Type,
    path: Vec<Step>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    String,
    Integer,
    Number,
    Boolean,
    Date,
    /// A type the convertor has no case for: every cell `null`.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter { left: Vec<String>, test: Test },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Test {
    Exists,
    Eq(String),
    Ne(String),
}

/// Why a CRD's columns are not printed by kache.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unsupported {
    /// The CRD does not serve the version.
    #[error("the CRD has no version {0}")]
    NoVersion(String),
    /// A column's JSONPath is outside what kache evaluates.
    #[error("column path {0:?} is not evaluated by kache")]
    Path(String),
}

/// The descriptions the apiserver gives its own columns (ObjectMeta's field docs), captured
/// from a real kube-apiserver v1.36.2 (`custom_columns.json`).
fn implicit(which: &str) -> &'static Value {
    static ALL: OnceLock<Value> = OnceLock::new();
    let all = ALL.get_or_init(|| serde_json::from_str(include_str!("custom_columns.json")).unwrap_or(Value::Null));
    &all[which]
}

impl CustomColumns {
    /// The columns a CRD object (`apiextensions.k8s.io/v1`, decoded JSON) prints for
    /// `version`.
    pub fn of_crd(crd: &Value, version: &str) -> Result<CustomColumns, Unsupported> {
        let v = crd["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"].as_str() == Some(version))
            .ok_or_else(|| Unsupported::NoVersion(version.to_string()))?;
        let given = v["additionalPrinterColumns"].as_array().filter(|c| !c.is_empty());
        let mut defs: Vec<Value> = vec![implicit("name").clone()];
        let mut columns = Vec::new();
        match given {
            Some(cols) => {
                for c in cols {
                    let path = c["jsonPath"].as_str().unwrap_or("");
                    let desc = match c["description"].as_str().filter(|d| !d.is_empty()) {
                        Some(d) => d.to_string(),
                        None => format!("Custom resource definition column (in JSONPath format): {path}"),
                    };
                    let ty = c["type"].as_str().unwrap_or("");
                    defs.push(serde_json::json!({
                        "name": c["name"].as_str().unwrap_or(""),
                        "type": ty,
                        "format": c["format"].as_str().unwrap_or(""),
                        "description": desc,
                        "priority": c["priority"].as_i64().unwrap_or(0),
                    }));
                    columns.push(Column { ty: Type::of(ty), path: parse(path).ok_or_else(|| Unsupported::Path(path.to_string()))? });
                }
            }
            None => {
                defs.push(implicit("age").clone());
                columns
                    .push(Column { ty: Type::Date, path: vec![Step::Field("metadata".into()), Step::Field("creationTimestamp".into())] });
            }
        }
        Ok(CustomColumns { definitions: crate::api::json::to_vec(&defs).into_boxed_slice(), columns: columns.into_boxed_slice() })
    }

    /// The `columnDefinitions` (a compact JSON array).
    pub fn definitions(&self) -> &[u8] {
        &self.definitions
    }

    /// The row template of an object (its decoded JSON).
    pub fn cells(&self, v: &Value) -> Cells {
        let mut w = Writer::default();
        w.str(v["metadata"]["name"].as_str().unwrap_or(""));
        for c in self.columns.iter() {
            match eval(v, &c.path).ok().and_then(|found| found.first().copied()) {
                Some(found) => cell(&mut w, c.ty, found),
                None => w.null(),
            }
        }
        w.finish()
    }
}

impl Type {
    fn of(s: &str) -> Type {
        match s {
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            "date" => Type::Date,
            _ => Type::Other,
        }
    }
}

/// One cell of a found value.
fn cell(w: &mut Writer, ty: Type, v: &Value) {
    match (ty, v) {
        (Type::String, Value::String(s)) => w.str(s),
        (Type::String, Value::Null) => w.str("<no value>"),
        (Type::String, Value::Bool(b)) => w.str(if *b { "true" } else { "false" }),
        (Type::String, Value::Number(n)) => match integer(n) {
            Some(i) => w.str(&i.to_string()),
            None => w.str(&go_print_float(n.as_f64().unwrap_or(0.0))),
        },
        (Type::String, _) => {
            let mut out = Vec::new();
            go_marshal(&mut out, v);
            w.str(&String::from_utf8_lossy(&out));
        }
        (Type::Integer, Value::Number(n)) => w.int(integer(n).unwrap_or_else(|| n.as_f64().unwrap_or(0.0) as i64)),
        (Type::Number, Value::Number(n)) => {
            let f = integer(n).map_or_else(|| n.as_f64().unwrap_or(0.0), |i| i as f64);
            w.raw(go_json_float(f).as_bytes());
        }
        (Type::Boolean, Value::Bool(b)) => w.bool(*b),
        (Type::Date, Value::String(s)) => {
            if s.is_empty() || s == "null" {
                w.since("", None, "");
            } else if crate::api::time::parse_timestamp(s).is_none() {
                w.str("<invalid>");
            } else {
                w.since("", time(v), "");
            }
        }
        _ => w.null(),
    }
}

/// A JSON number as the apiserver's unstructured decoding holds it: an int64 when it is an
/// integer in range, else a float64.
fn integer(n: &serde_json::Number) -> Option<i64> {
    n.as_i64()
}

/// A float as Go's encoding/json writes it: the shortest representation, with an exponent
/// (`1e+21`, `1e-7`) only below 1e-6 or from 1e21 on.
pub(crate) fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let e = format!("{f:e}");
        match e.split_once('e') {
            Some((m, x)) if !x.starts_with('-') => format!("{m}e+{x}"),
            _ => e,
        }
    } else {
        format!("{f}")
    }
}

/// A float as Go's `%v` prints it: the shortest representation, with an exponent of at
/// least two digits (`1.5e+08`, `1e-05`) below 1e-4 or from 1e6 on.
fn go_print_float(f: f64) -> String {
    let e = format!("{f:e}");
    let Some((m, x)) = e.split_once('e') else { return e };
    let x: i32 = x.parse().unwrap_or(0);
    if f != 0.0 && !(-4..6).contains(&x) {
        format!("{m}e{}{:02}", if x < 0 { '-' } else { '+' }, x.abs())
    } else {
        format!("{f}")
    }
}

/// A value as Go's json.Marshal writes the unstructured form: keys sorted, Go's escaping
/// and float format.
fn go_marshal(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable();
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                crate::api::json::write_str(out, k);
                out.push(b':');
                go_marshal(out, &m[k.as_str()]);
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                go_marshal(out, x);
            }
            out.push(b']');
        }
        Value::Number(n) => match integer(n) {
            Some(i) => out.extend_from_slice(i.to_string().as_bytes()),
            None => out.extend_from_slice(go_json_float(n.as_f64().unwrap_or(0.0)).as_bytes()),
        },
        _ => crate::api::json::write(out, v),
    }
}

/// Parse a column's `jsonPath` (it starts with `.`), or `None` outside what kache evaluates.
fn parse(path: &str) -> Option<Vec<Step>> {
    let b = path.as_bytes();
    if b.first() != Some(&b'.') {
        return None;
    }
    let mut steps = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // JSONPath's `.` before the end or a `[` names the field `""` (client-go's
            // parser reads a field up to its next terminator), which objects lack: the
            // apiserver prints such a column as null, not the whole object.
            b'.' if matches!(b.get(i + 1), None | Some(b'[')) => {
                steps.push(Step::Field(String::new()));
                i += 1;
            }
            b'.' if b.get(i + 1) == Some(&b'*') => {
                steps.push(Step::All);
                i += 2;
            }
            b'.' => {
                let n = field_len(&b[i + 1..]);
                if n == 0 {
                    return None;
                }
                steps.push(Step::Field(path[i + 1..i + 1 + n].to_string()));
                i += 1 + n;
            }
            b'[' => {
                let end = i + bracket_len(&b[i..])?;
                steps.push(bracket(&path[i + 1..end - 1])?);
                i = end;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// Length of a field name: letters, digits, `_`, `-` and `/`.
fn field_len(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'/')).count()
}

/// Length of a `[...]` from its `[` through its `]`, skipping quoted strings.
fn bracket_len(b: &[u8]) -> Option<usize> {
    let mut quote = None;
    for (i, &c) in b.iter().enumerate().skip(1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), b'\\') => return None,
            (Some(_), _) => {}
            (None, b'\'' | b'"') => quote = Some(c),
            (None, b']') => return Some(i + 1),
            (None, b'[') => return None,
            _ => {}
        }
    }
    None
}

/// The step of a bracket's inside.
fn bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Some(s) = quoted(inner) {
        return Some(Step::Field(s.to_string()));
    }
    if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
        let f = f.trim();
        let (left, test) = match f.find("==").or_else(|| f.find("!=")) {
            Some(at) => {
                let lit = quoted(f[at + 2..].trim())?.to_string();
                (f[..at].trim(), if &f[at..at + 2] == "==" { Test::Eq(lit) } else { Test::Ne(lit) })
            }
            None => (f, Test::Exists),
        };
        let rest = left.strip_prefix('@')?;
        let mut fields = Vec::new();
        let mut r = rest.as_bytes();
        let mut at = 1;
        while let [b'.', tail @ ..] = r {
            let n = field_len(tail);
            if n == 0 {
                return None;
            }
            fields.push(rest[at..at + n].to_string());
            r = &tail[n..];
            at += n + 1;
        }
        if !r.is_empty() || fields.is_empty() {
            return None;
        }
        return Some(Step::Filter { left: fields, test });
    }
    let digits = inner.strip_prefix('-').unwrap_or(inner);
    if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) {
        return inner.parse().ok().map(Step::Index);
    }
    None
}

/// The text of a `'...'` or `"..."` literal without escapes.
fn quoted(s: &str) -> Option<&str> {
    let q = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = s.strip_prefix(q)?.strip_suffix(q)?;
    (!inner.contains(q) && !inner.contains('\\')).then_some(inner)
}

/// Every value a path finds, in order; `Err` where the JSONPath evaluation fails.
fn eval<'v>(root: &'v Value, path: &[Step]) -> Result<Vec<&'v Value>, ()> {
    let mut cur = vec![root];
    for step in path {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(k) => {
                    if let Some(x) = v.as_object().and_then(|m| m.get(k)) {
                        next.push(x);
                    }
                }
                Step::Index(n) => match v {
                    Value::Null => {}
                    Value::Array(a) => {
                        let i = if *n < 0 { *n + a.len() as i64 } else { *n };
                        next.push(usize::try_from(i).ok().and_then(|i| a.get(i)).ok_or(())?);
                    }
                    _ => return Err(()),
                },
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => {
                        let mut keys: Vec<&String> = m.keys().collect();
                        keys.sort_unstable();
                        next.extend(keys.into_iter().map(|k| &m[k.as_str()]));
                    }
                    _ => {}
                },
                Step::Filter { left, test } => {
                    let Value::Array(a) = v else { return Err(()) };
                    for x in a {
                        let mut found = Some(x);
                        for k in left {
                            found = found.and_then(|f| f.as_object()).and_then(|m| m.get(k));
                        }
                        let pass = match (test, found) {
                            (Test::Exists, f) => f.is_some(),
                            (_, None) => false,
                            (Test::Eq(lit), Some(Value::String(s))) => s == lit,
                            (Test::Ne(lit), Some(Value::String(s))) => s != lit,
                            // Go's template comparison of unlike kinds fails the evaluation.
                            (_, Some(_)) => return Err(()),
                        };
                        if pass {
                            next.push(x);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_prints_them() {
        for (f, json, print) in [
            (2.7, "2.7", "2.7"),
            (1e21, "1e+21", "1e+21"),
            (1e20, "100000000000000000000", "1e+20"),
            (123456789.125, "123456789.125", "1.23456789125e+08"),
            (0.000001234, "0.000001234", "1.234e-06"),
            (7.0, "7", "7"),
            (1e-7, "1e-7", "1e-07"),
            (1234567.0, "1234567", "1.234567e+06"),
            (123456.0, "123456", "123456"),
            (0.0001, "0.0001", "0.0001"),
            (0.00001, "0.00001", "1e-05"),
            (-0.5, "-0.5", "-0.5"),
        ] {
            assert_eq!(go_json_float(f), json, "{f}");
            assert_eq!(go_print_float(f), print, "{f}");
        }
    }

    #[test]
    fn paths_kache_evaluates_and_those_it_leaves_to_the_apiserver() {
        assert_eq!(parse(".a.b"), Some(vec![Step::Field("a".into()), Step::Field("b".into())]));
        assert_eq!(parse(".a['b.c'][-1]"), Some(vec![Step::Field("a".into()), Step::Field("b.c".into()), Step::Index(-1)]));
        assert_eq!(
            parse(".c[?(@.type==\"Ready\")].status"),
            Some(vec![
                Step::Field("c".into()),
                Step::Filter { left: vec!["type".into()], test: Test::Eq("Ready".into()) },
                Step::Field("status".into())
            ])
        );
        assert_eq!(
            parse(".c[?(@.a.b)]"),
            Some(vec![Step::Field("c".into()), Step::Filter { left: vec!["a".into(), "b".into()], test: Test::Exists }])
        );
        assert_eq!(parse(".a[*].b"), Some(vec![Step::Field("a".into()), Step::All, Step::Field("b".into())]));
        // A bare `.` (and a trailing one) is the field named "", as client-go parses it.
        assert_eq!(parse("."), Some(vec![Step::Field(String::new())]));
        assert_eq!(parse(".a."), Some(vec![Step::Field("a".into()), Step::Field(String::new())]));
        assert_eq!(parse(".[0]"), Some(vec![Step::Field(String::new()), Step::Index(0)]));
        for unsupported in ["a.b", ".a[0:2]", ".a[0,1]", "..a", ".a[?(@.n==1)]", ".a[?(@.n<\"x\")]", ".a\\.b", ".a[", ".a b"] {
            assert_eq!(parse(unsupported), None, "{unsupported}");
        }
    }

    #[test]
    fn evaluation_finds_what_jsonpath_finds() {
        let v = serde_json::json!({"a": {"l": [{"t": "x", "s": 1}, {"t": "y"}, {"t": 3}], "n": null, "s": "str"}});
        let first = |p: &str| eval(&v, &parse(p).unwrap()).map(|r| r.first().map(|x| (*x).clone()));
        assert_eq!(first(".a.l[0].s"), Ok(Some(serde_json::json!(1))));
        assert_eq!(first(".a.l[-1].t"), Ok(Some(serde_json::json!(3))));
        assert_eq!(first(".a.l[3]"), Err(()));
        assert_eq!(first(".a.s[0]"), Err(()));
        assert_eq!(first(".a.missing.deeper"), Ok(None));
        assert_eq!(first(".a.n"), Ok(Some(Value::Null)));
        assert_eq!(first(".a.s.x"), Ok(None));
        // A filter comparing a non-string with a string fails the whole path.
        assert_eq!(first(".a.l[?(@.t==\"y\")].t"), Err(()));
        assert_eq!(first(".a.l[?(@.s)].t"), Ok(Some(serde_json::json!("x"))));
        assert_eq!(first(".a.l[*].t"), Ok(Some(serde_json::json!("x"))));
        assert_eq!(first("."), Ok(None), "not the whole object");
        assert_eq!(first(".a."), Ok(None));
        let keyed = serde_json::json!({"": 7});
        assert_eq!(eval(&keyed, &parse(".").unwrap()).map(|r| r.first().map(|x| (*x).clone())), Ok(Some(serde_json::json!(7))));
    }
}
