//! Progress bars (indicatif): one per phase, advancing with time, showing live counters.
//! Drawn on stderr only when it is a terminal.

use crate::stats::Counters;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A phase's bar; finished when dropped.
pub struct Bar {
    bar: ProgressBar,
    task: tokio::task::JoinHandle<()>,
}

impl Bar {
    /// A bar for `label` lasting about `seconds`.
    pub fn start(label: &str, seconds: f64, counters: Arc<Counters>) -> Bar {
        let len = (seconds * 10.0).ceil().max(1.0) as u64;
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>36} [{bar:30}] {elapsed:>4} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_string());
        let b = bar.clone();
        let task = tokio::spawn(async move {
            let start = Instant::now();
            // Bounded: at most an hour of ticks.
            for _ in 0..36_000 {
                let (r, e, bytes, ev) = counters.get();
                b.set_position(((start.elapsed().as_secs_f64() * 10.0) as u64).min(len));
                b.set_message(format!("req {r} err {e} {:.0} MB ev {ev}", bytes as f64 / 1e6));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Bar { bar, task }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.task.abort();
        self.bar.finish();
    }
}
