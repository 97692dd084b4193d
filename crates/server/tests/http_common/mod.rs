//! What the HTTP tests share (`http.rs`, `http_load.rs`): a server on loopback over the shipped
//! shapes model (or another), requests, the library's answer to compare with, OpenAI's error shape.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use base64::Engine as _;
use serde_json::{json, Value};
use tessera::{GenerateParams, LoadOptions, Model};
use tessera_server::{AppState, ServerConfig};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn shapes_dir() -> PathBuf {
    root().join("models/shapes-vlm")
}

pub struct Server {
    pub base: String,
    _runtime: tokio::runtime::Runtime,
}

pub fn start(config: ServerConfig) -> Result<Server> {
    start_with(&shapes_dir(), config)
}

pub fn start_with(model: &std::path::Path, config: ServerConfig) -> Result<Server> {
    if !model.exists() {
        anyhow::bail!("{} is missing: run scripts/fetch_smollm2.sh", model.display());
    }
    let model = Model::load(model.to_str().unwrap(), &LoadOptions::default())?;
    let state = AppState::new(Arc::new(model), config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let base = format!("http://{}", listener.local_addr()?);
    runtime.spawn(tessera_server::serve(listener, state, std::future::pending()));
    Ok(Server { base, _runtime: runtime })
}

/// The server over SmolLM2-135M-Instruct (a real instruct model, its Q4_1 GGUF).
pub fn smollm2() -> Result<Server> {
    let path = root().join("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    start_with(&path, ServerConfig { model_name: "smollm2".into(), ..Default::default() })
}

pub fn config() -> ServerConfig {
    ServerConfig { model_name: "shapes".into(), ..Default::default() }
}

pub fn data_url(file: &str) -> Result<String> {
    let bytes = std::fs::read(shapes_dir().join("examples").join(file))?;
    Ok(format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(bytes)))
}

pub fn image_chat(url: &str, question: &str) -> Value {
    json!([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": question}
    ]}])
}

/// POSTs `body`; returns the status and the JSON body (errors included).
pub fn post(server: &Server, path: &str, body: &Value) -> Result<(u16, Value)> {
    post_raw(server, path, &body.to_string())
}

pub fn post_raw(server: &Server, path: &str, body: &str) -> Result<(u16, Value)> {
    let res = ureq::post(&format!("{}{path}", server.base)).set("content-type", "application/json").send_string(body);
    let res = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => return Err(e.into()),
    };
    let status = res.status();
    let text = res.into_string()?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

/// The library's greedy answer to the same chat.
pub fn library_answer(file: &str, question: &str) -> Result<String> {
    let model = Model::load(shapes_dir().to_str().unwrap(), &LoadOptions::default())?;
    let image = tessera::load_image(&shapes_dir().join("examples").join(file), tessera::DEFAULT_MAX_PIXELS)?;
    let prompt = model.encode_prompt(question, None, false, &[image])?;
    Ok(model.generate(&prompt, &GenerateParams::default(), &mut |_| {})?.text)
}

pub fn assert_error(status: u16, body: &Value, want_status: u16, needle: &str) {
    assert_eq!(status, want_status, "{body}");
    let msg = body["error"]["message"].as_str().unwrap_or_else(|| panic!("no OpenAI error shape: {body}"));
    assert!(body["error"]["type"].is_string(), "{body}");
    assert!(msg.contains(needle), "error message {msg:?} does not mention {needle:?}");
}

/// A metric's value in `/metrics`.
pub fn metric(server: &Server, name: &str) -> Result<f64> {
    let text = ureq::get(&format!("{}/metrics", server.base)).call()?.into_string()?;
    let line = text.lines().find(|l| l.starts_with(&format!("{name} "))).context(format!("no metric {name}"))?;
    Ok(line[name.len() + 1..].parse()?)
}

/// The chunks of a streamed response to `body` at `path` (checked to end with `[DONE]`).
pub fn stream_chunks(server: &Server, path: &str, body: &Value) -> Result<Vec<Value>> {
    let res = ureq::post(&format!("{}{path}", server.base)).send_json(body.clone())?;
    let mut lines = Vec::new();
    for line in BufReader::new(res.into_reader()).lines() {
        if let Some(d) = line?.strip_prefix("data: ") {
            lines.push(d.to_string());
        }
    }
    anyhow::ensure!(lines.last().map(String::as_str) == Some("[DONE]"), "no [DONE] at the end");
    Ok(lines[..lines.len() - 1].iter().map(|l| serde_json::from_str(l)).collect::<Result<_, _>>()?)
}

/// A copy of the tiny Llama fixture (in a temporary folder named after `test`) whose template
/// opens a thinking block when the template variable `switch` is set (Qwen3-Thinking's and
/// DeepSeek-R1's generation prompts open it always).
pub fn thinking_model(switch: &str, test: &str) -> Result<PathBuf> {
    let src = root().join("tests/fixtures/tiny/llama-gqa");
    let dir = std::env::temp_dir().join(format!("tessera-{test}-thinking-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(&src)? {
        let entry = entry?;
        std::fs::copy(entry.path(), dir.join(entry.file_name()))?;
    }
    let path = dir.join("tokenizer_config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let template = config["chat_template"].as_str().context("chat_template")?.to_string();
    let opened = template.replace(
        "'<|im_start|>assistant\n'",
        &format!("'<|im_start|>assistant\n' }}}}{{% if {switch} %}}{{{{ '<think>\n' }}}}{{% endif %}}{{{{ ''"),
    );
    anyhow::ensure!(opened != template, "the fixture's template changed: {template}");
    // Both markers appear in the template (a thinking template shows how a block ends).
    config["chat_template"] = format!("{opened}{{# </think> #}}").into();
    std::fs::write(&path, config.to_string())?;
    Ok(dir)
}
