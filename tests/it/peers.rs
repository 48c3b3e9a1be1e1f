//! Peer readers: DuckDB (PyPI `duckdb`) reads every table of the store without gpuledger, and
//! its counts match `gpuledger query`.

use std::process::Command;

use tempfile::TempDir;

use crate::util::{count, ingest, run};

#[test]
fn duckdb_reads_every_table_with_the_same_counts() {
    let probe = Command::new("python3").args(["-c", "import duckdb"]).output();
    assert!(
        probe.as_ref().is_ok_and(|o| o.status.success()),
        "DuckDB is needed for this test: python3 -m pip install duckdb (.ci/run does)"
    );
    let dir = TempDir::new().unwrap();
    let cap = dir.path().join("capture");
    run(&["simulate", "--out", &cap.display().to_string(), "--gpus", "8", "--days", "1", "--scrape-interval", "60s"], 0);
    let store = dir.path().join("store");
    ingest(&[&cap], &store);
    let script = r#"
import duckdb, json, os, sys
root = sys.argv[1]
out = {}
for t in sys.argv[2:]:
    d = os.path.join(root, t)
    if not os.path.isdir(d):
        out[t] = 0
        continue
    q = f"SELECT count(*), count(DISTINCT date) FROM read_parquet('{d}/*/*.parquet', hive_partitioning = true)"
    out[t] = duckdb.execute(q).fetchone()[0]
print(json.dumps(out))
"#;
    let names: Vec<&str> = gpuledger_schemas::TABLES.iter().map(|t| t.name).collect();
    let out = Command::new("python3").arg("-c").arg(script).arg(&store).args(&names).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let duck: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut nonempty = 0;
    for t in &names {
        let ours = count(&store, &format!("SELECT count(*) AS n FROM {t}"));
        assert_eq!(duck[t].as_i64(), Some(ours), "table {t}");
        if ours > 0 {
            nonempty += 1;
        }
    }
    assert!(nonempty >= 8, "the simulated capture should fill most tables, filled {nonempty}");
}
