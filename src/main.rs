//! `gpuledger`: the command-line program. Parsing and glue only; the work lives in the
//! `collector` (sources -> store) and `ledger` (store -> SQL) crates.

mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator's settings this program runs with, set in its environment (mimalloc reads
/// them once, before `main`). `MIMALLOC_PURGE_DELAY=0`: memory freed goes back to the system at
/// once. With mimalloc's default delay a thread returns freed pages only when it next
/// allocates, so between the steps of a ledger run the process kept pages it no longer used:
/// on 16 GPUs x 2 days under `--memory-limit 128MiB` the peak RSS was 506 MiB with the
/// default, 365 MiB with none (the debug build, same figures). `MIMALLOC_ARENA_EAGER_COMMIT=0`:
/// mimalloc's arenas (1 GiB of address space each) are committed as they are used rather than
/// in large steps up front: 8 GPUs x 4 days under `--memory-limit 96MiB`, peak RSS 415 -> 269 MiB
/// (debug build).
const ALLOCATOR_ENV: &[(&str, &str)] = &[("MIMALLOC_PURGE_DELAY", "0"), ("MIMALLOC_ARENA_EAGER_COMMIT", "0")];

/// Runs this program again with [`ALLOCATOR_ENV`] unless it already has it (or the user set
/// those variables); returns only if that cannot be done, and the program goes on as it is.
fn with_allocator_settings() {
    use std::os::unix::process::CommandExt;
    if ALLOCATOR_ENV.iter().all(|(k, _)| std::env::var_os(k).is_some()) {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let mut cmd = std::process::Command::new(exe);
    cmd.arg0(arg0).args(args);
    for (k, v) in ALLOCATOR_ENV {
        if std::env::var_os(k).is_none() {
            cmd.env(k, v);
        }
    }
    // `exec` replaces this process; it returns only on failure.
    let _ = cmd.exec();
}

fn main() -> ExitCode {
    with_allocator_settings();
    // kube and reqwest both use rustls; exactly one crypto provider (ring) is compiled in, and
    // it is made the process default before either builds a TLS config.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = cli::Cli::parse();
    if let Err(e) = gpuledger_telemetry::logs::init(args.log_format) {
        let _ = writeln!(std::io::stderr(), "gpuledger: error: {e}");
        return ExitCode::from(cli::EXIT_ERROR);
    }
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`gpuledger query ... | head`) is not an error worth a message.
            if e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)) {
                return ExitCode::SUCCESS;
            }
            let msg = gpuledger_telemetry::join_chain(e.chain());
            let _ = writeln!(std::io::stderr(), "gpuledger: error: {msg}");
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}
