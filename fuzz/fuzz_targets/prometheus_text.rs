//! The exposition-text reader must never panic, and every line that is neither blank nor a
//! comment is either a record or a reported bad line, numbered as the text numbers it.
#![no_main]

use gpuledger_dcgm_text::Reader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut reader = Reader::new();
    let mut records = reader.records(data);
    let mut numbers = Vec::new();
    while let Some(item) = records.next() {
        match item {
            Ok(r) => {
                let _ = records.labels(r.labels);
                numbers.push(r.line);
            }
            Err(bad) => {
                assert!(!bad.reason.is_empty());
                numbers.push(bad.line);
            }
        }
    }
    let expected: Vec<u64> = data
        .split(|c| *c == b'\n')
        .zip(1u64..)
        .filter(|(line, _)| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let start = line.iter().position(|c| *c != b' ' && *c != b'\t');
            start.is_some_and(|i| line[i] != b'#')
        })
        .map(|(_, n)| n)
        .collect();
    assert_eq!(numbers, expected);
});
