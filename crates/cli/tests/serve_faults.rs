//! `tessera serve` told to stop while it works (issue 43, point 3): SIGTERM during 16 streams.
//! The running streams finish (each to its last event, `[DONE]`), and so does a request whose body
//! was still being sent, every new request gets 503 while they do, and the process then exits
//! with status 0. The model is SmolLM2 Q4_1, slow
//! enough on a CPU that 16 streams of 96 tokens are still running when the signal comes.

#![cfg(unix)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

const STREAMS: usize = 16;
const MAX_TOKENS: u64 = 96;
/// The longest any one wait may take on a busy machine before the test fails.
const PATIENCE: Duration = Duration::from_secs(300);

/// A running `tessera serve`, killed when dropped (a failed test leaves no server behind).
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(model: &str, extra: &[&str]) -> Result<Self> {
        let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(model);
        ensure!(model.exists(), "{} is missing: run scripts/fetch_smollm2.sh", model.display());
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .arg("serve")
            .arg("--model")
            .arg(&model)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("run tessera serve")?;
        let mut server = Server { child, base: format!("http://127.0.0.1:{port}") };
        let start = Instant::now();
        while get(&server.base, "/health").map(|(status, _)| status) != Ok(200) {
            if let Some(status) = server.child.try_wait()? {
                bail!("tessera serve exited before answering ({status})");
            }
            ensure!(start.elapsed() < PATIENCE, "tessera serve did not answer /health within {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    fn signal(&self, name: &str) -> Result<()> {
        let pid = self.child.id().to_string();
        ensure!(Command::new("kill").args([&format!("-{name}"), &pid]).status()?.success(), "kill -{name} {pid}");
        Ok(())
    }

    fn wait_exit(&mut self) -> Result<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            ensure!(start.elapsed() < PATIENCE, "tessera serve still running {PATIENCE:?} after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The status and body of a GET on a fresh connection (errors' statuses included).
fn get(base: &str, path: &str) -> Result<(u16, String), String> {
    let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(30)).build();
    match agent.get(&format!("{base}{path}")).call() {
        Ok(r) => Ok((r.status(), r.into_string().map_err(|e| e.to_string())?)),
        Err(ureq::Error::Status(status, r)) => Ok((status, r.into_string().map_err(|e| e.to_string())?)),
        Err(e) => Err(e.to_string()),
    }
}

/// What one stream received: the time of each content event, the finish reason, the usage and
/// whether it ended with `[DONE]`.
struct Streamed {
    content_at: Vec<Instant>,
    finish_reason: Option<String>,
    completion_tokens: Option<u64>,
    done: bool,
}

/// Runs one streamed chat; reports its first content event on `first` as it comes.
fn stream(base: &str, seed: u64, first: mpsc::Sender<()>) -> Result<Streamed> {
    let body = json!({
        "messages": [{"role": "user", "content": format!("Tell me a long story about a lighthouse keeper, number {seed}.")}],
        "max_tokens": MAX_TOKENS, "temperature": 0.8, "seed": seed, "stream": true,
        "stream_options": {"include_usage": true},
    });
    let res = ureq::post(&format!("{base}/v1/chat/completions")).send_json(body)?;
    let mut out = Streamed { content_at: Vec::new(), finish_reason: None, completion_tokens: None, done: false };
    for line in BufReader::new(res.into_reader()).lines() {
        let line = line.context("the stream broke off")?;
        let Some(data) = line.strip_prefix("data: ") else { continue };
        ensure!(!out.done, "an event after [DONE]: {data}");
        if data == "[DONE]" {
            out.done = true;
            continue;
        }
        let chunk: Value = serde_json::from_str(data)?;
        if let Some(choice) = chunk["choices"].get(0) {
            if choice["delta"]["content"].as_str().is_some_and(|s| !s.is_empty()) {
                if out.content_at.is_empty() {
                    let _ = first.send(());
                }
                out.content_at.push(Instant::now());
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                out.finish_reason = Some(reason.to_string());
            }
        }
        if let Some(n) = chunk["usage"]["completion_tokens"].as_u64() {
            out.completion_tokens = Some(n);
        }
    }
    Ok(out)
}

#[test]
fn sigterm_during_16_streams_lets_them_finish_refuses_new_requests_and_exits_0() -> Result<()> {
    let mut server = Server::start(
        "models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf",
        &["--max-connections", "64", "--header-timeout", "30", "--drain-timeout", "600"],
    )?;
    let (first, firsts) = mpsc::channel();
    let streams: Vec<_> = (0..STREAMS as u64)
        .map(|seed| {
            let (base, first) = (server.base.clone(), first.clone());
            std::thread::spawn(move || stream(&base, seed, first))
        })
        .collect();
    // One more request admitted before the signal whose end the test holds: its body is half
    // sent. However fast the streams end, the server cannot finish draining before this one does.
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0}).to_string();
    let (first_half, second_half) = body.split_at(body.len() / 2);
    let mut upload = std::net::TcpStream::connect(server.base.trim_start_matches("http://"))?;
    upload.set_read_timeout(Some(PATIENCE))?;
    write!(
        upload,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{first_half}",
        body.len()
    )?;
    // (The streams' first tokens take far longer than the server takes to read that head.)
    for i in 0..STREAMS {
        firsts.recv_timeout(PATIENCE).with_context(|| format!("{i} of {STREAMS} streams started"))?;
    }
    server.signal("TERM")?;
    let signalled = Instant::now();

    // New requests are refused while the streams run: a new connection gets 503.
    let refused = loop {
        match get(&server.base, "/health") {
            Ok((503, body)) => break body,
            Ok((200, _)) => {}
            // A connection accepted just before the signal whose request head had not arrived
            // yet is an idle one, which the drain closes at once (connections.rs): ask again.
            Err(e) if e.contains("Unexpected EOF") => {}
            other => bail!("/health after SIGTERM: {other:?}"),
        }
        ensure!(signalled.elapsed() < PATIENCE, "/health still answered 200 {PATIENCE:?} after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    let refused: Value = serde_json::from_str(&refused)?;
    ensure!(refused["error"]["message"] == "the server is shutting down", "{refused}");
    let chat = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4});
    match ureq::post(&format!("{}/v1/chat/completions", server.base)).send_json(chat) {
        Err(ureq::Error::Status(503, r)) => ensure!(r.header("retry-after") == Some("1")),
        Err(e) => bail!("a new chat after SIGTERM: {e}"),
        Ok(r) => bail!("a new chat after SIGTERM answered {}", r.status()),
    }
    let refused_at = signalled.elapsed();

    // The held request, admitted before the signal, completes once its body is in.
    upload.write_all(second_half.as_bytes())?;
    let mut answer = String::new();
    upload.read_to_string(&mut answer)?;
    ensure!(answer.starts_with("HTTP/1.1 200") && answer.contains("chat.completion"), "{answer}");

    // Every stream ran to its end.
    let mut running_at_signal = 0;
    for (i, s) in streams.into_iter().enumerate() {
        let s = s.join().map_err(|_| anyhow::anyhow!("stream {i} panicked"))??;
        ensure!(s.done, "stream {i} ended without [DONE]");
        let reason = s.finish_reason.as_deref();
        ensure!(matches!(reason, Some("length" | "stop")), "stream {i} finished with {reason:?}");
        let tokens = s.completion_tokens.with_context(|| format!("stream {i} sent no usage"))?;
        ensure!((1..=MAX_TOKENS).contains(&tokens), "stream {i}: {tokens} tokens");
        if reason == Some("length") {
            ensure!(tokens == MAX_TOKENS, "stream {i} stopped for length at {tokens} tokens");
        }
        if s.content_at.last().is_some_and(|&t| t > signalled) {
            running_at_signal += 1;
        }
    }
    // The premise: the streams were still running when the signal came (96 tokens each take
    // seconds on a CPU; the signal went as soon as each had its first).
    ensure!(running_at_signal >= STREAMS / 2, "only {running_at_signal} streams were still running at SIGTERM");

    let status = server.wait_exit()?;
    ensure!(status.success(), "tessera serve exited with {status} after SIGTERM");
    ensure!(get(&server.base, "/health").is_err(), "something still answers after the exit");
    eprintln!(
        "{running_at_signal} of {STREAMS} streams still running at SIGTERM finished; new requests refused \
         {refused_at:?} after it; exit after {:?}",
        signalled.elapsed()
    );
    Ok(())
}
