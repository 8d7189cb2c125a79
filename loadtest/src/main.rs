//! kache-loadtest: named load scenarios against a Kubernetes API endpoint (skeleton; see issue 5).

use clap::Parser;

/// Load scenarios for kache and any Kubernetes API endpoint.
#[derive(Parser, Debug)]
#[command(name = "kache-loadtest", version)]
struct Args {
    /// Scenario file to run (scenarios land with the load-benchmark issue).
    #[arg(long)]
    scenario: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::bail!(
        "kache-loadtest has no scenarios yet (asked for {:?}); they land with the load-benchmark issue",
        args.scenario
    )
}
