//! The server's connection limits over real loopback sockets (issue 43, point 5): past
//! `max_connections` a connection is answered 503 with a one-line JSON error and the server
//! answers again once connections close or time out; a connection that sends half a request head
//! is closed after `header_timeout`, and so is one that sends nothing or goes idle after an answer;
//! a drain closes idle connections and refuses new requests with 503 (that running streams finish
//! is `crates/cli/tests/serve_faults.rs`, with SIGTERM). Raw sockets, so that the test controls exactly
//! what each connection sends.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use tessera::{LoadOptions, Model};
use tessera_server::{AppState, ServerConfig};

/// The longest any one step may take on a busy machine before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    finished: std::sync::mpsc::Receiver<std::io::Result<()>>,
    _runtime: tokio::runtime::Runtime,
}

fn start(config: ServerConfig) -> Result<Server> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/shapes-vlm");
    let model = Model::load(&dir.to_string_lossy(), &LoadOptions::default())?;
    let state = AppState::new(Arc::new(model), ServerConfig { model_name: "shapes".into(), ..config })?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (done, finished) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        let _ = done.send(tessera_server::serve(listener, state, shutdown).await);
    });
    Ok(Server { addr, stop: Some(stop), finished, _runtime: runtime })
}

/// A connection opened and given `bytes` (possibly nothing, or half a request head).
fn open(server: &Server, bytes: &str) -> Result<TcpStream> {
    let mut s = TcpStream::connect(server.addr)?;
    s.set_read_timeout(Some(PATIENCE))?;
    s.write_all(bytes.as_bytes())?;
    Ok(s)
}

/// Sends one request on a new connection (closed after it) and reads the whole answer: the
/// status, the head and the body.
fn request(server: &Server, method: &str, path: &str, body: &str) -> Result<(u16, String, String)> {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let mut s = open(server, &(head + body))?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).with_context(|| format!("reading the answer to {method} {path}"))?;
    let (head, body) = answer.split_once("\r\n\r\n").with_context(|| format!("no HTTP answer: {answer:?}"))?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).with_context(|| format!("status in {head:?}"))?;
    Ok((status, head.to_ascii_lowercase(), body.to_string()))
}

/// Waits until `/health` answers 200 (connections close asynchronously on the server's side).
fn wait_healthy(server: &Server) -> Result<Duration> {
    let start = Instant::now();
    loop {
        if let Ok((200, _, _)) = request(server, "GET", "/health", "") {
            return Ok(start.elapsed());
        }
        ensure!(start.elapsed() < PATIENCE, "/health did not answer 200 within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn metric(server: &Server, name: &str) -> Result<f64> {
    let (status, _, body) = request(server, "GET", "/metrics", "")?;
    ensure!(status == 200, "/metrics answered {status}");
    let line = body.lines().find_map(|l| l.strip_prefix(&format!("tessera_{name} "))).context(name.to_string())?;
    Ok(line.trim().parse()?)
}

/// A 503 with Retry-After and a one-line OpenAI-shaped error whose message contains `needle`.
fn assert_unavailable((status, head, body): (u16, String, String), needle: &str) -> Result<()> {
    ensure!(status == 503, "status {status}, body {body}");
    ensure!(head.contains("retry-after: 1"), "no Retry-After: {head}");
    ensure!(!body.trim_end().contains('\n'), "the error is not one line: {body:?}");
    let json: Value = serde_json::from_str(&body)?;
    let message = json["error"]["message"].as_str().with_context(|| format!("no error message: {body}"))?;
    ensure!(json["error"]["type"] == "server_error" && message.contains(needle), "{body}");
    Ok(())
}

/// Reads from a connection the server should close without answering; returns when it saw the
/// close.
fn wait_closed(mut s: TcpStream, what: &str) -> Result<Instant> {
    let mut buf = [0u8; 256];
    match s.read(&mut buf) {
        Ok(0) => Ok(Instant::now()),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Ok(Instant::now()),
        Ok(n) => bail!("{what}: the server answered {:?}", String::from_utf8_lossy(&buf[..n])),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            bail!("{what}: still open after {PATIENCE:?}")
        }
        Err(e) => Err(e).context(what.to_string()),
    }
}

/// Connections holding the server's places, the `/health` answer one more then got, and when
/// the first of them was opened.
type Filled = (Vec<TcpStream>, (u16, String, String), Instant);

/// Opens one connection per entry of `heads` (each sending that much), then asks `/health`. A
/// connection the client has already closed (`wait_healthy`'s, `metric`'s) can keep its place
/// for a moment while the server finishes it; one of `heads` opened in that moment is refused
/// (`connections_refused_total` counts it) and the `/health` after them finds a place. That
/// race is tried again (5 times at most); any other outcome is returned for the caller to judge.
fn fill(server: &Server, heads: &[&str]) -> Result<Filled> {
    for _ in 0..5 {
        let before = metric(server, "connections_refused_total")?;
        // Time for the server to finish that request's connection too.
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let held: Vec<TcpStream> = heads.iter().map(|h| open(server, h)).collect::<Result<_>>()?;
        let answer = request(server, "GET", "/health", "")?;
        if answer.0 == 503 || metric(server, "connections_refused_total")? == before {
            return Ok((held, answer, started));
        }
    }
    bail!("every try, one of {} connections was refused while an earlier one kept its place", heads.len())
}

#[test]
fn past_the_cap_a_connection_gets_503_and_the_server_answers_again_once_they_close() -> Result<()> {
    let cap = 4;
    let server = start(ServerConfig { max_connections: cap, header_timeout: PATIENCE * 2, ..Default::default() })?;
    wait_healthy(&server)?;
    // `cap` idle connections hold every place: they are accepted before the requests below, in
    // order, so the requests find the cap full.
    let (idle, full, _) = fill(&server, &vec![""; cap])?;
    assert_unavailable(full, "--max-connections")?;
    let chat = r#"{"messages": [{"role": "user", "content": "How many shapes?"}], "max_tokens": 2}"#;
    assert_unavailable(request(&server, "POST", "/v1/chat/completions", chat)?, "limit of 4 open connections")?;
    // Closed by the client: the places come back.
    drop(idle);
    wait_healthy(&server)?;
    let (status, _, body) = request(&server, "POST", "/v1/chat/completions", chat)?;
    ensure!(status == 200, "{body}");
    ensure!(metric(&server, "connections_refused_total")? >= 2.0);
    Ok(())
}

#[test]
fn half_a_request_head_and_an_idle_connection_are_closed_after_the_header_timeout() -> Result<()> {
    let timeout = Duration::from_secs(3);
    let server = start(ServerConfig { max_connections: 2, header_timeout: timeout, ..Default::default() })?;
    wait_healthy(&server)?;
    let (held, full, opened) = fill(&server, &["POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-le", ""])?;
    let [half, silent]: [TcpStream; 2] = held.try_into().map_err(|_| anyhow::anyhow!("not two connections"))?;
    // The cap is full until the timeout frees it (unless this machine stalled past it).
    if full.0 == 503 {
        assert_unavailable(full, "--max-connections")?;
    } else {
        ensure!(opened.elapsed() >= timeout, "answered {} with the cap full", full.0);
    }
    let half_closed = wait_closed(half, "half a head")? - opened;
    let silent_closed = wait_closed(silent, "a silent one")? - opened;
    // Neither was closed before its time (the clock started a little before they opened).
    let early = timeout.mul_f64(0.9);
    ensure!(half_closed >= early && silent_closed >= early, "closed after {half_closed:?} / {silent_closed:?}");
    wait_healthy(&server)?;
    ensure!(metric(&server, "header_timeouts_total")? >= 1.0);
    // A kept-alive connection that goes idle after its answer is closed by the same timeout.
    let mut kept = open(&server, "GET /health HTTP/1.1\r\nhost: x\r\n\r\n")?;
    ensure!(read_answer(&mut kept)?.starts_with("http/1.1 200"));
    let answered = Instant::now();
    let idle_closed = wait_closed(kept, "a kept-alive idle connection")? - answered;
    ensure!(idle_closed >= early, "closed after {idle_closed:?}");
    Ok(())
}

/// Reads one answer (head and a `content-length` body) from a kept-alive connection.
fn read_answer(s: &mut TcpStream) -> Result<String> {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).with_context(|| format!("after {:?}", String::from_utf8_lossy(&bytes)))?;
        bytes.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&bytes).to_ascii_lowercase();
    let length = head.lines().find_map(|l| l.strip_prefix("content-length: ")).context("no content-length")?;
    let mut body = vec![0u8; length.trim().parse()?];
    s.read_exact(&mut body)?;
    Ok(format!("{head}{}", String::from_utf8_lossy(&body)))
}

#[test]
fn a_drain_closes_idle_connections_and_refuses_new_requests_with_503() -> Result<()> {
    let mut server = start(ServerConfig { header_timeout: PATIENCE, ..Default::default() })?;
    wait_healthy(&server)?;
    // A request whose head is half sent when the drain starts, and one kept-alive idle connection.
    let mut late = open(&server, "GET /health HTTP/1.1\r\nhost: x\r\n")?;
    let mut idle = open(&server, "GET /v1/models HTTP/1.1\r\nhost: x\r\n\r\n")?;
    ensure!(read_answer(&mut idle)?.starts_with("http/1.1 200"));
    // hyper closes at the drain a connection it has read nothing from yet, as never used: give
    // `late`'s task time to read its half head (on a loaded machine it may not have run yet; CI
    // once got a broken pipe writing the rest).
    std::thread::sleep(Duration::from_millis(500));
    server.stop.take().context("stopped twice")?.send(()).ok().context("the server is gone")?;
    // New connections are refused once the drain began. (One accepted just before it began is
    // idle when it does, and the drain closes it unanswered, as it does `idle` below.)
    let start = Instant::now();
    loop {
        let answer = request(&server, "GET", "/health", "");
        if let Ok(answer @ (503, _, _)) = answer {
            assert_unavailable(answer, "shutting down")?;
            break;
        }
        ensure!(start.elapsed() < PATIENCE, "still answering {answer:?} after the stop");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The idle kept-alive connection is closed, long before its header timeout.
    wait_closed(idle, "an idle connection while draining")?;
    // The half-sent request, completed now, is refused by the router; then the drain ends.
    late.write_all(b"\r\n")?;
    let mut answer = String::new();
    late.read_to_string(&mut answer)?;
    ensure!(answer.starts_with("HTTP/1.1 503") && answer.contains("shutting down"), "{answer}");
    server.finished.recv_timeout(PATIENCE).context("serve did not return after the drain")??;
    Ok(())
}
