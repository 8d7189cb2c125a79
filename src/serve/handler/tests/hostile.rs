//! Hostile query strings: every option a client can send, with extreme, malformed and
//! contradictory values, parsed and answered by every cached handler in every encoding and
//! view. Each request gets a response or a Status; nothing panics, on the request's task or
//! on a watch's own.

use super::watching;
use crate::api::media::{Format, View};
use crate::api::query::Options;
use crate::cache::object::Object;
use crate::cache::window::EventType;
use crate::cache::KindCache;
use crate::serve::handler::table::Include;
use crate::serve::handler::{get, list, watch};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use http_body_util::BodyExt;
use proptest::prelude::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, Once, OnceLock};
use std::thread::ThreadId;
use std::time::Duration;

/// Threads whose panics are counted (each case runs its runtime, and so the watches it
/// spawns, on its own thread), and the panics seen on them.
fn watched() -> &'static Mutex<(HashSet<ThreadId>, usize)> {
    static W: OnceLock<Mutex<(HashSet<ThreadId>, usize)>> = OnceLock::new();
    W.get_or_init(Default::default)
}

/// Count panics on watched threads (other tests' panics pass to the previous hook alone).
fn count_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let mut w = watched().lock().unwrap_or_else(|e| e.into_inner());
            if w.0.contains(&std::thread::current().id()) {
                w.1 += 1;
            }
            drop(w);
            previous(info);
        }));
    });
}

/// Numbers as clients may write them, in and out of every integer type's range.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("9223372036854775807".to_string()),
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("9223372036854775807".to_string()),
        Just("9223372036854775808".to_string()),
        Just("-9223372036854775808".to_string()),
        Just("18446744073709551615".to_string()),
        Just("18446744073709551616".to_string()),
        Just("18446744074".to_string()),
        Just("99999999999999999999999999".to_string()),
        Just("+5".to_string()),
        Just(" 5".to_string()),
        Just("0x10".to_string()),
        Just("1e3".to_string()),
        Just("\u{663}".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..40).prop_map(|n| n.to_string()),
    ]
}

/// Continue tokens: well-formed ones with any RV and start key, and junk.
fn token() -> impl Strategy<Value = String> {
    let start = prop_oneof![
        Just(String::new()),
        Just("/".to_string()),
        Just("/\u{0}".to_string()),
        Just("/ns/cm-0001\u{0}".to_string()),
        Just("/../secrets/x\u{0}".to_string()),
        Just("/ns/\u{ffff}\u{0}".to_string()),
        "[a-z/.\u{0}-]{0,20}",
        (1usize..5000).prop_map(|n| format!("/{}\u{0}", "x".repeat(n))),
    ];
    let v = prop_oneof![Just("meta.k8s.io/v1".to_string()), Just("v2".to_string())];
    let rv = prop_oneof![Just(i64::MIN), Just(-2i64), Just(-1i64), Just(0i64), Just(i64::MAX), 1i64..40];
    prop_oneof![
        3 => (v, rv, start).prop_map(|(v, rv, start)| URL_SAFE_NO_PAD.encode(serde_json::json!({"v": v, "rv": rv, "start": start}).to_string())),
        1 => "[A-Za-z0-9_=+/-]{0,40}",
        1 => Just(URL_SAFE_NO_PAD.encode("{\"rv\":1e400}")),
        1 => Just(URL_SAFE_NO_PAD.encode("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[")),
    ]
}

/// Label and field selectors: plausible, malformed, and large.
fn selector() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z.=!,()/ -]{0,30}",
        Just("metadata.name=cm-0001".to_string()),
        Just("metadata.namespace!=ns".to_string()),
        Just("a in (x,y),!b,c notin (z)".to_string()),
        Just("a==b==c".to_string()),
        (1usize..3000).prop_map(|n| format!("a in ({})", (0..n).map(|i| format!("v{i}")).collect::<Vec<_>>().join(","))),
        (1usize..3000).prop_map(|n| "(".repeat(n)),
        (1usize..500).prop_map(|n| (0..n).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join(",")),
    ]
}

/// One query parameter with a value of the kind it takes (or any other).
fn param() -> impl Strategy<Value = (String, String)> {
    let words = prop_oneof![
        Just(String::new()),
        Just("true".to_string()),
        Just("false".to_string()),
        Just("Exact".to_string()),
        Just("NotOlderThan".to_string()),
        Just("Metadata".to_string()),
        Just("None".to_string()),
        Just("Object".to_string()),
        "[a-zA-Z0-9]{0,8}",
    ];
    let key = prop_oneof![
        Just("watch"),
        Just("resourceVersion"),
        Just("resourceVersionMatch"),
        Just("limit"),
        Just("continue"),
        Just("labelSelector"),
        Just("fieldSelector"),
        Just("allowWatchBookmarks"),
        Just("sendInitialEvents"),
        Just("timeoutSeconds"),
        Just("includeObject"),
        Just("pretty"),
    ];
    (key, prop_oneof![3 => number(), 3 => words, 2 => token(), 2 => selector()]).prop_map(|(k, v)| (k.to_string(), v))
}

fn cache() -> Arc<KindCache> {
    let res = Arc::new(crate::sim::catalog::resource("configmaps"));
    let cache = Arc::new(KindCache::new(res, 10, crate::cache::Limits::default()));
    for i in 0..5u64 {
        let mut o = Object::bare(crate::cache::object::key("ns", &format!("cm-{i:04}")), 11 + i);
        o.json = Some(Bytes::from(format!(",{{\"metadata\":{{\"name\":\"cm-{i:04}\",\"namespace\":\"ns\"}}}}")));
        cache.apply(EventType::Added, o);
    }
    cache
}

/// Answer `query` in every view and encoding; the codes of the Statuses given.
async fn answer(cache: &Arc<KindCache>, query: &str) -> Vec<u16> {
    let opts = match Options::parse(Some(query)) {
        Ok(o) => o,
        Err(s) => return vec![s.code],
    };
    let include = Include::parse(opts.include_object.as_deref()).unwrap_or(Include::Metadata);
    let views = [
        View::Object,
        View::Metadata { list: !opts.watch, beta: false },
        View::Metadata { list: false, beta: true },
        View::Table { beta: false },
    ];
    let mut codes = Vec::new();
    for view in views {
        for fmt in [Format::Json, Format::Protobuf] {
            for ns in [None, Some("ns")] {
                let resp = if opts.watch {
                    watch(cache.clone(), watching(ns, opts.clone(), fmt, view), None).await
                } else {
                    let _ = get(cache, Some("ns"), "cm-0001", fmt, view, include);
                    list(cache, ns, &opts, fmt, view).await
                };
                match resp {
                    // Read what the answer starts with: a watch's first chunk, a list's body.
                    Ok(r) => {
                        let mut body = r.into_body();
                        let _ = tokio::time::timeout(Duration::from_secs(5), body.frame()).await;
                    }
                    Err(s) => codes.push(s.code),
                }
            }
        }
    }
    codes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_query_gets_an_answer_or_a_status_and_nothing_panics(watch in any::<bool>(), params in proptest::collection::vec(param(), 0..6)) {
        count_panics();
        let mut query = form_urlencoded::Serializer::new(String::new());
        if watch {
            query.append_pair("watch", "true");
        }
        let query = query.extend_pairs(&params).finish();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        let me = std::thread::current().id();
        watched().lock().unwrap().0.insert(me);
        let cache = rt.block_on(async { cache() });
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.block_on(async {
            let codes = answer(&cache, &query).await;
            // Let the watches spawned run until their clients are gone.
            tokio::time::sleep(Duration::from_secs(1)).await;
            codes
        })));
        drop(rt);
        let panics = {
            let mut w = watched().lock().unwrap();
            w.0.remove(&me);
            std::mem::take(&mut w.1)
        };
        let codes = run.map_err(|_| TestCaseError::fail(format!("{query}: the request's task panicked")))?;
        prop_assert_eq!(panics, 0, "{}: a watch panicked", query);
        for code in codes {
            prop_assert!((400..600).contains(&code), "{}: Status {}", query, code);
        }
    }
}
