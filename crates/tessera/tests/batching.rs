//! Continuous batching: a batched decode step gives every sequence the logits it gets alone
//! (bit for bit), and a request run through the engine among many others gets the tokens it
//! gets alone — on the quantized kernels (SmolLM2 Q4_1) and the dense f32 ones (the shipped
//! shapes model, with images).
//!
//! Bit for bit is a property of tessera's CPU kernels (row-invariant: a row's arithmetic does
//! not depend on the rows beside it). Candle's device-generic ops, which GPUs run and
//! `TESSERA_KERNELS=off` runs here (scripts/test_generic.sh), are not: their f32 matmul blocks
//! the rows differently for another row count, so there a batched row equals the sequence
//! alone to rounding — within [`GENERIC_TOL`] (measured: up to 7.6e-6 on the shapes model,
//! 6.4e-6 on the tiny families) — and the engine's requests still get their solo tokens.

mod common;

use std::sync::Arc;

use anyhow::{Context, Result};
use tessera::{load_image, Engine, EngineConfig, GenerateParams, Model, Prompt, DEFAULT_MAX_PIXELS};

fn shapes() -> Result<Model> {
    Ok(Model::load(common::repo_root().join("models/shapes-vlm").to_str().unwrap(), &common::load_options()?)?)
}

/// The shapes model with prompt blocks of `block` positions, and an image prompt.
fn shapes_in_blocks_of(block: usize) -> Result<(Model, Prompt)> {
    let opts = tessera::LoadOptions { prefill_block: Some(block), ..common::load_options()? };
    let model = Model::load(common::repo_root().join("models/shapes-vlm").to_str().unwrap(), &opts)?;
    let prompt = image_prompts(&model, 1)?.remove(0);
    Ok((model, prompt))
}

/// The largest difference between the last-position logits of two hidden states.
fn last_logits_diff(model: &Model, a: &tessera::Tensor, b: &tessera::Tensor) -> Result<f32> {
    let (a, b): (Vec<f32>, Vec<f32>) = (model.last_logits(a)?.to_vec1()?, model.last_logits(b)?.to_vec1()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max))
}

fn smollm2() -> Result<Model> {
    Ok(Model::load(common::smollm2_gguf()?.to_str().unwrap(), &common::gguf_load_options()?)?)
}

/// Prompts of different lengths (so the caches differ in length within a step).
fn text_prompts(model: &Model, n: usize) -> Result<Vec<Prompt>> {
    let topics = ["the sea", "a cat", "mountains", "rain", "bread", "a clock", "the moon", "trains"];
    (0..n)
        .map(|i| {
            let words = "very ".repeat(i % 5);
            let text = format!("Write a {words}short line about {} number {i}.", topics[i % topics.len()]);
            Ok(model.encode_prompt(&text, None, false, &[])?)
        })
        .collect()
}

fn image_prompts(model: &Model, n: usize) -> Result<Vec<Prompt>> {
    let dir = common::repo_root().join("models/shapes-vlm/examples");
    let files = ["three_shapes.png", "two_circles.png", "one_triangle_top.png", "four_shapes_noise.png"];
    let questions = ["How many shapes are there?", "What color is the circle?", "How many circles are there?"];
    (0..n)
        .map(|i| {
            let image = load_image(&dir.join(files[i % files.len()]), DEFAULT_MAX_PIXELS)?;
            Ok(model.encode_prompt(questions[i % questions.len()], None, false, &[image])?)
        })
        .collect()
}

/// How far a batched row's logits may be from the sequence alone where the kernels do not run
/// (f32 rounding of a differently blocked matmul; see the file's comment).
const GENERIC_TOL: f32 = 1e-4;

/// Prefills each prompt, then runs `steps` batched decode steps over all of them together and
/// compares every row with the same sequence decoded alone: bit for bit on tessera's kernels,
/// within [`GENERIC_TOL`] on Candle's generic ops.
fn batched_rows_equal_solo(model: &Model, prompts: &[Prompt], steps: usize) -> Result<()> {
    let mut solo_caches = Vec::new();
    let mut caches = Vec::new();
    let mut next = Vec::new();
    for p in prompts {
        let mut cache = model.new_cache();
        let hidden = model.forward(p, .., &mut cache, &mut Default::default(), &mut Default::default())?;
        let t = hidden.dim(1)?;
        let logits = model.logits(&hidden.narrow(1, t - 1, 1)?)?.squeeze(0)?.to_vec1::<f32>()?;
        next.push(tessera::sampling::argmax(&logits));
        solo_caches.push(cache.clone());
        caches.push(cache);
    }
    for step in 0..steps {
        let batched = model.decode_rows(&next, &mut caches)?.to_vec2::<f32>()?;
        for (i, cache) in solo_caches.iter_mut().enumerate() {
            let alone = model.decode_rows(&next[i..=i], std::slice::from_mut(cache))?.to_vec2::<f32>()?;
            let pairs = || batched[i].iter().zip(&alone[0]);
            if tessera_decoder::kernels_run_on(model.device()) {
                let single = pairs().filter(|(a, b)| a.to_bits() != b.to_bits()).count();
                assert_eq!(single, 0, "step {step}, sequence {i}: {single} logits differ from the sequence alone");
            } else {
                let worst = pairs().map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                assert!(worst < GENERIC_TOL, "step {step}, sequence {i}: logits {worst} from the sequence alone");
            }
        }
        next = batched.iter().map(|r| tessera::sampling::argmax(r)).collect();
    }
    Ok(())
}

#[test]
fn batched_decode_rows_equal_each_sequence_alone_on_quantized_kernels() -> Result<()> {
    let model = smollm2()?;
    // 20 rows: past the 16 rows where the kernels would switch to GEMM tiles.
    batched_rows_equal_solo(&model, &text_prompts(&model, 20)?, 3)
}

/// The same with an f16 KV cache (`--kv-cache-dtype f16`): the batched kernel reads each row's
/// f16 cache as the single-row one does.
#[test]
fn batched_decode_rows_equal_each_sequence_alone_with_an_f16_kv_cache() -> Result<()> {
    let opts = tessera::LoadOptions { kv_cache_dtype: Some(tessera::DType::F16), ..common::gguf_load_options()? };
    let model = Model::load(common::smollm2_gguf()?.to_str().unwrap(), &opts)?;
    assert_eq!(model.kv_cache_dtype(), tessera::DType::F16);
    batched_rows_equal_solo(&model, &text_prompts(&model, 18)?, 3)
}

#[test]
fn batched_decode_rows_equal_each_sequence_alone_on_dense_f32_with_images() -> Result<()> {
    let model = shapes()?;
    batched_rows_equal_solo(&model, &image_prompts(&model, 40)?, 2)
}

/// Every tiny text checkpoint's family (MHA/GQA/MQA, llama3 RoPE, Qwen2 biases, Gemma's norms,
/// Gemma 2's soft-caps, Gemma 3's and Qwen3's q/k norms, local layers): batched rows equal each
/// sequence alone, whichever path the layer takes (the batched CPU path where it applies).
#[test]
fn batched_decode_rows_equal_each_sequence_alone_in_every_tiny_family() -> Result<()> {
    for &name in common::TINY_TEXT_MODELS {
        let model = common::tiny_model(name)?;
        let prompts: Vec<Prompt> = ["Hello there", "The quick brown fox jumps", "1 2 3", "A"]
            .iter()
            .map(|p| model.encode_prompt(p, None, false, &[]))
            .collect::<std::result::Result<_, _>>()?;
        batched_rows_equal_solo(&model, &prompts, 4).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    }
    Ok(())
}

/// The tiny Qwen3.5 checkpoint (tests/fixtures/vlm/qwen3.5-tiny) and chats with and without an image.
fn qwen3_5_with_prompts(n: usize) -> Result<(Model, Vec<Prompt>)> {
    let dir = common::fixtures().join("vlm/qwen3.5-tiny");
    let model = Model::load(dir.to_str().context("utf-8 path")?, &common::load_options()?)?;
    let chelsea = load_image(&common::fixtures().join("images/chelsea.png"), DEFAULT_MAX_PIXELS)?;
    let questions = ["Describe this image.", "Hello, who are you?", "What is in this photo?", "Count to three."];
    let prompts = (0..n)
        .map(|i| {
            let images = if i % 2 == 0 { vec![chelsea.clone()] } else { vec![] };
            Ok(model.encode_prompt(questions[i % questions.len()], None, false, &images)?)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((model, prompts))
}

/// Qwen3.5's hybrid stack: in a batched step each row carries its own Gated DeltaNet states (and
/// its attention layers' keys), and gets the bits it gets alone; so does every request the engine
/// batches.
#[test]
fn batched_decode_rows_equal_each_sequence_alone_on_qwen3_5_linear_layers() -> Result<()> {
    let (model, prompts) = qwen3_5_with_prompts(6)?;
    batched_rows_equal_solo(&model, &prompts, 4)?;
    engine_matches_solo(model, prompts, 8)
}

#[test]
fn a_single_row_step_equals_the_plain_decode_step() -> Result<()> {
    let model = smollm2()?;
    let prompt = &text_prompts(&model, 1)?[0];
    let mut a = model.new_cache();
    model.forward(prompt, .., &mut a, &mut Default::default(), &mut Default::default())?;
    let mut b = a.clone();
    let rows = model.decode_rows(&[42], std::slice::from_mut(&mut a))?.to_vec2::<f32>()?;
    let plain = model.forward_last(&[42], &mut b)?.to_vec1::<f32>()?;
    assert_eq!(rows[0], plain);
    assert_eq!(a.len(), b.len());
    Ok(())
}

/// Every request submitted at once (the engine batches them) gets exactly its solo tokens.
fn engine_matches_solo(model: Model, prompts: Vec<Prompt>, max_new_tokens: usize) -> Result<()> {
    let params = GenerateParams { max_new_tokens, ..Default::default() };
    let solo: Vec<_> =
        prompts.iter().map(|p| model.generate(p, &params, &mut |_| {})).collect::<tessera::Result<_>>()?;
    let engine =
        Arc::new(Engine::start(Arc::new(model), EngineConfig { max_batch: 64, max_queue: 256, ..Default::default() })?);
    let handles: Vec<_> = prompts
        .into_iter()
        .map(|p| {
            let (engine, params) = (engine.clone(), params.clone());
            std::thread::spawn(move || {
                let mut streamed = String::new();
                let out = engine.generate(p, params, &mut |t| streamed.push_str(t));
                out.map(|o| (o, streamed))
            })
        })
        .collect();
    for (i, (h, alone)) in handles.into_iter().zip(&solo).enumerate() {
        let (out, streamed) = h.join().expect("request thread")?;
        assert_eq!(out.generated_tokens, alone.generated_tokens, "request {i}: batched tokens differ from solo");
        assert_eq!(out.text, alone.text, "request {i}");
        assert_eq!(streamed, alone.text, "request {i}: the streamed pieces add up to the text");
        assert_eq!(out.finish_reason, alone.finish_reason, "request {i}");
    }
    let stats = engine.stats();
    let steps = stats.decode_steps.load(std::sync::atomic::Ordering::Relaxed);
    let rows = stats.decode_rows.load(std::sync::atomic::Ordering::Relaxed);
    assert!(rows > steps, "the engine never decoded two sequences in one step ({rows} rows in {steps} steps)");
    Ok(())
}

#[test]
fn sixty_four_image_requests_through_the_engine_get_their_solo_tokens() -> Result<()> {
    let model = shapes()?;
    let prompts = image_prompts(&model, 64)?;
    engine_matches_solo(model, prompts, 8)
}

#[test]
fn text_requests_through_the_engine_get_their_solo_tokens_on_q4_1() -> Result<()> {
    let model = smollm2()?;
    let prompts = text_prompts(&model, 20)?;
    engine_matches_solo(model, prompts, 12)
}

#[test]
fn a_full_queue_is_refused_as_busy() -> Result<()> {
    let model = shapes()?;
    let prompt = image_prompts(&model, 1)?.remove(0);
    let engine = Engine::start(Arc::new(model), EngineConfig { max_batch: 1, max_queue: 0, ..Default::default() })?;
    let err = engine.submit(prompt, GenerateParams::default(), Box::new(|_| true)).unwrap_err();
    assert!(matches!(err, tessera::TesseraError::Busy(_)), "{err}");
    Ok(())
}

#[test]
fn an_image_sent_again_is_not_encoded_again_and_the_cache_keeps_to_its_budget() -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let model = shapes()?;
    let prompts = image_prompts(&model, 8)?; // 4 images, each twice
    let params = GenerateParams { max_new_tokens: 4, ..Default::default() };
    let solo: Vec<_> =
        prompts.iter().map(|p| model.generate(p, &params, &mut |_| {})).collect::<tessera::Result<_>>()?;
    let one = { model.encode_image(&prompts[0].images()[0])?.bytes() };
    let model = Arc::new(model);
    let run = |budget: usize, order: &[usize]| -> Result<Engine> {
        let engine = Engine::start(
            model.clone(),
            EngineConfig { max_batch: 8, max_queue: 8, image_cache_bytes: budget, kv_cache_bytes: 0 },
        )?;
        for &i in order {
            let out = engine.generate(prompts[i].clone(), params.clone(), &mut |_| {})?;
            assert_eq!(
                out.generated_tokens, solo[i].generated_tokens,
                "request {i}: cached features change the answer"
            );
        }
        Ok(engine)
    };
    // Room for all: each image encoded once, its second request served from the cache.
    let e = run(64 << 20, &(0..8).collect::<Vec<_>>())?;
    assert_eq!((e.stats().image_cache_misses.load(Relaxed), e.stats().image_cache_hits.load(Relaxed)), (4, 4));
    assert_eq!(e.stats().image_cache_bytes.load(Relaxed), 4 * one);
    // Room for one: A, B, A re-encodes A (evicted by B); B, B hits.
    let e = run(one, &[0, 1, 0, 1, 5])?;
    assert_eq!((e.stats().image_cache_misses.load(Relaxed), e.stats().image_cache_hits.load(Relaxed)), (4, 1));
    assert!(e.stats().image_cache_bytes.load(Relaxed) <= one);
    // No cache.
    let e = run(0, &[0, 4])?;
    assert_eq!((e.stats().image_cache_misses.load(Relaxed), e.stats().image_cache_hits.load(Relaxed)), (2, 0));
    Ok(())
}

/// Chunked prefill: a long prompt runs a budget of blocks between decode steps, so a stream
/// already running keeps getting tokens while it prefills (with whole-prompt prefill it would
/// get none until the long prompt's first token); and the long prompt's answer is its solo one.
#[test]
fn a_long_prompt_prefills_in_blocks_between_the_running_streams_decode_steps() -> Result<()> {
    use std::sync::{mpsc, Mutex};
    use tessera::Event;
    let model = smollm2()?;
    let long = model.encode_prompt(&"The quick brown fox jumps over the lazy dog. ".repeat(120), None, true, &[])?;
    let short = text_prompts(&model, 1)?.remove(0);
    let params = GenerateParams { max_new_tokens: 8, ..Default::default() };
    let alone = model.generate(&long, &params, &mut |_| {})?;
    // Three blocks or more: the engine runs at most one block of its default size per step,
    // so two decode steps or more fall between the long prompt's arrival and its first token.
    let blocks = model.prefill_blocks(&long).len();
    assert!(blocks >= 3, "{} positions in {blocks} blocks", long.len());
    let engine = Engine::start(Arc::new(model), EngineConfig::default())?;

    // The short request streams; each of its events is counted.
    let events = Arc::new(Mutex::new(0usize));
    let (started_tx, started) = mpsc::channel();
    let counter = events.clone();
    let short_params = GenerateParams { max_new_tokens: 200, ignore_eos: true, ..Default::default() };
    engine.submit(
        short,
        short_params,
        Box::new(move |e| {
            if let Event::Text(_) = e {
                *counter.lock().unwrap() += 1;
                let _ = started_tx.send(());
            }
            true
        }),
    )?;
    started.recv()?;
    // The long one: how many short events came between its submission and its first token.
    let at_submit = *events.lock().unwrap();
    let (tx, rx) = mpsc::channel();
    let (counter, mut first) = (events.clone(), true);
    engine.submit(
        long,
        params,
        Box::new(move |e| {
            if first {
                first = false;
                let _ = tx.send(Err(*counter.lock().unwrap()));
            }
            if let Event::Done(out) = e {
                let _ = tx.send(Ok(out));
            }
            true
        }),
    )?;
    let Err(at_first_token) = rx.recv()? else { anyhow::bail!("the long prompt ended without a first event") };
    let Ok(out) = rx.recv()? else { anyhow::bail!("the long prompt did not finish") };
    assert_eq!(out.generated_tokens, alone.generated_tokens, "the long prompt's answer differs from its solo one");
    assert!(
        at_first_token >= at_submit + 2,
        "the running stream got {} tokens while a {blocks}-block prompt prefilled",
        at_first_token - at_submit
    );
    Ok(())
}

/// The prompt's block size is a load option (`--prefill-block`): the blocks end every N
/// positions, generation gives what one forward over the whole prompt gives (within f32
/// reordering) and the tokens of the default blocks; a block of 0 positions is refused.
///
/// On f32 weights (the GGUF dequantized): blocks of 100 move the last logits by 1.7e-5 (the
/// attention's sums split elsewhere). Kept quantized, the int8 rounding of the activations
/// turns that into up to 0.53 (measured at blocks of 8, 96 and 100; blocks of a multiple of 64
/// are bit for bit the same as one forward there).
#[test]
fn the_prefill_block_size_is_a_load_option() -> Result<()> {
    let path = common::smollm2_gguf()?;
    let load = |block| -> Result<Model> {
        let dtype = Some(tessera::DType::F32);
        let opts = tessera::LoadOptions { prefill_block: block, dtype, ..common::gguf_load_options()? };
        Ok(Model::load(path.to_str().unwrap(), &opts)?)
    };
    let (by_100, default) = (load(Some(100))?, load(None)?);
    let prompt = by_100.encode_prompt(&"The quick brown fox jumps over the lazy dog. ".repeat(30), None, true, &[])?;
    let len = prompt.len();
    assert!(len > 300, "{len} positions");
    let want: Vec<usize> = (100..len).step_by(100).chain([len]).collect();
    assert_eq!(by_100.prefill_blocks(&prompt), want);
    assert_eq!(default.prefill_blocks_of(&prompt, 100), want, "another size, as that size's model cuts");
    assert_eq!(default.prefill_block(), tessera::PREFILL_BLOCK);
    assert_eq!(default.prefill_blocks(&prompt).len(), len.div_ceil(tessera::PREFILL_BLOCK));
    let mut images = tessera::ImageInputs::default();
    let blocked = by_100.prefill(&prompt, &mut by_100.new_cache(), &mut images, &mut Default::default())?;
    assert_eq!(images.encoded(), 0, "a text prompt encodes no image");
    let one = by_100.forward(&prompt, .., &mut by_100.new_cache(), &mut Default::default(), &mut Default::default())?;
    let diff = last_logits_diff(&by_100, &blocked, &one)?;
    assert!(diff < 1e-4, "blocks of 100 move the last logits by {diff}");
    let params = GenerateParams { max_new_tokens: 8, ..Default::default() };
    let (x, y) = (by_100.generate(&prompt, &params, &mut |_| {})?, default.generate(&prompt, &params, &mut |_| {})?);
    assert_eq!(x.generated_tokens, y.generated_tokens);
    let refused = load(Some(0)).err().map(|e| format!("{e:#}")).unwrap_or_default();
    assert!(refused.contains("--prefill-block"), "{refused}");
    Ok(())
}

/// Generation's prefill encodes each image once, however many blocks its tokens span (it once
/// encoded it again for every block: SmolVLM's 13-view photo four times), and the blocks give
/// what one forward over the whole prompt gives.
#[test]
fn a_prefill_encodes_each_image_once_across_its_blocks() -> Result<()> {
    let (model, prompt) = shapes_in_blocks_of(8)?;
    let runs = prompt.image_runs();
    let ends = model.prefill_blocks(&prompt);
    let spanned = ends.iter().filter(|&&e| runs.iter().any(|r| r.start < e && e < r.end)).count();
    assert!(spanned >= 2, "the image's tokens {runs:?} cross {spanned} block ends of {ends:?}");
    let mut images = tessera::ImageInputs::default();
    let blocked = model.prefill(&prompt, &mut model.new_cache(), &mut images, &mut Default::default())?;
    assert_eq!(images.encoded(), prompt.images().len(), "image encodes for {} blocks", ends.len());
    let one = model.forward(&prompt, .., &mut model.new_cache(), &mut Default::default(), &mut Default::default())?;
    let diff = last_logits_diff(&model, &blocked, &one)?;
    assert!(diff < 1e-4, "blocks of 8 move the last logits by {diff}");
    Ok(())
}

/// The engine too encodes a prompt's image once while its blocks run between other work, with
/// no image cache to keep it (or one it does not fit, or that evicts it between blocks).
#[test]
fn the_engine_encodes_an_image_once_across_its_blocks_without_an_image_cache() -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let (model, prompt) = shapes_in_blocks_of(8)?;
    assert!(model.prefill_blocks(&prompt).len() > 3);
    let params = GenerateParams { max_new_tokens: 4, ..Default::default() };
    let solo = model.generate(&prompt, &params, &mut |_| {})?;
    let config = EngineConfig { image_cache_bytes: 0, kv_cache_bytes: 0, ..Default::default() };
    let engine = Engine::start(Arc::new(model), config)?;
    let out = engine.generate(prompt, params, &mut |_| {})?;
    assert_eq!(out.generated_tokens, solo.generated_tokens);
    let stats = engine.stats();
    assert_eq!((stats.image_cache_misses.load(Relaxed), stats.image_cache_hits.load(Relaxed)), (1, 0));
    Ok(())
}
