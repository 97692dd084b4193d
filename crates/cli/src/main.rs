//! `tessera`: the command-line interface. Argument parsing and presentation only; all model
//! work happens in the `tessera` library.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use tessera::{parse_dtype, DeviceChoice, GenerateParams, GenerationOutput, LoadOptions, Model, SamplingParams};

/// `println!` that ends the process quietly when stdout is closed (e.g. piped into `head`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
            eprintln!("error: writing to stdout: {e}");
            std::process::exit(1);
        }
    }};
}

/// The model used when `--model` is not given: the small image + text model this repository
/// ships (models/shapes-vlm, trained by scripts/shapes/train.py).
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm");

/// The system allocator with per-thread budgets: chat templates (code shipped with downloaded
/// checkpoints) render under a memory bound instead of aborting the process.
#[global_allocator]
static ALLOC: tessera_kernels::BudgetedAlloc = tessera_kernels::BudgetedAlloc;

#[derive(Parser)]
#[command(name = "tessera", version, about = "Multimodal (image + text) LLM inference on Candle")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (streamed to stdout; timings to stderr).
    Generate(GenerateArgs),
    /// Print what a model is: architecture, sizes, dtype, tokenizer and chat template.
    Info(ModelArgs),
    /// Embeddings of a text (and images): per token or pooled, at any layer; JSON, .npy or .safetensors.
    Embed(EmbedArgs),
    /// Embedding arithmetic: a − b + c over the token embeddings, nearest tokens by cosine.
    Analogy(AnalogyArgs),
    /// Generate an answer about an image and draw, per generated token, where it looked.
    Explain(ExplainArgs),
    /// Exact-match accuracy per task on a question file (JSON lines: image, question, answer, task).
    Eval(EvalArgs),
    /// An OpenAI-compatible HTTP server (chat and text completions, embeddings, models, health,
    /// metrics) over one model, with continuous batching.
    ///
    /// Request logs go to stderr and never hold up a request: lines stderr cannot take in time
    /// are dropped and counted in /metrics (tessera_log_lines_dropped_total).
    Serve(ServeArgs),
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed on start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The model's id in /v1/models and responses. Default: the model folder's or file's name.
    #[arg(long)]
    served_model_name: Option<String>,
    /// Sequences decoded together in one step, 1 to 1024.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_batch: u64,
    /// Requests that may wait for the batch; more get 429 with Retry-After.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_queue: u64,
    /// Largest request body in bytes (images come inside it as data: URLs).
    #[arg(long, default_value_t = 32 << 20, value_parser = clap::value_parser!(u64).range(1024..=(1 << 32)))]
    max_body_bytes: u64,
    /// max_tokens when a request gives none.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    default_max_tokens: u64,
    /// Images per request.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=1024))]
    max_images: u64,
    /// Largest image in pixels (width × height), checked from the image's header before decoding.
    #[arg(long, default_value_t = tessera::DEFAULT_MAX_PIXELS)]
    max_image_pixels: u64,
    /// Let requests name local image files (paths or file:// URLs), only inside this folder.
    #[arg(long)]
    allowed_local_media: Option<PathBuf>,
    /// Download http(s) image URLs from this host and its subdomains (repeatable, or
    /// comma-separated); off by default. Redirects are not followed.
    #[arg(long, value_delimiter = ',')]
    allowed_media_domains: Vec<String>,
    /// Bytes of encoded image features kept for reuse (a chat resends its images every turn;
    /// the same image is then not encoded again); 0 turns the cache off.
    #[arg(long, default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(0..=(1u64 << 40)))]
    image_cache_bytes: u64,
    /// Bytes of finished requests' KV caches kept for prompts that start the same way (a chat's
    /// next turn resends the history: only what is new since the last turn's prompt is run);
    /// least recently used out; 0 turns the cache off.
    #[arg(long, default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(0..=(1u64 << 40)))]
    kv_cache_bytes: u64,
}

#[derive(Args)]
struct EmbedArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The text to embed.
    #[arg(long)]
    text: String,
    /// Images placed before the text (models that take images).
    #[arg(long)]
    image: Vec<PathBuf>,
    /// Hidden-state layer: 0 = token embeddings, L = after block L, the last = after the final norm (default).
    #[arg(long)]
    layer: Option<usize>,
    /// none (one vector per position), mean, last, or token:TEXT (the first token equal to TEXT).
    #[arg(long, default_value = "none")]
    pool: String,
    /// Scale each vector to unit L2 norm.
    #[arg(long)]
    normalize: bool,
    /// Write the vectors to this .npy or .safetensors file instead of printing JSON.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct AnalogyArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// a b c: computes a − b + c (e.g. king man woman).
    #[arg(num_args = 3, required = true)]
    words: Vec<String>,
    /// How many nearest tokens to print.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ExplainArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The image.
    #[arg(long)]
    image: PathBuf,
    /// The question.
    #[arg(long, short = 'p')]
    prompt: String,
    /// Folder for the PNG heatmaps and attention.json.
    #[arg(long, default_value = "explain")]
    out: PathBuf,
    /// One picture averaged over the answer's tokens instead of one per token.
    #[arg(long)]
    average: bool,
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Upscaling of the model's view of the image in the pictures (1 to 32).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    scale: u32,
}

#[derive(Args)]
struct EvalArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// JSON lines with `image` (relative to the file), `question`, `answer` and `task`.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm/eval/questions.jsonl"))]
    questions: PathBuf,
    /// Evaluate only the first N questions.
    #[arg(long)]
    limit: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also measure where the answers look: for questions with `named_patches` (the patches of
    /// the shape the question names), the share of the answer tokens' image attention (mean over
    /// layers and heads) that falls on those patches, against their share of the image area.
    #[arg(long)]
    attention: bool,
}

/// Attention on the named shape's patches, summed over questions.
#[derive(Default)]
struct AttentionShare {
    questions: usize,
    attention: f64,
    area: f64,
}

impl AttentionShare {
    /// Adds one question: `rows` are the answer tokens' attention rows (images first).
    fn add(&mut self, rows: &[Vec<f32>], image_tokens: usize, named: &[usize]) -> Result<()> {
        if rows.is_empty() || image_tokens == 0 {
            return Ok(());
        }
        if let Some(bad) = named.iter().find(|&&p| p >= image_tokens) {
            bail!("named patch {bad} is out of range: the image has {image_tokens} patches");
        }
        let mut share = 0.0;
        for row in rows {
            let image = &row[..image_tokens.min(row.len())];
            let total: f64 = image.iter().map(|&w| w as f64).sum();
            share += named.iter().filter_map(|&p| image.get(p)).map(|&w| w as f64).sum::<f64>() / total.max(1e-12);
        }
        self.questions += 1;
        self.attention += share / rows.len() as f64;
        self.area += named.len() as f64 / image_tokens as f64;
        Ok(())
    }
}

#[derive(Args, Clone)]
struct ModelArgs {
    /// A model folder, a .gguf file, or a Hugging Face Hub id `org/name[@revision]`
    /// (cached under HF_HOME; HF_HUB_OFFLINE=1 uses only the cache; HF_TOKEN authenticates).
    /// Default: the shipped image + text model, models/shapes-vlm.
    #[arg(long, short = 'm')]
    model: Option<String>,
    /// auto (CUDA, then Metal, then CPU), cpu, cuda[:N] or metal[:N].
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// f32, f16 or bf16. Default: f32 on CPU, bf16 on GPUs; GGUF files stay quantized unless
    /// a dtype is given, which dequantizes every tensor to it.
    #[arg(long, value_parser = dtype_name)]
    dtype: Option<String>,
    /// CPU threads, 1 to 256 (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Quantize the vision tower's and connector's matrices to 8 bits (Q8_0) on loading (CPU
    /// only): images encode about twice as fast, but the image features (and possibly the
    /// answers) no longer match transformers' f32 exactly.
    #[arg(long)]
    vision_int8: bool,
    /// Gemma 3: pan-and-scan — besides the whole image, the model also sees crops along its long
    /// side when its sides differ by the processor's ratio (1.2 by default) or more; more image
    /// tokens, more detail.
    #[arg(long)]
    pan_and_scan: bool,
    /// f32 or f16: the dtype the KV cache stores keys and values in. Default: the working dtype.
    /// Under f32 activations (the CPU's default, GGUF files included), f16 halves the cache's
    /// memory and, on the CPU, what each decode step reads (llama.cpp's default cache type), at
    /// the price of rounding keys and values to 16 bits (outputs may differ slightly from f32's).
    #[arg(long, value_parser = dtype_name)]
    kv_cache_dtype: Option<String>,
    /// Positions per prompt block: a prompt runs block by block (each block also ends after an
    /// end-of-turn token). Default: 512. A number at least the prompt's length runs it in one
    /// forward. Outputs may differ slightly between block sizes: the attention sums in another
    /// order (f32: ~1e-5 in a logit), which on quantized GGUF weights the int8 rounding of the
    /// activations can grow to ~0.5.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    prefill_block: Option<u32>,
}

#[derive(Args)]
struct GenerateArgs {
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

fn dtype_name(s: &str) -> std::result::Result<String, String> {
    tessera::parse_dtype(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

fn main() {
    tessera_kernels::keep_freed_memory();
    if let Err(e) = run() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Generate(args) => generate(args),
        Command::Info(args) => info(args),
        Command::Eval(args) => eval(args),
        Command::Explain(args) => explain(args),
        Command::Embed(args) => embed(args),
        Command::Analogy(args) => analogy(args),
        Command::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> Result<()> {
    let (model, load_s) = load(&args.model)?;
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        let path = model.info().source.path();
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "tessera".into())
    });
    let config = tessera_server::ServerConfig {
        model_name: name.clone(),
        max_body_bytes: args.max_body_bytes as usize,
        default_max_tokens: args.default_max_tokens as usize,
        max_images: args.max_images as usize,
        max_image_pixels: args.max_image_pixels,
        allowed_local_media: args.allowed_local_media.clone(),
        allowed_media_domains: args.allowed_media_domains.clone(),
        engine: tessera::EngineConfig {
            max_batch: args.max_batch as usize,
            max_queue: args.max_queue as usize,
            image_cache_bytes: args.image_cache_bytes as usize,
            kv_cache_bytes: args.kv_cache_bytes as usize,
        },
    };
    // Request logs on stderr; RUST_LOG-style filtering is not needed for one line per request.
    let _logs = tessera_server::logging::init()?;
    let state = tessera_server::AppState::new(std::sync::Arc::new(model), config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener =
            tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("serving {name} (loaded in {load_s:.2} s) on http://{local}  (OpenAI API under /v1)");
        tessera_server::serve(listener, state, tessera_server::shutdown_signal()).await?;
        Ok(())
    })
}

fn load(args: &ModelArgs) -> Result<(Model, f64)> {
    if let Some(n) = args.threads {
        if n == 0 {
            bail!("--threads must be at least 1");
        }
        if n > tessera_kernels::MAX_THREADS {
            bail!("--threads {n} is more than the {} threads tessera runs", tessera_kernels::MAX_THREADS);
        }
        // Candle sizes its thread pools from this variable on first use.
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    let device = args.device.open()?;
    let dtype = args.dtype.as_deref().map(parse_dtype).transpose()?;
    let spec = match &args.model {
        Some(m) => m.clone(),
        None => {
            if !std::path::Path::new(DEFAULT_MODEL).join("config.json").exists() {
                bail!("no --model given and the default model is missing ({DEFAULT_MODEL}); pass --model");
            }
            std::fs::canonicalize(DEFAULT_MODEL)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| DEFAULT_MODEL.to_string())
        }
    };
    let start = Instant::now();
    let model = Model::load(
        &spec,
        &LoadOptions {
            device,
            dtype,
            vision_q8_0: args.vision_int8,
            pan_and_scan: args.pan_and_scan,
            kv_cache_dtype: args.kv_cache_dtype.as_deref().map(parse_dtype).transpose()?,
            prefill_block: args.prefill_block.map(|n| n as usize),
        },
    )
    .with_context(|| format!("loading model `{spec}`"))?;
    Ok((model, start.elapsed().as_secs_f64()))
}

fn generate(args: GenerateArgs) -> Result<()> {
    if args.logprobs.is_some() && !args.json {
        bail!("--logprobs needs --json");
    }
    let (model, load_s) = load(&args.model)?;
    if !args.image.is_empty() {
        if model.max_images() == 0 {
            bail!(
                "model `{}` ({}) takes no images; --image needs a vision-language model",
                model.info().source.path().display(),
                model.config().family
            );
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
    let params = GenerateParams {
        max_new_tokens: args.max_new_tokens,
        sampling,
        stop_strings: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        logprobs: args.logprobs,
        capture_attention: false,
        constraint: None,
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
    let out = if args.json {
        model.generate(&prompt, &params, &mut |_| {})?
    } else {
        let mut stdout = std::io::stdout();
        let out = model.generate(&prompt, &params, &mut |t| {
            let _ = stdout.write_all(t.as_bytes());
            let _ = stdout.flush();
        })?;
        out!("");
        out
    };
    if args.json {
        print_json(&out, load_s)?;
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

fn print_json(out: &GenerationOutput, load_s: f64) -> Result<()> {
    let mut v = serde_json::to_value(out)?;
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

fn info(args: ModelArgs) -> Result<()> {
    let (model, load_s) = load(&args)?;
    let c = model.config();
    let d = &c.decoder;
    let i = model.info();
    out!("model:          {}", i.source.path().display());
    if c.text_family.name() == c.family {
        out!("architecture:   {}", c.family);
    } else {
        out!("architecture:   {} ({} decoder)", c.family, c.text_family.name());
    }
    out!(
        "decoder:        {} layers, width {}, MLP {}, {} heads / {} KV heads ({}), head_dim {}",
        d.num_hidden_layers,
        d.hidden_size,
        d.intermediate_size,
        d.num_attention_heads,
        d.num_key_value_heads,
        match (d.num_attention_heads, d.num_key_value_heads) {
            (h, k) if h == k => "MHA",
            (_, 1) => "MQA",
            _ => "GQA",
        },
        d.head_dim
    );
    out!("rope:           theta {}, scaling {:?}, layout {:?}", d.rope.theta, d.rope.scaling, d.rope.style);
    if let Some(m) = &d.rope.mrope {
        out!(
            "m-rope:         sections {:?} (temporal, height, width){}",
            m.section,
            if m.interleaved { ", interleaved" } else { "" }
        );
    }
    if let Some(local) = &d.local_rope {
        let n = local.layers.iter().filter(|&&l| l).count();
        out!(
            "local rope:     theta {}, scaling {:?} ({n} of {} layers)",
            local.rope.theta,
            local.rope.scaling,
            d.num_hidden_layers
        );
    }
    let windows: Vec<usize> = c.layer_windows.iter().flatten().copied().collect();
    if let Some(w) = windows.first() {
        out!("sliding window: {w} tokens in {} of {} layers", windows.len(), d.num_hidden_layers);
    }
    out!("context:        {} tokens", d.max_position_embeddings);
    out!("vocabulary:     {} (tied embeddings: {})", c.vocab_size, c.tie_word_embeddings);
    out!(
        "weights:        {:?}{}",
        i.dtype,
        i.quantization.as_ref().map(|q| format!(" activations, {q} quantized matmuls")).unwrap_or_default()
    );
    out!("device:         {:?}", model.device());
    out!("tokenizer:      {}", i.tokenizer_source);
    out!("eos ids:        {:?}", model.eos_ids());
    out!("chat template:  {}", i.chat_template_source.as_deref().unwrap_or("none (use --raw)"));
    match model.vision_description() {
        Some(v) if model.max_images() == usize::MAX => out!("vision:         {v}; several images per prompt"),
        Some(v) => out!("vision:         {v}; at most {} image(s) per prompt", model.max_images()),
        None => out!("vision:         none (text-only model)"),
    }
    out!("load time:      {load_s:.2}s");
    Ok(())
}

fn eval(args: EvalArgs) -> Result<()> {
    let (model, _) = load(&args.model)?;
    let text = read_text(&args.questions)?;
    let base = args.questions.parent().map(PathBuf::from).unwrap_or_default();
    let mut per_task: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let params = GenerateParams { max_new_tokens: 32, capture_attention: args.attention, ..Default::default() };
    let mut shares: std::collections::BTreeMap<String, AttentionShare> = Default::default();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if args.limit.is_some_and(|n| i >= n) {
            break;
        }
        let q: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: invalid JSON", args.questions.display(), i + 1))?;
        let field = |k: &str| -> Result<String> {
            q.get(k)
                .and_then(|v| v.as_str())
                .map(String::from)
                .with_context(|| format!("{} line {}: missing `{k}`", args.questions.display(), i + 1))
        };
        let image = tessera::load_image(&base.join(field("image")?), tessera::DEFAULT_MAX_PIXELS)?;
        let prompt = model.encode_prompt(&field("question")?, None, false, std::slice::from_ref(&image))?;
        let out = model.generate(&prompt, &params, &mut |_| {})?;
        let entry = per_task.entry(field("task")?).or_default();
        entry.1 += 1;
        if out.text.trim() == field("answer")?.trim() {
            entry.0 += 1;
        }
        if let (Some(rows), Some(named)) = (&out.attention, q.get("named_patches")) {
            let named: Vec<usize> = serde_json::from_value(named.clone()).with_context(|| {
                format!("{} line {}: `named_patches` is not a list of patch indices", args.questions.display(), i + 1)
            })?;
            shares.entry(field("task")?).or_default().add(rows, out.image_tokens, &named)?;
        }
    }
    let total: (usize, usize) = per_task.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    if args.json {
        let tasks: serde_json::Map<String, serde_json::Value> = per_task
            .iter()
            .map(|(t, (ok, n))| {
                (t.clone(), serde_json::json!({"correct": ok, "total": n, "accuracy": *ok as f64 / *n as f64}))
            })
            .collect();
        let attention: serde_json::Map<String, serde_json::Value> = shares
            .iter()
            .map(|(t, a)| {
                let n = a.questions.max(1) as f64;
                (t.clone(), serde_json::json!({"questions": a.questions, "attention_share": a.attention / n, "area_share": a.area / n}))
            })
            .collect();
        let mut report = serde_json::json!({"tasks": tasks, "correct": total.0, "total": total.1});
        if args.attention {
            report["attention"] = attention.into();
        }
        out!("{report}");
    } else {
        out!("| task | correct | total | exact match |");
        out!("| --- | --- | --- | --- |");
        for (t, (ok, n)) in per_task.iter().chain(std::iter::once((&"all".to_string(), &total))) {
            out!("| {t} | {ok} | {n} | {:.1}% |", 100.0 * *ok as f64 / (*n).max(1) as f64);
        }
        if args.attention {
            out!("");
            out!("| task | questions | answer's image attention on the named shape | the shape's share of the image |");
            out!("| --- | --- | --- | --- |");
            for (t, a) in &shares {
                let n = a.questions.max(1) as f64;
                out!("| {t} | {} | {:.1}% | {:.1}% |", a.questions, 100.0 * a.attention / n, 100.0 * a.area / n);
            }
        }
    }
    Ok(())
}

fn parse_pooling(s: &str) -> Result<tessera::Pooling> {
    Ok(match s {
        "none" => tessera::Pooling::None,
        "mean" => tessera::Pooling::Mean,
        "last" => tessera::Pooling::Last,
        _ => match s.strip_prefix("token:") {
            Some(t) if !t.is_empty() => tessera::Pooling::Token(t.to_string()),
            _ => bail!("unknown --pool `{s}` (expected none, mean, last or token:TEXT)"),
        },
    })
}

fn embed(args: EmbedArgs) -> Result<()> {
    let pooling = parse_pooling(&args.pool)?;
    let (model, _) = load(&args.model)?;
    let images = args
        .image
        .iter()
        .map(|p| tessera::load_image(p, tessera::DEFAULT_MAX_PIXELS))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(layer) = args.layer {
        let last = model.num_hidden_states() - 1;
        if layer > last {
            bail!("--layer {layer} is out of range: 0 (token embeddings) to {last} (after the final norm)");
        }
    }
    let e = model.contextual_embeddings(&images, &args.text, args.layer)?;
    let vectors = e.pooled(&pooling, args.normalize)?;
    match &args.out {
        Some(path) => {
            write_tensor(path, &vectors)?;
            eprintln!("wrote {:?} vectors to {}", vectors.dims(), path.display());
        }
        None => {
            let rows: Vec<Vec<f32>> = vectors.to_vec2()?;
            out!(
                "{}",
                serde_json::json!({
                    "ids": e.ids, "tokens": e.tokens, "image_tokens": e.image_tokens, "layer": e.layer,
                    "pool": args.pool, "normalized": args.normalize, "shape": vectors.dims(), "vectors": rows,
                })
            );
        }
    }
    Ok(())
}

/// Writes a 2-D f32 tensor as .npy or .safetensors (by extension).
fn write_tensor(path: &std::path::Path, t: &tessera::Tensor) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => {
            t.save_safetensors("embeddings", path).with_context(|| format!("writing {}", path.display()))
        }
        Some("npy") => {
            let shape = t.dims().iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
            let shape = if t.rank() == 1 { format!("{shape},") } else { shape };
            let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({shape}), }}");
            // Pad so that magic (6) + version (2) + length (2) + header + newline is a multiple of 64.
            while (10 + header.len() + 1) % 64 != 0 {
                header.push(' ');
            }
            header.push('\n');
            let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
            bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
            bytes.extend_from_slice(header.as_bytes());
            for v in t.flatten_all()?.to_vec1::<f32>()? {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
        }
        _ => bail!("--out {} must end in .npy or .safetensors", path.display()),
    }
}

fn analogy(args: AnalogyArgs) -> Result<()> {
    let (model, _) = load(&args.model)?;
    let [a, b, c] = [&args.words[0], &args.words[1], &args.words[2]];
    let top = model.analogy(a, b, c, args.top)?;
    if args.json {
        out!("{}", serde_json::to_string(&top)?);
    } else {
        out!("{a} − {b} + {c} ≈");
        for n in &top {
            out!("  {:<20} {:.4}", format!("{:?}", n.token), n.similarity);
        }
    }
    Ok(())
}

fn explain(args: ExplainArgs) -> Result<()> {
    let (model, _) = load(&args.model)?;
    if model.max_images() == 0 {
        bail!(
            "model `{}` takes no images; explain needs a vision-language model",
            model.info().source.path().display()
        );
    }
    let image = tessera::load_image(&args.image, tessera::DEFAULT_MAX_PIXELS)?;
    let (view, rows, cols) = model.model_view(&image)?;
    let prompt = model.encode_prompt(&args.prompt, None, false, std::slice::from_ref(&image))?;
    let params = GenerateParams { max_new_tokens: args.max_new_tokens, capture_attention: true, ..Default::default() };
    let out = model.generate(&prompt, &params, &mut |_| {})?;
    let attention = out.attention.clone().unwrap_or_default();
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    // Sequence positions of the image's tokens and of the prompt's text tokens.
    let image_pos = prompt.image_positions();
    let n_img = image_pos.len();
    let text = prompt.text_positions();
    let prompt_tokens = model.token_strings(&text.iter().map(|&(_, id)| id).collect::<Vec<_>>())?;
    let save = |name: &str, weights: &[f32]| -> Result<PathBuf> {
        let pic = tessera::render_heatmap(&view, weights, rows, cols, args.scale as usize)?;
        let path = args.out.join(name);
        tessera::save_png(&pic, &path).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    // The table is printed once the files are written (a closed stdout must not lose them).
    let mut table = vec![
        format!("answer: {:?}", out.text.trim()),
        "| # | token | on image | top prompt tokens |".to_string(),
        "| --- | --- | --- | --- |".to_string(),
    ];
    let mut records = Vec::new();
    let mut mean_image = vec![0f32; n_img];
    for (k, (id, row)) in out.generated_tokens.iter().zip(&attention).enumerate() {
        let token = model.token_strings(&[*id])?.remove(0);
        let image_part: Vec<f32> = image_pos.iter().map(|&p| row.get(p).copied().unwrap_or(0.0)).collect();
        let text_part: Vec<f32> = text.iter().map(|&(p, _)| row.get(p).copied().unwrap_or(0.0)).collect();
        for (m, w) in mean_image.iter_mut().zip(&image_part) {
            *m += w / attention.len() as f32;
        }
        let mut top: Vec<(usize, f32)> = text_part.iter().copied().enumerate().collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top_str: Vec<String> =
            top.iter().take(3).map(|(i, w)| format!("{:?} {:.3}", prompt_tokens[*i], w)).collect();
        let image_share: f32 = image_part.iter().sum();
        table.push(format!("| {k} | {token:?} | {image_share:.3} | {} |", top_str.join(", ")));
        let picture = if args.average { None } else { Some(save(&format!("token_{k:02}.png"), &image_part)?) };
        records.push(serde_json::json!({
            "index": k, "id": id, "token": token, "image_share": image_share,
            "image_attention": image_part, "prompt_attention": text_part, "picture": picture,
        }));
    }
    let average = if args.average { Some(save("average.png", &mean_image)?) } else { None };
    let json = serde_json::json!({
        "answer": out.text.trim(), "prompt_tokens": prompt_tokens, "grid": [rows, cols],
        "tokens": records, "average_picture": average,
    });
    let path = args.out.join("attention.json");
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "wrote pictures and {} to {}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        args.out.display()
    );
    for line in table {
        out!("{line}");
    }
    Ok(())
}

/// A text file the user named; a FIFO or device is refused before it is opened (reading one
/// would block for ever or never end).
fn read_text(path: &std::path::Path) -> Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{} is not a regular file (a FIFO, socket, device or folder)", path.display());
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
