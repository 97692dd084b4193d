//! The engine's prefix cache: a chat's second turn, which resends the first turn (and its
//! image), continues from the first turn's KV cache — the image is not encoded again and the
//! first turn's prompt is not run again — and answers exactly what it answers alone. The cache
//! keeps to its byte budget, least recently used out.

mod common;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use anyhow::{Context, Result};
use tessera::{
    load_image, ContentPart, Engine, EngineConfig, GenerateParams, GenerationOutput, Message, Model, Prompt, RgbImage,
    DEFAULT_MAX_PIXELS,
};

fn smollm2() -> Result<Arc<Model>> {
    Ok(Arc::new(Model::load(common::smollm2_gguf()?.to_str().context("utf-8 path")?, &common::gguf_load_options()?)?))
}

fn params(max_new_tokens: usize) -> GenerateParams {
    GenerateParams { max_new_tokens, ..Default::default() }
}

/// `prompt` through the engine; its answer must be the one the request gets alone.
fn ask(engine: &Engine, prompt: &Prompt, params: &GenerateParams) -> Result<GenerationOutput> {
    let alone = engine.model().generate(prompt, params, &mut |_| {})?;
    let out = engine.generate(prompt.clone(), params.clone(), &mut |_| {})?;
    assert_eq!(out.generated_tokens, alone.generated_tokens, "the engine's answer differs from the request alone");
    assert_eq!(out.text, alone.text);
    Ok(out)
}

/// Where the prompt's last end-of-turn token ends (the last turn before the assistant's header).
fn after_last_turn(model: &Model, prompt: &Prompt) -> usize {
    prompt
        .text_positions()
        .iter()
        .filter(|(_, id)| model.eos_ids().contains(id))
        .map(|(at, _)| at + 1)
        .max()
        .unwrap_or(0)
}

fn first_turn(question: &str) -> Vec<Message> {
    vec![Message::text("system", "You are a helpful assistant."), Message::text("user", question)]
}

fn second_turn(mut messages: Vec<Message>, answer: &str, question: &str) -> Vec<Message> {
    messages.push(Message::text("assistant", answer));
    messages.push(Message::text("user", question));
    messages
}

#[test]
fn a_chats_second_turn_runs_only_what_is_new_and_answers_as_alone() -> Result<()> {
    let model = smollm2()?;
    let engine = Engine::start(model.clone(), EngineConfig::default())?;
    let stats = engine.stats();
    let turn1 = first_turn("Name three fruits.");
    let p1 = model.encode_chat(&turn1, &[])?;
    let out1 = ask(&engine, &p1, &params(24))?;
    assert_eq!((stats.prefix_cache_hits.load(Relaxed), stats.prefilled_positions.load(Relaxed)), (0, p1.len() as u64));
    assert!(stats.prefix_cache_bytes.load(Relaxed) > 0, "the first turn's cache was not kept");

    let p2 = model.encode_chat(&second_turn(turn1, &out1.text, "Which of them is yellow?"), &[])?;
    assert_eq!(&p2.ids()[..p1.len() - 4], &p1.ids()[..p1.len() - 4], "turn 2 starts with turn 1");
    ask(&engine, &p2, &params(24))?;
    // Turn 1's prompt up to its user message's end comes from the cache; only the assistant's
    // header, its answer and the new question run.
    let reused = after_last_turn(&model, &p1);
    assert!(reused + 8 > p1.len(), "turn 1 ends {} positions after its last end of turn", p1.len() - reused);
    assert_eq!(stats.prefix_cache_hits.load(Relaxed), 1);
    assert_eq!(stats.prefix_reused_positions.load(Relaxed), reused as u64);
    assert_eq!(stats.prefilled_positions.load(Relaxed), (p1.len() + p2.len() - reused) as u64);
    // Turn 2's cache replaces turn 1's (it serves every prompt turn 1's would).
    assert_eq!(stats.prefix_cache_entries.load(Relaxed), 1);
    Ok(())
}

#[test]
fn the_prefix_cache_keeps_to_its_budget_least_recently_used_out() -> Result<()> {
    let model = smollm2()?;
    let (a, b) = (first_turn("Name three fruits."), first_turn("Name three colours."));
    let (pa, pb) = (model.encode_chat(&a, &[])?, model.encode_chat(&b, &[])?);
    // The size of each conversation's cache after its first and its second turn, measured
    // with room for everything.
    let sizes = |messages: &[Message], prompt: &Prompt, question: &str| -> Result<(usize, usize, Prompt)> {
        let engine = Engine::start(model.clone(), EngineConfig::default())?;
        let out = ask(&engine, prompt, &params(16))?;
        let first = engine.stats().prefix_cache_bytes.load(Relaxed);
        let second = model.encode_chat(&second_turn(messages.to_vec(), &out.text, question), &[])?;
        ask(&engine, &second, &params(8))?;
        Ok((first, engine.stats().prefix_cache_bytes.load(Relaxed), second))
    };
    let (a1, a2, pa2) = sizes(&a, &pa, "Which is red?")?;
    let (b1, b2, pb2) = sizes(&b, &pb, "Which is warm?")?;
    // Room for any one of them, not for two.
    let budget = a2.max(b2);
    assert!(budget < a1 + b1 && budget < a2 + b1 && budget < a2 + b2, "sizes {a1} {a2} {b1} {b2}");
    let engine = Engine::start(model.clone(), EngineConfig { kv_cache_bytes: budget, ..Default::default() })?;
    let stats = engine.stats();
    let reused = || stats.prefix_reused_positions.load(Relaxed) as usize;
    let system = pa.text_positions().iter().find(|(_, id)| model.eos_ids().contains(id)).context("system end")?.0 + 1;
    ask(&engine, &pa, &params(16))?;
    assert_eq!(reused(), 0);
    ask(&engine, &pb, &params(16))?;
    assert_eq!(reused(), system, "B's first turn shares the system message with A's");
    assert_eq!(stats.prefix_cache_entries.load(Relaxed), 1);
    assert!(stats.prefix_cache_bytes.load(Relaxed) <= budget);
    ask(&engine, &pa2, &params(8))?;
    assert_eq!(reused(), 2 * system, "A's first turn should have been evicted by B's");
    assert!(after_last_turn(&model, &pa) > system);
    // A's second turn evicted B's in turn.
    ask(&engine, &pb2, &params(8))?;
    assert_eq!(reused(), 3 * system);
    assert_eq!(stats.prefix_cache_entries.load(Relaxed), 1);
    assert!(stats.prefix_cache_bytes.load(Relaxed) <= budget);

    // No cache at all.
    let engine = Engine::start(model.clone(), EngineConfig { kv_cache_bytes: 0, ..Default::default() })?;
    ask(&engine, &pa, &params(16))?;
    ask(&engine, &pa, &params(16))?;
    assert_eq!(
        (engine.stats().prefix_cache_hits.load(Relaxed), engine.stats().prefix_cache_bytes.load(Relaxed)),
        (0, 0)
    );
    Ok(())
}

/// Qwen2-VL (M-RoPE positions, which the cached prefix must continue from): the second turn
/// resends the image; it is neither encoded again (the image-feature cache is off, so every
/// encoding would count as a miss) nor run through the decoder again.
#[test]
fn a_resent_image_is_not_encoded_or_prefilled_again_on_qwen2_vl() -> Result<()> {
    let dir = common::fixtures().join("vlm/qwen2-vl-tiny");
    let model = Arc::new(Model::load(dir.to_str().context("utf-8 path")?, &common::load_options()?)?);
    let image: RgbImage = load_image(&common::fixtures().join("images/chelsea.png"), DEFAULT_MAX_PIXELS)?;
    let engine = Engine::start(model.clone(), EngineConfig { image_cache_bytes: 0, ..Default::default() })?;
    let stats = engine.stats();
    let user = |text: &str, with_image: bool| {
        let mut parts = if with_image { vec![ContentPart::Image] } else { Vec::new() };
        parts.push(ContentPart::Text { text: text.into() });
        Message::parts("user", parts)
    };
    let turn1 = vec![user("Describe the picture.", true)];
    let p1 = model.encode_chat(&turn1, std::slice::from_ref(&image))?;
    assert!(p1.image_tokens() > 0);
    let out1 = ask(&engine, &p1, &params(6))?;
    let mut turn2 = turn1;
    turn2.push(Message::text("assistant", &out1.text));
    turn2.push(user("And its colours?", false));
    let p2 = model.encode_chat(&turn2, std::slice::from_ref(&image))?;
    ask(&engine, &p2, &params(6))?;
    assert_eq!(stats.image_cache_misses.load(Relaxed), 1, "the image was encoded again in turn 2");
    assert_eq!(stats.prefix_cache_hits.load(Relaxed), 1);
    let reused = stats.prefix_reused_positions.load(Relaxed) as usize;
    assert_eq!(reused, after_last_turn(&model, &p1));
    let last_image = p1.image_positions().into_iter().max().context("image positions")?;
    assert!(reused > last_image, "the reused prefix ({reused}) stops before the image ends ({last_image})");
    Ok(())
}

/// Qwen3.5's Gated DeltaNet layers keep a state that sums every position it has seen and cannot
/// be cut back to a prefix: the engine keeps the cache as it stands at the prompt's last block
/// end before its end (its last end of turn), during the prefill, and a chat's second turn
/// continues from it — whole — and answers as alone.
#[test]
fn a_model_with_linear_attention_layers_continues_a_chat_from_its_last_turn() -> Result<()> {
    let dir = common::fixtures().join("vlm/qwen3.5-tiny");
    let model = Arc::new(Model::load(dir.to_str().context("utf-8 path")?, &common::load_options()?)?);
    let engine = Engine::start(model.clone(), EngineConfig::default())?;
    let stats = engine.stats();
    let turn1 = first_turn("Name three fruits.");
    let p1 = model.encode_chat(&turn1, &[])?;
    let out1 = ask(&engine, &p1, &params(12))?;
    let kept = after_last_turn(&model, &p1);
    assert!(kept > 0 && kept < p1.len(), "turn 1 has an end of turn before its end ({kept} of {})", p1.len());
    assert_eq!(stats.prefix_cache_entries.load(Relaxed), 1, "the prompt's start was not kept");
    let p2 = model.encode_chat(&second_turn(turn1, &out1.text, "Which of them is yellow?"), &[])?;
    ask(&engine, &p2, &params(12))?;
    assert_eq!(stats.prefix_cache_hits.load(Relaxed), 1);
    assert_eq!(stats.prefix_reused_positions.load(Relaxed), kept as u64);
    assert_eq!(stats.prefilled_positions.load(Relaxed), (p1.len() + p2.len() - kept) as u64);
    // A prompt that shares less than the kept start's whole length runs from its beginning.
    let p3 = model.encode_chat(&first_turn("Name three trees."), &[])?;
    ask(&engine, &p3, &params(4))?;
    assert_eq!(stats.prefix_cache_hits.load(Relaxed), 1, "a recurrent state was cut back to a shorter prefix");
    Ok(())
}
