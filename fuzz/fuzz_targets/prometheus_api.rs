//! The Prometheus API response reader must never panic.
#![no_main]

use std::path::Path;

use gpuledger_collector::Diagnostics;
use gpuledger_collector::sources::prometheus_api::read_response;
use gpuledger_collector::tables::samples::SampleTables;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut tables = SampleTables::new();
    let mut diags = Diagnostics::new();
    read_response(Path::new("fuzz.json"), data, &mut tables, &mut diags);
    let _ = tables.take_batches().expect("batches build");
});
