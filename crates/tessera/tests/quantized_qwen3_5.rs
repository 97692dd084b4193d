//! Quantized Qwen3.5 (issue 39): llama-quantize's Q8_0 and Q4_K_M files of llama.cpp's f32
//! `qwen35` text GGUF of the tiny checkpoint (tests/fixtures/quant/qwen3.5-tiny-T/model.gguf,
//! with llama.cpp's greedy steps on them in llamacpp.json; scripts/make_qwen3_5_quant_references.sh).
//! tessera runs each file kept quantized (its int8 kernels on the CPU) as llama.cpp runs it: the
//! project's criterion, greedy ids equal wherever llama.cpp's top-1 margin exceeds 1.0 and its
//! top-5 logits within 2.0 (teacher-forced with llama.cpp's choices).

mod common;

use anyhow::{Context, Result};
use tessera::Model;

const TYPES: [&str; 2] = ["Q8_0", "Q4_K_M"];

fn file(t: &str) -> std::path::PathBuf {
    common::fixtures().join(format!("quant/qwen3.5-tiny-{t}"))
}

fn load(t: &str) -> Result<Model> {
    let path = file(t).join("model.gguf");
    Ok(Model::load(path.to_str().context("utf-8 path")?, &common::gguf_load_options()?)?)
}

#[test]
fn quantized_qwen3_5_agrees_with_llama_cpp_step_by_step() -> Result<()> {
    for t in TYPES {
        let reference = common::read_json(&file(t).join("llamacpp.json"))?;
        let worst = common::agrees_with_llama_cpp(&load(t)?, &reference, 2.0, &format!("qwen3.5-tiny {t}"))?;
        eprintln!("{t}: {worst}");
    }
    Ok(())
}
