//! The server over real HTTP on loopback (ureq as the client): every endpoint, streaming,
//! cancellation by disconnect, and the errors in OpenAI's shape with their statuses. The model
//! is the shipped shapes model; its answers are compared with the library's.

mod http_common;

use std::io::{BufRead, BufReader};

use anyhow::Result;
use base64::Engine as _;
use http_common::*;
use serde_json::{json, Value};
use tessera_server::ServerConfig;

#[test]
fn chat_with_an_image_answers_as_the_library_does() -> Result<()> {
    let server = start(config())?;
    for (file, question) in
        [("three_shapes.png", "How many shapes are there?"), ("two_circles.png", "How many circles are there?")]
    {
        let body = json!({"model": "shapes", "messages": image_chat(&data_url(file)?, question), "temperature": 0});
        let (status, res) = post(&server, "/v1/chat/completions", &body)?;
        assert_eq!(status, 200, "{res}");
        assert_eq!(res["object"], "chat.completion");
        assert_eq!(res["choices"][0]["message"]["role"], "assistant");
        assert_eq!(res["choices"][0]["message"]["content"].as_str(), Some(library_answer(file, question)?.as_str()));
        assert_eq!(res["choices"][0]["finish_reason"], "stop");
        let usage = &res["usage"];
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap())
        );
    }
    Ok(())
}

#[test]
fn streaming_sends_chunks_then_usage_then_done() -> Result<()> {
    let server = start(config())?;
    let body = json!({"messages": image_chat(&data_url("three_shapes.png")?, "How many shapes are there?"),
                      "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let res = ureq::post(&format!("{}/v1/chat/completions", server.base)).send_json(body)?;
    assert!(res.header("content-type").unwrap_or("").starts_with("text/event-stream"));
    let mut lines = Vec::new();
    for line in BufReader::new(res.into_reader()).lines() {
        let line = line?;
        if let Some(d) = line.strip_prefix("data: ") {
            lines.push(d.to_string());
        }
    }
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> =
        lines[..lines.len() - 1].iter().map(|l| serde_json::from_str(l)).collect::<Result<_, _>>()?;
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String =
        chunks.iter().filter_map(|c| c["choices"].get(0).and_then(|ch| ch["delta"]["content"].as_str())).collect();
    assert_eq!(text, library_answer("three_shapes.png", "How many shapes are there?")?);
    let finish = chunks.iter().find_map(|c| c["choices"].get(0).and_then(|ch| ch["finish_reason"].as_str()));
    assert_eq!(finish, Some("stop"));
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().map(Vec::len), Some(0));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() >= 1);
    Ok(())
}

/// The `data:` payloads of a streamed response, parsed, after checking it ends with `[DONE]`.

#[test]
fn streamed_logprobs_come_with_their_chunks_and_add_up_to_the_whole_answers() -> Result<()> {
    let server = start(config())?;
    let chat = json!({"messages": image_chat(&data_url("three_shapes.png")?, "How many shapes are there?"),
                      "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let (status, whole) = post(&server, "/v1/chat/completions", &chat)?;
    assert_eq!(status, 200, "{whole}");
    let want = whole["choices"][0]["logprobs"]["content"].as_array().cloned().unwrap_or_default();
    assert!(!want.is_empty() && want[0]["top_logprobs"].as_array().map(Vec::len) == Some(2), "{whole}");
    let mut body = chat.clone();
    body["stream"] = json!(true);
    let chunks = stream_chunks(&server, "/v1/chat/completions", &body)?;
    let mut streamed = Vec::new();
    for c in &chunks {
        let lp = &c["choices"][0]["logprobs"];
        if let Some(content) = lp["content"].as_array() {
            assert!(!content.is_empty(), "a chunk with an empty logprobs list: {c}");
            streamed.extend(content.iter().cloned());
        }
    }
    assert_eq!(streamed, want, "the streamed logprobs differ from the whole answer's");

    // The legacy completions' shape, streamed.
    let body = json!({"prompt": "Question: How many", "max_tokens": 3, "temperature": 0, "logprobs": 2});
    let (_, whole) = post(&server, "/v1/completions", &body)?;
    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let tokens: Vec<Value> = stream_chunks(&server, "/v1/completions", &streaming)?
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(Some(&tokens), whole["choices"][0]["logprobs"]["tokens"].as_array(), "{whole}");
    Ok(())
}

#[test]
fn completions_models_health_and_metrics() -> Result<()> {
    let server = start(config())?;
    // A raw prompt (the native model's text side): greedy, limited to 3 tokens, with logprobs.
    let (status, res) = post(
        &server,
        "/v1/completions",
        &json!({"prompt": "Question: How many", "max_tokens": 3, "temperature": 0, "logprobs": 2}),
    )?;
    assert_eq!(status, 200, "{res}");
    assert_eq!(res["object"], "text_completion");
    let n = res["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    assert!((1..=3).contains(&n), "{res}");
    let lp = &res["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(n), "{res}");
    assert!(lp["token_logprobs"][0].as_f64().unwrap() <= 0.0);
    assert_eq!(lp["top_logprobs"][0].as_object().map(|m| m.len()), Some(2), "{res}");

    let models: Value = ureq::get(&format!("{}/v1/models", server.base)).call()?.into_json()?;
    assert_eq!(models["data"][0]["id"], "shapes");
    let health: Value = ureq::get(&format!("{}/health", server.base)).call()?.into_json()?;
    assert_eq!(health["status"], "ok");
    let metrics = ureq::get(&format!("{}/metrics", server.base)).call()?.into_string()?;
    for name in [
        "tessera_requests_total 1",
        "tessera_queue_depth 0",
        "tessera_batch_size",
        "tessera_generated_tokens_total",
        // Nothing here installs the lossy log writer (crate::logging::init), so nothing is dropped.
        "tessera_log_lines_dropped_total 0",
    ] {
        assert!(metrics.contains(name), "metrics lack {name:?}:\n{metrics}");
    }
    Ok(())
}

#[test]
fn embeddings_are_unit_vectors_per_input() -> Result<()> {
    let server = start(config())?;
    let (status, res) = post(&server, "/v1/embeddings", &json!({"input": ["How many", "What color"]}))?;
    assert_eq!(status, 200, "{res}");
    let data = res["data"].as_array().unwrap();
    assert_eq!(data.len(), 2);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"].as_u64(), Some(i as u64));
        let v: Vec<f64> = d["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(v.len(), 192);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
    Ok(())
}

/// A one-thread HTTP server on loopback answering every request with `routes[path]` (status,
/// body), or 404; returns its `http://127.0.0.1:PORT` base.
fn file_server(routes: Vec<(&'static str, u16, Vec<u8>)>) -> Result<String> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let base = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, body) = routes
                .iter()
                .find(|(p, _, _)| *p == path)
                .map(|(_, s, b)| (*s, b.clone()))
                .unwrap_or((404, b"not found".to_vec()));
            let extra = if status == 302 { "Location: http://example.com/x.png\r\n" } else { "" };
            let head =
                format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n", body.len());
            let _ = conn.write_all(head.as_bytes()).and_then(|_| conn.write_all(&body));
        }
    });
    Ok(base)
}

#[test]
fn image_urls_are_downloaded_only_from_allowed_domains() -> Result<()> {
    let png = std::fs::read(shapes_dir().join("examples/three_shapes.png"))?;
    let base = file_server(vec![
        ("/three.png", 200, png.clone()),
        ("/moved.png", 302, Vec::new()),
        ("/big.png", 200, vec![0u8; 200 << 10]),
    ])?;
    let question = "How many shapes are there?";
    // Off by default.
    let server = start(config())?;
    let (s, b) = post(
        &server,
        "/v1/chat/completions",
        &json!({"messages": image_chat(&format!("{base}/three.png"), question)}),
    )?;
    assert_error(s, &b, 400, "--allowed-media-domains");

    let server =
        start(ServerConfig { allowed_media_domains: vec!["127.0.0.1".into()], max_body_bytes: 100 << 10, ..config() })?;
    let ask = |url: String| {
        post(&server, "/v1/chat/completions", &json!({"messages": image_chat(&url, question), "temperature": 0}))
    };
    let (s, b) = ask(format!("{base}/three.png"))?;
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        b["choices"][0]["message"]["content"].as_str(),
        Some(library_answer("three_shapes.png", question)?.as_str())
    );
    let port = base.rsplit(':').next().unwrap_or_default();
    let (s, b) = ask(format!("http://localhost:{port}/three.png"))?;
    assert_error(s, &b, 400, "host localhost is not in --allowed-media-domains");
    let (s, b) = ask(format!("http://evil@127.0.0.1:{port}/three.png"))?;
    assert_error(s, &b, 400, "not a URL with a host");
    let (s, b) = ask(format!("{base}/moved.png"))?;
    assert_error(s, &b, 400, "redirects are not followed");
    let (s, b) = ask(format!("{base}/missing.png"))?;
    assert_error(s, &b, 400, "HTTP 404");
    let (s, b) = ask(format!("{base}/big.png"))?;
    assert_error(s, &b, 400, "larger than --max-body-bytes");
    Ok(())
}

#[test]
fn bad_requests_get_openai_errors_with_the_right_status() -> Result<()> {
    let dir = root().join("target/test-scratch/server-media");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(shapes_dir().join("examples/two_circles.png"), dir.join("two_circles.png"))?;
    let server = start(ServerConfig {
        max_body_bytes: 64 << 10,
        max_images: 2,
        allowed_local_media: Some(dir.clone()),
        ..config()
    })?;
    let chat = "/v1/chat/completions";
    let (s, b) = post_raw(&server, chat, "{not json")?;
    assert_error(s, &b, 400, "invalid request body");
    let (s, b) = post(&server, chat, &json!({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}))?;
    assert_error(s, &b, 400, "temperature");
    let (s, b) = post(&server, chat, &json!({"messages": "hi"}))?;
    assert_error(s, &b, 400, "list of messages");
    let (s, b) = post(&server, chat, &json!({"messages": image_chat("data:image/png;base64,!!!", "How many?")}))?;
    assert_error(s, &b, 400, "base64");
    let garbage = format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(b"not a png"));
    let (s, b) = post(&server, chat, &json!({"messages": image_chat(&garbage, "How many?")}))?;
    assert_eq!(s, 400, "{b}");
    let (s, b) = post(&server, chat, &json!({"messages": image_chat("https://example.com/a.png", "How many?")}))?;
    assert_error(s, &b, 400, "does not download");
    // Local files: only inside the allowed folder, not by escaping it.
    let (s, b) = post(
        &server,
        chat,
        &json!({"messages": image_chat("two_circles.png", "How many circles are there?"), "temperature": 0}),
    )?;
    assert_eq!(s, 200, "{b}");
    let outside = shapes_dir().join("examples/two_circles.png");
    for src in [format!("file://{}", outside.display()), "../../../models/shapes-vlm/examples/two_circles.png".into()] {
        let (s, b) = post(&server, chat, &json!({"messages": image_chat(&src, "How many?")}))?;
        assert_error(s, &b, 400, "not a file under the allowed media folder");
    }
    let url = data_url("two_circles.png")?;
    let three = json!([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "image_url", "image_url": {"url": url}},
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "?"}]}]);
    let (s, b) = post(&server, chat, &json!({"messages": three}))?;
    assert_error(s, &b, 400, "at most 2");
    let long = "How many shapes are there? ".repeat(100);
    let (s, b) = post(&server, chat, &json!({"messages": [{"role": "user", "content": long}]}))?;
    assert_error(s, &b, 400, "context");
    // Streamed too: refused before the stream starts, not inside it.
    let (s, b) = post(&server, chat, &json!({"messages": [{"role": "user", "content": long}], "stream": true}))?;
    assert_error(s, &b, 400, "context");
    let big = json!({"messages": [{"role": "user", "content": "x".repeat(100_000)}]});
    let (s, b) = post(&server, chat, &big)?;
    assert_error(s, &b, 413, "--max-body-bytes");
    let (s, b) = post(&server, chat, &json!({"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]}))?;
    assert_error(s, &b, 404, "gpt-4");
    let (s, b) = post(&server, chat, &json!({"messages": [{"role": "user", "content": "hi"}], "n": 2}))?;
    assert_error(s, &b, 400, "n = 1");
    let (s, b) = post(
        &server,
        chat,
        &json!({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}}),
    )?;
    assert_error(s, &b, 400, "yaml");
    assert_eq!(b["error"]["param"], "response_format");
    let res = ureq::get(&format!("{}/v2/nothing", server.base)).call();
    assert!(matches!(res, Err(ureq::Error::Status(404, _))));
    Ok(())
}

#[test]
fn a_full_queue_answers_429_with_retry_after() -> Result<()> {
    let server = start(ServerConfig {
        engine: tessera::EngineConfig { max_batch: 1, max_queue: 0, ..Default::default() },
        ..config()
    })?;
    let res = ureq::post(&format!("{}/v1/completions", server.base)).send_json(json!({"prompt": "Question:"}));
    match res {
        Err(ureq::Error::Status(429, r)) => {
            assert_eq!(r.header("retry-after"), Some("1"));
            let body: Value = r.into_json()?;
            assert_eq!(body["error"]["type"], "rate_limit_exceeded");
        }
        other => panic!("expected 429, got {other:?}"),
    }
    Ok(())
}

#[test]
fn a_client_that_disconnects_mid_stream_cancels_its_sequence() -> Result<()> {
    let smollm2 = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    let server = start_with(&smollm2, config())?;
    // A long answer, streamed: read one event, then hang up.
    let body = json!({"messages": [{"role": "user", "content": "Write a long story about the sea."}],
                      "max_tokens": 200, "temperature": 0, "stream": true});
    let res = ureq::post(&format!("{}/v1/chat/completions", server.base)).send_json(body)?;
    let mut reader = BufReader::new(res.into_reader());
    let mut first = String::new();
    reader.read_line(&mut first)?;
    assert!(first.starts_with("data: "), "{first}");
    drop(reader);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let metrics = ureq::get(&format!("{}/metrics", server.base)).call()?.into_string()?;
        let cancelled = metrics.contains("tessera_requests_cancelled_total 1");
        let completed = metrics.contains("tessera_requests_completed_total 1");
        if cancelled {
            assert!(metrics.contains("tessera_batch_size 0"), "{metrics}");
            return Ok(());
        }
        assert!(!completed, "the sequence ran to its end after the client left:\n{metrics}");
        assert!(std::time::Instant::now() < deadline, "not cancelled within 30 s:\n{metrics}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn response_format_json_schema_and_json_object_are_enforced_while_sampling() -> Result<()> {
    let smollm2 = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    let server = start_with(&smollm2, config())?;
    // Bounded strings: a sampled answer must end well inside max_tokens.
    let schema = json!({"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                        "age": {"type": "integer"},
                        "pets": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 3}},
                        "required": ["name", "age", "pets"], "additionalProperties": false});
    let chat = |content: &str, format: Value, temperature: f64, seed: u64| {
        json!({"messages": [{"role": "user", "content": content}], "temperature": temperature, "seed": seed,
               "max_tokens": 400, "response_format": format})
    };
    let format = json!({"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": true}});
    // Greedy and sampled (a sampled answer is where an unconstrained model would stray).
    for (temperature, seed) in [(0.0, 0), (1.0, 1), (1.0, 2)] {
        let (s, res) =
            post(&server, "/v1/chat/completions", &chat("Describe a person.", format.clone(), temperature, seed))?;
        assert_eq!(s, 200, "{res}");
        let text = res["choices"][0]["message"]["content"].as_str().unwrap();
        let v: Value = serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{e}: {text:?}"))?;
        let obj = v.as_object().unwrap();
        assert_eq!(
            obj.keys().map(String::as_str).collect::<std::collections::BTreeSet<_>>(),
            ["age", "name", "pets"].into_iter().collect(),
            "{text}"
        );
        assert!(v["name"].is_string() && v["age"].is_i64(), "{text}");
        let pets = v["pets"].as_array().unwrap();
        assert!(pets.len() <= 3 && pets.iter().all(Value::is_string), "{text}");
        assert_eq!(res["choices"][0]["finish_reason"], "stop", "the grammar ended the output: {text}");
    }
    // The same sampled request without the schema does not give this JSON (the constraint is what holds).
    let (_, free) =
        post(&server, "/v1/chat/completions", &chat("Describe a person.", json!({"type": "text"}), 1.0, 1))?;
    let free = free["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(free).is_err(), "{free}");
    let (s, res) =
        post(&server, "/v1/chat/completions", &chat("A colour, as JSON.", json!({"type": "json_object"}), 1.0, 3))?;
    assert_eq!(s, 200, "{res}");
    let text = res["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(text)?.is_object(), "{text}");
    // A schema the grammar compiler rejects is a 400 naming response_format.
    let bad = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such-type"}}});
    let (s, res) = post(&server, "/v1/chat/completions", &chat("hi", bad, 0.0, 0))?;
    assert_error(s, &res, 400, "response format");
    assert_eq!(res["error"]["param"], "response_format");
    Ok(())
}

/// A chat's second turn over HTTP continues from the first turn's cached KV: the prefix
/// metrics count it, and the answer is the one a server without the cache gives.
#[test]
fn a_second_chat_turn_reuses_the_first_turns_cache() -> Result<()> {
    let smollm2 = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    let cached = start_with(&smollm2, config())?;
    let engine = tessera::EngineConfig { kv_cache_bytes: 0, ..Default::default() };
    let uncached = start_with(&smollm2, ServerConfig { engine, ..config() })?;
    let mut messages = vec![json!({"role": "user", "content": "Name three fruits."})];
    let ask = |server: &Server, messages: &Vec<Value>| -> Result<String> {
        let (s, b) =
            post(server, "/v1/chat/completions", &json!({"messages": messages, "temperature": 0, "max_tokens": 24}))?;
        anyhow::ensure!(s == 200, "{b}");
        Ok(b["choices"][0]["message"]["content"].as_str().unwrap_or_default().to_string())
    };
    let first = ask(&cached, &messages)?;
    assert_eq!(first, ask(&uncached, &messages)?);
    messages.push(json!({"role": "assistant", "content": first}));
    messages.push(json!({"role": "user", "content": "Which of them is yellow?"}));
    let before = metric(&cached, "tessera_prefilled_positions_total")?;
    let second = ask(&cached, &messages)?;
    assert_eq!(second, ask(&uncached, &messages)?, "the cached prefix changed the answer");
    assert_eq!(metric(&cached, "tessera_prefix_cache_hits_total")?, 1.0);
    let reused = metric(&cached, "tessera_prefix_reused_positions_total")?;
    let prompt = metric(&uncached, "tessera_prefilled_positions_total")? - before;
    assert!(reused > 20.0, "only {reused} positions reused");
    assert_eq!(metric(&cached, "tessera_prefilled_positions_total")? - before + reused, prompt);
    assert_eq!(metric(&uncached, "tessera_prefix_cache_hits_total")?, 0.0);
    Ok(())
}
