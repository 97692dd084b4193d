//! `tessera generate`: a prompt (or a whole conversation) in, text streamed to stdout, timings
//! to stderr; or one JSON object with ids, text, finish reason, timings and log-probabilities.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use tessera::{GenerateParams, GenerationOutput, ReasoningSplitter, SamplingParams, Split, ThinkingMarkers};

use crate::common::{load, out, read_text, ModelArgs};

#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The prompt text (the user's message, or with --raw the whole model input).
    #[arg(long, short = 'p', required_unless_present = "messages", conflicts_with = "messages")]
    prompt: Option<String>,
    /// An image to put before the prompt (repeat for several, where the model supports it).
    #[arg(long, conflicts_with = "messages")]
    image: Vec<PathBuf>,
    /// A whole conversation instead of --prompt/--image/--system: a JSON file holding a list of
    /// messages in the Hugging Face chat format, `{"role": "system"|"user"|"assistant",
    /// "content": "text" | [parts]}`, parts `{"type": "text", "text": …}`, `{"type": "image",
    /// "image"|"url"|"path": FILE}` (or `"base64": …`) and OpenAI's `{"type": "image_url",
    /// "image_url": {"url": FILE | "file://…" | "data:image/…;base64,…"}}`; images may be in
    /// any turn. Rendered by the model's chat template with the assistant's turn opened after
    /// it. Relative image paths are read from the current directory.
    #[arg(long, value_name = "CHAT.json", conflicts_with_all = ["system", "raw"])]
    messages: Option<PathBuf>,
    /// Refuse images larger than this many pixels (width × height), checked before decoding.
    #[arg(long, default_value_t = tessera::DEFAULT_MAX_PIXELS)]
    max_image_pixels: u64,
    /// Refuse an image that would take more than this many image tokens (Idefics3's tiling makes
    /// the count grow with the image's size).
    #[arg(long)]
    max_image_tokens: Option<usize>,
    /// A system message for the chat template.
    #[arg(long)]
    system: Option<String>,
    /// Feed the prompt as is (no chat template); the tokenizer adds whatever BOS it adds.
    #[arg(long)]
    raw: bool,
    /// Maximum number of tokens to generate.
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// 0 = greedy; otherwise at least 1e-6. Default: generation_config.json's (greedy when it does not
    /// sample).
    #[arg(long, value_parser = temperature)]
    temperature: Option<f64>,
    /// Sample among the K most likely tokens only (ties kept): at least 1. Default:
    /// generation_config.json's when it samples, else all.
    #[arg(long)]
    top_k: Option<usize>,
    /// Nucleus sampling: sample among the most likely tokens whose probabilities add up to P, in
    /// (0, 1]. Default: generation_config.json's when it samples, else 1.
    #[arg(long, value_parser = top_p)]
    top_p: Option<f64>,
    /// Drop tokens less likely than P times the most likely one, in [0, 1]. Default:
    /// generation_config.json's when it samples, else 0.
    #[arg(long, value_parser = min_p)]
    min_p: Option<f64>,
    /// Divide the logits of tokens already in the sequence by it (multiply the negative ones), as
    /// transformers does: greater than 0, 1 = none. Default: generation_config.json's.
    #[arg(long, value_parser = positive)]
    repetition_penalty: Option<f64>,
    /// Seed for sampling (same seed, same output).
    #[arg(long, default_value_t = 299_792_458)]
    seed: u64,
    /// Stop when the text contains this string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Do not stop at EOS tokens (fixed-length runs).
    #[arg(long)]
    ignore_eos: bool,
    /// Print one JSON object (ids, text, finish_reason, timings) instead of streaming.
    #[arg(long)]
    json: bool,
    /// With --json: the top-K log-probabilities at every generated position.
    #[arg(long)]
    logprobs: Option<usize>,
    /// The reasoning of a thinking model (the text between its chat template's thinking
    /// markers, `<think>…</think>`): `show` prints it (dimmed on a terminal), `hide` leaves only
    /// the answer. With --json both go to `reasoning_content` and `content`.
    #[arg(long, value_enum, default_value_t = Reasoning::Show)]
    reasoning: Reasoning,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Reasoning {
    Show,
    Hide,
}

/// A finite number, for the flag parsers below.
fn finite(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() {
        Ok(v)
    } else {
        Err(format!("{s} is not a finite number"))
    }
}

fn temperature(s: &str) -> std::result::Result<f64, String> {
    match finite(s)? {
        v if v == 0.0 || (1e-6..=1e6).contains(&v) => Ok(v),
        _ => Err(format!("{s} is outside 0 (greedy) or 1e-6 to 1e6")),
    }
}

fn top_p(s: &str) -> std::result::Result<f64, String> {
    match finite(s)? {
        v if v > 0.0 && v <= 1.0 => Ok(v),
        _ => Err(format!("{s} is outside (0, 1]")),
    }
}

fn min_p(s: &str) -> std::result::Result<f64, String> {
    match finite(s)? {
        v if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s} is outside [0, 1]")),
    }
}

fn positive(s: &str) -> std::result::Result<f64, String> {
    match finite(s)? {
        v if v > 0.0 => Ok(v),
        _ => Err(format!("{s} is not greater than 0")),
    }
}

/// Generates from the prompt or conversation: text streamed to stdout, or one JSON object.
pub fn run(args: GenerateArgs) -> Result<()> {
    if args.logprobs.is_some() && !args.json {
        bail!("--logprobs needs --json");
    }
    let (model, load_s) = load(&args.model)?;
    if !args.image.is_empty() {
        if model.max_images() == 0 {
            bail!("{}; --image needs a vision-language model", model.no_images_reason());
        }
        if args.image.len() > model.max_images() {
            bail!(
                "{} images given but model `{}` accepts at most {}",
                args.image.len(),
                model.info().source.path().display(),
                model.max_images()
            );
        }
    }
    let (images, image_names, chat) = match &args.messages {
        Some(file) => {
            let text = read_text(file)?;
            let json: serde_json::Value =
                serde_json::from_str(&text).with_context(|| format!("{} is not JSON", file.display()))?;
            let chat =
                tessera::Conversation::from_json(&json).with_context(|| format!("reading {}", file.display()))?;
            let images = chat
                .images
                .iter()
                .map(|src| tessera::load_image_source(src, args.max_image_pixels).map_err(pixel_limit_hint))
                .collect::<Result<Vec<_>, _>>()
                .with_context(|| format!("loading the images of {}", file.display()))?;
            let names: Vec<String> = chat
                .images
                .iter()
                .enumerate()
                .map(|(i, src)| if src.starts_with("data:") { format!("image {i} (a data: URL)") } else { src.clone() })
                .collect();
            (images, names, Some(chat))
        }
        None => {
            let images = args
                .image
                .iter()
                .map(|p| tessera::load_image(p, args.max_image_pixels).map_err(pixel_limit_hint))
                .collect::<Result<Vec<_>, _>>()?;
            (images, args.image.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(), None)
        }
    };
    let gen = model.generation_config();
    let sample_by_default = gen.do_sample.unwrap_or(false);
    let sampling = SamplingParams {
        temperature: args.temperature.unwrap_or(if sample_by_default { gen.temperature.unwrap_or(1.0) } else { 0.0 }),
        top_k: args.top_k.or(if sample_by_default { gen.top_k } else { None }),
        top_p: args.top_p.or(if sample_by_default { gen.top_p } else { None }),
        min_p: args.min_p.or(if sample_by_default { gen.min_p } else { None }),
        repetition_penalty: args.repetition_penalty.or(gen.repetition_penalty),
        seed: args.seed,
        ..Default::default()
    };
    let mut params = GenerateParams {
        max_new_tokens: args.max_new_tokens,
        sampling,
        stop_strings: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        logprobs: args.logprobs,
        capture_attention: false,
        constraint: None,
        keep_tokens: Vec::new(),
    };
    if let Some(budget) = args.max_image_tokens {
        for (img, name) in images.iter().zip(&image_names) {
            model.check_image_budget(img, budget, name)?;
        }
    }
    let prompt = match (&chat, &args.prompt) {
        (Some(chat), _) => model.encode_chat(&chat.messages, &images)?,
        (None, Some(text)) => model.encode_prompt(text, args.system.as_deref(), args.raw, &images)?,
        (None, None) => bail!("give --prompt or --messages"),
    };
    // The thinking markers, unless the prompt is raw; the prompt's last tokens tell whether the
    // template opened the thinking block itself.
    let markers = model.chat_template().filter(|_| !args.raw).and_then(|t| ThinkingMarkers::detect(t.source()));
    let tail = prompt.ids().len().saturating_sub(8);
    let prompt_tail = model.tokenizer().decode(&prompt.ids()[tail..], false).unwrap_or_default();
    let mut splitter = markers.clone().map(|m| ReasoningSplitter::new(m, &prompt_tail));
    if markers.is_some() {
        // Markers that are special tokens (Gemma 4's) stay in the text for the splitter.
        let tokenizer = model.tokenizer();
        params.keep_tokens = tessera::tool_calls::MARKERS.iter().filter_map(|m| tokenizer.token_to_id(m)).collect();
    }
    let out = if args.json {
        model.generate(&prompt, &params, &mut |_| {})?
    } else {
        let mut stdout = std::io::stdout();
        let dim = std::io::IsTerminal::is_terminal(&stdout);
        let show = args.reasoning == Reasoning::Show;
        let write = |split: Split, stdout: &mut std::io::Stdout| {
            if show && !split.reasoning.is_empty() {
                let text = if dim { format!("\x1b[2m{}\x1b[0m", split.reasoning) } else { split.reasoning };
                let _ = stdout.write_all(text.as_bytes());
            }
            let _ = stdout.write_all(split.content.as_bytes());
            let _ = stdout.flush();
        };
        let out = model.generate(&prompt, &params, &mut |t| match &mut splitter {
            Some(s) => write(s.push(t), &mut stdout),
            None => write(Split { reasoning: String::new(), content: t.to_string() }, &mut stdout),
        })?;
        if let Some(s) = &mut splitter {
            write(s.finish(), &mut stdout);
        }
        out!("");
        out
    };
    if args.json {
        let split = markers.map(|m| ReasoningSplitter::split(m, &prompt_tail, &out.text));
        print_json(&out, load_s, split)?;
    } else {
        report_timings(&out, load_s);
    }
    Ok(())
}

/// An image over the pixel limit: the error, and the flag that raises the limit.
fn pixel_limit_hint(e: tessera::VisionError) -> anyhow::Error {
    match e {
        tessera::VisionError::TooLarge { .. } => anyhow::anyhow!("{e} (--max-image-pixels raises the limit)"),
        e => e.into(),
    }
}

fn print_json(out: &GenerationOutput, load_s: f64, split: Option<Split>) -> Result<()> {
    let mut v = serde_json::to_value(out)?;
    if let (Some(split), Some(obj)) = (split, v.as_object_mut()) {
        obj.insert("reasoning_content".into(), split.reasoning.into());
        obj.insert("content".into(), split.content.into());
    }
    if let Some(t) = v.get_mut("timings").and_then(|t| t.as_object_mut()) {
        t.insert("load_s".into(), load_s.into());
    }
    out!("{}", serde_json::to_string(&v)?);
    Ok(())
}

fn report_timings(out: &GenerationOutput, load_s: f64) {
    let t = &out.timings;
    let gen_rate =
        if out.generated_tokens.len() > 1 { format!("{:.1} tok/s", t.generated_tokens_per_s) } else { "-".to_string() };
    eprintln!(
        "load {load_s:.2}s | prompt {} tokens, {:.1} tok/s | generated {} tokens, {gen_rate} | finish: {:?}",
        out.prompt_positions,
        t.prompt_tokens_per_s,
        out.generated_tokens.len(),
        out.finish_reason
    );
}
