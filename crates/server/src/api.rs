//! The OpenAI request and response bodies this server reads and writes (the fields it
//! honours; unknown fields are ignored, as OpenAI's API does, and a known field of the wrong
//! type is a 400 naming it).

use serde::{Deserialize, Serialize};

/// `stop`: one string or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// `response_format`: `text`, `json_object`, or `json_schema` with its schema.
#[derive(Debug, Clone, Deserialize)]
pub struct ResponseFormat {
    #[serde(rename = "type")]
    pub kind: String,
    pub json_schema: Option<JsonSchemaFormat>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct JsonSchemaFormat {
    /// (`name` and `strict` are accepted and ignored: the schema is always enforced.)
    pub schema: Option<serde_json::Value>,
}

/// The sampling fields shared by chat and text completions.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    /// (An extension of OpenAI's API, as vLLM's and llama.cpp's; Anthropic's has it.)
    pub top_k: Option<u64>,
    pub max_tokens: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub stop: Option<Stop>,
    pub seed: Option<u64>,
    pub frequency_penalty: Option<f64>,
    pub presence_penalty: Option<f64>,
    pub n: Option<u64>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<StreamOptions>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub model: Option<String>,
    /// Kept as JSON: [`tessera::Conversation::from_json`] reads the message forms.
    pub messages: serde_json::Value,
    #[serde(default)]
    pub logprobs: bool,
    pub top_logprobs: Option<u64>,
    pub response_format: Option<ResponseFormat>,
    /// Kept as JSON, checked by `handlers::tools` (which names the entry at fault).
    pub tools: Option<serde_json::Value>,
    /// `auto`, `none`, `required` or `{"type": "function", "function": {"name"}}`.
    pub tool_choice: Option<serde_json::Value>,
    /// Reaches the template as the variable `reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// More template variables (`enable_thinking`, …), as vLLM and llama.cpp take them.
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// The last (assistant) message is continued, not answered: a prefill (vLLM's field).
    #[serde(default)]
    pub continue_final_message: bool,
}

/// `prompt`: one string, or a list holding one.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum TextInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: Option<String>,
    pub prompt: TextInput,
    /// The number of top log-probabilities per token (0–5 in OpenAI's API; up to 20 here).
    pub logprobs: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct EmbeddingRequest {
    pub model: Option<String>,
    pub input: TextInput,
    pub encoding_format: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub total_tokens: usize,
}

impl Usage {
    pub fn new(prompt_tokens: usize, completion_tokens: usize) -> Self {
        Self { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TokenLogprobs {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}
