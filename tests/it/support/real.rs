//! The opt-in real tier's switch: `KACHE_REAL_KUBECONFIG` names a real kube-apiserver's
//! kubeconfig (`KACHE_REAL_CONTEXT` a context in it, default the current one). A test of the
//! tier asks [`real_upstream`] first and returns when it is `None`: the tier is off, and the
//! test has said that it is skipped and which variable runs it. CI sets neither.

use kache::upstream::Upstream;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable that names the real apiserver's kubeconfig and turns the tier on.
pub const KUBECONFIG: &str = "KACHE_REAL_KUBECONFIG";
/// The variable that picks a context of that kubeconfig.
pub const CONTEXT: &str = "KACHE_REAL_CONTEXT";

/// A real apiserver the environment names: its kubeconfig and context.
#[derive(Debug, Clone)]
pub struct RealUpstream {
    /// The kubeconfig file.
    pub kubeconfig: PathBuf,
    /// The context (`None`: the kubeconfig's current one).
    pub context: Option<String>,
}

/// The tier's apiserver, or `None` after printing that `test` is skipped because
/// `KACHE_REAL_KUBECONFIG` is not set (and the calling file, whose doc says how to run it).
#[track_caller]
pub fn real_upstream(test: &str) -> Option<RealUpstream> {
    real_upstream_named(test, KUBECONFIG)
}

/// [`real_upstream`] for a tier whose kubeconfig the variable `var` names (a cluster of its
/// own).
#[track_caller]
pub fn real_upstream_named(test: &str, var: &str) -> Option<RealUpstream> {
    let found = RealUpstream::from_env(var);
    if found.is_none() {
        eprintln!("{test}: skipped, {var} is not set (see {})", std::panic::Location::caller().file());
    }
    found
}

impl RealUpstream {
    /// The tier's apiserver, for helpers that run only after their test found the tier on.
    pub fn on() -> RealUpstream {
        RealUpstream::from_env(KUBECONFIG).expect("the real tier is on")
    }

    fn from_env(var: &str) -> Option<RealUpstream> {
        let kubeconfig = PathBuf::from(std::env::var_os(var)?);
        let context = std::env::var(CONTEXT).ok().filter(|c| !c.is_empty());
        Some(RealUpstream { kubeconfig, context })
    }

    /// kache's upstream client of it.
    pub async fn upstream(&self) -> Upstream {
        Upstream::load(Some(&self.kubeconfig), self.context.as_deref()).await.expect("the real apiserver's kubeconfig loads")
    }

    /// Its kube-rs client configuration.
    pub async fn config(&self) -> kube::Config {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
        let options = kube::config::KubeConfigOptions { context: self.context.clone(), ..Default::default() };
        kube::Config::from_custom_kubeconfig(kc, &options).await.expect("config")
    }

    /// A kube-rs client of it directly (not through kache).
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).expect("client")
    }

    /// `kubectl ARGS` run directly against it, its discovery cached under `cache`.
    pub fn kubectl(&self, cache: &Path, args: &[&str]) -> Command {
        let mut c = super::kubectl_command(&self.kubeconfig, cache, args);
        if let Some(context) = &self.context {
            c.arg("--context").arg(context);
        }
        c
    }
}
