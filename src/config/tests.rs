use super::*;
use clap::CommandFactory;
use std::time::Duration;

#[test]
fn go_durations_and_bare_numbers() {
    for (d, text) in [(0, "0s"), (90, "1m30s"), (300, "5m0s"), (3600, "1h0m0s"), (5430, "1h30m30s")] {
        assert_eq!(value::seconds_text(d), text);
        assert_eq!(seconds(text), Ok(d), "{text} reads back");
    }
    assert_eq!(value::millis_text(1500), "1.5s");
    assert_eq!(millis("1.5s"), Ok(1500));
    for (s, want) in [
        ("0", Duration::ZERO),
        ("90s", Duration::from_secs(90)),
        ("1m30s", Duration::from_secs(90)),
        ("1h", Duration::from_secs(3600)),
        ("1.5h", Duration::from_secs(5400)),
        ("300ms", Duration::from_millis(300)),
        ("2m0.5s", Duration::from_millis(120_500)),
        ("+5s", Duration::from_secs(5)),
        ("10us", Duration::from_micros(10)),
        ("10µs", Duration::from_micros(10)),
    ] {
        assert_eq!(parse_go_duration(s), Ok(want), "{s}");
    }
    for bad in ["", "s", "5", "5x", "-5s", "1m-5s", ".s", "5 s", "1d"] {
        assert!(parse_go_duration(bad).is_err(), "{bad:?} should not parse");
    }
    assert_eq!(seconds("90"), Ok(90));
    assert_eq!(seconds("90s"), Ok(90));
    assert_eq!(seconds("1m30s"), Ok(90));
    assert_eq!(seconds("5m"), Ok(300));
    assert!(seconds("1500ms").is_err(), "a seconds flag takes whole seconds");
    assert!(seconds("ninety").is_err());
    assert_eq!(millis("3000"), Ok(3000));
    assert_eq!(millis("3s"), Ok(3000));
    assert_eq!(millis("1.5s"), Ok(1500));
    assert!(millis("10us").is_err());
}

#[derive(Parser)]
struct Serve {
    #[command(flatten)]
    serve: ServeArgs,
}

fn serve(flags: &[&str]) -> Result<ServeArgs, clap::Error> {
    Serve::try_parse_from(std::iter::once("kache").chain(flags.iter().copied())).map(|s| s.serve)
}

#[test]
fn duration_flags_take_go_durations_and_bare_numbers_in_their_old_unit() {
    let s = serve(&["--serve-stale", "5m", "--upstream-timeout", "15", "--consistent-wait", "2s", "--stall-timeout", "1m30s"]).unwrap();
    assert_eq!(
        (s.cache.serve_stale_seconds, s.cache.upstream_timeout_seconds, s.cache.consistent_wait_ms, s.security.stall_timeout_seconds),
        (300, 15, 2000, 90)
    );
    // A bare number is in the unit the old name (and the environment variable) says.
    assert_eq!(serve(&["--consistent-wait", "1500"]).unwrap().cache.consistent_wait_ms, 1500);
    assert_eq!(serve(&["--write-timeout", "2h"]).unwrap().security.write_timeout_seconds, 7200);
    assert!(serve(&["--serve-stale", "five"]).is_err());
    assert!(serve(&["--shutdown-grace", "1500ms"]).is_err(), "a setting kept in seconds takes whole seconds");
    // The defaults, shown as durations, parse through the same parsers.
    let d = serve(&[]).unwrap();
    assert_eq!((d.cache.serve_stale_seconds, d.cache.consistent_wait_ms, d.shutdown_grace_seconds), (300, 3000, 30));
    assert_eq!(d.security.stall_timeout_seconds, crate::serve::server::stall::STALL_TIMEOUT.as_secs());
}

#[test]
fn size_flags_take_quantities() {
    let s =
        serve(&["--cache-window-size", "32Mi", "--max-header-size", "1.5Mi", "--max-watch-buffers-size", "1Gi", "--max-uri-size", "100k"])
            .unwrap();
    assert_eq!(
        (s.cache.window_bytes, s.security.max_header_bytes, s.security.max_watch_buffers_bytes, s.security.max_uri_bytes),
        (32 << 20, 3 << 19, 1 << 30, 100_000)
    );
    let s = serve(&["--max-cheaper-upstream-rate-per-client", "500M", "--max-table-cell-size-per-object", "1024"]).unwrap();
    assert_eq!((s.cache.max_cheaper_upstream_bytes_per_client, s.cache.max_table_cell_bytes_per_object), (500_000_000, 1024));
    for bad in ["32MB", "-1Ki", "1.5", "lots", "500m"] {
        assert!(serve(&["--cache-window-size", bad]).is_err(), "{bad}");
    }
    let d = serve(&[]).unwrap();
    assert_eq!(d.cache.window_bytes, crate::cache::DEFAULT_WINDOW_BYTES);
    assert_eq!(d.security.max_watch_buffers_bytes_per_user, crate::serve::handler::WATCH_BUFFERS_PER_USER);
    assert_eq!(d.cache.max_cheaper_upstream_bytes_per_client, 8 << 20);
}

#[test]
fn old_flag_names_still_work() {
    let s = serve(&[
        "--cache-window-bytes",
        "33554432",
        "--serve-stale-seconds",
        "120",
        "--consistent-wait-ms",
        "2500",
        "--watch-bookmark-interval-seconds",
        "1m",
        "--max-header-bytes",
        "64Ki",
        "--stall-timeout-seconds",
        "20",
        "--token-cache-ttl-seconds",
        "30",
        "--max-cheaper-upstream-bytes-per-client",
        "1048576",
        "--shutdown-grace-seconds",
        "5",
    ])
    .unwrap();
    assert_eq!((s.cache.window_bytes, s.cache.serve_stale_seconds, s.cache.consistent_wait_ms), (32 << 20, 120, 2500));
    assert_eq!((s.cache.bookmark_interval_seconds, s.security.max_header_bytes, s.security.stall_timeout_seconds), (60, 64 << 10, 20));
    assert_eq!(
        (s.security.token_cache_ttl_seconds, s.cache.max_cheaper_upstream_bytes_per_client, s.shutdown_grace_seconds),
        (30, 1 << 20, 5)
    );
    // An old name and its new one are the same flag: given both, clap refuses it as given twice.
    assert!(serve(&["--serve-stale", "1m", "--serve-stale-seconds", "60"]).is_err());
}

/// Every old name of every subcommand still parses, and is hidden from `--help`.
#[test]
fn old_names_are_hidden_aliases_of_flags_without_units() {
    let cli = Cli::command();
    let mut aliases = 0;
    for sub in cli.get_subcommands() {
        for a in sub.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            assert!(
                !(long.ends_with("-seconds") || long.ends_with("-ms") || long.contains("-bytes")),
                "kache {} --{long}: a flag's name carries no unit",
                sub.get_name()
            );
            assert!(a.get_visible_aliases().is_none_or(|v| v.is_empty()), "--{long}: old names stay hidden");
            aliases += a.get_all_aliases().map_or(0, |v| v.len());
        }
    }
    assert!(aliases >= 25, "only {aliases} aliases");
}

#[test]
fn defaults_show_durations_and_quantities() {
    let cli = Cli::command();
    let serve = cli.find_subcommand("serve").unwrap();
    let default = |long: &str| {
        let a = serve.get_arguments().find(|a| a.get_long() == Some(long)).unwrap_or_else(|| panic!("--{long}"));
        a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect::<Vec<_>>().join(",")
    };
    assert_eq!(default("cache-window-size"), "32Mi");
    assert_eq!(default("max-watch-buffers-size"), "1Gi");
    assert_eq!(default("serve-stale"), "5m0s");
    assert_eq!(default("upstream-watch-idle"), "1m30s");
    assert_eq!(default("consistent-wait"), "3s");
    assert_eq!(default("listen"), DEFAULT_LISTEN);
}

#[test]
fn the_command_line_is_consistent() {
    Cli::command().debug_assert();
    // Port 0 is still there for whoever wants a free port.
    assert_eq!(serve(&["--listen", "127.0.0.1:0"]).unwrap().listen, "127.0.0.1:0");
}

#[test]
fn every_serve_flag_has_a_heading_and_a_one_line_summary() {
    let mut cli = Cli::command();
    cli.build();
    let serve = cli.find_subcommand("serve").unwrap();
    for a in serve.get_arguments().filter(|a| !matches!(a.get_id().as_str(), "help" | "version")) {
        let long = a.get_long().unwrap_or_default();
        assert!(a.get_help_heading().is_some(), "--{long} has no heading");
        let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        assert!(!help.is_empty() && !help.contains('\n') && help.len() <= 100, "--{long}: summary {help:?}");
    }
}

#[test]
fn version_names_the_commit() {
    let v = Cli::command().render_version();
    assert!(v.contains(env!("CARGO_PKG_VERSION")) && v.contains(crate::GIT_COMMIT), "{v}");
    assert!(!crate::GIT_COMMIT.is_empty());
}

#[test]
fn completions_and_man_pages_name_the_flags() {
    use clap_complete::Shell;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let script = String::from_utf8(manual::completion(&manual::CompletionArgs { shell })).unwrap();
        assert!(script.contains("serve") && script.contains("cache-window-size"), "{shell}: {script}");
        assert!(!script.contains("cache-window-bytes"), "{shell}: old names are not offered");
    }
    let page = String::from_utf8(manual::man(&manual::ManArgs { command: None }).unwrap()).unwrap();
    assert!(page.contains(".TH kache") && page.contains("serve") && page.contains("log\\-level"), "{page}");
    let page = String::from_utf8(manual::man(&manual::ManArgs { command: Some("serve".into()) }).unwrap()).unwrap();
    assert!(page.contains(".TH kache-serve") && page.contains("cache\\-window\\-size"), "{page}");
    assert!(page.contains("KACHE_CACHE_WINDOW_BYTES") && page.contains("LISTENING AND TLS"), "{page}");
    assert!(manual::man(&manual::ManArgs { command: Some("nope".into()) }).is_err());
}

#[test]
fn log_levels_are_checked() {
    for ok in ["info", "INFO", "debug", "warn,kache=debug", "kache=debug,hyper=warn", "off", "kache::serve=trace"] {
        validate_log_level(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in ["", "verbose", "warning", "kache=loud", "=debug", "info,nonsense"] {
        let e = validate_log_level(bad).unwrap_err();
        assert_eq!(e.flag, "--log-level", "{bad}");
    }
}

#[test]
fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
    use std::ffi::OsStr;
    assert!(log_colours(true, None));
    assert!(log_colours(true, Some(OsStr::new(""))), "an empty NO_COLOR is unset");
    assert!(!log_colours(true, Some(OsStr::new("1"))));
    assert!(!log_colours(false, None), "a file or a pipe gets no escape codes");
    assert!(!log_colours(false, Some(OsStr::new("1"))));
}

#[test]
fn the_demo_churns_by_default_and_the_simulator_does_not() {
    let churn = |argv: &[&str]| match Cli::try_parse_from(argv).expect("flags parse").command {
        Command::Demo(d) => d.cluster.churn_per_sec,
        Command::Sim(s) => s.cluster.churn_per_sec,
        _ => unreachable!("a demo or sim command"),
    };
    assert_eq!(churn(&["kache", "demo"]), DEMO_CHURN_PER_SEC.parse::<f64>().unwrap());
    assert!(churn(&["kache", "demo"]) > 0.0);
    assert_eq!(churn(&["kache", "demo", "--churn-per-sec", "0"]), 0.0);
    assert_eq!(churn(&["kache", "demo", "--churn-per-sec", "50"]), 50.0);
    assert_eq!(churn(&["kache", "sim"]), 0.0);
}
