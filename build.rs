//! Build script: the git commit kache is built from, as `KACHE_GIT_COMMIT` for
//! `kache::GIT_COMMIT` (`kache --version`, the `kache_build_info` metric).
//!
//! `KACHE_GIT_COMMIT` set in the build's environment wins (an image build has no `.git`);
//! otherwise `git rev-parse --short HEAD`; "unknown" without git or outside a repository.
//! It is read again when HEAD moves: a checkout, or a commit on the current branch.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=KACHE_GIT_COMMIT");
    let commit = match std::env::var("KACHE_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into()),
    };
    // `--git-path` resolves a worktree's HEAD and the refs it shares with the main checkout.
    // Only files that exist are watched: cargo reruns a build script on every build while a
    // watched file is missing (a branch whose ref is only in packed-refs has none).
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for path in watched {
        if let Some(p) = git(&["rev-parse", "--git-path", &path]).filter(|p| std::path::Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    println!("cargo:rustc-env=KACHE_GIT_COMMIT={commit}");
}
