//! The HTTP API's connections: how many may be open at once, and how long one may sit idle.
//!
//! `axum::serve` keeps a connection as long as the client does: a client that sends half a
//! header and waits, or thousands of idle keep-alive connections, would hold file descriptors
//! until the process ran out (`Too many open files` while refreshing the store's tables). The
//! listener here takes a connection only while fewer than `max` are open (the rest wait in the
//! kernel's listen queue), and closes one that moves no byte for `idle`.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// A TCP listener with a cap on open connections and an idle deadline on each.
pub struct GuardedListener {
    inner: TcpListener,
    open: Arc<Semaphore>,
    idle: Duration,
}

impl GuardedListener {
    pub fn new(inner: TcpListener, max: usize, idle: Duration) -> Self {
        GuardedListener { inner, open: Arc::new(Semaphore::new(max.max(1))), idle }
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = IdleTimeout;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // Never closed, so acquiring only waits.
        let permit = Arc::clone(&self.open).acquire_owned().await;
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    return (IdleTimeout::new(stream, self.idle, permit.ok()), addr);
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "http: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that fails its reads and writes once no byte has moved for `idle`, which makes
/// the HTTP server close it; it gives its place back when dropped.
pub struct IdleTimeout {
    stream: TcpStream,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    _place: Option<OwnedSemaphorePermit>,
}

impl IdleTimeout {
    fn new(stream: TcpStream, idle: Duration, place: Option<OwnedSemaphorePermit>) -> Self {
        IdleTimeout { stream, idle, deadline: Box::pin(tokio::time::sleep(idle)), _place: place }
    }

    /// Progress moves the deadline; no progress past it is an error.
    fn after<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>, moved: bool) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                if moved {
                    let at = Instant::now() + self.idle;
                    self.deadline.as_mut().reset(at);
                }
                Poll::Ready(r)
            }
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "no byte moved within serve.http_idle_timeout"))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl AsyncRead for IdleTimeout {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let moved = buf.filled().len() > before;
        self.after(cx, polled, moved)
    }
}

impl AsyncWrite for IdleTimeout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write(cx, data);
        let moved = matches!(polled, Poll::Ready(Ok(n)) if n > 0);
        self.after(cx, polled, moved)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        let moved = matches!(polled, Poll::Ready(Ok(n)) if n > 0);
        self.after(cx, polled, moved)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
