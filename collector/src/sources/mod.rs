//! Readers of the capture formats of DESIGN.md ("Capture directories"). Each turns bytes into
//! rows for [`crate::tables`] plus diagnostics; none writes the store.

pub mod dcgm_text;
pub mod kubernetes_file;
pub mod prometheus_api;
