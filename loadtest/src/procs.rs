//! CPU and RSS of the processes under test, from `/proc/PID/stat` (utime + stime) and
//! `/proc/PID/status` (VmRSS), sampled while a phase runs.

use crate::stats::ProcFigures;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn clock_ticks() -> f64 {
    static TCK: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// CPU seconds (user + system) the process has used.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Resident set size in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Samples a set of processes from `start` until `finish`.
pub struct Sampler {
    procs: Vec<(String, u32, f64)>,
    peaks: Arc<std::sync::Mutex<Vec<u64>>>,
    stop: Arc<AtomicBool>,
    started: Instant,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Sampler {
    /// Start sampling `procs` (role, pid) every 250 ms.
    pub fn start(procs: Vec<(String, u32)>) -> Sampler {
        let procs: Vec<(String, u32, f64)> = procs.into_iter().map(|(r, p)| (r, p, cpu_seconds(p).unwrap_or(0.0))).collect();
        let peaks = Arc::new(std::sync::Mutex::new(procs.iter().map(|p| rss_bytes(p.1).unwrap_or(0)).collect::<Vec<_>>()));
        let stop = Arc::new(AtomicBool::new(false));
        let pids: Vec<u32> = procs.iter().map(|p| p.1).collect();
        let (p2, s2) = (peaks.clone(), stop.clone());
        let task = tokio::spawn(async move {
            // Bounded: at most one hour of samples.
            for _ in 0..14_400 {
                if s2.load(Ordering::Relaxed) {
                    break;
                }
                {
                    let mut peaks = p2.lock().unwrap_or_else(|e| e.into_inner());
                    for (i, pid) in pids.iter().enumerate() {
                        peaks[i] = peaks[i].max(rss_bytes(*pid).unwrap_or(0));
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Sampler { procs, peaks, stop, started: Instant::now(), task: Some(task) }
    }

    /// Stop and return each process's figures.
    pub async fn finish(mut self) -> Vec<ProcFigures> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let wall = self.started.elapsed().as_secs_f64().max(1e-9);
        let peaks = self.peaks.lock().unwrap_or_else(|e| e.into_inner()).clone();
        self.procs
            .iter()
            .zip(peaks)
            .map(|((role, pid, cpu0), peak)| {
                let end = rss_bytes(*pid).unwrap_or(0);
                ProcFigures {
                    role: role.clone(),
                    pid: *pid,
                    cpu_percent: 100.0 * (cpu_seconds(*pid).unwrap_or(*cpu0) - cpu0) / wall,
                    rss_mb_end: end as f64 / 1e6,
                    rss_mb_peak: peak.max(end) as f64 / 1e6,
                }
            })
            .collect()
    }
}
