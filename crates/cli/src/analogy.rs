//! `tessera analogy`: a − b + c over the token embeddings, and the tokens nearest to it by
//! cosine similarity.

use anyhow::Result;
use clap::Args;

use crate::common::{load, out, ModelArgs};

#[derive(Args)]
pub struct AnalogyArgs {
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

/// Prints the tokens nearest to a − b + c, most similar first (a table, or JSON).
pub fn run(args: AnalogyArgs) -> Result<()> {
    let (model, _) = load(&args.model)?;
    let [a, b, c] = [&args.words[0], &args.words[1], &args.words[2]];
    let top = model.analysis().analogy(a, b, c, args.top)?;
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
