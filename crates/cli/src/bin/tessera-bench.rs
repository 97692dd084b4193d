//! `tessera-bench`: prompt-processing and generation speed and peak memory of one model
//! configuration, in the style of llama.cpp's `llama-bench` (pp = prompt tokens/s, tg = generated
//! tokens/s). One configuration per process, because the CPU thread count is fixed at start-up;
//! `scripts/bench.sh` runs the matrix and prints the table.

use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use tessera::{parse_dtype, DeviceChoice, GenerateParams, LoadOptions, Model};

#[derive(Parser)]
#[command(about = "Measure prompt processing and generation speed of one model configuration")]
struct Args {
    #[arg(long, required_unless_present = "read_bandwidth", default_value = "")]
    model: String,
    /// Instead of a model, measure the memory-read bandwidth (GB/s) with `--threads` threads:
    /// the roofline that decode speed is compared with.
    #[arg(long)]
    read_bandwidth: bool,
    /// f32/f16/bf16 (GGUF files are dequantized); default: as loaded (GGUF stays quantized).
    #[arg(long)]
    dtype: Option<String>,
    /// f32 or f16: the KV cache's dtype (default: the working dtype; see `tessera generate --help`).
    #[arg(long)]
    kv_cache_dtype: Option<String>,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long, default_value = "cpu")]
    device: DeviceChoice,
    /// Prompt length for the prompt-processing measurement.
    #[arg(long, default_value_t = 128)]
    prompt_tokens: usize,
    /// Tokens generated one at a time for the generation measurement.
    #[arg(long, default_value_t = 64)]
    gen_tokens: usize,
    /// Sequences decoded together in each generation step (`Model::decode_rows`, as the server
    /// batches its streams): tg is then the aggregate tokens/s of all of them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    batch: u32,
    /// Tokens already in the KV cache (processed untimed) before each measurement, like
    /// llama-bench's `-d`.
    #[arg(long, default_value_t = 0)]
    depth: usize,
    /// Positions per prompt block (default: the model's, 512): pp runs the prompt block by
    /// block, as `tessera generate` does; a number at least --prompt-tokens runs it in one forward.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    prefill_block: Option<u32>,
    /// After the measurements, prompt processing again in blocks of each of these sizes
    /// (comma-separated; a size at least --prompt-tokens is one forward): what the block size
    /// costs on this device. JSON `pp_by_block`.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..))]
    prefill_sweep: Vec<u32>,
    /// Instead of pp and tg: image → first token. The image (decoded once, beforehand) and
    /// --image-prompt through the model's template, the image processor, the vision tower and
    /// the prompt's forward, up to the first greedy token (its logits read back from the
    /// device), in this one process: one cold run, then best of --reps (as a server that is up
    /// answers; the cold run's time is printed too).
    #[arg(long)]
    image: Option<std::path::PathBuf>,
    /// The question asked about --image (in one user message, after the image).
    #[arg(long, default_value = "Can you describe this image?")]
    image_prompt: String,
    /// As `tessera generate --vision-int8`: the vision tower's and connector's matmuls on the
    /// CPU's int8 kernels.
    #[arg(long)]
    vision_int8: bool,
    /// As `tessera generate --quantize T`: a safetensors checkpoint quantized on loading as
    /// llama-quantize would (Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0); its time is in the load time.
    #[arg(long, value_parser = |s: &str| s.parse::<tessera::QuantMix>())]
    quantize: Option<tessera::QuantMix>,
    /// Timed repetitions (after one warm-up).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    reps: u32,
    /// Print one JSON object instead of a table row.
    #[arg(long)]
    json: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    tessera_kernels::keep_freed_memory();
    std::env::set_var("RAYON_NUM_THREADS", args.threads.to_string());
    if args.read_bandwidth {
        let gbs = read_bandwidth(args.threads, args.reps as usize);
        if args.json {
            println!("{}", serde_json::json!({ "threads": args.threads, "read_gb_s": gbs }));
        } else {
            println!("memory read bandwidth, {} threads: {gbs:.1} GB/s", args.threads);
        }
        return Ok(());
    }
    let device = args.device.open()?;
    let dtype = args.dtype.as_deref().map(parse_dtype).transpose()?;
    let kv_cache_dtype = args.kv_cache_dtype.as_deref().map(parse_dtype).transpose()?;
    let t0 = Instant::now();
    let prefill_block = args.prefill_block.map(|n| n as usize);
    let opts = LoadOptions {
        device,
        dtype,
        kv_cache_dtype,
        prefill_block,
        vision_q8_0: args.vision_int8,
        quantize: args.quantize,
        ..Default::default()
    };
    let model = Model::load(&args.model, &opts).context("loading model")?;
    let load_s = t0.elapsed().as_secs_f64();
    if let Some(image) = &args.image {
        return image_first_token(&model, image, &args, load_s);
    }

    // A prompt of real text, cut to the requested length.
    let text = "The history of the city begins with a small settlement on the river, where traders met to \
                exchange salt, grain and cloth. Over the centuries it grew into a busy port. "
        .repeat(1 + (args.prompt_tokens + args.depth) / 16);
    let mut prompt = model.tokenizer().encode(&text, false)?;
    prompt.truncate(args.prompt_tokens);

    let mut context = model.tokenizer().encode(&text, false)?;
    context.truncate(args.depth);
    if context.len() < args.depth {
        anyhow::bail!("--depth {}: the bench text has only {} tokens", args.depth, context.len());
    }

    // The prompt's blocks, as generation cuts them.
    let as_run = model.prompt(prompt.clone(), &[])?;
    let ends = model.prefill_blocks(&as_run);
    // Prompt processing: `prompt` after `depth` cached tokens, in blocks ending at `ends`; seconds.
    let prefill_s = |ends: &[usize]| -> Result<f64> {
        let mut cache = model.new_cache();
        if !context.is_empty() {
            model.forward_last(&context, &mut cache)?;
        }
        let start = Instant::now();
        let mut hidden = None;
        let mut at = 0;
        for &end in ends {
            hidden = Some(model.forward_embeds(
                &model.embed_ids(&prompt[at..end])?,
                &[],
                &mut cache,
                &mut Default::default(),
            )?);
            at = end;
        }
        let _ = model.last_logits(&hidden.context("an empty prompt")?)?.to_vec1::<f32>()?;
        Ok(start.elapsed().as_secs_f64())
    };
    let mut pp = Vec::new();
    let mut tg = Vec::new();
    for rep in 0..=args.reps {
        let pp_s = prefill_s(&ends)?;
        // Generation: one token at a time after `depth` cached tokens (at least one), for
        // `batch` sequences together (a single one through `forward_last`, as the CLI runs).
        let mut cache = model.new_cache();
        // As `Model::generate` reserves the whole sequence's positions.
        cache.reserve(args.depth.max(1) + args.gen_tokens);
        let first = if context.is_empty() { &prompt[..1] } else { &context[..] };
        let logits: Vec<f32> = model.forward_last(first, &mut cache)?.to_vec1()?;
        let mut next = tessera::sampling::argmax(&logits);
        let batch = args.batch as usize;
        // Each sequence its own copy of the cache (a clone would share the buffers), so the
        // step reads `batch` caches from memory as a server's does; one sequence decodes on
        // the cache its first tokens made, as `Model::generate` does.
        let mut caches = match batch {
            1 => vec![cache],
            _ => (0..batch).map(|_| cache.copy_prefix(cache.len())).collect::<Result<Vec<_>, _>>()?,
        };
        let mut ids = vec![next; batch];
        let start = Instant::now();
        for _ in 0..args.gen_tokens {
            if batch == 1 {
                let logits: Vec<f32> = model.forward_last(&[next], &mut caches[0])?.to_vec1()?;
                next = tessera::sampling::argmax(&logits);
            } else {
                let logits: Vec<Vec<f32>> = model.decode_rows(&ids, &mut caches)?.to_vec2()?;
                ids = logits.iter().map(|l| tessera::sampling::argmax(l)).collect();
            }
        }
        let tg_s = start.elapsed().as_secs_f64();
        if rep > 0 {
            pp.push(prompt.len() as f64 / pp_s);
            tg.push((args.gen_tokens * batch) as f64 / tg_s);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let mut by_block = serde_json::Map::new();
    for &n in &args.prefill_sweep {
        let ends = model.prefill_blocks_of(&as_run, n as usize);
        let mut rates = Vec::new();
        for rep in 0..=args.reps {
            let s = prefill_s(&ends)?;
            if rep > 0 {
                rates.push(prompt.len() as f64 / s);
            }
        }
        by_block.insert(n.to_string(), mean(&rates).into());
    }
    let peak_mib = peak_rss_mib();
    let label = match (&args.dtype, &model.info().quantization) {
        (Some(d), _) => d.clone(),
        (None, _) if args.quantize.is_some() => {
            format!("{} (load-time)", args.quantize.map(|m| m.name()).unwrap_or_default())
        }
        (None, Some(q)) => q.clone(),
        (None, None) => format!("{:?}", model.info().dtype).to_lowercase(),
    };
    let label = match &args.kv_cache_dtype {
        Some(kv) => format!("{label}, {kv} KV"),
        None => label,
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": args.model, "weights": label, "threads": args.threads,
                "prompt_tokens": prompt.len(), "prefill_blocks": ends.len(), "gen_tokens": args.gen_tokens, "depth": args.depth, "batch": args.batch,
                "kv_cache_dtype": model.kv_cache_dtype().as_str(), "pp_tok_s": mean(&pp), "pp_by_block": by_block, "tg_tok_s": mean(&tg), "peak_rss_mib": peak_mib, "load_s": load_s,
                "flash_attn": tessera::flash_attention_enabled(),
            })
        );
    } else {
        println!(
            "| tessera | {label} | {} | pp{} {:.1} | tg{}{} {:.1} | {} MiB |",
            args.threads,
            prompt.len(),
            mean(&pp),
            args.gen_tokens,
            if args.batch > 1 { format!(" ×{}", args.batch) } else { String::new() },
            mean(&tg),
            peak_mib.map(|m| format!("{m:.0}")).unwrap_or_else(|| "?".into())
        );
        for (n, rate) in &by_block {
            println!("pp{} in blocks of {n}: {:.1} tok/s", prompt.len(), rate.as_f64().unwrap_or(f64::NAN));
        }
    }
    Ok(())
}

/// `--image`: seconds from the decoded image and the question to the first token, cold and
/// then best of `--reps`.
fn image_first_token(model: &Model, path: &std::path::Path, args: &Args, load_s: f64) -> Result<()> {
    let image = tessera::load_image(path, tessera::DEFAULT_MAX_PIXELS)?;
    let params = GenerateParams { max_new_tokens: 1, ignore_eos: true, ..Default::default() };
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..=args.reps {
        let start = Instant::now();
        let prompt = model.encode_prompt(&args.image_prompt, None, false, std::slice::from_ref(&image))?;
        let out = model.generate(&prompt, &params, &mut |_| {})?;
        times.push(start.elapsed().as_secs_f64());
        last = Some(out);
    }
    let out = last.context("no run")?;
    let cold_s = times[0];
    let best_s = times[1..].iter().copied().fold(f64::INFINITY, f64::min);
    let peak_mib = peak_rss_mib();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "model": args.model, "image": path, "threads": args.threads, "prompt_positions": out.prompt_positions,
                "image_tokens": out.image_tokens, "first_token": out.generated_tokens, "first_token_s": best_s,
                "cold_first_token_s": cold_s, "reps": args.reps, "peak_rss_mib": peak_mib, "load_s": load_s,
                "flash_attn": tessera::flash_attention_enabled(),
            })
        );
    } else {
        println!(
            "| tessera | {} | image → first token ({} positions, {} of them the image's) | {best_s:.3} s (cold {cold_s:.3} s) |",
            path.display(),
            out.prompt_positions,
            out.image_tokens,
        );
    }
    Ok(())
}

/// Best-of-`reps` read bandwidth over a 1 GiB buffer (far larger than any cache), each thread
/// summing its own contiguous part.
fn read_bandwidth(threads: usize, reps: usize) -> f64 {
    let n = (1usize << 30) / 8;
    let buf: Vec<u64> = (0..n as u64).collect();
    let chunk = n.div_ceil(threads.max(1));
    let mut best = 0f64;
    for _ in 0..=reps {
        let start = Instant::now();
        let total: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        // Eight independent sums so the adds do not serialise the loads.
                        let mut acc = [0u64; 8];
                        for c in part.chunks_exact(8) {
                            for i in 0..8 {
                                acc[i] = acc[i].wrapping_add(c[i]);
                            }
                        }
                        acc.iter().fold(0u64, |a, b| a.wrapping_add(*b))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0)).fold(0, u64::wrapping_add)
        });
        std::hint::black_box(total);
        best = best.max((n * 8) as f64 / start.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// Peak resident memory (VmHWM) on Linux.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
