//! The three PATCH flavours the apiserver takes: JSON merge patch (RFC 7386), strategic merge
//! patch (lists merged by their patch merge key, `$patch`/`$setElementOrder`/`$retainKeys`/
//! `$deleteFromPrimitiveList` directives) for built-in kinds, and JSON patch (RFC 6902).

use crate::api::status::Status;
use serde_json::{Map, Value};

/// RFC 7386 JSON merge patch.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The patch merge key of a list field of the built-in kinds (`patchMergeKey` in the API
/// types); `None` for lists that are replaced as a whole.
fn merge_key(field: &str, sample: Option<&Value>) -> Option<&'static str> {
    Some(match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => "name",
        "volumeMounts" => "mountPath",
        "volumeDevices" => "devicePath",
        // Container ports merge on containerPort, Service ports on port.
        "ports" if sample.is_some_and(|s| s.get("containerPort").is_some()) => "containerPort",
        "ports" => "port",
        "conditions" | "addresses" => "type",
        "ownerReferences" => "uid",
        "hostAliases" | "podIPs" | "hostIPs" => "ip",
        "taints" => "key",
        "topologySpreadConstraints" => "topologyKey",
        _ => return None,
    })
}

/// Lists of scalars merged as sets (`patchStrategy: merge` without a key).
fn merges_scalars(field: &str) -> bool {
    field == "finalizers"
}

/// A patch value written into a place that had nothing: its directives dropped.
fn fresh(v: &Value) -> Value {
    let mut out = Value::Null;
    strategic_merge(&mut out, v);
    out
}

/// Strategic merge patch, as `kubectl apply`, `kubectl set image` and client-go's
/// `StrategicMergePatchType` send it.
pub(super) fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            let mut m = p.clone();
            m.remove("$patch");
            *target = Value::Null;
            strategic_merge(target, &Value::Object(m));
            return;
        }
        Some("delete") => {
            *target = Value::Null;
            return;
        }
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else { return };
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        t.retain(|k, _| keep.iter().any(|x| x == k) || p.contains_key(k));
    }
    for (k, v) in p {
        merge_field(t, k, v);
    }
    for (k, order) in p {
        if let (Some(field), Some(order)) = (k.strip_prefix("$setElementOrder/"), order.as_array()) {
            if let Some(Value::Array(cur)) = t.get_mut(field) {
                reorder(field, cur, order);
            }
        }
    }
}

/// One member `k` of a strategic merge patch applied to the object `t`: a directive (a
/// primitive list's deletions), a removal (`null`), a list merged by its strategy, an object
/// merged in turn, or a value set.
fn merge_field(t: &mut Map<String, Value>, k: &str, v: &Value) {
    if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
        if let (Some(Value::Array(cur)), Some(gone)) = (t.get_mut(field), v.as_array()) {
            cur.retain(|x| !gone.contains(x));
        }
        return;
    }
    if k.starts_with('$') {
        return;
    }
    if v.is_null() {
        t.remove(k);
        return;
    }
    match (t.get_mut(k), v) {
        (Some(Value::Array(cur)), Value::Array(items)) => merge_list(k, cur, items),
        (Some(cur @ Value::Object(_)), Value::Object(_)) => {
            strategic_merge(cur, v);
            if cur.is_null() {
                t.remove(k);
            }
        }
        (_, Value::Array(items)) => {
            let mut cur = Vec::new();
            merge_list(k, &mut cur, items);
            t.insert(k.to_string(), Value::Array(cur));
        }
        _ => {
            let nv = fresh(v);
            if nv.is_null() {
                t.remove(k);
            } else {
                t.insert(k.to_string(), nv);
            }
        }
    }
}

fn merge_list(field: &str, cur: &mut Vec<Value>, items: &[Value]) {
    let is_directive =
        |i: &Value| i.get("$patch").and_then(Value::as_str) == Some("replace") && i.as_object().is_some_and(|m| m.len() == 1);
    if items.iter().any(is_directive) {
        *cur = items.iter().filter(|i| !is_directive(i)).map(fresh).collect();
        return;
    }
    if merges_scalars(field) {
        for i in items {
            if !cur.contains(i) {
                cur.push(i.clone());
            }
        }
        return;
    }
    let Some(key) = merge_key(field, items.first().or(cur.first())) else {
        *cur = items.iter().map(fresh).collect();
        return;
    };
    for item in items {
        let id = item.get(key);
        let at = id.and_then(|id| cur.iter().position(|c| c.get(key) == Some(id)));
        let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
        match (at, delete) {
            (Some(i), true) => {
                cur.remove(i);
            }
            (None, true) => {}
            (Some(i), false) => strategic_merge(&mut cur[i], item),
            (None, false) => cur.push(fresh(item)),
        }
    }
}

/// Apply `$setElementOrder`: the listed elements first, in that order, then the rest.
fn reorder(field: &str, cur: &mut Vec<Value>, order: &[Value]) {
    let key = merge_key(field, cur.first());
    let same = |a: &Value, o: &Value| match key {
        Some(k) => a.get(k).is_some() && a.get(k) == o.get(k),
        None => a == o,
    };
    let mut rest = std::mem::take(cur);
    for o in order {
        if let Some(i) = rest.iter().position(|a| same(a, o)) {
            cur.push(rest.remove(i));
        }
    }
    cur.extend(rest);
}

fn invalid(msg: String) -> Status {
    Status::failure(422, "Invalid", msg)
}

/// Split an RFC 6901 pointer into unescaped tokens.
fn tokens(pointer: &str) -> Result<Vec<String>, Status> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer.strip_prefix('/').ok_or_else(|| invalid(format!("invalid JSON pointer {pointer:?}")))?;
    Ok(rest.split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect())
}

/// The container a pointer's last token lives in, and that token.
fn parent<'a>(doc: &'a mut Value, path: &str) -> Result<(&'a mut Value, String), Status> {
    let mut toks = tokens(path)?;
    let last = toks.pop().ok_or_else(|| invalid("the whole document cannot be patched".into()))?;
    let mut cur = doc;
    for t in &toks {
        cur = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(move |i| a.get_mut(i)),
            _ => None,
        }
        .ok_or_else(|| invalid(format!("doc is missing path: {path}")))?;
    }
    Ok((cur, last))
}

fn get(doc: &Value, path: &str) -> Result<Value, Status> {
    doc.pointer(path).cloned().ok_or_else(|| invalid(format!("doc is missing path: {path}")))
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, Status> {
    let (c, last) = parent(doc, path)?;
    let missing = || invalid(format!("doc is missing path: {path}"));
    match c {
        Value::Object(m) => m.shift_remove(&last).ok_or_else(missing),
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => Ok(a.remove(i)),
            _ => Err(missing()),
        },
        _ => Err(missing()),
    }
}

fn add(doc: &mut Value, path: &str, v: Value) -> Result<(), Status> {
    let (c, last) = parent(doc, path)?;
    match c {
        Value::Object(m) => {
            m.insert(last, v);
            Ok(())
        }
        Value::Array(a) if last == "-" => {
            a.push(v);
            Ok(())
        }
        Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i <= a.len() => {
                a.insert(i, v);
                Ok(())
            }
            _ => Err(invalid(format!("invalid array index in {path}"))),
        },
        _ => Err(invalid(format!("doc is missing path: {path}"))),
    }
}

/// RFC 6902 JSON patch (`kubectl patch --type=json`).
pub(super) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), Status> {
    let ops = ops.as_array().ok_or_else(|| Status::bad_request("a JSON patch must be a list of operations"))?;
    for op in ops {
        let s = |k: &str| op.get(k).and_then(Value::as_str).ok_or_else(|| invalid(format!("JSON patch operation without {k}: {op}")));
        let path = s("path")?;
        let value = || op.get("value").cloned().ok_or_else(|| invalid(format!("JSON patch operation without value: {op}")));
        match s("op")? {
            "add" => add(doc, path, value()?)?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                remove(doc, path)?;
                add(doc, path, value()?)?;
            }
            "move" => {
                let v = remove(doc, s("from")?)?;
                add(doc, path, v)?;
            }
            "copy" => {
                let v = get(doc, s("from")?)?;
                add(doc, path, v)?;
            }
            "test" => {
                if get(doc, path)? != value()? {
                    return Err(invalid(format!("testing value {path} failed")));
                }
            }
            other => return Err(invalid(format!("unexpected kind of JSON patch operation: {other:?}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a:1", "ports": [{"containerPort": 80, "name": "http"}], "env": [{"name": "X", "value": "1"}]},
            {"name": "sidecar", "image": "s:1"}
        ]}}}, "metadata": {"finalizers": ["a"], "labels": {"k": "v"}}})
    }

    #[test]
    fn set_image_merges_containers_by_name() {
        // What `kubectl set image deploy/d app=a:2` sends.
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"image": "a:2", "name": "app"}]
        }}}});
        let mut d = deployment();
        strategic_merge(&mut d, &patch);
        let c = &d["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["image"], "a:2");
        assert_eq!(c[0]["ports"][0]["containerPort"], 80, "other fields kept");
        assert_eq!(c[1], json!({"name": "sidecar", "image": "s:1"}), "other containers kept");
    }

    #[test]
    fn directives_delete_replace_and_order() {
        let mut d = deployment();
        strategic_merge(
            &mut d,
            &json!({"spec": {"template": {"spec": {"containers": [
                {"name": "sidecar", "$patch": "delete"},
                {"name": "new", "image": "n:1", "env": [{"name": "Y", "value": "2"}]},
                {"name": "app", "env": [{"name": "Z", "value": "3"}]}
            ]}}}, "metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"], "labels": {"$patch": "replace", "only": "this"}}}),
        );
        let c = d["spec"]["template"]["spec"]["containers"].as_array().unwrap();
        assert_eq!(c.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), ["app", "new"]);
        assert_eq!(c[0]["env"], json!([{"name": "X", "value": "1"}, {"name": "Z", "value": "3"}]));
        assert_eq!(d["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(d["metadata"]["labels"], json!({"only": "this"}));
        // Lists without a merge key are replaced; null deletes.
        let mut v = json!({"spec": {"tolerations": [{"key": "a"}], "x": 1}});
        strategic_merge(&mut v, &json!({"spec": {"tolerations": [{"key": "b"}], "x": null}}));
        assert_eq!(v, json!({"spec": {"tolerations": [{"key": "b"}]}}));
    }

    #[test]
    fn json_patch_follows_rfc_6902() {
        let mut d = json!({"metadata": {"labels": {"a/b": "1"}}, "data": {"k": "v"}, "list": [1, 2]});
        json_patch(
            &mut d,
            &json!([
                {"op": "test", "path": "/data/k", "value": "v"},
                {"op": "replace", "path": "/data/k", "value": "w"},
                {"op": "add", "path": "/list/-", "value": 3},
                {"op": "add", "path": "/list/0", "value": 0},
                {"op": "remove", "path": "/metadata/labels/a~1b"},
                {"op": "copy", "from": "/data/k", "path": "/data/c"},
                {"op": "move", "from": "/data/c", "path": "/data/m"}
            ]),
        )
        .unwrap();
        assert_eq!(d, json!({"metadata": {"labels": {}}, "data": {"k": "w", "m": "w"}, "list": [0, 1, 2, 3]}));
        let e = json_patch(&mut d, &json!([{"op": "test", "path": "/data/k", "value": "nope"}])).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(json_patch(&mut d, &json!([{"op": "remove", "path": "/nope/x"}])).unwrap_err().code, 422);
    }
}
