//! Progress for long ingests: a bar when stderr is a terminal, a plain line every few seconds
//! otherwise (logs stay readable), nothing with `--progress off`.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use gpuledger_collector::ingest::Progress;
use indicatif::{ProgressBar, ProgressStyle};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProgressMode {
    /// A bar on a terminal, plain lines otherwise.
    Auto,
    /// Always a bar.
    On,
    /// Nothing.
    Off,
}

pub enum Reporter {
    Bar(ProgressBar),
    Lines { total: AtomicU64, done: AtomicU64, started: Instant, last: Mutex<Instant> },
    Silent,
}

impl Reporter {
    pub fn new(mode: ProgressMode) -> Reporter {
        let terminal = std::io::stderr().is_terminal();
        match mode {
            ProgressMode::Off => Reporter::Silent,
            ProgressMode::On => Reporter::bar(),
            ProgressMode::Auto if terminal => Reporter::bar(),
            ProgressMode::Auto => Reporter::Lines { total: AtomicU64::new(0), done: AtomicU64::new(0), started: Instant::now(), last: Mutex::new(Instant::now()) },
        }
    }

    fn bar() -> Reporter {
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Reporter::Bar(bar)
    }
}

impl Progress for Reporter {
    fn start(&self, files: u64, bytes: u64) {
        match self {
            Reporter::Bar(b) => {
                b.set_length(bytes);
                b.set_message(format!("{files} files"));
            }
            Reporter::Lines { total, .. } => {
                total.store(bytes, Ordering::Relaxed);
                eprintln!("gpuledger: reading {files} files, {:.1} MiB", bytes as f64 / 1048576.0);
            }
            Reporter::Silent => {}
        }
    }

    fn advance(&self, bytes: u64) {
        match self {
            Reporter::Bar(b) => b.inc(bytes),
            Reporter::Lines { total, done, started, last } => {
                let d = done.fetch_add(bytes, Ordering::Relaxed) + bytes;
                let Ok(mut last) = last.lock() else { return };
                if last.elapsed() >= Duration::from_secs(5) {
                    *last = Instant::now();
                    let t = total.load(Ordering::Relaxed).max(1);
                    eprintln!(
                        "gpuledger: {:.0}% read ({:.1} of {:.1} MiB) after {:.0}s",
                        100.0 * d as f64 / t as f64,
                        d as f64 / 1048576.0,
                        t as f64 / 1048576.0,
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            Reporter::Silent => {}
        }
    }

    fn finish(&self) {
        if let Reporter::Bar(b) = self {
            b.finish_and_clear();
        }
    }
}
