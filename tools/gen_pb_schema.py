#!/usr/bin/env python3
"""Generate src/api/transcode/schema.rs: the protobuf schema table kache's transcoder uses.

Sources (both are crates in the local cargo registry, no network needed):
  * k8s-pb 0.9.0: prost-generated Rust for every Kubernetes protobuf message. Its
    `#[prost(...)]` attributes give each field's tag and wire type, the field's Rust type
    names the nested message.
  * k8s-openapi 0.29.0 (module v1_36): its serde code holds every field's exact JSON
    spelling (`"hostIPC" => Field::Key_host_ipc`). A proto field that has no JSON key of
    its own but whose message's fields appear in the parent's JSON is an embedded Go struct
    written inline (`json:",inline"`, e.g. Probe.handler, Volume.volumeSource).

Usage (from the repository root):
    python3 tools/gen_pb_schema.py > src/api/transcode/schema.rs
Options:
    --registry DIR   the cargo registry source dir (default: ~/.cargo/registry/src/*)
    --report         print how each JSON name was derived to stderr

The output is deterministic; python3 standard library only.
"""

import glob
import os
import re
import sys

K8S_PB = "k8s-pb-0.9.0"
K8S_OPENAPI = "k8s-openapi-0.29.0"
OPENAPI_VERSION = "v1_36"

# (group, version, kind) -> k8s-pb message path. Only these and what they contain are emitted.
ROOTS = [
    ("", "v1", "Pod", "api.core.v1.Pod"),
    ("", "v1", "Node", "api.core.v1.Node"),
    ("", "v1", "Namespace", "api.core.v1.Namespace"),
    ("", "v1", "Service", "api.core.v1.Service"),
    ("", "v1", "ConfigMap", "api.core.v1.ConfigMap"),
    ("", "v1", "Secret", "api.core.v1.Secret"),
    ("", "v1", "Event", "api.core.v1.Event"),
    ("", "v1", "Endpoints", "api.core.v1.Endpoints"),
    ("apps", "v1", "Deployment", "api.apps.v1.Deployment"),
    ("", "v1", "Status", "apimachinery.pkg.apis.meta.v1.Status"),
    ("meta.k8s.io", "v1", "Status", "apimachinery.pkg.apis.meta.v1.Status"),
]

# Messages that are scalars in JSON; the transcoder handles them by this tag.
SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time": "Time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "FieldsV1",
    "apimachinery.pkg.api.resource.Quantity": "Quantity",
    "apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "apimachinery.pkg.runtime.RawExtension": "RawExtension",
}

# Last-resort camelCase exceptions (only used when neither source gives a spelling).
ACRONYMS = {"ip": "IP", "ips": "IPs", "ipc": "IPC", "pid": "PID", "cidr": "CIDR",
            "cidrs": "CIDRs", "url": "URL", "uri": "URI", "tcp": "TCP", "udp": "UDP",
            "id": "ID", "uid": "UID", "api": "API", "fqdn": "FQDN", "iscsi": "ISCSI"}

SCALARS = {"string": "String", "bytes": "Bytes", "bool": "Bool", "int32": "Int32",
           "int64": "Int64", "double": "Double"}


def norm(name):
    return name.replace("r#", "").replace("_", "").lower()


def strip_comments(text):
    return "\n".join(l for l in text.splitlines() if not l.strip().startswith("//"))


def find_struct_bodies(text):
    """Yield (struct name, body text) for every `pub struct X { ... }`."""
    for m in re.finditer(r"pub struct (\w+)\s*\{", text):
        depth, i = 1, m.end()
        while depth and i < len(text):
            c = text[i]
            depth += c == "{"
            depth -= c == "}"
            i += 1
        yield m.group(1), text[m.end():i - 1]


FIELD_RE = re.compile(r"#\[prost\((.*?)\)\]\s*pub\s+((?:r#)?\w+)\s*:\s*(.*?),\s*(?=#\[prost|$)", re.S)


def resolve_type(module, rust_type):
    """Resolve a Rust path relative to `module` (list of segments) to a dotted message path."""
    t = re.sub(r"\s+", "", rust_type)
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<",
                    "::prost::alloc::boxed::Box<"):
        while t.startswith(wrapper):
            t = t[len(wrapper):-1]
    segs = t.split("::")
    mod = list(module)
    while segs and segs[0] == "super":
        mod.pop()
        segs.pop(0)
    return ".".join(mod + segs)


def parse_pb(root):
    """All messages of k8s-pb's api/ and apimachinery/ trees: path -> list of fields."""
    messages = {}
    for path in sorted(glob.glob(os.path.join(root, "**", "mod.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), root)
        module = rel.split(os.sep)
        if module[0] not in ("api", "apimachinery"):
            continue
        with open(path, encoding="utf-8") as f:
            text = strip_comments(f.read())
        for name, body in find_struct_bodies(text):
            fields = []
            for attr, fname, ftype in FIELD_RE.findall(body.strip()):
                tag = int(re.search(r'tag\s*=\s*"(\d+)"', attr).group(1))
                parts = [p.strip() for p in attr.split(",")]
                f = {"tag": tag, "name": fname.replace("r#", ""), "repeated": "repeated" in parts}
                mm = re.match(r'btree_map\s*=\s*"(\w+),\s*(\w+)"', attr)
                if mm:
                    key, val = mm.groups()
                    if key != "string":
                        sys.exit("unsupported map key %s in %s.%s" % (key, name, fname))
                    if val == "message":
                        inner = re.sub(r"\s+", "", ftype)
                        inner = inner[inner.index(",") + 1:-1].rstrip(",")
                        f["kind"] = ("map", ("message", resolve_type(module, inner)))
                    else:
                        f["kind"] = ("map", (val,))
                elif parts[0] == "message":
                    f["kind"] = ("message", resolve_type(module, ftype))
                elif parts[0].split("=")[0].strip() in SCALARS:
                    f["kind"] = (parts[0].split("=")[0].strip(),)
                else:
                    sys.exit("unsupported prost attribute %r in %s.%s" % (attr, name, fname))
                fields.append(f)
            fields.sort(key=lambda f: f["tag"])
            messages[".".join(module + [name])] = fields
    return messages


def parse_openapi(root):
    """k8s-openapi: module path + lowercased struct name -> JSON keys; and all JSON keys.

    Struct names are compared lowercased: k8s-pb writes `AwsElasticBlockStoreVolumeSource`
    where k8s-openapi writes `AWSElasticBlockStoreVolumeSource`.
    """
    structs, all_keys = {}, {}
    for path in sorted(glob.glob(os.path.join(root, "**", "*.rs"), recursive=True)):
        rel = os.path.relpath(os.path.dirname(path), root)
        module = [] if rel == "." else rel.split(os.sep)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        sm = re.search(r"^pub struct (\w+)", text, re.M)
        if not sm:
            continue
        keys = re.findall(r'"([A-Za-z0-9_$]+)" => Field::Key_\w+', text)
        structs[".".join(module + [sm.group(1).lower()])] = keys
        for k in keys:
            all_keys.setdefault(norm(k), set()).add(k)
    return structs, all_keys


def camel(rust_name):
    words = rust_name.split("_")
    out = words[0]
    for w in words[1:]:
        out += ACRONYMS.get(w, w[:1].upper() + w[1:])
    return out


def main():
    args = sys.argv[1:]
    report = "--report" in args
    registry = None
    if "--registry" in args:
        registry = args[args.index("--registry") + 1]
    if registry is None:
        cands = sorted(glob.glob(os.path.expanduser("~/.cargo/registry/src/*/" + K8S_PB)))
        if not cands:
            sys.exit("k8s-pb 0.9.0 not found in the cargo registry (run cargo fetch)")
        registry = os.path.dirname(cands[-1])
    pb_root = os.path.join(registry, K8S_PB, "src")
    oa_root = os.path.join(registry, K8S_OPENAPI, "src", OPENAPI_VERSION)
    if not os.path.isdir(oa_root):
        sys.exit("%s not found (add k8s-openapi 0.29 to a scratch crate and cargo fetch)" % oa_root)

    messages = parse_pb(pb_root)
    structs, all_keys = parse_openapi(oa_root)

    # Transitive closure of the roots.
    closure, todo = set(), [r[3] for r in ROOTS]
    while todo:
        m = todo.pop()
        if m in closure:
            continue
        if m not in messages:
            sys.exit("message %s not found in k8s-pb" % m)
        closure.add(m)
        if m in SPECIAL:
            continue
        for f in messages[m]:
            k = f["kind"]
            if k[0] == "message":
                todo.append(k[1])
            elif k[0] == "map" and k[1][0] == "message":
                todo.append(k[1][1])
    order = sorted(closure)
    ids = {m: i for i, m in enumerate(order)}

    stats = {"openapi": 0, "inline": 0, "inline-parent": 0, "global": 0, "camel": 0}
    notes = []

    def openapi_keys(msg):
        mod, _, sname = msg.rpartition(".")
        return structs.get(mod + "." + sname.lower())

    # Inline (embedded) fields: a non-repeated message field without a JSON key of its own
    # whose message's fields all appear among the parent's JSON keys.
    inline_fields, inline_parent_keys = set(), {}
    for m in order:
        keys = openapi_keys(m)
        if m in SPECIAL or keys is None:
            continue
        have = set(norm(x) for x in keys)
        for f in messages[m]:
            k = f["kind"]
            if norm(f["name"]) in have or k[0] != "message" or k[1] in SPECIAL or f["repeated"]:
                continue
            sub = [norm(g["name"]) for g in messages[k[1]]]
            if sub and all(x in have for x in sub):
                inline_fields.add((m, f["name"]))
                inline_parent_keys.setdefault(k[1], []).extend(keys)
                notes.append("inline %s.%s" % (m, f["name"]))

    def json_name(msg, f):
        if (msg, f["name"]) in inline_fields:
            stats["inline"] += 1
            return "", True
        for source, keys in (("openapi", openapi_keys(msg)),
                             ("inline-parent", inline_parent_keys.get(msg))):
            for k in keys or ():
                if norm(k) == norm(f["name"]):
                    stats[source] += 1
                    return k, False
        spellings = all_keys.get(norm(f["name"]))
        if spellings and len(spellings) == 1:
            stats["global"] += 1
            notes.append("global %s.%s -> %s" % (msg, f["name"], next(iter(spellings))))
            return next(iter(spellings)), False
        c = camel(f["name"])
        stats["camel"] += 1
        notes.append("camel %s.%s -> %s (openapi struct %s)" % (
            msg, f["name"], c, "found" if openapi_keys(msg) is not None else "missing"))
        return c, False

    out = []
    w = out.append
    w("// @generated by tools/gen_pb_schema.py from the crates %s and %s (%s)." % (
        K8S_PB, K8S_OPENAPI, OPENAPI_VERSION))
    w("// Do not edit by hand. Regenerate from the repository root with:")
    w("//     python3 tools/gen_pb_schema.py > src/api/transcode/schema.rs")
    w("// (both crates must be in the local cargo registry: they are dev-dependencies / cargo fetch).")
    w("")
    w("//! The protobuf schema of the Kubernetes kinds the transcoder knows (generated).")
    w("")
    w("use super::{field, FieldKind as K, MapValue as V, MessageDesc, Special};")
    w("")
    w("/// Every message in the transitive closure of [`ROOTS`], indexed by message id.")
    w("/// Fields are in tag order: `field(tag, rust name, JSON name, kind, repeated, inline)`;")
    w("/// an inline field (a Go struct embedded with `json:\",inline\"`) has no JSON name.")
    w("pub(super) static MESSAGES: &[MessageDesc] = &[")
    for m in order:
        special = SPECIAL.get(m, "None")
        w("    // %d" % ids[m])
        w('    MessageDesc { name: "k8s.io.%s", special: Special::%s, fields: &[' % (m, special))
        for f in messages[m]:
            jname, inline = json_name(m, f) if m not in SPECIAL else (f["name"], False)
            k = f["kind"]
            if k[0] == "message":
                kind = "K::Message(%d)" % ids[k[1]]
            elif k[0] == "map":
                v = k[1]
                mv = "V::Message(%d)" % ids[v[1]] if v[0] == "message" else "V::%s" % SCALARS[v[0]]
                kind = "K::Map(%s)" % mv
            else:
                kind = "K::%s" % SCALARS[k[0]]
            w('        field(%d, "%s", "%s", %s, %s, %s),' % (
                f["tag"], f["name"], jname, kind, "true" if f["repeated"] else "false",
                "true" if inline else "false"))
        w("    ]},")
    w("];")
    w("")
    w("/// The top-level kinds: (API group, version, kind, message id).")
    w("pub(super) static ROOTS: &[(&str, &str, &str, u16)] = &[")
    for g, v, k, m in ROOTS:
        w('    ("%s", "%s", "%s", %d),' % (g, v, k, ids[m]))
    w("];")
    sys.stdout.write("\n".join(out) + "\n")
    if report:
        for n in notes:
            print(n, file=sys.stderr)
        print("messages: %d, json names: %s" % (len(order), stats), file=sys.stderr)


if __name__ == "__main__":
    main()
