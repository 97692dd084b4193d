//! The server over real HTTP under load: 64 concurrent streams with hang-ups each getting their
//! solo answer, with memory bounded. Alone in its test binary, so the process's RSS is this
//! test's.

mod http_common;

use std::io::{BufRead, BufReader};
use std::sync::Arc;

use anyhow::Result;
use http_common::*;
use serde_json::{json, Value};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Streams `body` to `path`; with `hang_up`, reads the first content chunk and disconnects.
/// Returns the streamed text (`None` after a hang-up).
fn stream(server: &Server, path: &str, body: &Value, hang_up: bool) -> Result<Option<String>> {
    let res = ureq::post(&format!("{}{path}", server.base)).send_json(body.clone())?;
    let mut text = String::new();
    let mut done = false;
    for line in BufReader::new(res.into_reader()).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let chunk: Value = serde_json::from_str(data)?;
        anyhow::ensure!(chunk.get("error").is_none(), "an error in the stream: {chunk}");
        let choice = &chunk["choices"][0];
        let piece = choice["delta"]["content"].as_str().or(choice["text"].as_str()).unwrap_or("");
        text.push_str(piece);
        if hang_up && !piece.is_empty() {
            return Ok(None);
        }
    }
    anyhow::ensure!(done, "the stream ended without [DONE]");
    Ok(Some(text))
}

#[test]
fn sixty_four_concurrent_streams_mixed_with_hang_ups_each_get_their_solo_answer() -> Result<()> {
    let server = Arc::new(start(config())?);
    let images = ["three_shapes.png", "two_circles.png", "one_triangle_top.png", "four_shapes_noise.png"];
    let urls: Vec<String> = images.iter().map(|f| data_url(f)).collect::<Result<_>>()?;
    let questions = ["How many shapes are there?", "What color is the circle?", "How many circles are there?"];
    let prompts = ["Question:", "Answer: 3 Question:", "Question: What"];
    // Even: an image chat; odd: a long raw completion, every fourth of which hangs up early.
    let request = |i: usize| -> (&'static str, Value, bool) {
        if i.is_multiple_of(2) {
            let body = json!({"messages": image_chat(&urls[i / 2 % urls.len()], questions[i / 2 % questions.len()]),
                              "temperature": 0, "stream": true});
            ("/v1/chat/completions", body, false)
        } else {
            let body = json!({"prompt": prompts[i / 2 % prompts.len()], "max_tokens": 40, "temperature": 0,
                              "stream": true});
            ("/v1/completions", body, i % 8 == 7)
        }
    };
    let before = rss_kib();
    let handles: Vec<_> = (0..64)
        .map(|i| {
            let (server, (path, body, hang_up)) = (server.clone(), request(i));
            std::thread::spawn(move || stream(&server, path, &body, hang_up))
        })
        .collect();
    let results: Vec<Option<String>> =
        handles.into_iter().map(|h| h.join().expect("client thread")).collect::<Result<_>>()?;
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    // Every completed stream equals the same request run alone afterwards.
    let mut completed = 0;
    for (i, streamed) in results.iter().enumerate() {
        let Some(streamed) = streamed else { continue };
        completed += 1;
        let (path, mut body, _) = request(i);
        body["stream"] = json!(false);
        let (status, alone) = post(&server, path, &body)?;
        assert_eq!(status, 200, "{alone}");
        let choice = &alone["choices"][0];
        let text = choice["message"]["content"].as_str().or(choice["text"].as_str()).unwrap();
        assert_eq!(streamed, text, "request {i}: the concurrent answer differs from the answer alone");
    }
    assert_eq!(completed, 64 - 8);
    // Nothing lost: every request ended, completed or cancelled by its hang-up; none failed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while metric(&server, "tessera_batch_size")? > 0.0 {
        assert!(std::time::Instant::now() < deadline, "sequences still running 30 s after the last client");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let (done, cancelled) =
        (metric(&server, "tessera_requests_completed_total")?, metric(&server, "tessera_requests_cancelled_total")?);
    assert_eq!(metric(&server, "tessera_requests_failed_total")?, 0.0);
    assert_eq!(done + cancelled, 64.0 + completed as f64, "completed {done}, cancelled {cancelled}");
    assert!(cancelled >= 1.0, "no hang-up cancelled its sequence");
    let mean_batch = metric(&server, "tessera_decode_rows_total")? / metric(&server, "tessera_decode_steps_total")?;
    assert!(mean_batch > 1.5, "the streams were not decoded together (mean batch {mean_batch:.2})");
    assert!(grown_mib < 256, "RSS grew by {grown_mib} MiB under 64 streams");
    // 32 image chats over 4 images: each encoded once (the rest from the image cache).
    assert_eq!(metric(&server, "tessera_image_cache_misses_total")?, 4.0);
    assert!(metric(&server, "tessera_image_cache_hits_total")? >= 28.0);
    Ok(())
}
