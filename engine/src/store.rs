//! The ledger's one store-specific step in DataFusion: letting a session reach the store.
//!
//! Reading the Parquet is DataFusion's, through listing tables over the store's URL; every
//! other file operation is `gpuledger_store`'s.

use std::sync::Arc;

use datafusion::prelude::SessionContext;
use gpuledger_store::StoreLocation;

/// Lets `ctx` read the store's URLs (a no-op for a directory).
pub fn register_client(ctx: &SessionContext, location: &StoreLocation) {
    if let StoreLocation::Remote(r) = location {
        ctx.register_object_store(&r.bucket_url(), Arc::clone(&r.store));
    }
}
