//! prost as an independent oracle: the apiserver's protobuf and ours, both decoded by the
//! k8s-pb types, compared as prost's normalized `Debug`; and our decoding against the
//! apiserver's JSON.

use super::*;

/// prost's pretty `Debug` of a k8s-pb message with empty fields dropped, the same rule
/// as [`normalize`]: `None`, `Some("")`, `Some(0)`, `Some(false)`, `[]`, `{}` fields and
/// map entries go, and so do fields whose message is left with no fields. List elements
/// stay.
fn prost_normalized(debug: &str) -> String {
    struct Node {
        head: String,
        children: Vec<Node>,
        tail: Option<String>,
    }
    fn parse(lines: &mut std::iter::Peekable<std::str::Lines<'_>>) -> Vec<Node> {
        let mut out = Vec::new();
        while let Some(line) = lines.peek() {
            let t = line.trim();
            if t.starts_with('}') || t.starts_with(']') || t.starts_with(')') {
                return out;
            }
            let line = lines.next().unwrap().trim().to_owned();
            if line.ends_with('{') || line.ends_with('[') || line.ends_with('(') {
                let children = parse(lines);
                let tail = lines.next().map(|l| l.trim().to_owned());
                out.push(Node { head: line, children, tail });
            } else {
                out.push(Node { head: line, children: Vec::new(), tail: None });
            }
        }
        out
    }
    /// `name: ` or `"map key": ` prefix?
    fn labelled(head: &str) -> bool {
        let b = head.as_bytes();
        if b.first() == Some(&b'"') {
            return head.contains("\": ");
        }
        let n = b.iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_' || **c == b'#').count();
        n > 0 && head[n..].starts_with(": ")
    }
    fn empty_literal(v: &str) -> bool {
        matches!(v, "None," | "\"\"," | "0," | "0.0," | "false," | "[]," | "{},")
    }
    fn value_part(head: &str) -> &str {
        if let Some(rest) = head.strip_prefix('"') {
            // Map key: skip the quoted key (Debug escapes quotes inside it).
            let mut esc = false;
            for (i, c) in rest.char_indices() {
                match c {
                    '\\' if !esc => esc = true,
                    '"' if !esc => return rest[i + 1..].trim_start_matches(": "),
                    _ => esc = false,
                }
            }
            return head;
        }
        head.split_once(": ").map_or(head, |(_, v)| v)
    }
    fn prune(nodes: Vec<Node>, in_some: bool) -> Vec<Node> {
        nodes
            .into_iter()
            .filter_map(|n| {
                let lab = labelled(&n.head);
                if n.tail.is_none() {
                    let empty = if lab { empty_literal(value_part(&n.head)) } else { in_some && empty_literal(&n.head) };
                    return (!empty).then_some(n);
                }
                let some = n.head.ends_with("Some(");
                let children = prune(n.children, some);
                if children.is_empty() && (lab || in_some) {
                    return None;
                }
                Some(Node { children, ..n })
            })
            .collect()
    }
    fn render(nodes: &[Node], depth: usize, out: &mut String) {
        for n in nodes {
            out.push_str(&"  ".repeat(depth));
            out.push_str(&n.head);
            out.push('\n');
            render(&n.children, depth + 1, out);
            if let Some(t) = &n.tail {
                out.push_str(&"  ".repeat(depth));
                out.push_str(t);
                out.push('\n');
            }
        }
    }
    let nodes = prune(parse(&mut debug.lines().peekable()), false);
    let mut out = String::new();
    render(&nodes, 0, &mut out);
    out
}

/// Decode with prost (fails on any wire-type error) and return the normalized Debug.
pub(super) fn prost_view(kind: &str, bytes: &[u8]) -> String {
    use k8s_pb::api::core::v1 as core;
    use prost::Message as _;
    let dbg = match kind {
        "Pod" => format!("{:#?}", core::Pod::decode(bytes).unwrap()),
        "ConfigMap" => format!("{:#?}", core::ConfigMap::decode(bytes).unwrap()),
        "Secret" => format!("{:#?}", core::Secret::decode(bytes).unwrap()),
        "Node" => format!("{:#?}", core::Node::decode(bytes).unwrap()),
        "Status" => format!("{:#?}", k8s_pb::apimachinery::pkg::apis::meta::v1::Status::decode(bytes).unwrap()),
        other => panic!("no prost type for {other}"),
    };
    prost_normalized(&dbg)
}

/// JSON object -> our protobuf -> prost, against the apiserver's protobuf -> prost.
pub(super) fn assert_encodes_like_apiserver(kind: &str, json: &Value, apiserver_raw: &[u8]) {
    let ours = json_to_pb(ty(kind), json).unwrap();
    let a = prost_view(kind, &ours);
    let b = prost_view(kind, apiserver_raw);
    assert_eq!(a, b, "{kind}: our encoding differs from the apiserver's (normalized)");
    assert!(b.lines().count() > 10, "suspiciously empty comparison: {b}");
}

/// The apiserver's protobuf -> our JSON, against the apiserver's JSON.
pub(super) fn assert_decodes_like_apiserver(kind: &str, raw: &[u8], json: &Value) {
    let ours = pb_to_json(ty(kind), raw).unwrap();
    assert_eq!(normalize(&ours), normalize(&without_type_meta(json)), "{kind}");
}
