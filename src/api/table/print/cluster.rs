//! Cluster-wide kinds: leases, storage classes, priority classes, role bindings.

use super::*;

pub(crate) fn lease(w: &mut Writer, v: &Value) {
    w.str(name(v));
    w.str(s(&v["spec"]["holderIdentity"]));
    w.since("", created(v), "");
}

pub(crate) fn storage_class(w: &mut Writer, v: &Value) {
    let mut n = name(v).to_string();
    if annotation(v, "storageclass.kubernetes.io/is-default-class") == Some("true")
        || annotation(v, "storageclass.beta.kubernetes.io/is-default-class") == Some("true")
    {
        n.push_str(" (default)");
    }
    w.str(&n);
    w.str(s(&v["provisioner"]));
    w.str(v["reclaimPolicy"].as_str().unwrap_or("Delete"));
    w.str(v["volumeBindingMode"].as_str().unwrap_or("Immediate"));
    w.bool(v["allowVolumeExpansion"].as_bool().unwrap_or(false));
    w.since("", created(v), "");
}

pub(crate) fn priority_class(w: &mut Writer, v: &Value) {
    w.str(name(v));
    w.int(int(&v["value"]));
    w.bool(v["globalDefault"].as_bool().unwrap_or(false));
    w.since("", created(v), "");
    w.str(s(&v["preemptionPolicy"]));
}

pub(crate) fn role_binding(w: &mut Writer, v: &Value) {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for sub in arr(&v["subjects"]) {
        match s(&sub["kind"]) {
            "ServiceAccount" => sas.push(format!("{}/{}", s(&sub["namespace"]), s(&sub["name"]))),
            "User" => users.push(s(&sub["name"]).to_string()),
            "Group" => groups.push(s(&sub["name"]).to_string()),
            _ => {}
        }
    }
    w.str(name(v));
    w.str(&format!("{}/{}", s(&v["roleRef"]["kind"]), s(&v["roleRef"]["name"])));
    w.since("", created(v), "");
    w.str(&users.join(", "));
    w.str(&groups.join(", "));
    w.str(&sas.join(", "));
}
