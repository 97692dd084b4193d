//! Requests with tools and reasoning, run beside each other under continuous batching, answer
//! exactly (greedy) what each answers alone: reasoning split from the answer and a capped
//! thinking block (`budget_tokens`) on the tiny Llama fixture with a template that opens a
//! thinking block when asked; a forced call (a JSON-schema constraint), `auto` with a strict
//! function (the lazy call grammar) and a Responses API call on SmolLM2-135M-Instruct (the
//! tools' description does not fit the tiny model's 128 positions); a plain chat on each.
//! Each runs 3 times at once; then each alone; the bodies are equal but for their ids and times.

mod http_common;

use std::sync::Arc;

use anyhow::Result;
use http_common::{metric, post, start_with};
use serde_json::{json, Value};
use tessera_server::ServerConfig;

/// `v` without the fields a response's identity or time sets (`id`, `created`, `created_at`).
fn strip(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !["id", "created", "created_at"].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), strip(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
        other => other.clone(),
    }
}

#[test]
fn tools_and_reasoning_batched_answer_as_alone() -> Result<()> {
    let dir = http_common::thinking_model("enable_thinking", "batched")?;
    let servers = [
        Arc::new(start_with(&dir, ServerConfig { model_name: "tiny".into(), ..Default::default() })?),
        Arc::new(http_common::smollm2()?),
    ];
    let add = json!({"name": "add", "description": "Adds two integers.", "strict": true, "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": false}});
    let tools = json!([{"type": "function", "function": add}]);
    let user = |q: &str| json!([{"role": "user", "content": q}]);
    let n = 48;
    let chat = "/v1/chat/completions";
    let (tiny, smollm2) = (0, 1);
    let requests = [
        (tiny, chat, json!({"messages": user("Think first."), "chat_template_kwargs": {"enable_thinking": true}})),
        (
            tiny,
            "/v1/messages",
            json!({"messages": user("Think."), "thinking": {"type": "enabled", "budget_tokens": 8}}),
        ),
        (tiny, chat, json!({"messages": user("Hello there.")})),
        (smollm2, chat, json!({"messages": user("Add 2 and 3."), "tools": tools, "tool_choice": "required"})),
        (smollm2, chat, json!({"messages": user("Add 2 and 3."), "tools": tools, "tool_choice": "auto"})),
        (
            smollm2,
            "/v1/responses",
            json!({"input": "Add 1 and 1.", "tools": [{"type": "function", "name": "add",
            "parameters": add["parameters"]}], "tool_choice": "required"}),
        ),
        (smollm2, chat, json!({"messages": user("Hello there.")})),
    ];
    let requests: Vec<(usize, &str, Value)> = requests
        .into_iter()
        .map(|(server, path, mut body)| {
            body["temperature"] = json!(0);
            body[if path == "/v1/responses" { "max_output_tokens" } else { "max_tokens" }] = json!(n);
            (server, path, body)
        })
        .collect();
    let handles: Vec<_> = (0..3)
        .flat_map(|_| requests.iter().cloned())
        .map(|(server, path, body)| {
            let server = servers[server].clone();
            std::thread::spawn(move || post(&server, path, &body))
        })
        .collect();
    let together: Vec<(u16, Value)> =
        handles.into_iter().map(|h| h.join().expect("client thread")).collect::<Result<_>>()?;
    for server in &servers {
        let mean_batch = metric(server, "tessera_decode_rows_total")? / metric(server, "tessera_decode_steps_total")?;
        assert!(mean_batch > 1.5, "the requests were not decoded together (mean batch {mean_batch:.2})");
    }
    for (i, (server, path, body)) in requests.iter().enumerate() {
        let (s, alone) = post(&servers[*server], path, body)?;
        assert_eq!(s, 200, "{alone}");
        for (k, (s, res)) in together.iter().skip(i).step_by(requests.len()).enumerate() {
            assert_eq!(*s, 200, "{res}");
            assert_eq!(strip(res), strip(&alone), "{path} {body}: copy {k} beside the others differs from alone");
        }
    }
    // What each shows: reasoning, a capped thinking block then text, a call.
    let (_, r) = &together[0];
    assert!(r["choices"][0]["message"]["reasoning_content"].as_str().is_some_and(|t| !t.is_empty()), "{r}");
    let (_, r) = &together[1];
    assert_eq!((&r["content"][0]["type"], &r["content"][1]["type"]), (&json!("thinking"), &json!("text")), "{r}");
    let (_, r) = &together[3];
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
