//! The chat pipeline every chat front-end runs — `/v1/chat/completions` ([`super::chat`]),
//! Anthropic's `/v1/messages` ([`super::messages`]) — once it has translated its request into a
//! [`ChatJob`]: the conversation as OpenAI's message JSON (which [`Conversation::from_json`]
//! reads), the tools, an output format, template variables and generation settings. [`start`]
//! renders the prompt through the chat template, submits it to the engine and returns the
//! [`ChatRun`], whose [`ChatOutput`] turns the generated text into deltas (reasoning, content,
//! tool calls: OpenAI's delta objects); each front-end turns those into its own body or events.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use tessera::{
    Conversation, Event, GenerateParams, GenerationOutput, OutputFormat, Prompt, ReasoningSplitter, RenderOptions,
    ThinkingMarkers, ToolFormat,
};
use tokio::sync::mpsc;

use super::chat_output::{Calls, ChatOutput};
use super::media::load_image;
use super::request::{blocking, collect, submit};
use super::tools::{calls_as_text, describe_in_system, output_format, strict_grammar, Choice, Tools};
use crate::error::ApiError;
use crate::AppState;

/// A chat request, translated from the API it came in.
pub(super) struct ChatJob {
    /// OpenAI's `messages` list.
    pub messages: Value,
    pub tools: Tools,
    /// A constraint on the whole output (chat's `response_format`); a forced call brings its own.
    pub format: Option<OutputFormat>,
    /// More template variables (`enable_thinking`, `reasoning_effort`, …).
    pub kwargs: Map<String, Value>,
    /// The last message is an assistant prefill the answer continues.
    pub continue_final: bool,
    /// The most tokens the reasoning may take: then the template's closing marker is forced.
    pub thinking_budget: Option<usize>,
    pub params: GenerateParams,
    /// Seeds the calls' ids (with the server's start time and the prompt's length).
    pub seed: u64,
}

/// A generation under way: the engine's events, and the splitter its text goes through.
pub(super) struct ChatRun {
    pub rx: mpsc::UnboundedReceiver<Event>,
    pub output: ChatOutput,
    /// Positions the prompt takes (text and image tokens).
    pub prompt_positions: usize,
}

impl ChatRun {
    /// Waits for the whole output; returns it with all its deltas and whether it made calls.
    pub async fn whole(mut self) -> Result<(GenerationOutput, Vec<Value>, bool), ApiError> {
        let out = collect(self.rx).await?;
        let mut deltas = self.output.push(&out.text);
        let (rest, called) = self.output.finish();
        deltas.extend(rest);
        Ok((out, deltas, called))
    }
}

/// What the model's chat template can do.
struct Template {
    source: String,
    /// It renders `tools` and calls.
    tools: bool,
}

impl Template {
    fn of(state: &AppState) -> Self {
        let t = state.model().chat_template();
        Self {
            source: t.map(|t| t.source().to_string()).unwrap_or_default(),
            tools: t.is_some_and(|t| t.supports_tools()),
        }
    }
}

/// Renders the prompt, submits it and returns the run. 400s name the request field at fault
/// (`messages`, `tools`, `response_format`).
pub(super) async fn start(state: &Arc<AppState>, job: ChatJob) -> Result<ChatRun, ApiError> {
    let ChatJob { messages, tools, format, kwargs, continue_final, thinking_budget, mut params, seed } = job;
    let format = match (format, tools.forced_schema()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "tool_choice forces a call, which response_format would constrain too: give one of them",
            )
            .param("response_format"))
        }
        (None, Some(schema)) => Some(OutputFormat::JsonSchema(schema)),
        (f, None) => f,
    };
    let template = Template::of(state);
    let template_format = ToolFormat::detect(&template.source);
    let native = !tools.list.is_empty() && template.tools;
    let calls = match tools.choice {
        Choice::Off => Calls::Off,
        Choice::Auto => Calls::Auto(output_format(template_format.filter(|_| native))),
        Choice::Forced(_) => Calls::Forced,
    };
    // `auto` with a strict function: the model's calls are held to the schemas (unless a
    // response format constrains the whole output).
    let tokenizer = state.model().tokenizer();
    let lazy = format
        .is_none()
        .then(|| strict_grammar(&tools, native.then_some(template_format).flatten(), &template.source, tokenizer))
        .flatten();
    let held = lazy.is_some() || matches!(calls, Calls::Forced);
    let format = format.or(lazy);
    let thinking = ThinkingMarkers::detect(&template.source);
    if !matches!(calls, Calls::Off) || thinking.is_some() {
        // The markers that are special tokens (Mistral's, Gemma 4's) stay in the text.
        params.keep_tokens = tessera::tool_calls::MARKERS.iter().filter_map(|m| tokenizer.token_to_id(m)).collect();
    }
    let (prompt, rendered) = render(state, messages, &tools, kwargs, continue_final).await?;
    if let Some(format) = format {
        let st = state.clone();
        params.constraint = Some(
            blocking(move || {
                let param = if held { "tools" } else { "response_format" };
                st.model().output_constraint(&format).map_err(|e| ApiError::from(e).param(param))
            })
            .await?,
        );
    }
    // A budget caps a thinking block the template has; the format (if any) constrains the
    // answer after it.
    if let (Some(budget), Some(markers)) = (thinking_budget, &thinking) {
        let inside = markers.opened_by(&rendered);
        let then = params.constraint.take();
        params.constraint = Some(state.model().thinking_budget(markers, budget, inside, then)?);
    }
    let prompt_positions = prompt.len();
    let rx = submit(state, prompt, params)?;
    let reasoning = thinking.map(|m| ReasoningSplitter::new(m, &rendered));
    let seed = seed ^ state.created ^ rendered.len() as u64;
    let output = ChatOutput::new(reasoning, calls, template_format, seed);
    Ok(ChatRun { rx, output, prompt_positions })
}

/// The prompt of `messages` (OpenAI's list) with `tools` and the template variables `kwargs`
/// (the last message continued with `continue_final`), and its rendered text. Images are
/// fetched under [`super::media`]'s rules.
pub(super) async fn render(
    state: &Arc<AppState>,
    messages: Value,
    tools: &Tools,
    kwargs: Map<String, Value>,
    continue_final: bool,
) -> Result<(Prompt, String), ApiError> {
    let tool_template = Template::of(state).tools;
    let native = !tools.list.is_empty() && tool_template;
    let describe = !tools.list.is_empty() && !tool_template && tools.choice != Choice::Off;
    let (st, tool_list) = (state.clone(), tools.list.clone());
    blocking(move || {
        let conv =
            Conversation::from_json(&messages).map_err(|e| ApiError::bad_request(e.to_string()).param("messages"))?;
        if conv.images.len() > st.config.max_images {
            return Err(ApiError::bad_request(format!(
                "{} images in the request; the server takes at most {}",
                conv.images.len(),
                st.config.max_images
            ))
            .param("messages"));
        }
        let images = conv.images.iter().map(|s| load_image(&st, s)).collect::<Result<Vec<_>, _>>()?;
        // A template without tools sees earlier calls as their JSON text, and the tools (unless
        // `tool_choice` is `none`) described in the system message.
        let messages = match (tool_template, describe) {
            (true, _) => conv.messages,
            (false, true) => describe_in_system(&conv.messages, &tool_list),
            (false, false) => conv.messages.iter().map(calls_as_text).collect(),
        };
        if continue_final && messages.last().is_none_or(|m| m.role != "assistant") {
            return Err(ApiError::bad_request("only a final assistant message can be continued").param("messages"));
        }
        let opts = RenderOptions { tools: native.then(|| json!(tool_list)), kwargs, continue_final };
        Ok(st.model().encode_chat_with(&messages, &images, &opts)?)
    })
    .await
}
