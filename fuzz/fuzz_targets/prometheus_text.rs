//! The exposition-text reader must never panic, and every line it reads is either a sample or
//! a reported error.
#![no_main]

use std::path::Path;

use gpuledger_collector::Diagnostics;
use gpuledger_collector::sources::dcgm_text::{ScrapeTime, read_text};
use gpuledger_collector::tables::samples::SampleTables;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut tables = SampleTables::new();
    let mut diags = Diagnostics::new();
    let stats = read_text(Path::new("fuzz.prom"), data, ScrapeTime::FileName(0), &mut tables, &mut diags);
    assert_eq!(stats.lines, stats.samples + stats.rejected);
    assert_eq!(stats.rejected as usize, diags.errors.len());
    let _ = tables.take_batches().expect("batches build");
});
