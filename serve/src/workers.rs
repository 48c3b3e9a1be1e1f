//! The statements' own threads.
//!
//! SQL connections and the HTTP API's queries run on a tokio runtime of their own, apart from
//! the one that accepts connections, answers `/healthz` and the HTTP API, and runs the timers:
//! statements that keep every one of their threads busy cannot make the server deaf. Their
//! plans yield regularly (see [`crate::stop`]), so they take turns among themselves too.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

/// The runtime statements run on. Dropped from async code (the server's end), so it is shut
/// down in the background instead of waiting for its tasks.
pub struct Workers {
    runtime: Option<Runtime>,
    handle: Handle,
}

impl Workers {
    /// A runtime with `threads` worker threads named `gpuledger-sql`.
    pub fn new(threads: usize) -> std::io::Result<Workers> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(threads.max(1)).thread_name("gpuledger-sql").enable_all().build()?;
        let handle = runtime.handle().clone();
        Ok(Workers { runtime: Some(runtime), handle })
    }

    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        if let Some(r) = self.runtime.take() {
            r.shutdown_background();
        }
    }
}

/// Runs `work` on `handle`'s runtime; dropping the returned future (the caller gave up: a
/// timeout, a closed HTTP connection) aborts the work.
pub fn run_on<T: Send + 'static>(handle: &Handle, work: impl Future<Output = T> + Send + 'static) -> Aborting<T> {
    Aborting(handle.spawn(work))
}

/// A spawned task that is aborted when its handle is dropped.
pub struct Aborting<T>(JoinHandle<T>);

impl<T> Future for Aborting<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
