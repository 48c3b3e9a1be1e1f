//! `/metrics`, `/healthz`, `/readyz` over HTTP (axum).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;

use super::metrics::Metrics;

pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(metrics);
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, "the HTTP server failed");
    }
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], m.render(super::now_ms()))
}

async fn ready(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    if m.is_ready() { (StatusCode::OK, "ready\n") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready: replaying the WAL or listing the cluster\n") }
}
