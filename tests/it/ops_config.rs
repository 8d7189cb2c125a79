//! Operations: configuration is validated at start. A bad value, given as a flag or as its
//! `KACHE_...` environment variable, makes the binary exit with code 2 and a message that
//! names the flag, before it listens or talks to the upstream (the upstream here is a socket
//! that accepts nothing, so a check made too late shows up as a hang, caught by a deadline).
//! Also: every flag of every subcommand has a `KACHE_...` environment variable; a failed
//! start ends with one line naming what failed (flag and address, upstream URL, kubeconfig
//! file); and kache says once why it answers 401 (its own credentials refused, a client's
//! token unknown to the upstream, no credentials).

use clap::CommandFactory;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Run the binary with `args` and `env` (KUBECONFIG and every KACHE_ variable of the test's
/// own environment removed); kill it and fail if it is still running after 30 s.
fn run(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = dir.path().join("stderr");
    let mut c = Command::new(env!("CARGO_BIN_EXE_kache"));
    c.args(args).env_remove("KUBECONFIG");
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KACHE_")) {
        c.env_remove(k);
    }
    c.envs(env.iter().copied());
    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&err).expect("stderr file"));
    let mut child = crate::support::ChildGuard(c.spawn().expect("spawn kache"));
    let end = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.0.try_wait().expect("try_wait") {
            break s;
        }
        if Instant::now() > end {
            let _ = child.0.kill();
            panic!(
                "kache {args:?} {env:?} was still running after 30 s instead of rejecting its configuration: {}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Outcome { code: status.code(), stderr: std::fs::read_to_string(&err).unwrap_or_default() }
}

/// A kubeconfig whose server is a listening socket that never answers, and the listener
/// (keep it alive for the test).
fn silent_upstream() -> (tempfile::TempDir, String, std::net::TcpListener) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = crate::support::ops::upstream_kubeconfig(dir.path(), &format!("http://{}", listener.local_addr().unwrap()));
    (dir, path.display().to_string(), listener)
}

fn rejected(args: &[&str], env: &[(&str, &str)], names: &[&str]) {
    let out = run(args, env);
    assert_eq!(out.code, Some(2), "kache {args:?} with {env:?}: expected exit code 2, got {:?}: {}", out.code, out.stderr);
    for n in names {
        assert!(out.stderr.contains(n), "kache {args:?} with {env:?}: message does not name {n:?}: {}", out.stderr);
    }
    assert!(out.stderr.lines().count() <= 6, "a short message, not a dump: {}", out.stderr);
}

#[test]
fn bad_serve_flags_exit_2_naming_the_flag() {
    let (_dir, kc, _l) = silent_upstream();
    let base = ["serve", "--upstream-kubeconfig", kc.as_str(), "--insecure-http"];
    let with = |extra: &[&'static str]| -> Vec<&str> { base.iter().copied().chain(extra.iter().copied()).collect() };
    for (extra, flag) in [
        (&["--cache-window-events", "0"][..], "--cache-window-events"),
        (&["--snapshot-history", "0"], "--snapshot-history"),
        (&["--watcher-lag", "0"], "--watcher-lag"),
        (&["--watch-bookmark-interval", "0"], "--watch-bookmark-interval"),
        (&["--cache-window-events", "many"], "--cache-window-events"),
        (&["--consistent-wait=-5"], "--consistent-wait"),
        (&["--shutdown-grace", "soon"], "--shutdown-grace"),
        (&["--preload-encodings", "yaml"], "--preload-encodings"),
        (&["--log-format", "xml"], "--log-format"),
        (&["--listen", "not-an-address"], "--listen"),
        (&["--log-level", "verbose"], "--log-level"),
        (&["--log-level", "kache=loud"], "--log-level"),
        (&["--serve-stale", "5 minutes"], "--serve-stale"),
        (&["--upstream-timeout", "1500ms"], "--upstream-timeout"),
        // An old name is the same flag, and the message names the new one.
        (&["--serve-stale-seconds", "5 minutes"], "--serve-stale"),
        (&["--cache-window-size", "32MB"], "--cache-window-size"),
        (&["--cache-window-bytes=-1"], "--cache-window-size"),
        (&["--max-header-size", "1Ki"], "--max-header-size"),
        (&["--write-timeout", "0s"], "--write-timeout"),
        (&["--tls-min-version", "VersionTLS10"], "--tls-min-version"),
        (&["--tls-cipher-suites", "TLS_RSA_WITH_AES_128_CBC_SHA"], "--tls-cipher-suites"),
    ] {
        rejected(&with(extra), &[], &[flag]);
    }
    // Plain HTTP off loopback.
    rejected(&with(&["--listen", "0.0.0.0:0"]), &[], &["--listen", "loopback"]);
    rejected(&with(&["--listen", "[::]:0"]), &[], &["--listen", "loopback"]);
    // Security flags (TLS is the default when --insecure-http is not given).
    rejected(&["serve", "--upstream-kubeconfig", kc.as_str(), "--passthrough-auth", "sideways"], &[], &["--passthrough-auth"]);
    rejected(&["serve", "--upstream-kubeconfig", kc.as_str(), "--tls-cert-file", "/nonexistent.crt"], &[], &["--tls-private-key-file"]);
}

#[test]
fn bad_values_from_the_environment_exit_2_naming_the_flag() {
    let (_dir, kc, _l) = silent_upstream();
    let serve = ["serve", "--upstream-kubeconfig", kc.as_str(), "--insecure-http"];
    for (var, value, flag) in [
        ("KACHE_CACHE_WINDOW_EVENTS", "0", "--cache-window-events"),
        ("KACHE_SNAPSHOT_HISTORY", "0", "--snapshot-history"),
        ("KACHE_WATCHER_LAG", "0", "--watcher-lag"),
        ("KACHE_CACHE_WINDOW_EVENTS", "ten", "--cache-window-events"),
        ("KACHE_SHUTDOWN_GRACE_SECONDS", "soon", "--shutdown-grace"),
        ("KACHE_CACHE_WINDOW_BYTES", "lots", "--cache-window-size"),
        ("KACHE_PRELOAD_ENCODINGS", "json,yaml", "--preload-encodings"),
        ("KACHE_LOG_FORMAT", "xml", "--log-format"),
        ("KACHE_LISTEN", "0.0.0.0:0", "--listen"),
    ] {
        rejected(&serve, &[(var, value)], &[flag]);
    }
    // The whole configuration from the environment, one value bad.
    rejected(
        &["serve"],
        &[("KACHE_UPSTREAM_KUBECONFIG", kc.as_str()), ("KACHE_INSECURE_HTTP", "true"), ("KACHE_LISTEN", "0.0.0.0:0")],
        &["--listen", "loopback"],
    );
    // A flag given on the command line wins over its environment variable.
    rejected(
        &["serve", "--upstream-kubeconfig", kc.as_str(), "--insecure-http", "--cache-window-events", "0"],
        &[("KACHE_CACHE_WINDOW_EVENTS", "100")],
        &["--cache-window-events"],
    );
}

#[test]
fn bad_sim_and_demo_flags_exit_2() {
    rejected(&["sim", "--nodes", "0"], &[], &["--nodes"]);
    rejected(&["sim", "--churn-per-sec=-1"], &[], &["--churn-per-sec"]);
    rejected(&["sim"], &[("KACHE_SIM_CHURN_PER_SEC", "NaN")], &["--churn-per-sec"]);
    rejected(&["sim", "--window-events", "0"], &[], &["--window-events"]);
    rejected(&["sim", "--listen", "0.0.0.0:0"], &[], &["--listen", "loopback"]);
    rejected(&["serve", "--no-such-flag"], &[], &["--no-such-flag"]);
}

/// `kache demo` flattens both the cluster's and the cache's settings, and two pairs of their
/// fields share a clap id (`window_events`: `--window-events` / `--cache-window-events`, and
/// `bookmark_interval_seconds`: `--bookmark-interval` /
/// `--watch-bookmark-interval`). Sharing an id, a debug build of `kache demo` would panic
/// at start on clap's debug assertion and a release build silently give both flags of a
/// pair one value, so src/config gives the cache's fields their own ids.
#[test]
fn demo_flags_are_consistent_and_validated() {
    kache::config::Cli::command().debug_assert();
    rejected(&["demo", "--cache-window-events", "0", "--exit-after", "1s"], &[], &["--cache-window-events"]);
}

/// Flags that are checked only after kache has reached the upstream (or never): a bad
/// `--admin-listen` is found when binding after discovery (exit 1, "cannot listen"), a
/// missing `--upstream-kubeconfig` file exited 1 and hid the other errors. Regression test
/// for `run_serve` validating them first.
#[test]
fn flags_checked_late_are_rejected_up_front() {
    let (_dir, kc, _l) = silent_upstream();
    rejected(&["serve", "--upstream-kubeconfig", kc.as_str(), "--insecure-http", "--admin-listen", "nonsense"], &[], &["--admin-listen"]);
    rejected(&["serve", "--upstream-kubeconfig", "/nonexistent/kubeconfig", "--insecure-http"], &[], &["--upstream-kubeconfig"]);
}

#[test]
fn every_flag_has_a_kache_environment_variable() {
    let cli = kache::config::Cli::command();
    let mut checked = 0;
    let mut missing = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    let mut visit = |cmd: &clap::Command, prefix: &str| {
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if matches!(long, "help" | "version") {
                continue;
            }
            checked += 1;
            match a.get_env().and_then(|e| e.to_str()) {
                Some(env) if env.starts_with("KACHE_") => {
                    if let Some(other) = seen.insert((prefix.to_string(), env.to_string()), long.to_string()) {
                        panic!("{prefix}: {env} is used by both --{other} and --{long}");
                    }
                }
                other => missing.push(format!("{prefix} --{long} (env {other:?})")),
            }
        }
    };
    visit(&cli, "kache");
    for sub in cli.get_subcommands() {
        visit(sub, &format!("kache {}", sub.get_name()));
    }
    assert!(missing.is_empty(), "flags without a KACHE_ environment variable: {missing:?}");
    assert!(checked >= 20, "only {checked} flags seen");
}

/// Run the binary with `args`; its exit code and standard output.
fn output(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kache")).args(args).env_remove("KUBECONFIG").stdin(Stdio::null()).output().expect("kache");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kache serve -h` is a summary: one line per flag, under headings; `--help` adds the
/// long texts; the hidden old names appear in neither.
#[test]
fn serve_help_is_grouped_and_short() {
    let (code, short) = output(&["serve", "-h"]);
    assert_eq!(code, Some(0));
    let (code, long) = output(&["serve", "--help"]);
    assert_eq!(code, Some(0));
    for heading in
        ["Listening and TLS:", "Upstream:", "Caching:", "Freshness:", "Limits:", "Authentication and authorization:", "Observability:"]
    {
        assert!(short.lines().any(|l| l == heading), "-h lacks the heading {heading:?}:\n{short}");
        assert!(long.lines().any(|l| l == heading), "--help lacks the heading {heading:?}");
    }
    let flags = short.lines().filter(|l| l.trim_start().starts_with("--") || l.starts_with("  -h")).count();
    let text = short.lines().filter(|l| !l.is_empty() && !l.ends_with(':')).count();
    assert!(flags >= 60, "{flags} flag lines:\n{short}");
    // Every line other than a heading is a flag's, but for the usage line and the two about the value forms.
    assert!(text <= flags + 5, "{text} lines for {flags} flags: a flag's help spans lines:\n{short}");
    assert!(long.lines().count() > 2 * short.lines().count(), "--help has the long texts");
    assert!(long.contains("--cache-window-size <SIZE>") && long.contains("[default: 32Mi]"), "{long}");
    assert!(long.contains("--listen <ADDR>") && long.contains("[default: 127.0.0.1:7443]"), "{long}");
    assert!(!long.contains("cache-window-bytes") && !long.contains("-seconds <"), "old names are hidden:\n{long}");
}

#[test]
fn version_names_the_commit() {
    let (code, out) = output(&["--version"]);
    assert_eq!(code, Some(0));
    assert_eq!(out.trim(), format!("kache {}", kache::VERSION));
    assert!(out.contains(kache::GIT_COMMIT) && out.contains("(commit "), "{out}");
}

#[test]
fn completion_scripts_and_man_pages_name_serve_and_its_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, script) = output(&["completion", shell]);
        assert_eq!(code, Some(0), "kache completion {shell}");
        assert!(
            script.contains("serve") && script.contains("cache-window-size") && script.contains("upstream-kubeconfig"),
            "{shell}:\n{script}"
        );
    }
    let (code, page) = output(&["man"]);
    assert_eq!(code, Some(0));
    assert!(page.contains(".TH kache "), "{page}");
    assert!(page.contains("serve"), "{page}");
    let (code, page) = output(&["man", "serve"]);
    assert_eq!(code, Some(0));
    assert!(page.contains(".TH kache-serve") && page.contains("\\-\\-listen") && page.contains("KACHE_LISTEN"), "{page}");
    rejected(&["man", "no-such-command"], &[], &["no-such-command"]);
}

/// The one line `kache: ...` a failed start ends with: the last line of stderr, and no other
/// line starts so.
fn start_error(out: &Outcome, args: &[&str]) -> String {
    assert!(out.code.is_some_and(|c| c != 0), "kache {args:?}: expected a failure, got {:?}: {}", out.code, out.stderr);
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(last.starts_with("kache: "), "kache {args:?}: stderr does not end with the error line:\n{}", out.stderr);
    assert_eq!(out.stderr.lines().filter(|l| l.starts_with("kache: ")).count(), 1, "kache {args:?}: one error line:\n{}", out.stderr);
    // Written to a file, not a terminal: the log lines before it carry no colour codes.
    assert!(!out.stderr.contains('\x1b'), "kache {args:?}: ANSI escape codes in a log file:\n{}", out.stderr);
    last.to_string()
}

/// A listen address in use names its flag and the address, for every listener of every
/// subcommand; the error is one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_address_in_use_is_named_with_its_flag() {
    let sim = crate::support::start(&crate::support::cluster(&["--nodes", "2", "--pods", "10"])).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = crate::support::ops::upstream_kubeconfig(dir.path(), &format!("http://{}", sim.addr)).display().to_string();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let busy = taken.local_addr().unwrap().to_string();
    let demo_kc = dir.path().join("demo.kubeconfig").display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["serve", "--upstream-kubeconfig", &kc, "--insecure-http", "--listen", &busy], "--listen"),
        (vec!["serve", "--upstream-kubeconfig", &kc, "--insecure-http", "--admin-listen", &busy], "--admin-listen"),
        (vec!["sim", "--nodes", "2", "--pods", "10", "--listen", &busy], "--listen"),
        (vec!["sim", "--nodes", "2", "--pods", "10", "--fault-listen", &busy], "--fault-listen"),
        (vec!["demo", "--nodes", "2", "--pods", "10", "--kubeconfig", &demo_kc, "--listen", &busy], "--listen"),
    ];
    for (args, flag) in cases {
        let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let out = tokio::task::spawn_blocking(move || run(&owned.iter().map(String::as_str).collect::<Vec<_>>(), &[])).await.unwrap();
        let line = start_error(&out, &args);
        assert!(line.starts_with(&format!("kache: {flag} {busy}: ")), "kache {args:?}: {line}");
        assert!(line.to_lowercase().contains("address already in use"), "kache {args:?}: {line}");
    }
}

/// An upstream that cannot be reached is named by its URL, in one line.
#[test]
fn an_unreachable_upstream_is_named_by_its_url() {
    // A port just freed: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().unwrap().port();
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("http://127.0.0.1:{port}");
    let kc = crate::support::ops::upstream_kubeconfig(dir.path(), &url).display().to_string();
    let args = ["serve", "--upstream-kubeconfig", &kc, "--insecure-http"];
    let line = start_error(&run(&args, &[]), &args);
    assert!(line.starts_with(&format!("kache: cannot discover the resources of the upstream at {url}")), "{line}");
}

/// A kubeconfig that is missing, not a file or not YAML is named in a line of its own,
/// whether given by flag, by KUBECONFIG, or found (not) at ~/.kube/config.
#[test]
fn a_kubeconfig_that_cannot_be_read_is_named_in_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.kubeconfig");
    std::fs::write(&garbage, "apiVersion: v1\nclusters: [\n  - name: x\n").unwrap();
    let garbage = garbage.display().to_string();
    let missing = dir.path().join("missing.kubeconfig").display().to_string();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let home_config = home.join(".kube").join("config").display().to_string();
    let a_dir = dir.path().display().to_string();
    let home = home.display().to_string();
    // The arguments, the environment, and the file the error must name.
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (vec!["serve", "--insecure-http", "--upstream-kubeconfig", &garbage], vec![], &garbage),
        (vec!["serve", "--insecure-http", "--upstream-kubeconfig", &missing], vec![], &missing),
        (vec!["serve", "--insecure-http", "--upstream-kubeconfig", &a_dir], vec![], &a_dir),
        (vec!["serve", "--insecure-http"], vec![("KUBECONFIG", &missing)], &missing),
        (vec!["serve", "--insecure-http"], vec![("KUBECONFIG", &garbage)], &garbage),
        (vec!["serve", "--insecure-http"], vec![("HOME", &home)], &home_config),
        (vec!["kubeconfig", "--server", "https://kache:443", "--out", "-", "--from-kubeconfig", &garbage], vec![], &garbage),
    ];
    for (args, env, file) in cases {
        let line = start_error(&run(&args, &env), &args);
        assert!(line.contains(file), "kache {args:?} {env:?}: the error names {file}: {line}");
        assert!(line.len() < 240, "kache {args:?} {env:?}: a short line: {line}");
    }
}

/// kache says, once, why it answers 401: the upstream refused kache's own credentials (here
/// at discovery, so kache cannot start either), a TokenReview did not authenticate a client's
/// token (an upstream without users), a request came without credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kache_says_once_why_it_answers_401() {
    use crate::support::ops::{request_as, AuthSim, KacheBin};
    let users = "tokens:\n  alice-token: {username: alice, groups: [devs]}\n";
    let sim = AuthSim::start(users, "rules: []\n", &["--nodes", "2", "--pods", "10"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc = dir.path().join("upstream.kubeconfig");
    let url = format!("http://{}", sim.addr);
    std::fs::write(
        &kc,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: up\n  cluster:\n    server: {url}\ncontexts:\n- name: up\n  context:\n    cluster: up\n    user: kache\ncurrent-context: up\nusers:\n- name: kache\n  user:\n    token: not-a-token-the-upstream-knows\n"),
    )
    .unwrap();
    let kc = kc.display().to_string();
    let args = ["serve", "--upstream-kubeconfig", kc.as_str(), "--insecure-http"];
    let out = {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || run(&args.iter().map(String::as_str).collect::<Vec<_>>(), &[])).await.unwrap()
    };
    let line = start_error(&out, &args);
    assert!(line.contains(&url), "{line}");
    assert_eq!(out.stderr.matches("the upstream refused kache's credentials (401 Unauthorized)").count(), 1, "{}", out.stderr);

    // An upstream without users: every client token is refused by its TokenReview.
    let open = crate::support::start(&crate::support::cluster(&["--nodes", "2", "--pods", "10"])).await;
    let k = KacheBin::spawn(&format!("http://{}", open.addr), &["--no-anonymous"], &[], 60).await;
    for token in ["made-up-1", "made-up-2"] {
        assert_eq!(request_as(k.addr, token, http::Method::GET, "/api/v1/pods?limit=1", None).await.0, 401);
    }
    for _ in 0..2 {
        assert_eq!(k.api.get("/api/v1/pods?limit=1").await.status, 401);
    }
    let log = k.stderr();
    assert_eq!(log.matches("the upstream's TokenReview did not authenticate a client's token").count(), 1, "{log}");
    assert!(log.contains("invalid bearer token"), "the review's own reason: {log}");
    assert_eq!(log.matches("a request without credentials got 401: pass --allow-anonymous").count(), 1, "{log}");
    assert!(!log.contains("refused kache's credentials"), "{log}");
}
