//! # tessera-server
//!
//! An OpenAI-compatible HTTP server over one loaded model: `POST /v1/chat/completions` (text
//! and images as `data:` URLs, streamed as server-sent events or not), Anthropic's
//! `POST /v1/messages` (and `/v1/messages/count_tokens`), `POST /v1/responses` (stateless),
//! `POST /v1/completions`, `POST /v1/embeddings`, `GET /v1/models`, `GET /health` and `GET /metrics` (Prometheus
//! text). Generation runs in [`tessera::Engine`]'s continuous batching: every request joins
//! the running batch between decode steps, and a client that disconnects cancels its
//! sequence at once. Errors use OpenAI's JSON shape with the matching status (Anthropic's on
//! `/v1/messages`).
//!
//! Logs (one line per request) go to stderr through [`logging::init`]'s lossy queue: a slow or
//! stuck stderr costs log lines, counted in `/metrics` as `tessera_log_lines_dropped_total`,
//! never requests.

mod api;
pub mod connections;
mod error;
mod handlers;
pub mod logging;
mod metrics;

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::routing::{get, post};
use axum::Router;
use tessera::{Engine, EngineConfig, Model};

pub use error::ApiError;

/// What the server allows and how it names its model.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The model's id in `/v1/models` and in responses.
    pub model_name: String,
    /// Request bodies larger than this are refused (413).
    pub max_body_bytes: usize,
    /// `max_tokens` when a request gives none.
    pub default_max_tokens: usize,
    /// Images per request.
    pub max_images: usize,
    /// Pixels per image, read from the image's header before decoding.
    pub max_image_pixels: u64,
    /// Local image paths and `file://` URLs are read only under this folder (off when `None`).
    pub allowed_local_media: Option<PathBuf>,
    /// `http(s)` image URLs are downloaded only from these hosts and their subdomains (none:
    /// off).
    pub allowed_media_domains: Vec<String>,
    /// Connections served at once; more are answered 503 ([`connections`]).
    pub max_connections: usize,
    /// How long a connection may take to send a request's head, from its opening or its last
    /// response; then it is closed.
    pub header_timeout: Duration,
    /// How long a stop request waits for running requests before closing their connections.
    pub drain_timeout: Duration,
    pub engine: EngineConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            model_name: "tessera".into(),
            max_body_bytes: 32 << 20,
            default_max_tokens: 256,
            max_images: 8,
            max_image_pixels: tessera::DEFAULT_MAX_PIXELS,
            allowed_local_media: None,
            allowed_media_domains: Vec::new(),
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(120),
            engine: EngineConfig::default(),
        }
    }
}

/// The server's shared state: the engine (which owns the model) and the settings.
pub struct AppState {
    pub engine: Engine,
    pub config: ServerConfig,
    /// Unix seconds at start (`created` of the model entry).
    pub created: u64,
    pub started: Instant,
    /// The connections' counters (`/metrics`).
    pub connections: connections::ConnectionStats,
    /// Set once the server stops taking requests: every new one gets 503.
    pub draining: AtomicBool,
    next_id: std::sync::atomic::AtomicU64,
}

impl AppState {
    /// Starts the engine's scheduler over `model`.
    pub fn new(model: Arc<Model>, config: ServerConfig) -> tessera::Result<Arc<Self>> {
        if let Some(dir) = &config.allowed_local_media {
            if !dir.is_dir() {
                return Err(tessera::TesseraError::InvalidInput(format!(
                    "--allowed-local-media {}: not a folder",
                    dir.display()
                )));
            }
        }
        let engine = Engine::start(model, config.engine.clone())?;
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Ok(Arc::new(Self {
            engine,
            config,
            created,
            started: Instant::now(),
            connections: Default::default(),
            draining: false.into(),
            next_id: 0.into(),
        }))
    }

    pub fn model(&self) -> &Model {
        self.engine.model()
    }

    /// A fresh response id after `prefix` (`chatcmpl-…`, `cmpl-…`, `msg_…`).
    fn id(&self, prefix: &str) -> String {
        let n = self.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{prefix}{:x}{n:06x}", self.created)
    }
}

/// Every route of the API.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(handlers::chat_completions))
        .route("/v1/messages", post(handlers::messages))
        .route("/v1/messages/count_tokens", post(handlers::count_tokens))
        .route("/v1/responses", post(handlers::responses))
        .route("/v1/completions", post(handlers::completions))
        .route("/v1/embeddings", post(handlers::embeddings))
        .route("/v1/models", get(handlers::models))
        .route("/health", get(handlers::health))
        .route("/metrics", get(metrics::metrics))
        .route("/", get(handlers::chat_page))
        .fallback(handlers::not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), refuse_while_draining))
        .layer(axum::middleware::from_fn(log_request))
        .with_state(state)
}

/// Once the server is shutting down, every new request gets 503 (the running ones finish).
async fn refuse_while_draining(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    if state.draining.load(std::sync::atomic::Ordering::SeqCst) {
        let message = "the server is shutting down".to_string();
        return ApiError { status: axum::http::StatusCode::SERVICE_UNAVAILABLE, message, param: None }.into_response();
    }
    next.run(req).await
}

/// One log line per request: method, path, status and time to the response's head (a
/// stream's body continues after it).
async fn log_request(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    let (method, path, start) = (req.method().clone(), req.uri().path().to_string(), Instant::now());
    let res = next.run(req).await;
    tracing::info!(%method, path, status = res.status().as_u16(), ms = start.elapsed().as_millis() as u64, "request");
    res
}

/// Serves `state` on `listener` until `shutdown` resolves; then drains (running requests
/// finish, new ones get 503) and returns. Connections are capped and must send their request
/// heads in time ([`connections`]).
///
/// Connections run with `TCP_NODELAY`: a stream sends one small SSE event per token, and with
/// Nagle's algorithm each event would wait for the client's delayed ACK of the one before
/// (about 40 ms on Linux), capping a stream near 25 tokens/s.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    connections::serve(listener, state, shutdown).await
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
