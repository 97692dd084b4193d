//! What every subcommand shares: the model-loading options (`ModelArgs`) and loading, the
//! `out!` macro for stdout, and reading a text file the user named.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use tessera::{parse_dtype, DeviceChoice, LoadOptions, Model};

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

pub(crate) use out;

/// The model used when `--model` is not given: the small image + text model this repository
/// ships (models/shapes-vlm, trained by scripts/shapes/train.py).
const DEFAULT_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm");

#[derive(Args, Clone)]
pub struct ModelArgs {
    /// A model folder, a .gguf file, or a Hugging Face Hub id `org/name[@revision]`
    /// (cached under HF_HOME; HF_HUB_OFFLINE=1 uses only the cache; HF_TOKEN authenticates).
    /// Default: the shipped image + text model, models/shapes-vlm.
    #[arg(long, short = 'm')]
    model: Option<String>,
    /// With a .gguf text model: llama.cpp's mmproj GGUF holding the vision tower and projector
    /// (SmolVLM / Idefics3, LLaVA 1.5, LLaVA-interleave, Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5,
    /// Gemma 3, Gemma 4, Mistral 3 / Pixtral, MiniCPM-V 4.6, InternVL3; an unknown projector type
    /// is named in the error). Default: the one `mmproj*.gguf` file beside the model, if there is
    /// exactly one.
    #[arg(long)]
    mmproj: Option<PathBuf>,
    /// With an mmproj that states no image-token budget (Gemma 4's): the most tokens per image,
    /// as llama.cpp's --image-max-tokens (one of 70, 140, 280, 560, 1120). Default: the
    /// processor's, 280.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    image_max_tokens: Option<u32>,
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
    /// Q4_0, Q4_K_M, Q5_K_M, Q6_K or Q8_0: quantize a safetensors checkpoint's matrices on
    /// loading (CPU only; GGUF files keep their own types), each to the type llama-quantize gives
    /// it for that type (the _M mixes' per-layer rules, its fallbacks for rows that 256-value
    /// blocks do not tile), the vision tower and connector as llama-quantize does an mmproj:
    /// the same blocks as llama-quantize writes, run on the int8 kernels.
    #[arg(long, value_parser = quant_name)]
    quantize: Option<String>,
    /// The vision tower's and connector's matrices only, in 8 bits (Q8_0) on loading (CPU only;
    /// with --quantize, they stay at Q8_0): images encode about twice as fast, but the image
    /// features (and possibly the answers) no longer match transformers' f32 exactly.
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

/// A `--quantize` value, checked by the argument parser.
fn quant_name(s: &str) -> std::result::Result<String, String> {
    s.parse::<tessera::QuantMix>().map(|_| s.to_string())
}

/// A `--dtype` / `--kv-cache-dtype` value, checked by the argument parser.
fn dtype_name(s: &str) -> std::result::Result<String, String> {
    tessera::parse_dtype(s).map(|_| s.to_string()).map_err(|e| e.to_string())
}

/// The model `args` name, on the device and in the dtype they ask for, and the seconds loading took.
pub fn load(args: &ModelArgs) -> Result<(Model, f64)> {
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
            if !Path::new(DEFAULT_MODEL).join("config.json").exists() {
                bail!("no --model given and the default model is missing ({DEFAULT_MODEL}); pass --model");
            }
            std::fs::canonicalize(DEFAULT_MODEL)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_else(|_| DEFAULT_MODEL.to_string())
        }
    };
    let gguf = Path::new(&spec).extension().is_some_and(|e| e == "gguf");
    let mmproj = match &args.mmproj {
        Some(given) => Some(given.clone()),
        None if gguf => tessera::mmproj_beside(Path::new(&spec)).inspect(|found| {
            eprintln!("using the mmproj beside the model: {} (--mmproj names another)", found.display())
        }),
        None => None,
    };
    let start = Instant::now();
    let model = Model::load(
        &spec,
        &LoadOptions {
            device,
            dtype,
            vision_q8_0: args.vision_int8,
            quantize: args.quantize.as_deref().map(str::parse).transpose().map_err(anyhow::Error::msg)?,
            pan_and_scan: args.pan_and_scan,
            kv_cache_dtype: args.kv_cache_dtype.as_deref().map(parse_dtype).transpose()?,
            prefill_block: args.prefill_block.map(|n| n as usize),
            mmproj,
            image_max_tokens: args.image_max_tokens.map(|n| n as usize),
        },
    )
    .with_context(|| format!("loading model `{spec}`"))?;
    Ok((model, start.elapsed().as_secs_f64()))
}

/// A text file the user named; a FIFO or device is refused before it is opened (reading one
/// would block for ever or never end).
pub fn read_text(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        anyhow::bail!("{} is not a regular file (a FIFO, socket, device or folder)", path.display());
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}
