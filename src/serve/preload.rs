//! The resources kache loads at start (`--preload`), listed in turns
//! (`cache::feed::turns`).

use super::Serve;
use crate::api::media::Format;
use crate::api::resource::ResourceRef;
use crate::cache::feed::turns;

/// Start `serve`'s preloaded feeds, held, fill those with a saved state from it
/// (`--state-dir`), and release them one after another: the kinds in the order `--preload`
/// names them, each in protobuf (client-go's encoding) before JSON.
pub(super) async fn preload(serve: &Serve) {
    let (mut order, resources) = (Vec::new(), serve.resources.load());
    for name in &serve.settings.preload {
        let Some(r) = resources.iter().find(|r| &r.plural == name || format!("{}.{}", r.plural, r.group) == *name) else {
            tracing::warn!(resource = %name, "preload: the upstream has no such listable resource");
            continue;
        };
        for fmt in encodings(r, &serve.settings.preload_formats) {
            let feed = serve.feed_held(r, fmt, true);
            feed.mark_preloaded();
            order.push(feed);
        }
    }
    if let Some(p) = &serve.persist {
        if let Some(cluster) = p.cluster(&serve.upstream).await {
            p.restore(&order, &cluster, &serve.upstream).await;
        }
    }
    tokio::spawn(turns::in_turn(order));
}

/// The encodings `r` is preloaded in, protobuf first; protobuf only where the kind has it.
fn encodings(r: &ResourceRef, asked: &[Format]) -> Vec<Format> {
    let mut fmts: Vec<Format> = asked.iter().copied().filter(|f| *f == Format::Json || r.protobuf).collect();
    fmts.sort_by_key(|f| *f != Format::Protobuf);
    fmts.dedup();
    fmts
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn protobuf_is_loaded_first_and_only_where_the_kind_has_it() {
        let mut pods = crate::sim::catalog::resource("pods");
        let both = [Format::Json, Format::Protobuf, Format::Json];
        assert_eq!(encodings(&Arc::new(pods.clone()), &both), vec![Format::Protobuf, Format::Json]);
        pods.protobuf = false;
        let custom = Arc::new(pods);
        assert_eq!(encodings(&custom, &both), vec![Format::Json]);
        assert_eq!(encodings(&custom, &[Format::Protobuf]), Vec::<Format>::new());
    }
}
