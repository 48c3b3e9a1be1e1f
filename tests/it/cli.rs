//! The command line as a user meets it: help, exit codes, one-line errors, schema output.

use tempfile::TempDir;

use crate::util::{bin, run};

#[test]
fn help_teaches_examples_and_exit_codes() {
    let out = run(&["--help"], 0);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["ingest", "query", "schema", "simulate", "demo", "Exit codes:", "gpuledger ingest ./capture --store ./store"] {
        assert!(text.contains(want), "--help lacks {want:?}:\n{text}");
    }
    let out = run(&["ingest", "--help"], 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--strict") && text.contains("<unix-millis>.prom"), "{text}");
}

#[test]
fn strict_turns_bad_input_into_exit_1_and_keeps_the_rest() {
    let dir = TempDir::new().unwrap();
    let f = dir.path().join("1790812800000.prom");
    std::fs::write(&f, "good{a=\"1\"} 1\nbad{a=\"1\"} x\n").unwrap();
    let store = dir.path().join("store");
    let out = run(&["ingest", "--strict", "--progress", "off", "--store", &store.display().to_string(), &f.display().to_string()], 1);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1790812800000.prom:2: value \"x\" is not a number"), "{err}");
    let q = run(&["query", "--store", &store.display().to_string(), "--format", "csv", "SELECT metric, value FROM metric_samples"], 0);
    assert_eq!(String::from_utf8_lossy(&q.stdout), "metric,value\ngood,1.0\n");
}

#[test]
fn errors_are_one_line_with_exit_2() {
    let dir = TempDir::new().unwrap();
    let out = run(&["query", "--store", &dir.path().join("nope").display().to_string(), "SELECT 1"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("gpuledger: error: store ") && err.contains("no such directory"), "{err}");
    let store = dir.path().join("s");
    std::fs::create_dir(&store).unwrap();
    let out = run(&["query", "--store", &store.display().to_string(), "SELECT nope FROM gpu_samples"], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("query `SELECT nope FROM gpu_samples`") && err.contains("nope"), "{err}");
    // Not a store: refuse to write into somebody's directory.
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    let f = dir.path().join("notes.txt");
    let out = run(&["ingest", "--progress", "off", "--store", &dir.path().display().to_string(), &f.display().to_string()], 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a gpuledger store"));
}

/// `config check`: every mistake of every section, with its line, exit 1; the shipped example
/// has none; the server's secrets only with `--serve`; nothing is created.
#[test]
fn config_check_reports_every_mistake_and_runs_nothing() {
    let dir = TempDir::new().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[accounting]\nidle_policy = \"everyone\"\n\n[collector]\ndcgm_prot = 9400\n\n[serve]\nmemory_limit = \"lots\"\n\n[[serve.users]]\nname = \"grafana\"\npassword_env = \"GPULEDGER_TEST_UNSET_PASSWORD\"\n").unwrap();
    let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    let out = run(&["config", "check", &bad.display().to_string()], 1);
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    let file = bad.display().to_string();
    // (A file with ledger sections needs its default price too.)
    assert_eq!(lines.len(), 4, "{text}");
    for (line, (at, key)) in lines.iter().zip([(1, "prices.default"), (2, "accounting.idle_policy"), (5, "collector.dcgm_prot"), (8, "serve.memory_limit")]) {
        assert!(line.starts_with(&format!("{file}:{at}: {key}: ")), "{line}");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 mistakes"));
    // The server's password variable is unset: a mistake for the server only.
    let out = run(&["config", "check", "--serve", &file], 1);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("{file}:12: serve.users[0].password_env")), "{}", String::from_utf8_lossy(&out.stdout));
    let after: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before, after, "config check created files");

    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/gpuledger.toml");
    let out = run(&["config", "check", "--ledger", example], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no mistakes (checked: ledger, collector, store, serve)"), "{}", String::from_utf8_lossy(&out.stdout));
    let out = run(&["config", "check", &dir.path().join("missing.toml").display().to_string()], 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read"));
}

#[test]
fn schema_prints_every_documented_column() {
    let out = run(&["schema", "gpu_samples"], 0);
    let text = String::from_utf8_lossy(&out.stdout);
    for c in gpuledger_schemas::table("gpu_samples").unwrap().columns {
        assert!(text.contains(c.name) && text.contains(c.doc), "missing {}", c.name);
    }
    let out = bin().args(["schema", "gpu_sample"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no table named \"gpu_sample\""));
}

#[test]
fn schema_lists_and_shows_the_derived_tables() {
    let all = String::from_utf8_lossy(&run(&["schema"], 0).stdout).to_string();
    for t in gpuledger_schemas::DERIVED_TABLES {
        assert!(all.contains(&format!("{} (derived) -- ", t.name)) && all.contains(&format!("file: ledger/{}.parquet", t.name)), "{} not listed", t.name);
    }
    let out = run(&["schema", "priced_state_hours"], 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("priced_state_hours (derived) -- "), "{text}");
    for c in gpuledger_schemas::derived_table("priced_state_hours").unwrap().columns {
        assert!(text.contains(c.name) && text.contains(c.doc), "missing {}", c.name);
    }
}

/// Without the `ballista` feature (the default build), the distributed engine's commands say in
/// one line that this build lacks it and how to get it, instead of failing somewhere inside.
#[cfg(not(feature = "ballista"))]
#[test]
fn a_build_without_ballista_says_so_and_how_to_get_it() {
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store").display().to_string();
    let ledger = ["ledger", "--store", &store, "--engine", "ballista", "--scheduler", "df://127.0.0.1:9"];
    for args in [&["ballista", "scheduler", "--listen", "127.0.0.1:0"][..], &["ballista", "executor", "--scheduler", "127.0.0.1:9", "--listen", "127.0.0.1:0"][..], &ledger[..]] {
        let out = run(args, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("not in this build") && err.contains("--features ballista"), "{err}");
    }
}

/// `gpuledger store status | head -4`, at its worst: the reader is gone before the first line
/// (a pipe whose read end is closed), so every write fails with a broken pipe. The command ends
/// quietly and successfully, as `head`'s writers do, instead of panicking.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    let store = TempDir::new().unwrap();
    let store = store.path().to_str().unwrap();
    for args in [vec!["schema"], vec!["store", "status", "--store", store]] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let output = bin().args(&args).stdout(writer).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("error"), "{args:?}: stderr: {stderr}");
        assert!(output.status.success(), "{args:?}: {:?}, stderr: {stderr}", output.status);
    }
}
