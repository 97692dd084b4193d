//! `tessera quantize`: a safetensors checkpoint written as llama.cpp's quantized GGUF text model
//! and, for a vision-language model, its mmproj GGUF (`tessera::quantize_to_gguf`), with a
//! progress bar on stderr.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tessera::export::Progress;
use tessera::{QuantMix, QuantizeJob};

#[derive(Args)]
pub struct QuantizeArgs {
    /// The checkpoint: a model folder (safetensors) or a Hugging Face Hub id `org/name[@revision]`.
    model: String,
    /// The text model's GGUF to write (llama.cpp's `llama`, `mistral3`, `qwen2`, `qwen2vl`, `qwen3vl`,
    /// `qwen35`, `gemma3` or `gemma4` architecture).
    out: PathBuf,
    /// For a vision-language model (SmolVLM / Idefics3, LLaVA, Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
    /// Qwen3.5, Gemma 3, Gemma 4, InternVL3, Mistral 3, MiniCPM-V 4.6), required:
    /// the mmproj GGUF to write, holding the vision tower and projector as llama.cpp's converter
    /// writes them (`convert_hf_to_gguf.py --mmproj`; LLaVA's legacy script), quantized as
    /// llama-quantize quantizes an mmproj.
    #[arg(long)]
    mmproj_out: Option<PathBuf>,
    /// Q4_0, Q4_K_M, Q5_K_M, Q6_K or Q8_0: each matrix gets the type llama-quantize gives it for
    /// this type (the _M mixes' per-layer rules, its fallbacks for rows that 256-value blocks do
    /// not tile) and the same blocks; norms, biases and embeddings of patches and positions stay f32.
    #[arg(long = "type", short = 't', value_parser = parse_mix)]
    mix: QuantMix,
    /// CPU threads for the quantization, 1 to 256 (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

fn parse_mix(s: &str) -> std::result::Result<QuantMix, String> {
    s.parse()
}

/// Writes the files, then prints one line per file (path, size, tensor types).
pub fn run(args: QuantizeArgs) -> Result<()> {
    if let Some(n) = args.threads {
        if n == 0 || n > tessera_kernels::MAX_THREADS {
            bail!("--threads must be 1 to {}", tessera_kernels::MAX_THREADS);
        }
        std::env::set_var("RAYON_NUM_THREADS", n.to_string());
    }
    let job = QuantizeJob { model: args.model.clone(), out: args.out, mmproj_out: args.mmproj_out, mix: args.mix };
    let style = ProgressStyle::with_template("{msg} [{bar:30}] {percent:>3}% {elapsed}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    let mut bar: Option<ProgressBar> = None;
    let written = tessera::quantize_to_gguf(&job, &mut |p| match p {
        Progress::File { path, values, .. } => {
            if let Some(done) = bar.take() {
                done.finish();
            }
            let b = ProgressBar::new(values).with_style(style.clone());
            b.set_message(format!("writing {}", path.display()));
            bar = Some(b);
        }
        Progress::Tensor { values, .. } => {
            if let Some(b) = &bar {
                b.inc(values);
            }
        }
    });
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let written = written.with_context(|| format!("quantizing `{}` to {}", args.model, args.mix))?;
    for w in written {
        crate::common::out!(
            "{}: {:.1} MiB, {} tensors ({})",
            w.path.display(),
            w.bytes as f64 / (1024.0 * 1024.0),
            w.tensors,
            w.types
        );
    }
    Ok(())
}
