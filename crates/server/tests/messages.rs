//! `POST /v1/messages` (Anthropic's Messages API) over loopback HTTP. The answers are the chat
//! endpoint's, as the same conversation through `/v1/chat/completions` gives them (one pipeline,
//! two front-ends): greedy text with SmolLM2-135M-Instruct (system prompt, stop sequences,
//! usage, `count_tokens`), an image block on the shapes VLM, a call forced by `tool_choice` and
//! its result sent back, thinking on a template that opens a thinking block when asked (and
//! capped by `budget_tokens`), an assistant prefill continued, `cache_control` ignored; an
//! `output_config` JSON schema is enforced. Streams
//! follow Anthropic's event grammar (each event's `event:` line naming its `type`) and join to
//! the whole response's blocks. Bad requests get 400s in Anthropic's error shape.

mod http_common;

use std::io::{BufRead, BufReader};

use anyhow::{Context, Result};
use base64::Engine as _;
use http_common::{post, smollm2, start_with, Server};
use serde_json::{json, Value};
use tessera_server::ServerConfig;

/// The events of a streamed `/v1/messages` response to `body`, checked against Anthropic's
/// grammar: `message_start`, pings, content blocks (`content_block_start`, deltas of that
/// index, `content_block_stop`) numbered from 0, `message_delta`, `message_stop`, and nothing
/// after; each event's `event:` name equal to its `type`.
fn stream(server: &Server, body: &Value) -> Result<Vec<Value>> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let res = ureq::post(&format!("{}/v1/messages", server.base)).send_json(body)?;
    let (mut events, mut name) = (Vec::new(), None);
    for line in BufReader::new(res.into_reader()).lines() {
        let line = line?;
        // (The space after the colon is optional in server-sent events.)
        if let Some(n) = line.strip_prefix("event:") {
            name = Some(n.trim_start().to_string());
        } else if let Some(d) = line.strip_prefix("data:") {
            let event: Value = serde_json::from_str(d)?;
            anyhow::ensure!(name.take().as_deref() == event["type"].as_str(), "event name vs {event}");
            events.push(event);
        }
    }
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).filter(|k| *k != "ping").collect();
    anyhow::ensure!(kinds.first() == Some(&"message_start"), "{kinds:?}");
    anyhow::ensure!(kinds[kinds.len() - 2..] == ["message_delta", "message_stop"], "{kinds:?}");
    let mut open: Option<u64> = None;
    let mut next = 0;
    for e in &events[1..events.len() - 2] {
        let index = e["index"].as_u64();
        match e["type"].as_str() {
            Some("ping") => {}
            Some("content_block_start") => {
                anyhow::ensure!(open.is_none() && index == Some(next), "{e} while block {open:?} is open");
                open = index;
            }
            Some("content_block_delta") => anyhow::ensure!(open.is_some() && index == open, "{e}"),
            Some("content_block_stop") => {
                anyhow::ensure!(open.is_some() && index == open, "{e}");
                (open, next) = (None, next + 1);
            }
            _ => anyhow::bail!("unexpected event {e}"),
        }
    }
    anyhow::ensure!(open.is_none(), "block {open:?} never stopped");
    Ok(events)
}

/// The blocks a stream's events join to (as Anthropic's SDKs accumulate them), with its stop
/// reason, stop sequence and usage (`message_start`'s input tokens, `message_delta`'s output).
fn joined(events: &[Value]) -> Result<Value> {
    let mut blocks: Vec<Value> = Vec::new();
    let mut json_text = String::new();
    for e in events {
        match e["type"].as_str() {
            Some("content_block_start") => {
                blocks.push(e["content_block"].clone());
                json_text.clear();
            }
            Some("content_block_delta") => {
                let block = blocks.last_mut().context("a delta before any block")?;
                let d = &e["delta"];
                let (field, piece) = match d["type"].as_str() {
                    Some("text_delta") => ("text", &d["text"]),
                    Some("thinking_delta") => ("thinking", &d["thinking"]),
                    Some("input_json_delta") => {
                        json_text.push_str(d["partial_json"].as_str().context("partial_json")?);
                        continue;
                    }
                    _ => anyhow::bail!("unknown delta {d}"),
                };
                let text =
                    block[field].as_str().context("a text field")?.to_string() + piece.as_str().context("text")?;
                block[field] = json!(text);
            }
            Some("content_block_stop") if !json_text.is_empty() => {
                blocks.last_mut().context("block")?["input"] = serde_json::from_str(&json_text)?;
            }
            _ => {}
        }
    }
    let delta = &events[events.len() - 2];
    Ok(json!({"content": blocks, "stop_reason": delta["delta"]["stop_reason"],
              "stop_sequence": delta["delta"]["stop_sequence"],
              "usage": {"input_tokens": events[0]["message"]["usage"]["input_tokens"],
                        "output_tokens": delta["usage"]["output_tokens"]}}))
}

/// The fields of a whole response that a stream carries too.
fn comparable(res: &Value) -> Value {
    json!({"content": res["content"], "stop_reason": res["stop_reason"], "stop_sequence": res["stop_sequence"],
           "usage": {"input_tokens": res["usage"]["input_tokens"], "output_tokens": res["usage"]["output_tokens"]}})
}

/// `body`'s answer, whole (checked to be a message) and streamed (checked to join to it).
fn answer(server: &Server, body: &Value) -> Result<Value> {
    let (s, res) = post(server, "/v1/messages", body)?;
    anyhow::ensure!(s == 200, "{body}: {res}");
    assert_eq!((res["type"].as_str(), res["role"].as_str()), (Some("message"), Some("assistant")), "{res}");
    assert!(res["id"].as_str().is_some_and(|i| i.starts_with("msg_")), "{res}");
    let streamed = joined(&stream(server, body)?)?;
    assert_eq!(streamed, comparable(&res), "streamed vs whole for {body}");
    Ok(res)
}

/// The one text block's text.
fn text(res: &Value) -> &str {
    let blocks = res["content"].as_array().map(Vec::as_slice).unwrap_or_default();
    assert!(blocks.len() == 1 && blocks[0]["type"] == "text", "{res}");
    blocks[0]["text"].as_str().unwrap_or_default()
}

#[test]
fn text_answers_equal_the_chat_endpoints() -> Result<()> {
    let server = smollm2()?;
    let system = "You are a helpful assistant who answers in one sentence.";
    let question = "What is the capital of France?";
    let chat = json!({"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                      "temperature": 0, "max_tokens": 40});
    let (s, expected) = post(&server, "/v1/chat/completions", &chat)?;
    anyhow::ensure!(s == 200, "{expected}");
    let want = expected["choices"][0]["message"]["content"].as_str().context("content")?;
    assert!(want.len() > 8, "{expected}");
    let finish = expected["choices"][0]["finish_reason"].as_str();
    let messages = json!([{"role": "user", "content": question}]);
    // `system` as a string and as one text block; the question as a string and as a block.
    let bodies = [
        json!({"model": "smollm2", "system": system, "messages": messages, "temperature": 0, "max_tokens": 40}),
        json!({"system": [{"type": "text", "text": system}], "temperature": 0, "max_tokens": 40,
               "messages": [{"role": "user", "content": [{"type": "text", "text": question}]}]}),
    ];
    for body in &bodies {
        let res = answer(&server, body)?;
        assert_eq!(text(&res), want, "{body}");
        let reason = if finish == Some("length") { "max_tokens" } else { "end_turn" };
        assert_eq!((res["stop_reason"].as_str(), &res["stop_sequence"]), (Some(reason), &Value::Null));
        assert_eq!(res["usage"]["input_tokens"], expected["usage"]["prompt_tokens"]);
        assert_eq!(res["usage"]["output_tokens"], expected["usage"]["completion_tokens"]);
        let (s, count) = post(&server, "/v1/messages/count_tokens", body)?;
        assert_eq!((s, &count["input_tokens"]), (200, &res["usage"]["input_tokens"]), "{count}");
    }

    // A stop sequence from the middle of the answer cuts it there, and is named.
    let words: Vec<&str> = want.split_whitespace().collect();
    let stop = words.get(words.len() / 2).context("a word")?.to_string();
    let mut body = bodies[0].clone();
    body["stop_sequences"] = json!(["\u{1F600}", stop]);
    let res = answer(&server, &body)?;
    assert_eq!(text(&res), &want[..want.find(&stop).context("the stop")?]);
    assert_eq!((res["stop_reason"].as_str(), res["stop_sequence"].as_str()), (Some("stop_sequence"), Some(&*stop)));
    // A low max_tokens stops there.
    let mut body = bodies[0].clone();
    body["max_tokens"] = json!(3);
    let res = answer(&server, &body)?;
    assert_eq!((res["stop_reason"].as_str(), res["usage"]["output_tokens"].as_u64()), (Some("max_tokens"), Some(3)));
    assert!(want.starts_with(text(&res)), "{res}");
    Ok(())
}

#[test]
fn an_image_block_answers_as_the_chat_endpoint() -> Result<()> {
    let server = http_common::start(http_common::config())?;
    let bytes = std::fs::read(http_common::shapes_dir().join("examples/three_shapes.png"))?;
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    let question = "How many shapes are there?";
    let chat = json!({"messages": http_common::image_chat(&format!("data:image/png;base64,{data}"), question),
                      "max_tokens": 16, "temperature": 0});
    let (s, expected) = post(&server, "/v1/chat/completions", &chat)?;
    anyhow::ensure!(s == 200, "{expected}");
    let body = json!({"max_tokens": 16, "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "text", "text": question}]}]});
    let res = answer(&server, &body)?;
    assert_eq!(text(&res), expected["choices"][0]["message"]["content"].as_str().context("content")?);
    assert_eq!(res["usage"]["input_tokens"], expected["usage"]["prompt_tokens"]);
    // Not an image, and an image URL from a host the server does not download from.
    let bad = |source: Value| json!({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": source}]}]});
    let cases = [
        (bad(json!({"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"})), "image"),
        (bad(json!({"type": "url", "url": "https://example.com/a.png"})), "--allowed-media-domains"),
        (bad(json!({"type": "base64", "media_type": "image/bmp", "data": data})), "media_type `image/bmp`"),
    ];
    for (body, needle) in cases {
        let (s, res) = post(&server, "/v1/messages", &body)?;
        assert_anthropic_error(s, &res, 400, needle);
    }
    Ok(())
}

fn tools() -> Value {
    json!([
        {"name": "get_weather", "description": "Current weather in a city.", "input_schema": {"type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"],
            "additionalProperties": false}},
        {"name": "add", "description": "Adds two integers.", "input_schema": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"],
            "additionalProperties": false}}
    ])
}

#[test]
fn a_forced_tool_use_and_its_result_round_trip() -> Result<()> {
    let server = smollm2()?;
    let user = json!({"role": "user", "content": "What is 12 plus 30?"});
    let ask = |choice: &Value| json!({"messages": [user], "tools": tools(), "tool_choice": choice, "temperature": 0, "max_tokens": 100});
    let mut call = Value::Null;
    for choice in [json!({"type": "tool", "name": "add"}), json!({"type": "any"})] {
        let res = answer(&server, &ask(&choice))?;
        assert_eq!(res["stop_reason"], "tool_use", "{res}");
        let blocks = res["content"].as_array().context("content")?;
        assert_eq!(blocks.len(), 1, "{res}");
        let block = &blocks[0];
        assert_eq!(block["type"], "tool_use", "{res}");
        assert!(block["id"].as_str().is_some_and(|i| !i.is_empty()), "{res}");
        let input = block["input"].as_object().context("input")?;
        match block["name"].as_str() {
            Some("add") => assert!(input.len() == 2 && input["a"].is_i64() && input["b"].is_i64(), "{res}"),
            Some("get_weather") => assert!(input.len() == 1 && input["city"].is_string(), "{res}"),
            other => anyhow::bail!("a call of {other:?}"),
        }
        if choice["type"] == "tool" {
            assert_eq!(block["name"], "add");
            call = block.clone();
        }
    }
    // The call and its result sent back: an answer (`none`: text; `auto`: text or another call).
    let sum = call["input"]["a"].as_i64().unwrap_or(0) + call["input"]["b"].as_i64().unwrap_or(0);
    let history = json!([user, {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": sum.to_string()}]}]);
    for choice in ["auto", "none"] {
        let body = json!({"messages": history, "tools": tools(), "tool_choice": {"type": choice},
                          "temperature": 0, "max_tokens": 24});
        let res = answer(&server, &body)?;
        let blocks = res["content"].as_array().context("content")?;
        assert!(!blocks.is_empty(), "{res}");
        match res["stop_reason"].as_str() {
            Some("tool_use") => assert_eq!(choice, "auto", "{res}"),
            _ => assert!(!text(&res).is_empty(), "{res}"),
        }
    }
    // The same history through the chat endpoint renders the same prompt.
    let chat_history = json!([user, {"role": "assistant", "content": null, "tool_calls": [{"id": call["id"],
        "type": "function", "function": {"name": "add", "arguments": call["input"].to_string()}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": sum.to_string()}]);
    let openai_tools: Vec<Value> = tools()
        .as_array()
        .context("tools")?
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {"name": t["name"], "description": t["description"],
                        "parameters": t["input_schema"]}})
        })
        .collect();
    let (s, chat) = post(
        &server,
        "/v1/chat/completions",
        &json!({"messages": chat_history, "tools": openai_tools,
        "tool_choice": "none", "temperature": 0, "max_tokens": 24}),
    )?;
    anyhow::ensure!(s == 200, "{chat}");
    let (s, res) = post(
        &server,
        "/v1/messages",
        &json!({"messages": history, "tools": tools(),
        "tool_choice": {"type": "none"}, "temperature": 0, "max_tokens": 24}),
    )?;
    anyhow::ensure!(s == 200, "{res}");
    assert_eq!(Some(text(&res)), chat["choices"][0]["message"]["content"].as_str());
    assert_eq!(res["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    Ok(())
}

#[test]
fn thinking_is_a_thinking_block_when_enabled() -> Result<()> {
    let dir = http_common::thinking_model("enable_thinking", "messages")?;
    let server = start_with(&dir, ServerConfig { model_name: "tiny".into(), ..Default::default() })?;
    let body = |thinking: Value| {
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0,
               "thinking": thinking})
    };
    let chat = |enable: bool| {
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0,
               "chat_template_kwargs": {"enable_thinking": enable}})
    };
    // Enabled: the output starts inside the block (no `</think>` follows in 12 tokens of a
    // random model), all of it thinking — the chat endpoint's `reasoning_content`.
    let res = answer(&server, &body(json!({"type": "enabled"})))?;
    let (s, expected) = post(&server, "/v1/chat/completions", &chat(true))?;
    anyhow::ensure!(s == 200, "{expected}");
    let reasoning = expected["choices"][0]["message"]["reasoning_content"].as_str().context("reasoning")?;
    let blocks = res["content"].as_array().context("content")?;
    assert_eq!(blocks[0], json!({"type": "thinking", "thinking": reasoning, "signature": ""}), "{res}");
    assert_eq!(blocks.len(), 1, "{res}");
    // Disabled: no block opens; the answer is text, as chat's content.
    let res = answer(&server, &body(json!({"type": "disabled"})))?;
    let (s, expected) = post(&server, "/v1/chat/completions", &chat(false))?;
    anyhow::ensure!(s == 200, "{expected}");
    assert_eq!(Some(text(&res)), expected["choices"][0]["message"]["content"].as_str(), "{res}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn budget_tokens_cap_the_thinking_block() -> Result<()> {
    let dir = http_common::thinking_model("enable_thinking", "budget")?;
    let server = start_with(&dir, ServerConfig { model_name: "tiny".into(), ..Default::default() })?;
    let body = |thinking: Value| {
        json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 24, "temperature": 0,
               "thinking": thinking})
    };
    // Unbounded, a random model thinks for all 24 tokens.
    let free = answer(&server, &body(json!({"type": "enabled"})))?;
    let blocks = free["content"].as_array().context("content")?;
    assert_eq!((blocks.len(), &blocks[0]["type"]), (1, &json!("thinking")), "{free}");
    let all = blocks[0]["thinking"].as_str().context("thinking")?;
    // Capped at 6 tokens: the same first 6 tokens of thinking, then `</think>` forced, then
    // an answer (a text block) in the tokens left.
    let capped = answer(&server, &body(json!({"type": "enabled", "budget_tokens": 6})))?;
    let blocks = capped["content"].as_array().context("content")?;
    assert_eq!(blocks.len(), 2, "{capped}");
    assert_eq!((&blocks[0]["type"], &blocks[1]["type"]), (&json!("thinking"), &json!("text")), "{capped}");
    let thought = blocks[0]["thinking"].as_str().context("thinking")?;
    assert!(!thought.is_empty() && all.starts_with(thought) && thought.len() < all.len(), "{thought:?} vs {all:?}");
    let n = tokens(&dir, thought)?.len();
    assert!((1..=6).contains(&n), "{thought:?} is {n} tokens");
    assert_eq!(capped["usage"]["output_tokens"], 24, "{capped}");
    // The budget must be under max_tokens, as Anthropic's API asks.
    let (s, res) = post(&server, "/v1/messages", &body(json!({"type": "enabled", "budget_tokens": 24})))?;
    assert_anthropic_error(s, &res, 400, "budget_tokens");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

/// `text`'s token ids under the tokenizer in `dir`.
fn tokens(dir: &std::path::Path, text: &str) -> Result<Vec<u32>> {
    let tokenizer = tessera::Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    Ok(tokenizer.encode(text, false)?)
}

#[test]
fn a_last_assistant_message_is_continued() -> Result<()> {
    let server = smollm2()?;
    let (system, question, prefill) = ("Answer briefly.", "What is the capital of France?", "The capital of France is");
    let body = json!({"system": system, "max_tokens": 12, "temperature": 0, "messages": [
        {"role": "user", "content": question}, {"role": "assistant", "content": prefill}]});
    let res = answer(&server, &body)?;
    // The continuation of the prompt cut after the prefill (SmolLM2's ChatML template): what a
    // raw completion of that text gives.
    let raw = format!(
        "<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n{prefill}"
    );
    let (s, expected) = post(&server, "/v1/completions", &json!({"prompt": raw, "max_tokens": 12, "temperature": 0}))?;
    anyhow::ensure!(s == 200, "{expected}");
    assert_eq!(Some(text(&res)), expected["choices"][0]["text"].as_str(), "{res}");
    assert_eq!(res["usage"]["input_tokens"], expected["usage"]["prompt_tokens"]);
    let (s, count) = post(&server, "/v1/messages/count_tokens", &body)?;
    assert_eq!((s, &count["input_tokens"]), (200, &res["usage"]["input_tokens"]), "{count}");
    // The chat endpoint continues it too, with `continue_final_message`.
    let chat = json!({"messages": [{"role": "system", "content": system}, {"role": "user", "content": question},
        {"role": "assistant", "content": prefill}], "continue_final_message": true, "max_tokens": 12, "temperature": 0});
    let (s, chat) = post(&server, "/v1/chat/completions", &chat)?;
    anyhow::ensure!(s == 200, "{chat}");
    assert_eq!(Some(text(&res)), chat["choices"][0]["message"]["content"].as_str());

    // `cache_control` on the system prompt, a block and a tool is accepted and changes nothing.
    let cache = json!({"type": "ephemeral"});
    let marked = json!({"max_tokens": 12, "temperature": 0, "tool_choice": {"type": "none"},
        "system": [{"type": "text", "text": system, "cache_control": cache}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": cache}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": question, "cache_control": cache}]}]});
    let mut plain = marked.clone();
    plain["system"] = json!(system);
    plain["tools"][0].as_object_mut().context("tool")?.remove("cache_control");
    plain["messages"][0]["content"] = json!(question);
    assert_eq!(comparable(&answer(&server, &marked)?), comparable(&answer(&server, &plain)?));
    Ok(())
}

#[test]
fn an_output_format_schema_is_enforced() -> Result<()> {
    let server = smollm2()?;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                        "required": ["city"], "additionalProperties": false});
    let body = json!({"max_tokens": 60, "temperature": 0, "messages": [{"role": "user", "content": "Name a city."}],
                      "output_config": {"format": {"type": "json_schema", "schema": schema}, "effort": "low"}});
    let res = answer(&server, &body)?;
    let v: Value = serde_json::from_str(text(&res))?;
    assert!(v["city"].as_str().is_some_and(|c| c.chars().count() <= 20), "{v}");
    assert_eq!(v.as_object().map(|o| o.len()), Some(1), "{v}");
    Ok(())
}

fn assert_anthropic_error(status: u16, body: &Value, want: u16, needle: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["type"], "error", "not Anthropic's error shape: {body}");
    let kind = if want == 404 { "not_found_error" } else { "invalid_request_error" };
    assert_eq!(body["error"]["type"], kind, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{message:?} does not mention {needle:?}");
}

#[test]
fn bad_requests_get_anthropic_errors() -> Result<()> {
    let server = smollm2()?;
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"messages": user}), 400, "`max_tokens` is required"),
        (json!({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "video"}]}]}), 400, "`video`"),
        (json!({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}), 400, "messages[0].role"),
        (json!({"max_tokens": 8, "messages": []}), 400, "`messages`"),
        (json!({"max_tokens": "8", "messages": user}), 400, "max_tokens"),
        (json!({"max_tokens": 8, "messages": user, "temperature": 1.5}), 400, "temperature"),
        (
            json!({"max_tokens": 8, "messages": user, "tools": tools(), "tool_choice": {"type": "tool", "name": "nope"}}),
            400,
            "`nope`",
        ),
        (json!({"max_tokens": 8, "messages": user, "tools": [{"name": "f", "input_schema": "x"}]}), 400, "tools[0]"),
        (json!({"max_tokens": 8, "messages": user, "thinking": {"type": "sometimes"}}), 400, "thinking.type"),
        (
            json!({"max_tokens": 8, "messages": user, "output_config": {"format": {"type": "xml"}}}),
            400,
            "output_config.format",
        ),
        (json!({"max_tokens": 8, "messages": user, "model": "claude-opus-4"}), 404, "claude-opus-4"),
    ];
    for (body, status, needle) in cases {
        let (s, res) = post(&server, "/v1/messages", &body)?;
        assert_anthropic_error(s, &res, status, needle);
    }
    let (s, res) = http_common::post_raw(&server, "/v1/messages", "{not json")?;
    assert_anthropic_error(s, &res, 400, "invalid request body");
    let (s, res) = post(&server, "/v1/messages/count_tokens", &json!({"messages": [{"role": "user"}]}))?;
    assert_anthropic_error(s, &res, 400, "messages[0].content");
    Ok(())
}
