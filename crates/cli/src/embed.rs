//! `tessera embed`: a text's (and images') hidden states at a layer, per token or pooled, as
//! JSON on stdout or written to a .npy or .safetensors file.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::common::{load, out, ModelArgs};
use crate::output::write_file;

#[derive(Args)]
pub struct EmbedArgs {
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

/// Embeds the text (after its images) and prints the vectors as JSON or writes them to `--out`.
pub fn run(args: EmbedArgs) -> Result<()> {
    let pooling = parse_pooling(&args.pool)?;
    let (model, _) = load(&args.model)?;
    let images = args
        .image
        .iter()
        .map(|p| tessera::load_image(p, tessera::DEFAULT_MAX_PIXELS))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(layer) = args.layer {
        let last = model.analysis().num_hidden_states() - 1;
        if layer > last {
            bail!("--layer {layer} is out of range: 0 (token embeddings) to {last} (after the final norm)");
        }
    }
    let e = model.analysis().contextual_embeddings(&images, &args.text, args.layer)?;
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

/// Writes a 2-D f32 tensor as .npy or .safetensors (by extension), through the one file writer.
fn write_tensor(path: &std::path::Path, t: &tessera::Tensor) -> Result<()> {
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => safetensors::serialize([("embeddings", t)], None)
            .with_context(|| format!("encoding the vectors for {}", path.display()))?,
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
            bytes
        }
        _ => bail!("--out {} must end in .npy or .safetensors", path.display()),
    };
    write_file(path, &bytes)
}
