//! `gpuledger`: the command-line program. Parsing and glue only; the work lives in the
//! `collector` (sources -> store) and `ledger` (store -> SQL) crates.

mod cli;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
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
