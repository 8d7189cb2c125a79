//! Operations documentation and deploy files kept in sync with the code:
//! - the flags table of docs/operations.md is `kache serve --help` (every flag in the order
//!   the help lists them, under its heading, with its environment variable, default and
//!   the whole of its long help);
//! - the metrics table of docs/operations.md is `telemetry::METRICS` (every declared metric,
//!   with the help `/metrics` gives it);
//! - deploy/grafana-dashboard.json queries only declared metrics, and every one of them;
//! - every `KACHE_...` variable the manifests under deploy/ set is one kache reads.
//!
//! On a mismatch the expected table is printed; `BLESS=1 cargo test --test it ops_docs`
//! rewrites the tables in docs/operations.md in place (add `-- --test-threads=1`).

use clap::CommandFactory;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Where the operations reference lives.
const OPERATIONS: &str = "docs/operations.md";

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

fn cell(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

/// The long flags `kache serve --help` lists, in its order.
fn help_flags() -> Vec<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kache"))
        .args(["serve", "--help"])
        .env_remove("KUBECONFIG")
        .output()
        .expect("kache serve --help");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut flags = Vec::new();
    for line in text.lines() {
        // Option lines are indented 2 (`-h, --help`) or 6 (`--name`); their texts, 10.
        if line.len() - line.trim_start().len() > 6 {
            continue;
        }
        let t = line.trim_start();
        // Option lines start with `-x, --name` or `--name`.
        let t = t.strip_prefix("-h, ").or_else(|| t.strip_prefix("-V, ")).unwrap_or(t);
        if let Some(rest) = t.strip_prefix("--") {
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            if !name.is_empty() && !flags.contains(&name) {
                flags.push(name);
            }
        }
    }
    assert!(flags.len() > 10, "too few flags parsed from `kache serve --help`:\n{text}");
    flags
}

/// The flags table, generated from the same clap definition `--help` renders, in the help's order.
fn flags_table() -> String {
    let cli = kache::config::Cli::command();
    let serve = cli.find_subcommand("serve").expect("serve subcommand").clone();
    let args: Vec<clap::Arg> = serve.get_arguments().chain(cli.get_arguments()).cloned().collect();
    let mut rows = vec!["| flag | environment | default | meaning |".to_string(), "|---|---|---|---|".to_string()];
    let mut heading = None;
    for name in help_flags() {
        if name == "help" || name == "version" {
            continue;
        }
        let a = args
            .iter()
            .find(|a| a.get_long() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("--{name} is in --help but not in the clap definition"));
        if a.get_help_heading() != heading {
            heading = a.get_help_heading();
            rows.push(format!("| **{}** | | | |", heading.unwrap_or("Options")));
        }
        let takes_value = a.get_num_args().is_none_or(|n| n.takes_values())
            && !matches!(a.get_action(), clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count);
        let value = if takes_value {
            let v =
                a.get_value_names().and_then(|v| v.first()).map(|s| s.to_string()).unwrap_or_else(|| a.get_id().as_str().to_uppercase());
            format!(" {v}")
        } else {
            String::new()
        };
        let env = a.get_env().and_then(|e| e.to_str()).map(|e| format!("`{e}`")).unwrap_or_default();
        let default: Vec<String> = a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let default = if default.is_empty() || !takes_value { String::new() } else { format!("`{}`", default.join(",")) };
        let mut meaning = a.get_long_help().or(a.get_help()).map(|h| h.to_string()).unwrap_or_default();
        let possible: Vec<String> = a.get_possible_values().iter().map(|p| p.get_name().to_string()).collect();
        if takes_value && !possible.is_empty() {
            // clap drops the period that ends a one-paragraph help.
            if !meaning.is_empty() && !meaning.ends_with('.') {
                meaning.push('.');
            }
            meaning.push_str(&format!(" One of: {}.", possible.join(", ")));
        }
        rows.push(format!("| `--{name}{value}` | {env} | {default} | {} |", cell(&meaning)));
    }
    rows.join("\n")
}

fn metrics_table() -> String {
    let mut rows = vec!["| metric | type | meaning |".to_string(), "|---|---|---|".to_string()];
    for m in kache::telemetry::METRICS {
        rows.push(format!("| `{}` | {} | {} |", m.name, m.kind.as_str(), cell(m.help)));
    }
    rows.join("\n")
}

/// The names of the declared families.
fn declared() -> BTreeSet<&'static str> {
    kache::telemetry::METRICS.iter().map(|m| m.name).collect()
}

/// Replace (BLESS=1) or compare the text between `<!-- NAME:begin -->` and `<!-- NAME:end -->`.
fn check_section(doc: &Path, name: &str, expected: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let (begin, end) = (format!("<!-- {name}:begin -->\n"), format!("<!-- {name}:end -->"));
    let expected = &format!("{expected}\n");
    let (Some(b), Some(e)) = (text.find(&begin), text.find(&end)) else {
        return Err(format!("{} lacks the markers {begin:?} ... {end:?}", doc.display()));
    };
    let current = text.get(b + begin.len()..e).unwrap_or("");
    if current == expected {
        return Ok(());
    }
    if std::env::var_os("BLESS").is_some() {
        let updated = format!("{}{expected}{}", &text[..b + begin.len()], &text[e..]);
        std::fs::write(doc, updated).unwrap();
        return Ok(());
    }
    Err(format!("the {name} table in {} is out of date; expected (or run with BLESS=1):\n\n{expected}\n", doc.display()))
}

#[test]
fn the_flags_table_matches_kache_serve_help() {
    check_section(&repo(OPERATIONS), "flags:serve", &flags_table()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_metrics_table_matches_src_telemetry() {
    check_section(&repo(OPERATIONS), "metrics", &metrics_table()).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn the_grafana_dashboard_uses_exactly_the_declared_metrics() {
    let path = repo("deploy/grafana-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut exprs = Vec::new();
    for p in dash["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    assert!(!exprs.is_empty());
    let declared = declared();
    let mut used = BTreeSet::new();
    for e in &exprs {
        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("kache_")) {
            let base =
                ["_bucket", "_sum", "_count"].iter().find_map(|s| word.strip_suffix(s).filter(|b| declared.contains(*b))).unwrap_or(word);
            assert!(declared.contains(base), "the dashboard queries {word}, which src/telemetry.rs does not declare: {e}");
            used.insert(base);
        }
    }
    let unused: Vec<_> = declared.difference(&used).collect();
    assert!(unused.is_empty(), "metrics without a dashboard panel: {unused:?}");
}

#[test]
fn manifests_set_only_variables_kache_reads() {
    let cli = kache::config::Cli::command();
    let mut known = BTreeSet::new();
    let mut add = |c: &clap::Command| {
        for a in c.get_arguments() {
            if let Some(e) = a.get_env().and_then(|e| e.to_str()) {
                known.insert(e.to_string());
            }
        }
    };
    add(&cli);
    add(cli.find_subcommand("serve").unwrap());
    let mut files = Vec::new();
    let mut stack = vec![repo("deploy")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "env" || x == "yaml") {
                files.push(p);
            }
        }
    }
    let mut seen = 0;
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines().map(str::trim).filter(|l| !l.starts_with('#')) {
            // `KACHE_X=...` in .env files, `name: KACHE_X` in manifests.
            let name = line
                .split_once('=')
                .map(|(k, _)| k)
                .filter(|k| k.starts_with("KACHE_"))
                .or_else(|| line.strip_prefix("- name: ").or_else(|| line.strip_prefix("name: ")).filter(|k| k.starts_with("KACHE_")));
            if let Some(name) = name {
                seen += 1;
                assert!(known.contains(name.trim()), "{} sets {name}, which is not an environment variable of `kache serve`", f.display());
            }
        }
    }
    assert!(seen >= 10, "only {seen} KACHE_ variables found under deploy/");
}

#[test]
fn the_alert_rules_use_declared_metrics_and_the_operations_doc_explains_each() {
    let path = repo("deploy/monitoring/prometheusrule.yaml");
    let rule: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let declared = declared();
    let readme = std::fs::read_to_string(repo(OPERATIONS)).unwrap();
    let mut alerts = 0;
    for g in rule["spec"]["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            let (name, expr) = (r["alert"].as_str().expect("alert"), r["expr"].as_str().expect("expr"));
            alerts += 1;
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| w.starts_with("kache_")) {
                assert!(declared.contains(word), "alert {name} queries {word}, which src/telemetry.rs does not declare: {expr}");
            }
            assert!(readme.contains(&format!("`{name}`")), "{OPERATIONS} does not explain the alert {name}");
        }
    }
    assert!(alerts >= 5, "only {alerts} alerts");
}
