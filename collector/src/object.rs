//! One version of one Kubernetes or Kueue object: what the readers (`sources::kubernetes_file`,
//! the live watchers) find and the tables (`tables::k8s`) take. Apart from both, so that the
//! tables need nothing from the readers.

use gpuledger_schemas::EventType;

/// One version of one object, in the order its stream holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectVersion {
    /// Observation time, UTC milliseconds (see `k8s_objects.observed_at` in the schema).
    pub observed_at_ms: i64,
    /// Position in its source stream, 0-based.
    pub seq: i64,
    /// ADDED / MODIFIED / DELETED, or SNAPSHOT for List items and plain objects.
    pub event_type: EventType,
    /// The object, `metadata.managedFields` removed.
    pub object: serde_json::Value,
}

/// Parses an RFC 3339 time (Kubernetes `Time` and `MicroTime`) into UTC milliseconds.
pub(crate) fn parse_time_ms(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(s.trim()).ok().map(|t| t.timestamp_millis())
}
