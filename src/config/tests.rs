use super::*;
use std::time::Duration;

#[test]
fn go_durations_and_bare_numbers() {
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

#[test]
fn seconds_flags_take_both_forms() {
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        cache: CacheArgs,
    }
    let f =
        Flags::try_parse_from(["kache", "--serve-stale-seconds", "5m", "--upstream-timeout-seconds", "15", "--consistent-wait-ms", "2s"])
            .unwrap();
    assert_eq!((f.cache.serve_stale_seconds, f.cache.upstream_timeout_seconds, f.cache.consistent_wait_ms), (300, 15, 2000));
    assert!(Flags::try_parse_from(["kache", "--serve-stale-seconds", "five"]).is_err());
    // The defaults still parse through the same parser.
    let f = Flags::try_parse_from(["kache"]).unwrap();
    assert_eq!(f.cache.serve_stale_seconds, 300);
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
