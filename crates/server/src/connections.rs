//! The accept loop: every connection the server holds is bounded in number and in how long it may
//! take to send a request's head, and a stop request drains the server instead of cutting it off.
//!
//! - **A cap on open connections** (`ServerConfig::max_connections`, `--max-connections`). A
//!   connection past the cap is still read, but only to answer `503 Service Unavailable` with
//!   `Retry-After: 1` and a one-line JSON error, and closed; at most [`OVERFLOW_CONNECTIONS`] are
//!   answered so at once, and past those a new connection is closed unread. Refusals are counted
//!   (`tessera_connections_refused_total`).
//! - **A header-read timeout** (`ServerConfig::header_timeout`, `--header-timeout`): a connection
//!   that has not sent a whole request head this long after it opened, or after its last
//!   response (an idle keep-alive connection), is closed (hyper's `header_read_timeout`),
//!   counted as `tessera_header_timeouts_total`. So half-open and idle connections cannot hold
//!   the cap's places forever; a request's body and its response (a long stream) are not bound
//!   by it.
//! - **Graceful drain** on `shutdown` (SIGTERM, Ctrl-C): requests already running — streams
//!   included — finish; every new request, on a new connection or an open one, gets 503
//!   ("shutting down") while they do; idle connections are closed at once; once the last running
//!   request is done (or `ServerConfig::drain_timeout` has passed) [`serve`] returns.
//!
//! axum's own `axum::serve` offers neither limit, so the loop is written here over hyper's HTTP/1
//! connection, as axum's is (`axum-0.8.9/src/serve/mod.rs`), with hyper-util's
//! `GracefulShutdown` for the drain.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::{ApiError, AppState};

/// Connections past the cap that are answered with a 503 at the same time; more are closed
/// without an answer. Each costs a task and a descriptor for at most [`REFUSAL_TIME`].
pub const OVERFLOW_CONNECTIONS: usize = 64;

/// The longest a refused connection is kept: its request head, a small body, and the 503.
const REFUSAL_TIME: Duration = Duration::from_secs(5);

/// Body bytes of a refused request read (and dropped) before the 503 goes out, so that the
/// client, still sending, gets the answer instead of a reset connection.
const REFUSED_BODY_BYTES: usize = 1 << 20;

/// Counters of the connections, served in `/metrics`.
#[derive(Debug, Default)]
pub struct ConnectionStats {
    /// Connections being served now (refused ones not included).
    pub open: AtomicUsize,
    /// Connections accepted and served.
    pub accepted: AtomicU64,
    /// Connections answered 503 (or closed unread) because the cap was reached or the server
    /// was shutting down.
    pub refused: AtomicU64,
    /// Connections closed because their request head did not arrive within the timeout.
    pub header_timeouts: AtomicU64,
}

/// Holds one of the cap's places (and the `open` gauge) for the life of a connection.
struct Place {
    _permit: tokio::sync::OwnedSemaphorePermit,
    state: Arc<AppState>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.state.connections.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a connection is refused.
#[derive(Clone, Copy)]
enum Refusal {
    Full(usize),
    ShuttingDown,
}

impl Refusal {
    fn error(self) -> ApiError {
        let message = match self {
            Refusal::Full(cap) => {
                format!("the server holds its limit of {cap} open connections (--max-connections); try again later")
            }
            Refusal::ShuttingDown => "the server is shutting down".to_string(),
        };
        ApiError { status: StatusCode::SERVICE_UNAVAILABLE, message, param: None }
    }
}

/// Serves `state`'s router on `listener` under the limits of `state.config` until `shutdown`
/// resolves, then drains (see the module documentation) and returns.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = crate::router(state.clone());
    let places = Arc::new(Semaphore::new(state.config.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(state.config.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    accept_failed(e).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY on a connection: {e}");
        }
        let Ok(permit) = places.clone().try_acquire_owned() else {
            refuse(tcp, Refusal::Full(state.config.max_connections), &overflow, &state);
            continue;
        };
        state.connections.open.fetch_add(1, Ordering::Relaxed);
        state.connections.accepted.fetch_add(1, Ordering::Relaxed);
        let place = Place { _permit: permit, state: state.clone() };
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(builder.serve_connection(TokioIo::new(tcp), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                if e.is_timeout() {
                    place.state.connections.header_timeouts.fetch_add(1, Ordering::Relaxed);
                }
            }
            drop(place);
        });
    }

    // Draining: new requests get 503 (the router's middleware refuses them on open connections,
    // `refuse` on new ones) while the requests already running finish.
    state.draining.store(true, std::sync::atomic::Ordering::SeqCst);
    let running = state.connections.open.load(Ordering::Relaxed);
    tracing::info!("shutting down: {running} connections open; running requests finish, new ones get 503");
    let drained = graceful.shutdown();
    let deadline = tokio::time::sleep(state.config.drain_timeout);
    tokio::pin!(drained, deadline);
    loop {
        tokio::select! {
            _ = &mut drained => break,
            _ = &mut deadline => {
                let left = state.connections.open.load(Ordering::Relaxed);
                tracing::warn!("{left} connections still open after the drain timeout: closed");
                break;
            }
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => refuse(tcp, Refusal::ShuttingDown, &overflow, &state),
                Err(e) => accept_failed(e).await,
            },
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// An error from `accept`: a connection reset before it was taken is nothing; anything else (out
/// of descriptors: EMFILE) is logged and the loop waits a moment, as `axum::serve` does, instead
/// of spinning.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(e.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset) {
        return;
    }
    tracing::error!("accepting a connection failed: {e}");
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Answers every request on `tcp` with `why`'s 503 and closes it, within [`REFUSAL_TIME`]; or,
/// with [`OVERFLOW_CONNECTIONS`] refusals already under way, closes it at once.
fn refuse(tcp: TcpStream, why: Refusal, overflow: &Arc<Semaphore>, state: &Arc<AppState>) {
    state.connections.refused.fetch_add(1, Ordering::Relaxed);
    let Ok(permit) = overflow.clone().try_acquire_owned() else {
        drop(tcp);
        return;
    };
    let service = hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| async move {
        // Read what the client sends (up to a limit) so that it is not reset mid-send.
        let _ = axum::body::to_bytes(axum::body::Body::new(req.into_body()), REFUSED_BODY_BYTES).await;
        Ok::<Response, std::convert::Infallible>(why.error().into_response())
    });
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(REFUSAL_TIME).keep_alive(false);
    let connection = builder.serve_connection(TokioIo::new(tcp), service);
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REFUSAL_TIME, connection).await;
        drop(permit);
    });
}
