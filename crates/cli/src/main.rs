//! `tessera`: the command-line interface. Argument parsing and presentation only; all model
//! work happens in the `tessera` library. This file holds the top-level command, logging and
//! dispatch; each subcommand is its own module, the model-loading options every one takes are in
//! [`common`], and [`error`] reports a failure as one line.

mod analogy;
mod common;
mod embed;
mod error;
mod eval;
mod explain;
mod generate;
mod info;
mod output;
mod quantize;
mod serve;

use anyhow::Result;
use clap::{Parser, Subcommand};

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
    Generate(generate::GenerateArgs),
    /// Print what a model is: architecture, sizes, dtype, tokenizer and chat template.
    Info(common::ModelArgs),
    /// Embeddings of a text (and images): per token or pooled, at any layer; JSON, .npy or .safetensors.
    Embed(embed::EmbedArgs),
    /// Embedding arithmetic: a − b + c over the token embeddings, nearest tokens by cosine.
    Analogy(analogy::AnalogyArgs),
    /// Generate an answer about an image and draw, per generated token, where it looked.
    Explain(explain::ExplainArgs),
    /// Exact-match accuracy per task on a question file (JSON lines: image, question, answer, task).
    Eval(eval::EvalArgs),
    /// An OpenAI-compatible HTTP server (chat and text completions, embeddings, models, health,
    /// metrics) over one model, with continuous batching.
    ///
    /// Request logs go to stderr and never hold up a request: lines stderr cannot take in time
    /// are dropped and counted in /metrics (tessera_log_lines_dropped_total).
    Serve(serve::ServeArgs),
    /// Quantize a safetensors checkpoint into llama.cpp's GGUF (Q4_0, Q4_K_M, Q5_K_M, Q6_K,
    /// Q8_0): the text model, and with --mmproj-out a vision-language model's mmproj, as
    /// llama.cpp's converter and llama-quantize write them (the same bytes), for tessera and
    /// llama.cpp alike.
    Quantize(quantize::QuantizeArgs),
}

fn main() {
    tessera_kernels::keep_freed_memory();
    if let Err(e) = run() {
        eprintln!("error: {}", error::one_line(&e));
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Generate(args) => generate::run(args),
        Command::Info(args) => info::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Analogy(args) => analogy::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Quantize(args) => quantize::run(args),
    }
}

/// Logging (the server's one line per request), set up by `serve` once its model is loaded:
/// through a bounded queue to stderr, so a stuck stderr costs log lines, never requests. Keep
/// the guard until the server stops (it flushes what is queued).
fn init_logging() -> Result<tessera_server::logging::LogGuard> {
    Ok(tessera_server::logging::init()?)
}
