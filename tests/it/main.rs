//! Integration tests: the real `gpuledger` binary on real fixtures, simulated captures and
//! peer readers. One test binary (each extra one would link DataFusion again).

mod backfill;
mod cli;
mod dashboards;
mod delta;
mod deploy;
mod dra;
mod drivers;
mod fleet;
mod hostile;
mod incremental;
mod focus;
mod fixtures;
mod ingest;
mod ledger;
mod live;
mod peers;
mod replay;
mod retention;
mod serve_http;
mod serve_sql;
mod serving;
mod simulate;
mod util;
