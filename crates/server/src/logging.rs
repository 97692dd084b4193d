//! Logs that never hold up serving. Events are formatted on the thread that logs them and handed
//! to a writer thread through a bounded queue ([`tracing_appender::non_blocking`], lossy): when
//! stderr is slow or stuck (a pipe nobody reads, a stalled journal, a terminal paused with
//! Ctrl-S) the queue fills and further lines are dropped and counted ([`dropped_lines`], served
//! as `tessera_log_lines_dropped_total` in `/metrics`), and no request ever waits on a write.
//!
//! Issue 43: with the subscriber writing to stderr directly, a full stderr pipe blocked both
//! runtime workers inside the request-logging middleware and the server stopped answering.

use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::Duration;

use tracing::subscriber::SetGlobalDefaultError;
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};

/// Log lines queued for a slow stderr before new ones are dropped (about 1 MB of request lines).
pub const BUFFERED_LINES: usize = 8192;

/// The dropped-line count of the writer [`init`] installed.
static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// How long dropping a [`LogGuard`] waits for the queued lines to be written.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Keeps the writer thread. Dropping it (at exit) writes what is queued, waiting at most
/// [`FLUSH_WAIT`] for a stderr that takes nothing.
#[must_use = "queued log lines are lost unless the guard lives until exit"]
pub struct LogGuard {
    worker: Option<WorkerGuard>,
}

impl Drop for LogGuard {
    /// `WorkerGuard`'s own drop is bounded only while stdout takes its complaint: when the queue
    /// is full it prints to stdout, which under `2>&1` is the same stuck pipe. So it is dropped on
    /// a thread of its own, and exit goes on after [`FLUSH_WAIT`] whatever it is doing.
    fn drop(&mut self) {
        let Some(worker) = self.worker.take() else { return };
        let (done, finished) = std::sync::mpsc::channel();
        let flush = std::thread::Builder::new().name("tessera-log-flush".into()).spawn(move || {
            drop(worker);
            let _ = done.send(());
        });
        if flush.is_ok() {
            let _ = finished.recv_timeout(FLUSH_WAIT);
        }
    }
}

/// Installs the process-wide `tracing` subscriber: one line per event on stderr through the lossy
/// queue, colours only when stderr is a terminal. Fails if a global subscriber is already set.
pub fn init() -> Result<LogGuard, SetGlobalDefaultError> {
    let (writer, worker) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(BUFFERED_LINES)
        .thread_name("tessera-log")
        .finish(std::io::stderr());
    let dropped = writer.error_counter();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_target(false)
        .with_ansi(std::io::stderr().is_terminal())
        .finish();
    tracing::subscriber::set_global_default(subscriber)?;
    // The subscriber above is the one global one, so at most one counter gets here.
    let _ = DROPPED.set(dropped);
    Ok(LogGuard { worker: Some(worker) })
}

/// Log lines dropped so far because stderr did not keep up (0 when [`init`] was not called).
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}
