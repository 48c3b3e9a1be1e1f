//! The last stored version of every object: what the live collector must not record again when
//! a watch resumes or a list repeats what the store already has.

use std::collections::HashMap;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{Int64Type, TimestampMillisecondType};

use gpuledger_schemas::EventType;

use super::ParquetSource;
use crate::error::{Error, Result};

/// The last stored version of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHead {
    pub resource_version: String,
    pub deleted: bool,
    /// `(observed_at, seq)`: how versions are ordered.
    order: (i64, i64),
}

/// kind -> object key (uid, else `namespace/name`) -> last version.
pub type Heads = HashMap<String, HashMap<String, ObjectHead>>;

/// Folds the versions of one stored `k8s_objects` file into `out`.
pub(crate) fn read_heads(source: ParquetSource, out: &mut Heads) -> Result<()> {
    const COLS: [&str; 8] = ["kind", "namespace", "name", "uid", "resource_version", "event_type", "observed_at", "seq"];
    let file = source.name.clone();
    for batch in source.read_columns(&COLS)? {
        let batch = batch.map_err(|source| Error::Arrow { table: "k8s_objects", source })?;
        let col = |name: &str| batch.column_by_name(name).ok_or_else(|| Error::refused(file.clone(), format!("column {name} missing")));
        let kind = col("kind")?.as_string::<i32>().clone();
        let ns = col("namespace")?.as_string::<i32>().clone();
        let name = col("name")?.as_string::<i32>().clone();
        let uid = col("uid")?.as_string::<i32>().clone();
        let rv = col("resource_version")?.as_string::<i32>().clone();
        let ev = col("event_type")?.as_string::<i32>().clone();
        let at = col("observed_at")?.as_primitive::<TimestampMillisecondType>().clone();
        let seq = col("seq")?.as_primitive::<Int64Type>().clone();
        for i in 0..batch.num_rows() {
            let key = if uid.is_valid(i) && !uid.value(i).is_empty() {
                uid.value(i).to_owned()
            } else {
                format!("{}/{}", if ns.is_valid(i) { ns.value(i) } else { "" }, name.value(i))
            };
            let head = ObjectHead {
                resource_version: if rv.is_valid(i) { rv.value(i).to_owned() } else { String::new() },
                deleted: EventType::parse(ev.value(i)) == Some(EventType::Deleted),
                order: (at.value(i), seq.value(i)),
            };
            let kind_map = out.entry(kind.value(i).to_owned()).or_default();
            match kind_map.get(&key) {
                Some(h) if h.order >= head.order => {}
                _ => {
                    kind_map.insert(key, head);
                }
            }
        }
    }
    Ok(())
}
