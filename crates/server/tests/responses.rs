//! `POST /v1/responses` (OpenAI's Responses API, stateless) over loopback HTTP with
//! SmolLM2-135M-Instruct: the same conversation gives the chat endpoint's greedy answer as one
//! `message` item; a call forced by `tool_choice` is a `function_call` item, and the call with its
//! output sent back as input items gets the chat endpoint's answer to the same history; a
//! `json_schema` text format is enforced; `reasoning.effort` reaches the template and reasoning
//! is a `reasoning` item. Streams follow the Responses events (sequence numbers
//! in order, each item added, its deltas, done) and end with the whole response. Bad requests
//! are 400s in OpenAI's error shape naming the field.

mod http_common;

use std::io::{BufRead, BufReader};

use anyhow::{Context, Result};
use http_common::{post, smollm2, start_with, Server};
use serde_json::{json, Value};
use tessera_server::ServerConfig;

/// The events of the streamed response to `body`: each `event:` name equal to its `type`,
/// `sequence_number`s 0, 1, 2, …, `response.created` first and `response.completed` /
/// `.incomplete` last; every item added before its deltas and done after them.
fn stream(server: &Server, body: &Value) -> Result<Vec<Value>> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let res = ureq::post(&format!("{}/v1/responses", server.base)).send_json(body)?;
    let (mut events, mut name) = (Vec::<Value>::new(), None);
    for line in BufReader::new(res.into_reader()).lines() {
        let line = line?;
        if let Some(n) = line.strip_prefix("event:") {
            name = Some(n.trim_start().to_string());
        } else if let Some(d) = line.strip_prefix("data:") {
            let event: Value = serde_json::from_str(d.trim_start())?;
            anyhow::ensure!(name.take().as_deref() == event["type"].as_str(), "event name vs {event}");
            anyhow::ensure!(event["sequence_number"] == events.len(), "{event}");
            events.push(event);
        }
    }
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    anyhow::ensure!(kinds[..2] == ["response.created", "response.in_progress"], "{kinds:?}");
    anyhow::ensure!(["response.completed", "response.incomplete"].contains(&kinds[kinds.len() - 1]), "{kinds:?}");
    let mut open: Option<u64> = None;
    let mut next = 0;
    for e in &events[2..events.len() - 1] {
        let index = e["output_index"].as_u64();
        match e["type"].as_str() {
            Some("response.output_item.added") => {
                anyhow::ensure!(open.is_none() && index == Some(next), "{e} while {open:?} is open");
                open = index;
            }
            Some("response.output_item.done") => {
                anyhow::ensure!(index == open, "{e}");
                (open, next) = (None, next + 1);
            }
            _ => anyhow::ensure!(open.is_some() && index == open, "{e} outside its item"),
        }
    }
    anyhow::ensure!(open.is_none(), "item {open:?} never done");
    Ok(events)
}

/// The output a stream's deltas join to (text, reasoning and arguments appended to the items
/// as `response.output_item.added` gave them).
fn joined(events: &[Value]) -> Result<Vec<Value>> {
    let mut items: Vec<Value> = Vec::new();
    for e in events {
        let delta = e["delta"].as_str().unwrap_or("");
        match e["type"].as_str() {
            Some("response.output_item.added") => items.push(e["item"].clone()),
            Some("response.output_text.delta") | Some("response.reasoning_text.delta") => {
                let item = items.last_mut().context("an item")?;
                let kind = if item["type"] == "message" { "output_text" } else { "reasoning_text" };
                if item["content"].as_array().is_some_and(Vec::is_empty) {
                    item["content"] = json!([{"type": kind, "text": ""}]);
                }
                let text = item["content"][0]["text"].as_str().unwrap_or("").to_string() + delta;
                item["content"][0]["text"] = json!(text);
            }
            Some("response.function_call_arguments.delta") => {
                let item = items.last_mut().context("an item")?;
                item["arguments"] = json!(item["arguments"].as_str().unwrap_or("").to_string() + delta);
            }
            _ => {}
        }
    }
    Ok(items)
}

/// `body`'s response, whole and streamed: the stream's last event holds the whole response,
/// and its deltas join to the same output.
fn respond(server: &Server, body: &Value) -> Result<Value> {
    let (s, res) = post(server, "/v1/responses", body)?;
    anyhow::ensure!(s == 200, "{body}: {res}");
    assert_eq!(res["object"], "response");
    assert!(res["id"].as_str().is_some_and(|i| i.starts_with("resp_")), "{res}");
    let events = stream(server, body)?;
    let last = &events[events.len() - 1]["response"];
    for key in ["status", "usage", "incomplete_details"] {
        assert_eq!(last[key], res[key], "{key}: streamed vs whole");
    }
    // (Item ids are the response's own.)
    let without_ids = |r: &Value| -> Vec<Value> {
        let items = r["output"].as_array().cloned().unwrap_or_default();
        items
            .into_iter()
            .map(|mut i| i.as_object_mut().map(|o| o.remove("id")).map(|_| i).unwrap_or_default())
            .collect()
    };
    assert_eq!(without_ids(last), without_ids(&res), "output: streamed vs whole");
    // Ids and statuses aside, the joined deltas are the output's text.
    let strip = |items: &[Value]| -> Vec<Value> {
        items
            .iter()
            .map(
                |i| json!({"type": i["type"], "content": i["content"], "arguments": i["arguments"], "name": i["name"]}),
            )
            .collect()
    };
    let output = res["output"].as_array().context("output")?;
    let text_of = |items: Vec<Value>| -> Vec<Value> {
        items
            .into_iter()
            .map(|mut i| {
                if let Some(parts) = i["content"].as_array_mut() {
                    parts.iter_mut().for_each(|p| *p = json!(p["text"]));
                }
                i
            })
            .collect()
    };
    assert_eq!(text_of(strip(&joined(&events)?)), text_of(strip(output)), "joined deltas vs output");
    Ok(res)
}

/// The text of a response's one message item.
fn text(res: &Value) -> &str {
    let output = res["output"].as_array().map(Vec::as_slice).unwrap_or_default();
    assert!(output.len() == 1 && output[0]["type"] == "message", "{res}");
    assert_eq!(output[0]["content"][0]["type"], "output_text", "{res}");
    output[0]["content"][0]["text"].as_str().unwrap_or_default()
}

fn chat_answer(server: &Server, body: &Value) -> Result<Value> {
    let (s, res) = post(server, "/v1/chat/completions", body)?;
    anyhow::ensure!(s == 200, "{res}");
    Ok(res)
}

#[test]
fn text_answers_equal_the_chat_endpoints() -> Result<()> {
    let server = smollm2()?;
    let (system, question) = ("You answer in one sentence.", "What is the capital of France?");
    let expected = chat_answer(
        &server,
        &json!({"messages": [{"role": "system", "content": system},
        {"role": "user", "content": question}], "temperature": 0, "max_tokens": 40}),
    )?;
    let want = expected["choices"][0]["message"]["content"].as_str().context("content")?;
    let bodies = [
        json!({"model": "smollm2", "instructions": system, "input": question, "temperature": 0,
               "max_output_tokens": 40}),
        json!({"input": [{"role": "system", "content": system},
                         {"role": "user", "content": [{"type": "input_text", "text": question}]}],
               "temperature": 0, "max_output_tokens": 40, "store": false}),
    ];
    for body in &bodies {
        let res = respond(&server, body)?;
        assert_eq!(text(&res), want, "{body}");
        let complete = expected["choices"][0]["finish_reason"] == "stop";
        assert_eq!(res["status"], if complete { "completed" } else { "incomplete" }, "{res}");
        assert_eq!(res["usage"]["input_tokens"], expected["usage"]["prompt_tokens"]);
        assert_eq!(res["usage"]["output_tokens"], expected["usage"]["completion_tokens"]);
    }
    let mut body = bodies[0].clone();
    body["max_output_tokens"] = json!(3);
    let res = respond(&server, &body)?;
    assert_eq!(
        (res["status"].as_str(), &res["incomplete_details"]["reason"]),
        (Some("incomplete"), &json!("max_output_tokens"))
    );
    assert!(want.starts_with(text(&res)), "{res}");
    Ok(())
}

fn tools() -> Value {
    json!([{"type": "function", "name": "add", "description": "Adds two integers.", "strict": true,
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                           "required": ["a", "b"], "additionalProperties": false}}])
}

#[test]
fn a_forced_function_call_and_its_output_round_trip() -> Result<()> {
    let server = smollm2()?;
    let user = json!({"role": "user", "content": "What is 12 plus 30?"});
    for choice in [json!({"type": "function", "name": "add"}), json!("required")] {
        let body = json!({"input": [user], "tools": tools(), "tool_choice": choice, "temperature": 0,
                          "max_output_tokens": 100});
        let res = respond(&server, &body)?;
        assert_eq!(res["status"], "completed", "{res}");
        let output = res["output"].as_array().context("output")?;
        assert!(output.len() == 1 && output[0]["type"] == "function_call" && output[0]["name"] == "add", "{res}");
        let call = &output[0];
        let args: Value = serde_json::from_str(call["arguments"].as_str().context("arguments")?)?;
        assert!(args["a"].is_i64() && args["b"].is_i64() && args.as_object().map(|o| o.len()) == Some(2), "{res}");
        // The call and its output sent back: the chat endpoint's answer to the same history.
        let sum = (args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)).to_string();
        let input = json!([user, {"type": "function_call", "call_id": call["call_id"], "name": "add",
            "arguments": call["arguments"]}, {"type": "function_call_output", "call_id": call["call_id"], "output": sum}]);
        let res = respond(
            &server,
            &json!({"input": input, "tools": tools(), "tool_choice": "none",
            "temperature": 0, "max_output_tokens": 24}),
        )?;
        let chat_tools = json!([{"type": "function", "function": {"name": "add", "description": "Adds two integers.",
            "parameters": tools()[0]["parameters"]}}]);
        let history = json!([user, {"role": "assistant", "content": null, "tool_calls": [{"id": call["call_id"],
            "type": "function", "function": {"name": "add", "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["call_id"], "content": sum}]);
        let expected = chat_answer(
            &server,
            &json!({"messages": history, "tools": chat_tools, "tool_choice": "none",
            "temperature": 0, "max_tokens": 24}),
        )?;
        assert_eq!(Some(text(&res)), expected["choices"][0]["message"]["content"].as_str());
    }
    Ok(())
}

#[test]
fn a_json_schema_format_is_enforced() -> Result<()> {
    let server = smollm2()?;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                        "required": ["city"], "additionalProperties": false});
    let body = json!({"input": "Name a city.", "temperature": 0, "max_output_tokens": 60,
                      "text": {"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": true}}});
    let res = respond(&server, &body)?;
    let v: Value = serde_json::from_str(text(&res))?;
    let city = v["city"].as_str().context("a city")?;
    assert!(city.chars().count() <= 20 && v.as_object().map(|o| o.len()) == Some(1), "{v}");
    Ok(())
}

#[test]
fn reasoning_is_a_reasoning_item() -> Result<()> {
    // The template opens a thinking block when `reasoning_effort` is set: the output starts in it
    // (no `</think>` follows in 12 tokens of a random model), all of it reasoning — the chat
    // endpoint's `reasoning_content` for the same `reasoning_effort`.
    let dir = http_common::thinking_model("reasoning_effort", "responses")?;
    let server = start_with(&dir, ServerConfig { model_name: "tiny".into(), ..Default::default() })?;
    let body = json!({"input": "Hi", "max_output_tokens": 12, "temperature": 0, "reasoning": {"effort": "low"}});
    let res = respond(&server, &body)?;
    let expected = chat_answer(
        &server,
        &json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12,
        "temperature": 0, "reasoning_effort": "low"}),
    )?;
    let reasoning = expected["choices"][0]["message"]["reasoning_content"].as_str().context("reasoning")?;
    let output = res["output"].as_array().context("output")?;
    assert_eq!(output.len(), 1, "{res}");
    assert_eq!(output[0]["type"], "reasoning", "{res}");
    assert_eq!(output[0]["content"], json!([{"type": "reasoning_text", "text": reasoning}]), "{res}");
    // Without it, a message.
    let mut body = body.clone();
    body.as_object_mut().map(|b| b.remove("reasoning"));
    let res = respond(&server, &body)?;
    assert!(!text(&res).is_empty(), "{res}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

#[test]
fn bad_requests_name_the_field() -> Result<()> {
    let server = smollm2()?;
    let cases = [
        (json!({"input": []}), "input", "`input`"),
        (json!({"input": [{"type": "web_search_call"}]}), "input", "input[0]: item type `web_search_call`"),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input",
            "input_file",
        ),
        (json!({"input": "hi", "previous_response_id": "resp_1"}), "previous_response_id", "stores no responses"),
        (json!({"input": "hi", "tools": [{"type": "web_search"}]}), "tools", "tools[0]"),
        (
            json!({"input": "hi", "tools": tools(), "tool_choice": {"type": "function", "name": "nope"}}),
            "tool_choice",
            "`nope`",
        ),
        (json!({"input": "hi", "text": {"format": {"type": "xml"}}}), "text", "text.format.type"),
        (json!({"input": "hi", "max_output_tokens": "many"}), "max_output_tokens", "max_output_tokens"),
    ];
    for (body, param, needle) in cases {
        let (s, res) = post(&server, "/v1/responses", &body)?;
        assert_eq!(s, 400, "{body}: {res}");
        assert_eq!(res["error"]["param"], param, "{body}: {res}");
        let message = res["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(needle), "{body}: {message}");
    }
    Ok(())
}
