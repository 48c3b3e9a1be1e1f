//! The object-stream reader and the typed tables must never panic on any bytes, as JSON or YAML.
#![no_main]

use std::path::Path;

use gpuledger_collector::Diagnostics;
use gpuledger_collector::sources::kubernetes_file::read_objects;
use gpuledger_collector::tables::k8s::K8sTables;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for name in ["fuzz.json", "fuzz.yaml"] {
        let path = Path::new(name);
        let mut diags = Diagnostics::new();
        let versions = read_objects(path, data, 0, &mut diags);
        let mut tables = K8sTables::new();
        for v in &versions {
            tables.push(path, v, &mut diags);
        }
        let _ = tables.finish().expect("batches build");
    }
});
