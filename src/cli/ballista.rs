//! `gpuledger ballista scheduler|executor`: the processes of a Ballista cluster that runs the
//! accounting (`gpuledger ledger --engine ballista`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuledger_engine::ballista::{self, ExecutorOptions};

/// Run a Ballista scheduler or executor for `gpuledger ledger --engine ballista`.
///
/// These are Ballista 55's own scheduler and executor (the library code of the stock
/// binaries) with gpuledger's SQL functions and object-store credentials added: stock
/// binaries cannot run the accounting, whose SQL calls label(), epoch_ms() and mig_sevenths().
/// Every process reads the store with the credentials of its own environment (AWS_*,
/// GOOGLE_*, AZURE_*), so give each the same ones.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// The scheduler: plans each query into stages and hands tasks to executors.
    #[command(after_help = "Example:\n  gpuledger ballista scheduler --listen 0.0.0.0:50050")]
    Scheduler(SchedulerArgs),
    /// An executor: runs tasks and serves their shuffle output to other executors.
    #[command(after_help = "Example:\n  gpuledger ballista executor --scheduler 10.0.0.5:50050 --listen 0.0.0.0:50051 --concurrency 8 --memory-limit 24GiB")]
    Executor(ExecutorArgs),
}

#[derive(Debug, clap::Args)]
pub struct SchedulerArgs {
    /// Address of the scheduler's gRPC service (clients connect as df://HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:50050")]
    listen: SocketAddr,
}

#[derive(Debug, clap::Args)]
pub struct ExecutorArgs {
    /// The scheduler's address (HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:50050")]
    scheduler: SocketAddr,
    /// Address of the executor's Arrow Flight service; its gRPC service takes the next port.
    /// The host is what other executors connect to, so make it reachable from them.
    #[arg(long, default_value = "127.0.0.1:50051")]
    listen: SocketAddr,
    /// Tasks run at once (default: the number of cores).
    #[arg(long)]
    concurrency: Option<usize>,
    /// Directory for shuffle files and spills (default: a new temporary directory).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Memory of all running tasks together (e.g. 8GiB); operators spill beyond their share.
    #[arg(long, value_parser = super::byte_size)]
    memory_limit: Option<u64>,
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    if !gpuledger_engine::BALLISTA_BUILT {
        anyhow::bail!("ballista {}", gpuledger_engine::BALLISTA_NOT_BUILT);
    }
    // Deep plans (the accounting's views nest a dozen levels) are decoded and planned
    // recursively: the stock Ballista binaries use 32 MiB stacks for the same reason.
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_stack_size(32 << 20).build().context("starting the runtime")?;
    match command {
        Command::Scheduler(a) => {
            eprintln!("gpuledger: ballista scheduler listening on {}", a.listen);
            rt.block_on(ballista::run_scheduler(a.listen)).context("ballista scheduler")?;
        }
        Command::Executor(a) => {
            let temp;
            let work_dir = match a.work_dir {
                Some(d) => d,
                None => {
                    temp = tempfile::tempdir().context("creating the executor's work directory")?;
                    temp.path().to_path_buf()
                }
            };
            let concurrency = a.concurrency.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            eprintln!("gpuledger: ballista executor on {} ({concurrency} task slots, work dir {}), scheduler {}", a.listen, work_dir.display(), a.scheduler);
            let options = ExecutorOptions { scheduler: a.scheduler, listen: a.listen, concurrency, work_dir, memory_limit: a.memory_limit };
            rt.block_on(ballista::run_executor(options)).context("ballista executor")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
