//! The `kache` binary: parse the command line, set up logging, run the subcommand.

use clap::Parser;
use kache::config::{Cli, Command};
use std::io::IsTerminal;
use std::process::ExitCode;

/// jemalloc rather than glibc's malloc: the request path allocates and frees per request
/// from several threads, which costs glibc's allocator a large share of kache's CPU.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Write generated text (a completion script, a man page) to standard output. A reader that
/// closed early (`| head`) is no error.
fn print(text: &[u8]) -> ExitCode {
    use std::io::Write;
    match std::io::stdout().lock().write_all(text) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kache: cannot write to standard output: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // jemalloc returns freed pages to the system only on its own calls unless a background
    // thread does it: after a cold start's LIST buffers are freed, a quiet kache would keep
    // them resident.
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    let cli = Cli::parse();
    match &cli.command {
        Command::Completion(args) => return print(&kache::config::manual::completion(args)),
        Command::Man(args) => {
            return match kache::config::manual::man(args) {
                Ok(page) => print(&page),
                Err(e) => {
                    eprintln!("kache: {e}");
                    ExitCode::from(2)
                }
            }
        }
        _ => {}
    }
    // Refused before anything starts: a mistyped level would otherwise log at a level
    // nobody asked for, or nothing.
    if let Err(e) = kache::config::validate_log_level(&cli.log_level) {
        eprintln!("kache: {e}");
        return ExitCode::from(2);
    }
    let filter = tracing_subscriber::EnvFilter::new(&cli.log_level);
    let colours = kache::config::log_colours(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR").as_deref());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(colours);
    if cli.log_format == kache::config::LogFormat::Json {
        builder.json().init();
    } else {
        builder.init();
    }
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kache: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.command {
            #[cfg(feature = "sim")]
            Command::Sim(args) => kache::sim::launch::run_sim(args).await,
            #[cfg(feature = "sim")]
            Command::Demo(args) => kache::sim::launch::run_demo(args).await,
            Command::Serve(args) => kache::app::run_serve(args).await,
            Command::Kubeconfig(args) => kache::app::kubeconfig::run(&args),
            Command::Status(args) => kache::app::status::run(&args).await,
            // Answered above, before logging starts.
            Command::Completion(_) | Command::Man(_) => Ok(()),
        }
    });
    // Tasks still running (informers, servers) stop here: nothing logs after the outcome,
    // and a blocking job still running does not hold the exit up for long.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kache: {}", kache::app::describe(&e));
            let usage = matches!(e, kache::app::StartError::Config(_) | kache::app::StartError::Kubeconfig(_));
            if usage {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
