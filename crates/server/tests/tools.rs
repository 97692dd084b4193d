//! Tool calling over loopback HTTP with SmolLM2-135M-Instruct (a template without tool syntax:
//! its tools go to the system message). `tool_choice` `required` or a named function constrains
//! the output to a call, so even this small model, greedy or sampled, makes a call whose
//! arguments are valid under the function's schema; the stream's tool-call deltas join to the
//! whole response's call; a second turn with the call and its result in the history answers;
//! bad tools are 400s naming the field.

mod http_common;

use anyhow::{Context, Result};
use http_common::{smollm2 as start, stream_chunks, Server};
use serde_json::{json, Value};

fn post(server: &Server, body: &Value) -> Result<(u16, Value)> {
    http_common::post(server, "/v1/chat/completions", body)
}

/// The chunks of the streamed response to `body`.
fn stream(server: &Server, body: &Value) -> Result<Vec<Value>> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    stream_chunks(server, "/v1/chat/completions", &body)
}

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city.",
         "parameters": {"type": "object", "properties": {
             "city": {"type": "string", "maxLength": 20},
             "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
          "required": ["city", "unit"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add", "description": "Adds two integers.", "strict": true,
         "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"], "additionalProperties": false}}}
    ])
}

/// Checks a call's arguments against the two schemas above.
fn check_arguments(name: &str, arguments: &str) -> Result<()> {
    let args: Value = serde_json::from_str(arguments).with_context(|| format!("arguments {arguments:?}"))?;
    let keys: Vec<&str> = args.as_object().context("an object")?.keys().map(String::as_str).collect();
    match name {
        "get_weather" => {
            anyhow::ensure!(keys == ["city", "unit"], "{arguments}");
            anyhow::ensure!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 20), "{arguments}");
            anyhow::ensure!(["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap_or("")), "{arguments}");
        }
        "add" => anyhow::ensure!(keys == ["a", "b"] && args["a"].is_i64() && args["b"].is_i64(), "{arguments}"),
        other => anyhow::bail!("a call of `{other}`, which is not a tool"),
    }
    Ok(())
}

/// The call a stream's deltas add up to (OpenAI's rules: the first delta of an index brings
/// its id and name, later ones argument fragments), the number of argument fragments, and the
/// finish reason.
fn streamed_call(chunks: &[Value]) -> Result<(Value, usize, String)> {
    let (mut id, mut name, mut args, mut fragments, mut finish) = (None, None, String::new(), 0, String::new());
    for c in chunks.iter().filter(|c| !c["choices"].as_array().is_some_and(Vec::is_empty)) {
        let choice = &c["choices"][0];
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
        for call in choice["delta"]["tool_calls"].as_array().into_iter().flatten() {
            anyhow::ensure!(call["index"] == 0, "{call}");
            if let Some(i) = call["id"].as_str() {
                anyhow::ensure!(id.is_none(), "a second id: {call}");
                id = Some(i.to_string());
                name = call["function"]["name"].as_str().map(String::from);
                anyhow::ensure!(call["type"] == "function", "{call}");
            }
            let fragment = call["function"]["arguments"].as_str().context("arguments fragment")?;
            if !fragment.is_empty() {
                fragments += 1;
                args.push_str(fragment);
            }
        }
        anyhow::ensure!(choice["delta"]["content"].as_str().unwrap_or("").is_empty(), "content in {c}");
    }
    let call = json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    Ok((call, fragments, finish))
}

#[test]
fn forced_calls_are_valid_under_the_schema_and_stream_as_deltas() -> Result<()> {
    let server = start()?;
    let ask = |choice: Value, temperature: f64, seed: u64| {
        json!({"messages": [{"role": "user", "content": "What is the weather in Paris, and what is 12 plus 30?"}],
               "tools": tools(), "tool_choice": choice, "temperature": temperature, "seed": seed,
               "max_tokens": 200})
    };
    let named = json!({"type": "function", "function": {"name": "add"}});
    let cases = [
        (json!("required"), 0.0, 0, None),
        (json!("required"), 1.0, 1, None),
        (json!("required"), 1.0, 2, None),
        (named.clone(), 0.0, 0, Some("add")),
        (named, 1.0, 3, Some("add")),
        (json!({"type": "function", "function": {"name": "get_weather"}}), 1.0, 4, Some("get_weather")),
    ];
    for (choice, temperature, seed, want) in cases {
        let body = ask(choice.clone(), temperature, seed);
        let (s, res) = post(&server, &body)?;
        anyhow::ensure!(s == 200, "{res}");
        let choice0 = &res["choices"][0];
        assert_eq!(choice0["finish_reason"], "tool_calls", "{res}");
        let message = &choice0["message"];
        assert_eq!(message["content"], Value::Null, "{res}");
        let calls = message["tool_calls"].as_array().context("tool_calls")?;
        assert_eq!(calls.len(), 1, "{res}");
        let call = &calls[0];
        assert_eq!(call["type"], "function");
        assert!(call["id"].as_str().is_some_and(|i| i.starts_with("call_")), "{call}");
        let name = call["function"]["name"].as_str().context("name")?;
        if let Some(want) = want {
            assert_eq!(name, want, "{choice}");
        }
        check_arguments(name, call["function"]["arguments"].as_str().context("arguments string")?)?;

        // The same request streamed: the deltas join to the same call, in several fragments.
        let chunks = stream(&server, &body)?;
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let (streamed, fragments, finish) = streamed_call(&chunks)?;
        assert_eq!(&streamed, call, "seed {seed}");
        assert_eq!(finish, "tool_calls");
        assert!(fragments >= 2, "the arguments came in {fragments} fragment(s)");
    }
    Ok(())
}

#[test]
fn a_call_and_its_result_in_the_history_get_an_answer() -> Result<()> {
    let server = start()?;
    let user = json!({"role": "user", "content": "What is 12 plus 30?"});
    let first = json!({"messages": [user], "tools": tools(),
                       "tool_choice": {"type": "function", "function": {"name": "add"}}, "temperature": 0});
    let (s, res) = post(&server, &first)?;
    anyhow::ensure!(s == 200, "{res}");
    let call = res["choices"][0]["message"]["tool_calls"][0].clone();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().context("arguments")?)?;
    let result = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
    let history = json!([user, {"role": "assistant", "content": null, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": call["id"], "content": result.to_string()}]);
    for choice in ["auto", "none"] {
        let body = json!({"messages": history, "tools": tools(), "tool_choice": choice, "temperature": 0,
                          "max_tokens": 24});
        let (s, res) = post(&server, &body)?;
        anyhow::ensure!(s == 200, "{res}");
        let message = &res["choices"][0]["message"];
        let finish = res["choices"][0]["finish_reason"].as_str().unwrap_or("");
        // `none` never parses calls; `auto` may (the model is free), and then says so.
        match message["tool_calls"].as_array() {
            Some(calls) => {
                assert_eq!((choice, finish), ("auto", "tool_calls"), "{res}");
                assert!(!calls.is_empty());
            }
            None => {
                assert!(message["content"].as_str().is_some_and(|c| !c.is_empty()), "{res}");
                assert!(["stop", "length"].contains(&finish), "{res}");
            }
        }
    }
    Ok(())
}

#[test]
fn bad_tools_are_400s_naming_the_field() -> Result<()> {
    let server = start()?;
    let user = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"messages": user, "tools": {"name": "f"}}), "tools", "a list"),
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"description": "x"}}]}),
            "tools",
            "tools[0]",
        ),
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]}),
            "tools",
            "parameters",
        ),
        (
            json!({"messages": user, "tools": tools(), "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice",
            "`nope`",
        ),
        (json!({"messages": user, "tools": tools(), "tool_choice": "always"}), "tool_choice", "always"),
        (json!({"messages": user, "tool_choice": "required"}), "tool_choice", "no `tools`"),
        (
            json!({"messages": user, "tools": tools(), "tool_choice": "required",
                "response_format": {"type": "json_object"}}),
            "response_format",
            "one of them",
        ),
        (json!({"messages": user, "chat_template_kwargs": {"messages": []}}), "chat_template_kwargs", "messages"),
        (
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"arguments": "{}"}}]}]}),
            "messages",
            "name",
        ),
        (
            json!({"messages": user, "tools": [{"type": "function", "function": {"name": "f",
                "parameters": {"type": "no-such-type"}}}], "tool_choice": "required"}),
            "tools",
            "",
        ),
    ];
    for (body, param, needle) in cases {
        let (s, res) = post(&server, &body)?;
        assert_eq!(s, 400, "{body}: {res}");
        assert_eq!(res["error"]["param"], param, "{body}: {res}");
        let message = res["error"]["message"].as_str().unwrap_or("");
        assert!(message.contains(needle), "{body}: {message}");
    }
    Ok(())
}
