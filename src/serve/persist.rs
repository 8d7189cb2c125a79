//! The caches kept across kache's restarts (`--state-dir`): each synced feed's state is
//! written to a file of its own now and then and when kache shuts down, and read back at
//! start, so a preloaded kind resumes its upstream watch from the saved resourceVersion
//! instead of listing again (`cache::state`).
//!
//! A state is used only if it is the upstream cluster's (its `kube-system` UID) and not newer
//! than the cluster (a storage restored from a backup); anything else is refused with one
//! log line and `kache_state_refused_total`, and the kind lists as without a state.
//!
//! Beside the kinds' states, the revision ledger's trust ([`LEDGER_FILE`]): which resources
//! share the upstream's storage is the cluster's layout, not the caches', so a restarted kache
//! takes it back for the same cluster instead of comparing resourceVersions again (a few
//! one-key LISTs per kind).

use crate::cache::feed::Feed;
use crate::cache::state::{self, Cluster, SavedState, StateKey, StateRefused, StateWriteError};
use crate::telemetry;
use crate::upstream::ledger::TrustBook;
use crate::upstream::Upstream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The file of the revision ledger's trust: JSON, the cluster's UID and its [`TrustBook`].
pub const LEDGER_FILE: &str = "ledger.json";

/// The ledger's trust as saved.
#[derive(serde::Serialize, serde::Deserialize)]
struct SavedTrust {
    cluster: String,
    book: TrustBook,
}

/// What `--state-dir` and its flags set.
#[derive(Debug, Clone)]
pub struct StateSettings {
    /// Where the states are written (created 0700).
    pub dir: PathBuf,
    /// How often every synced cache is written (zero: only at shutdown).
    pub every: Duration,
    /// Whether Secrets are written too.
    pub secrets: bool,
}

/// The saved states of one kache.
pub(super) struct Persist {
    settings: StateSettings,
    /// The upstream cluster's identity, once read.
    cluster: tokio::sync::OnceCell<String>,
    /// One writer at a time (the timer's and the shutdown's).
    writing: tokio::sync::Mutex<()>,
}

impl Persist {
    pub(super) fn new(settings: StateSettings) -> Persist {
        Persist { settings, cluster: tokio::sync::OnceCell::new(), writing: tokio::sync::Mutex::new(()) }
    }

    /// Whether `feed`'s state is kept.
    fn keeps(&self, feed: &Feed) -> bool {
        let r = &feed.cache.resource;
        self.settings.secrets || !(r.group.is_empty() && r.plural == "secrets")
    }

    /// Whose state `feed`'s is, for `cluster`.
    fn key(cluster: &str, feed: &Feed) -> StateKey {
        let r = &feed.cache.resource;
        StateKey {
            cluster: cluster.to_string(),
            group: r.group.clone(),
            version: r.version.clone(),
            plural: r.plural.clone(),
            format: feed.fmt,
        }
    }

    /// The file `feed`'s state is kept in.
    fn file(feed: &Feed) -> String {
        let r = &feed.cache.resource;
        state::file_name(&r.group, &r.version, &r.plural, feed.fmt)
    }

    /// Read the upstream's identity (once it answers) and where it stands now.
    pub(super) async fn cluster(&self, upstream: &Upstream) -> Option<Cluster> {
        match state::cluster(upstream).await {
            Ok(c) => {
                let _ = self.cluster.set(c.uid.clone());
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %e, "saved states not used: the upstream cluster's identity cannot be read");
                None
            }
        }
    }

    /// Fill `feeds` (held, not yet running) from their saved states, all at once, each
    /// refused one reported; the others list as usual. The ledger's trust first, if saved for
    /// this cluster.
    pub(super) async fn restore(&self, feeds: &[Arc<Feed>], cluster: &Cluster, upstream: &Upstream) {
        let trust = std::fs::read(self.settings.dir.join(LEDGER_FILE)).ok().and_then(|b| serde_json::from_slice::<SavedTrust>(&b).ok());
        if let Some(t) = trust.filter(|t| t.cluster == cluster.uid) {
            upstream.ledger().restore_trust(&t.book);
        }
        let restoring = feeds.iter().filter(|f| self.keeps(f)).map(|feed| {
            let (key, name) = (Self::key(&cluster.uid, feed), Self::file(feed));
            let (dir, feed, current) = (self.settings.dir.clone(), feed.clone(), cluster.rv);
            async move {
                let restored = tokio::task::spawn_blocking({
                    let feed = feed.clone();
                    move || {
                        let saved = state::read(&dir, &name, &key)?;
                        if saved.rv > current {
                            return Err(StateRefused::Ahead { rv: saved.rv, current });
                        }
                        feed.restore(&saved)
                    }
                })
                .await
                .unwrap_or_else(|e| Err(StateRefused::Inconsistent(format!("restoring panicked: {e}"))));
                match restored {
                    Ok(()) | Err(StateRefused::Missing) => {}
                    Err(e) => {
                        let r = &feed.cache.resource.plural;
                        tracing::warn!(resource = %r, fmt = ?feed.fmt, reason = e.reason(), "saved state not used, listing instead: {e}");
                        metrics::counter!(telemetry::STATE_REFUSED, "reason" => e.reason()).increment(1);
                    }
                }
            }
        });
        futures_util::future::join_all(restoring).await;
    }

    /// Write the state of every synced feed of `feeds` it keeps. The cluster's identity is
    /// read first if it has not been (`upstream`); without it nothing is written.
    pub(super) async fn save(&self, feeds: Vec<Arc<Feed>>, upstream: &Upstream) {
        let _one = self.writing.lock().await;
        let cluster = match self.cluster.get() {
            Some(c) => c.clone(),
            None => match self.cluster(upstream).await {
                Some(c) => c.uid,
                None => return,
            },
        };
        for feed in feeds.into_iter().filter(|f| f.synced() && f.refused().is_none() && self.keeps(f)) {
            let name = Self::file(&feed);
            let (dir, cluster) = (self.settings.dir.clone(), cluster.clone());
            let written = tokio::task::spawn_blocking(move || -> Result<(u64, SavedState), StateWriteError> {
                let saved = SavedState::of(&cluster, &feed.cache, feed.fmt)?;
                let bytes = state::write(&dir, &name, &saved)?;
                Ok((bytes, saved))
            })
            .await;
            match written {
                Ok(Ok((bytes, saved))) => {
                    metrics::counter!(telemetry::STATE_WRITES, "outcome" => "written").increment(1);
                    tracing::debug!(resource = %saved.key.plural, fmt = ?saved.key.format, bytes, rv = saved.rv, "state written");
                }
                Ok(Err(StateWriteError::CustomColumns)) => {}
                Ok(Err(e)) => {
                    metrics::counter!(telemetry::STATE_WRITES, "outcome" => "failed").increment(1);
                    tracing::warn!(error = %e, "state not written");
                }
                Err(e) => tracing::warn!(error = %e, "state not written"),
            }
        }
        let trust = SavedTrust { cluster, book: upstream.ledger().trust_book() };
        let dir = self.settings.dir.clone();
        let written = tokio::task::spawn_blocking(move || {
            state::write_file(&dir, LEDGER_FILE, |out| serde_json::to_writer(out, &trust).map_err(std::io::Error::other))
        })
        .await;
        if let Ok(Err(e)) = written {
            tracing::warn!(error = %e, "the revision ledger's trust not written");
        }
    }

    /// How often the states are written (`None`: only at shutdown).
    pub(super) fn every(&self) -> Option<Duration> {
        Some(self.settings.every).filter(|d| !d.is_zero())
    }
}
