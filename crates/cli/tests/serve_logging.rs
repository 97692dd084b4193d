//! `tessera serve` with stdout and stderr on one pipe that nobody reads (`tessera serve 2>&1 |
//! a stalled reader`): once the pipe and the log queue are full, log lines are dropped and
//! counted, while requests, `/health` and a graceful exit still go through in bounded time
//! (issue 43: a full stderr pipe used to stop the server).

#![cfg(unix)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

/// The longest any one request may take; a worker stuck writing a log line times out here.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `tessera serve`, killed when dropped (a failed test leaves no server behind).
struct Server {
    child: Child,
    /// The read end of the stdout + stderr pipe: kept open, never read, so that writes block
    /// (with it closed they would fail at once instead).
    _unread: ChildStdout,
    base: String,
    agent: ureq::Agent,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts the shapes model on a free loopback port and waits until `/health` answers.
    fn start() -> Result<Self> {
        let model = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/shapes-vlm");
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" serve --model \"$1\" --host 127.0.0.1 --port \"$2\" 2>&1")
            .arg(env!("CARGO_BIN_EXE_tessera"))
            .arg(&model)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("run tessera serve")?;
        let unread = child.stdout.take().context("the child's stdout pipe")?;
        let agent = ureq::AgentBuilder::new().timeout(REQUEST_TIMEOUT).build();
        let mut server = Server { child, _unread: unread, base: format!("http://127.0.0.1:{port}"), agent };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("tessera serve exited before answering ({status})");
            }
            if server.get("/health").is_ok() {
                return Ok(server);
            }
            ensure!(Instant::now() < deadline, "tessera serve did not answer /health within 120 s of starting");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The body of a GET that answered 200 within [`REQUEST_TIMEOUT`].
    fn get(&self, path: &str) -> Result<String> {
        Ok(self.agent.get(&format!("{}{path}", self.base)).call()?.into_string()?)
    }

    fn dropped_lines(&self) -> Result<u64> {
        let name = "tessera_log_lines_dropped_total ";
        let metrics = self.get("/metrics")?;
        let line = metrics.lines().find_map(|l| l.strip_prefix(name)).context("no tessera_log_lines_dropped_total")?;
        Ok(line.trim().parse()?)
    }
}

#[test]
fn a_log_pipe_nobody_reads_costs_log_lines_not_requests() -> Result<()> {
    let mut server = Server::start()?;

    // Fill the pipe (64 KiB on Linux) and then the log queue behind it: lines are dropped only
    // once the queue is full, which the writer thread, stuck on the full pipe, no longer drains.
    let limit = 4 * tessera_server::logging::BUFFERED_LINES + 10_000;
    let mut sent = 0;
    while server.dropped_lines().with_context(|| format!("/metrics after {sent} requests"))? == 0 {
        ensure!(sent < limit, "{sent} requests and no log line dropped: the pipe never filled");
        for _ in 0..256 {
            server.get("/health").with_context(|| format!("request {sent}, filling the pipe"))?;
            sent += 1;
        }
    }

    // With the pipe full, 500 more requests of every kind answer, each within REQUEST_TIMEOUT
    // (engine work included: every 50th is a completion), and all of their lines are dropped.
    let before = server.dropped_lines()?;
    let start = Instant::now();
    for i in 0..500 {
        let what = || format!("request {i} of 500 with the pipe full");
        match i % 50 {
            0 => {
                let body = json!({"prompt": "Question: How many", "max_tokens": 2, "temperature": 0});
                let url = format!("{}/v1/completions", server.base);
                let res: Value = server.agent.post(&url).send_json(body).with_context(what)?.into_json()?;
                ensure!(res["object"] == "text_completion", "{res}");
            }
            1..=9 => {
                let models: Value = serde_json::from_str(&server.get("/v1/models").with_context(what)?)?;
                ensure!(models["data"][0]["id"].is_string(), "{models}");
            }
            _ => {
                server.get("/health").with_context(what)?;
            }
        }
    }
    let took = start.elapsed();
    ensure!(took < Duration::from_secs(60), "500 requests took {took:?}");
    let health: Value = serde_json::from_str(&server.get("/health").context("/health with the pipe full")?)?;
    ensure!(health["status"] == "ok", "{health}");
    let after = server.dropped_lines()?;
    ensure!(after >= before + 500, "dropped {before} log lines, then {after} after 500 requests");

    // SIGTERM: a graceful exit, not held up by the queue it cannot flush.
    let pid = server.child.id().to_string();
    ensure!(Command::new("kill").args(["-TERM", &pid]).status()?.success(), "kill -TERM {pid}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = server.child.try_wait()? {
            break status;
        }
        ensure!(Instant::now() < deadline, "tessera serve still running 30 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    ensure!(status.success(), "tessera serve exited with {status} after SIGTERM");
    eprintln!("{sent} requests filled the pipe and queue; 500 more took {took:?}; {after} lines dropped");
    Ok(())
}
