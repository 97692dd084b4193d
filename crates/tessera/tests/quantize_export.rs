//! `tessera quantize` (issue 39): a safetensors folder written as llama.cpp's quantized GGUF
//! (and mmproj), against llama-quantize's own files of the same folders
//! (tests/fixtures/quant/, scripts/make_quant_references.sh: llama.cpp's converter to f32, then
//! llama-quantize, llama.cpp 0c1e57098):
//! - the tensor infos (names, order, types, shapes, offsets) and the whole data section are
//!   llama-quantize's byte for byte, and every metadata key llama-quantize wrote has the same
//!   value here but `general.name` / `general.size_label` (the converter's guesses from the
//!   folder name and the parameter count);
//! - on a 256-wide Qwen2 checkpoint (where the k-quants and the `_M` rules apply), under all five
//!   types, every quantized tensor's type and blocks are llama-quantize's;
//! - the written files load back in tessera and compute what `--quantize` at load time
//!   computes on the folder.
//!
//! That llama.cpp itself loads and answers from a written pair is checked by
//! scripts/peers/check_quantize_pair.sh (llama.cpp is not built in CI; its outcome is in
//! docs/cli.md, `tessera quantize`).

mod common;

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use candle_core::quantized::gguf_file;
use tessera::{load_image, quantize_to_gguf, GenerateParams, LoadOptions, Model, QuantMix, QuantizeJob};

const MIXES: [QuantMix; 3] = [QuantMix::Q8_0, QuantMix::Q4_0, QuantMix::Q4_K_M];

fn quantize(folder: &str, out: &Path, mmproj: Option<PathBuf>, mix: QuantMix) -> Result<Vec<tessera::WrittenFile>> {
    let job = QuantizeJob {
        model: common::fixtures().join(folder).to_str().context("utf-8")?.to_string(),
        out: out.to_path_buf(),
        mmproj_out: mmproj,
        mix,
    };
    let mut tensors = 0;
    let written = quantize_to_gguf(&job, &mut |p| {
        if let tessera::export::Progress::Tensor { .. } = p {
            tensors += 1
        }
    })?;
    let listed: usize = written.iter().map(|w| w.tensors).sum();
    ensure!(tensors == listed, "progress reported {tensors} tensors of {listed}");
    Ok(written)
}

/// `ours` and `theirs` are the same GGUF but for the converter's naming keys: the same tensor
/// infos, the same data section byte for byte, every key of `theirs` with the same value.
fn same_gguf_as(ours: &Path, theirs: &Path) -> Result<()> {
    let read = |p: &Path| -> Result<(gguf_file::Content, Vec<u8>)> {
        let bytes = std::fs::read(p).with_context(|| p.display().to_string())?;
        let content = gguf_file::Content::read(&mut std::io::Cursor::new(&bytes))?;
        Ok((content, bytes))
    };
    let ((a, a_bytes), (b, b_bytes)) = (read(ours)?, read(theirs)?);
    let what = theirs.display();
    let mut names: Vec<&String> = b.tensor_infos.keys().collect();
    names.sort();
    let mut ours_names: Vec<&String> = a.tensor_infos.keys().collect();
    ours_names.sort();
    assert_eq!(ours_names, names, "{what}: tensor names");
    for name in names {
        let (x, y) = (&a.tensor_infos[name], &b.tensor_infos[name]);
        assert_eq!(x.ggml_dtype, y.ggml_dtype, "{what}: {name}'s type");
        assert_eq!(x.shape.dims(), y.shape.dims(), "{what}: {name}'s shape");
        assert_eq!(x.offset, y.offset, "{what}: {name}'s offset (the order and padding)");
    }
    let (da, db) = (&a_bytes[a.tensor_data_offset as usize..], &b_bytes[b.tensor_data_offset as usize..]);
    assert_eq!(da.len(), db.len(), "{what}: data section length");
    let differ = da.iter().zip(db).filter(|(x, y)| x != y).count();
    assert_eq!(differ, 0, "{what}: {differ} of {} data bytes differ", db.len());
    let mut keys = 0;
    for (key, theirs) in &b.metadata {
        if key == "general.name" || key == "general.size_label" {
            continue;
        }
        let ours = a.metadata.get(key).with_context(|| format!("{what}: `{key}` not written"))?;
        assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{what}: `{key}`");
        keys += 1;
    }
    ensure!(keys >= 15, "{what}: only {keys} keys compared");
    let extra: Vec<&String> = a.metadata.keys().filter(|k| !b.metadata.contains_key(*k)).collect();
    ensure!(extra.iter().all(|k| *k == "general.name"), "{what}: keys llama.cpp's file lacks: {extra:?}");
    Ok(())
}

/// The tiny VLM folders llama-quantize's pairs were made from (tests/fixtures/quant/<name>-<type>).
const PAIRS: [&str; 12] = [
    "smolvlm-tiny",
    "llava-tiny",
    "llava-interleave-tiny",
    "qwen2-vl-tiny",
    "qwen2.5-vl-tiny",
    "qwen3-vl-tiny",
    "gemma3-tiny",
    "internvl-tiny",
    "mistral3-pair-tiny",
    "qwen3.5-tiny",
    "minicpm-v4.6-pair-tiny",
    "gemma4-pair-tiny",
];

/// The tiny VLM folders quantized to pairs: both files are llama-quantize's (from llama.cpp's
/// f32 pair of the same folder, scripts/make_gguf_pairs.sh) under Q8_0 and Q4_K_M, and Q4_0 for
/// SmolVLM — LLaVA's mmproj as the legacy script writes it (layers past the feature layer and the
/// post-norm dropped, `fc1`/`fc2` under each other's names), Qwen2/2.5-VL's `qkv` split into
/// q/k/v rows and its Conv3d patch kernel into two frames as the converter splits them, its text
/// model as `qwen2vl` with the M-RoPE sections; Qwen3-VL's `qkv` kept whole, its DeepStack
/// mergers named by block, its text model as `qwen3vl` (`n_deepstack_layers`, the head widths);
/// Gemma 3's norms stored as `1 + w` (the text model's and `mm.soft_emb_norm`), its sliding
/// window, local RoPE base and linear RoPE scaling, its pooling factor; InternVL's CLS token and
/// layer scales, its projector as `mm.model.mlp.{0,1,3}`, its shuffle and tile bounds; Mistral 3's
/// text model as `mistral3`, its Pixtral tower's q/k rows permuted as a Llama's; Qwen3.5's text
/// model as `qwen35` (the `ssm.*` keys, `A = −exp(A_log)`, the squeezed conv kernel, the value
/// heads retiled over the key heads, `1 + w` norms but the gated one) and its Qwen3-VL tower
/// without DeepStack (scripts/make_qwen3_5_quant_references.sh); MiniCPM-V 4.6's Qwen3.5 text
/// model and its SigLIP tower, window merger and downsample MLP; Gemma 4's text model as
/// `gemma4` (per-layer keys, `rope_freqs`, per-layer inputs, KV-shared layers without k/v, the
/// `gemma4` vocabulary) and its `gemma4v` mmproj (the patch embedding as a Conv2d kernel, the
/// clipped linears' bounds, the pooling factor).
#[test]
fn the_tiny_pairs_are_llama_quantizes() -> Result<()> {
    let scratch = common::scratch("quantize_export_pairs")?;
    for name in PAIRS {
        for mix in MIXES.into_iter().filter(|m| name == PAIRS[0] || *m != QuantMix::Q4_0) {
            let model = scratch.join(format!("{name}-{mix}.gguf"));
            let mmproj = scratch.join(format!("mmproj-{name}-{mix}.gguf"));
            let written = quantize(&format!("vlm/{name}"), &model, Some(mmproj.clone()), mix)?;
            assert_eq!(written.len(), 2);
            let reference = common::fixtures().join(format!("quant/{name}-{mix}"));
            same_gguf_as(&model, &reference.join("model.gguf"))?;
            same_gguf_as(&mmproj, &reference.join("mmproj.gguf"))?;
        }
    }
    Ok(())
}

/// The tiny Qwen2 folder (q/k/v biases, tied embeddings): llama-quantize's file of it.
#[test]
fn the_qwen2_model_is_llama_quantizes() -> Result<()> {
    let scratch = common::scratch("quantize_export_qwen2")?;
    for mix in MIXES {
        let model = scratch.join(format!("model-{mix}.gguf"));
        let written = quantize("tiny/qwen2-bias", &model, None, mix)?;
        assert_eq!((written.len(), written[0].bytes), (1, std::fs::metadata(&model)?.len()));
        same_gguf_as(&model, &common::fixtures().join(format!("quant/qwen2-bias-{mix}/model.gguf")))?;
    }
    Ok(())
}

/// The values scripts/make_quant_references.py writes into its 256-wide checkpoint (as
/// tests/quantize.rs repeats them): splitmix64 seeded by the FNV-1a hash of the name.
fn values(name: &str, n: usize) -> Vec<f32> {
    let mut s = name.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3));
    (0..n)
        .map(|i| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let k = (z >> 41) as i64 - (1 << 22);
            k as f32 * 2f32.powi(-25) * if i % 97 == 0 { 4.0 } else { 1.0 }
        })
        .collect()
}

/// The k-quants and the `_M` rules in files: the 256-wide Qwen2 checkpoint of
/// tests/fixtures/quant/qwen2-256.json (rebuilt here from its generator; the tiny folders'
/// 64-wide rows reach only the fallback types) written under all five types: every quantized
/// tensor has llama-quantize's type and its blocks hash to llama-quantize's SHA-256.
#[test]
fn k_quant_files_hold_llama_quantizes_blocks() -> Result<()> {
    use sha2::{Digest, Sha256};
    let reference = common::read_json(&common::fixtures().join("quant/qwen2-256.json"))?;
    let c = &reference["config"];
    let dim = |k: &str| c[k].as_u64().map(|v| v as usize).with_context(|| k.to_string());
    let (h, inter, layers, vocab) =
        (dim("hidden_size")?, dim("intermediate_size")?, dim("num_hidden_layers")?, dim("vocab_size")?);
    let kv = dim("num_key_value_heads")? * h / dim("num_attention_heads")?;
    let mut shapes = vec![
        ("model.embed_tokens.weight".to_string(), vec![vocab, h]),
        ("model.norm.weight".into(), vec![h]),
        ("lm_head.weight".into(), vec![vocab, h]),
    ];
    for i in 0..layers {
        let p = format!("model.layers.{i}.");
        for (m, shape) in [
            ("input_layernorm.weight", vec![h]),
            ("post_attention_layernorm.weight", vec![h]),
            ("self_attn.q_proj.weight", vec![h, h]),
            ("self_attn.q_proj.bias", vec![h]),
            ("self_attn.k_proj.weight", vec![kv, h]),
            ("self_attn.k_proj.bias", vec![kv]),
            ("self_attn.v_proj.weight", vec![kv, h]),
            ("self_attn.v_proj.bias", vec![kv]),
            ("self_attn.o_proj.weight", vec![h, h]),
            ("mlp.gate_proj.weight", vec![inter, h]),
            ("mlp.up_proj.weight", vec![inter, h]),
            ("mlp.down_proj.weight", vec![h, inter]),
        ] {
            shapes.push((format!("{p}{m}"), shape));
        }
    }
    let dir = common::scratch("quantize_export_qwen2_256")?;
    let folder = dir.join("qwen2-256");
    std::fs::create_dir_all(&folder)?;
    let mut tensors = std::collections::HashMap::new();
    for (name, shape) in &shapes {
        let n = shape.iter().product();
        tensors.insert(
            name.clone(),
            candle_core::Tensor::from_vec(values(name, n), shape.as_slice(), &candle_core::Device::Cpu)?,
        );
    }
    candle_core::safetensors::save(&tensors, folder.join("model.safetensors"))?;
    std::fs::write(folder.join("config.json"), serde_json::to_string(c)?)?;
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(common::fixtures().join("tiny/qwen2-bias").join(f), folder.join(f))?;
    }
    let mixes = reference["mixes"].as_object().context("mixes")?;
    ensure!(mixes.len() == 5, "{} types in the reference", mixes.len());
    let mut k_quant_tensors = 0;
    for (mix, table) in mixes {
        let out = dir.join(format!("{mix}.gguf"));
        let job = QuantizeJob {
            model: folder.to_str().context("utf-8")?.to_string(),
            out: out.clone(),
            mmproj_out: None,
            mix: mix.parse().map_err(anyhow::Error::msg)?,
        };
        quantize_to_gguf(&job, &mut |_| {})?;
        let bytes = std::fs::read(&out)?;
        let content = gguf_file::Content::read(&mut std::io::Cursor::new(&bytes))?;
        let table = table.as_array().context("table")?;
        let quantized = content.tensor_infos.values().filter(|t| t.ggml_dtype.block_size() > 1).count();
        assert_eq!(quantized, table.len(), "{mix}: quantized tensors");
        for entry in table {
            let name = entry["gguf"].as_str().context("gguf")?;
            let info = content.tensor_infos.get(name).with_context(|| format!("{mix}: {name}"))?;
            let ty = format!("{:?}", info.ggml_dtype).replace('K', "_K");
            assert_eq!(ty, entry["type"].as_str().context("type")?, "{mix}: {name}'s type");
            let dims = info.shape.dims();
            let len = dims[0] * dims[1] / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
            let start = (content.tensor_data_offset + info.offset) as usize;
            let digest: String =
                Sha256::digest(&bytes[start..start + len]).iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(digest, entry["sha256"].as_str().context("sha256")?, "{mix}: {name} ({ty}) bytes");
            k_quant_tensors += usize::from(info.ggml_dtype.block_size() == 256);
        }
    }
    assert!(k_quant_tensors > 3 * 30, "{k_quant_tensors} k-quant tensors");
    Ok(())
}

/// `--quantize` runs on the CPU's kernels: both sides of a comparison load there.
fn load_time(mix: QuantMix) -> LoadOptions {
    LoadOptions { quantize: Some(mix), dtype: Some(tessera::DType::F32), ..Default::default() }
}

/// The written pair reloads in tessera and answers as its reference: the same image features
/// bit for bit (the same blocks in the same order), the same prompt ids, the same greedy ids, and
/// logits within the bound quantize.rs's
/// `a_quantized_vlm_folder_answers_as_llama_quantizes_pair` settled on for the same comparison
/// (the SmolVLM pair's bytes are that pair's): the converter's q/k permutation makes the attention
/// scores sum the same products in another order, and where that moves an activation across an
/// int8 rounding step of the next quantized matmul the logits move by more than rounding.
/// Measured on SmolVLM: 4.3e-6 under Q8_0, 0.144 under Q4_K_M, of logits up to 10.8.
///
/// The reference is the folder under `--quantize` where its plan is the written files': SmolVLM,
/// Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Gemma 3 and InternVL3 under both types, LLaVA and LLaVA-interleave under
/// Q8_0 (one type for every matrix). For the Qwen towers this is the check that `--quantize`
/// quantizes the fused `qkv` part by part as the converter splits it (it once stayed dense f32:
/// the features then differed by up to 0.71 of 36 for Qwen2-VL, 0.35 of 14 for Qwen2.5-VL under
/// Q8_0), and for Qwen3-VL, whose mmproj keeps `qkv` whole, that the pair's quantized `qkv` runs
/// in its stored blocks (it once ran dequantized to f32: the features then differed by up to
/// 0.19 of 11.9 under Q8_0). For Gemma 3 it checks that `--quantize` rounds
/// `mm_input_projection` (applied transposed, so run dense) through the blocks llama-quantize
/// stores it in (it once stayed f32: 0.026 of 5.3 under Q8_0, 0.21 under Q4_K_M). Elsewhere the
/// reference is llama-quantize's own pair of the folder (tests/fixtures/quant), loaded in
/// tessera: LLaVA under Q4_K_M, whose legacy mmproj holds only the layers below the feature
/// layer, with `fc1`/`fc2` under each other's names, so llama-quantize's `_M` rules (the `attn_v`
/// count, the `ffn_down` extra bits) pick other types than `--quantize` does on the folder's
/// matrices; Qwen3.5, whose converter retiles the DeltaNet's value heads, so that `out_proj`'s
/// columns fall into other blocks than the folder's (its logits then differ by 0.62 under
/// Q8_0), and whose text file is checked against llama.cpp's own steps in quantized_qwen3_5.rs
/// (MiniCPM-V 4.6's text model is the same: 1.03 under Q8_0, image features bit-equal); Mistral
/// 3, whose converter permutes the tower's q/k rows for interleaved RoPE (the same blocks, another
/// rounding path through the int8 activations: features within 0.16, greedy ids equal, measured
/// 2026-11-29); Gemma 4, whose pair leaves the image budget open (280 by default, the folder's
/// processor states 70).
#[test]
fn a_written_pair_answers_as_its_reference() -> Result<()> {
    let scratch = common::scratch("quantize_export_reload")?;
    let image = load_image(&common::fixtures().join("images/chelsea.png"), tessera::DEFAULT_MAX_PIXELS)?;
    for (name, mix) in PAIRS.iter().flat_map(|n| [(*n, QuantMix::Q8_0), (*n, QuantMix::Q4_K_M)]) {
        let folder = common::fixtures().join("vlm").join(name);
        let what = format!("{name} {mix}");
        let (model, mmproj) = (scratch.join("model.gguf"), scratch.join("mmproj.gguf"));
        quantize(&format!("vlm/{name}"), &model, Some(mmproj.clone()), mix)?;
        let ours =
            Model::load(model.to_str().context("utf-8")?, &LoadOptions { mmproj: Some(mmproj), ..Default::default() })?;
        let folder_plan = name == "smolvlm-tiny"
            || name == "internvl-tiny"
            || (name.starts_with("qwen") && name != "qwen3.5-tiny")
            || name.starts_with("gemma3")
            || (name.starts_with("llava") && mix == QuantMix::Q8_0);
        let folder = if folder_plan {
            Model::load(folder.to_str().context("utf-8")?, &load_time(mix))?
        } else {
            let reference = common::fixtures().join(format!("quant/{name}-{mix}"));
            let mmproj = Some(reference.join("mmproj.gguf"));
            Model::load(
                reference.join("model.gguf").to_str().context("utf-8")?,
                &LoadOptions { mmproj, ..Default::default() },
            )?
        };
        let features = |m: &Model| -> Result<Vec<f32>> {
            Ok(common::on_cpu(m.encode_image(&image)?.tokens())?.flatten_all()?.to_vec1()?)
        };
        let (a, b) = (features(&ours)?, features(&folder)?);
        assert_eq!(a.len(), b.len(), "{what}: image tokens");
        let differ = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        assert_eq!(differ, 0, "{what}: {differ} of {} image feature values differ", a.len());
        let prompt = |m: &Model| m.encode_prompt("What is in this image?", None, false, std::slice::from_ref(&image));
        let (p, q) = (prompt(&ours)?, prompt(&folder)?);
        assert_eq!(p.ids(), q.ids(), "{what}: prompt ids");
        let logits = |m: &Model, p: &tessera::Prompt| -> Result<candle_core::Tensor> {
            let hidden = m.forward(p, .., &mut m.new_cache(), &mut Default::default(), &mut Default::default())?;
            common::on_cpu(&m.logits(&hidden)?)
        };
        let d = common::max_abs_diff(&logits(&ours, &p)?, &logits(&folder, &q)?, "logits")?;
        assert!(d < 0.5, "{what}: logits differ by {d}");
        let params = GenerateParams { max_new_tokens: 12, ignore_eos: true, ..Default::default() };
        let greedy = |m: &Model, p: &tessera::Prompt| m.generate(p, &params, &mut |_| {}).map(|o| o.generated_tokens);
        assert_eq!(greedy(&ours, &p)?, greedy(&folder, &q)?, "{what}: greedy ids");
    }
    Ok(())
}

/// Text models written and reloaded, against the folder under `--quantize`: Qwen2's rows are
/// stored unpermuted, so the two are one computation (bit-identical logits); Llama's and
/// Mistral's (written as llama.cpp's `llama`) have their q/k rows permuted, so their logits
/// agree within the bound of the pair test above; the greedy ids are the same.
#[test]
fn written_text_models_compute_as_the_folders_quantized_at_load() -> Result<()> {
    let scratch = common::scratch("quantize_export_reload_text")?;
    for (name, bound) in [("qwen2-bias", 0.0), ("llama-gqa", 0.5), ("mistral", 0.5)] {
        let folder = common::fixtures().join("tiny").join(name);
        let ids = common::ids(&common::read_json(&folder.join("reference.json"))?["prompt_ids"]);
        let model = scratch.join(format!("{name}.gguf"));
        quantize(&format!("tiny/{name}"), &model, None, QuantMix::Q4_K_M)?;
        let ours = Model::load(model.to_str().context("utf-8")?, &LoadOptions::default())?;
        let folder = Model::load(folder.to_str().context("utf-8")?, &load_time(QuantMix::Q4_K_M))?;
        let logits = |m: &Model| -> Result<Vec<f32>> {
            let p = m.prompt(ids.clone(), &[])?;
            let hidden = m.forward(&p, .., &mut m.new_cache(), &mut Default::default(), &mut Default::default())?;
            Ok(common::on_cpu(&m.logits(&hidden)?)?.flatten_all()?.to_vec1()?)
        };
        let (a, b) = (logits(&ours)?, logits(&folder)?);
        assert_eq!(a.len(), b.len(), "{name}: logits");
        let d = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
        assert!(d <= bound, "{name}: logits differ by {d}");
        let params = GenerateParams { max_new_tokens: 16, ignore_eos: true, ..Default::default() };
        let greedy =
            |m: &Model| m.generate(&m.prompt(ids.clone(), &[])?, &params, &mut |_| {}).map(|o| o.generated_tokens);
        assert_eq!(greedy(&ours)?, greedy(&folder)?, "{name}: greedy ids");
    }
    Ok(())
}

/// What cannot be written is refused in one line naming the file, before anything is written.
#[test]
fn bad_requests_are_refused_and_write_nothing() -> Result<()> {
    let scratch = common::scratch("quantize_export_refused")?;
    let out = scratch.join("model.gguf");
    let refused = |folder: &str, mmproj: Option<PathBuf>| -> String {
        quantize(folder, &out, mmproj, QuantMix::Q8_0).err().map(|e| format!("{e:#}")).unwrap_or_default()
    };
    let e = refused("vlm/smolvlm-tiny", None);
    assert!(e.contains("--mmproj-out") && e.contains("smolvlm-tiny"), "{e}");
    let e = refused("tiny/qwen2-bias", Some(scratch.join("mmproj.gguf")));
    assert!(e.contains("text model") && e.contains("mmproj.gguf"), "{e}");
    let e = refused("quant/qwen2-bias-Q8_0/model.gguf", None);
    assert!(e.contains("already") && e.contains("model.gguf"), "{e}");
    let e = refused("tiny/llama-mqa-llama3rope", None);
    assert!(e.contains("RoPE") && e.contains("config.json"), "{e}");
    let e = refused("tiny/gemma", None);
    assert!(e.contains("gemma") && e.contains("config.json"), "{e}");
    // Gemma 4 with a byte-level BPE tokenizer: the converter's `LlamaHfVocab` stops at it too.
    let e = refused("vlm/gemma4-tiny", Some(scratch.join("mmproj.gguf")));
    assert!(e.contains("`gemma4` vocabulary") && e.contains("byte_fallback") && e.contains("tokenizer.json"), "{e}");
    let e = refused("vlm/smolvlm-tiny", Some(out.clone()));
    assert!(e.contains("both") && e.contains("model.gguf"), "{e}");
    // Gemma 3 whose local layers are not llama.cpp's pattern (every layer but each 6th): the
    // file could not say so.
    let moved = common::scratch("quantize_export_refused_gemma3")?.join("gemma3-moved-window");
    std::fs::create_dir_all(&moved)?;
    let mut config = common::read_json(&common::fixtures().join("vlm/gemma3-tiny/config.json"))?;
    config["text_config"]["layer_types"][2] = "full_attention".into();
    std::fs::write(moved.join("config.json"), serde_json::to_string(&config)?)?;
    let e = refused(moved.to_str().context("utf-8")?, Some(scratch.join("mmproj.gguf")));
    assert!(e.contains("sliding-window") && e.contains("gemma3") && e.contains("config.json"), "{e}");
    // A SentencePiece model beside tokenizer.json: the converter would write its vocabulary.
    let spm = moved.with_file_name("qwen2-with-spm");
    std::fs::create_dir_all(&spm)?;
    for entry in std::fs::read_dir(common::fixtures().join("tiny/qwen2-bias"))? {
        let entry = entry?;
        std::fs::copy(entry.path(), spm.join(entry.file_name()))?;
    }
    std::fs::write(spm.join("tokenizer.model"), b"")?;
    let e = refused(spm.to_str().context("utf-8")?, None);
    assert!(e.contains("SentencePiece") && e.contains("tokenizer.model"), "{e}");
    let left: Vec<_> = std::fs::read_dir(&scratch)?.flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "files left: {left:?}");
    // An output folder that does not exist: the file is named, nothing is left.
    let missing = scratch.join("no/such/dir/model.gguf");
    let e =
        quantize("tiny/qwen2-bias", &missing, None, QuantMix::Q8_0).err().map(|e| format!("{e:#}")).unwrap_or_default();
    assert!(e.contains("no/such/dir/model.gguf"), "{e}");
    Ok(())
}

/// A Qwen3.5 checkpoint with multi-token-prediction layers (`mtp.*`, as the real ones hold):
/// the converter leaves them out, and so does `tessera quantize` — the same pair as without them
/// (llama-quantize's), where they once stopped it as tensors with no mmproj name.
#[test]
fn qwen3_5_mtp_layers_are_left_out_as_the_converter_leaves_them() -> Result<()> {
    let scratch = common::scratch("quantize_export_mtp")?;
    let folder = scratch.join("qwen3.5-mtp");
    std::fs::create_dir_all(&folder)?;
    let source = common::fixtures().join("vlm/qwen3.5-tiny");
    for entry in std::fs::read_dir(&source)? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_none_or(|e| e != "safetensors") {
            std::fs::copy(&path, folder.join(path.file_name().context("name")?))?;
        }
    }
    let mut tensors = candle_core::safetensors::load(source.join("model.safetensors"), &candle_core::Device::Cpu)?;
    let mtp = candle_core::Tensor::ones((64, 128), candle_core::DType::F32, &candle_core::Device::Cpu)?;
    tensors.insert("mtp.fc.weight".into(), mtp);
    candle_core::safetensors::save(&tensors, folder.join("model.safetensors"))?;
    let (model, mmproj) = (scratch.join("model.gguf"), scratch.join("mmproj.gguf"));
    let job = QuantizeJob {
        model: folder.to_str().context("utf-8")?.into(),
        out: model.clone(),
        mmproj_out: Some(mmproj.clone()),
        mix: QuantMix::Q8_0,
    };
    quantize_to_gguf(&job, &mut |_| {})?;
    let reference = common::fixtures().join("quant/qwen3.5-tiny-Q8_0");
    same_gguf_as(&model, &reference.join("model.gguf"))?;
    same_gguf_as(&mmproj, &reference.join("mmproj.gguf"))
}
