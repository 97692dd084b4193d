//! Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's image side as llama.cpp's converter writes it into
//! an mmproj (`tessera quantize`; `conversion/qwenvl.py`'s `Qwen2VLVisionModel` and
//! `conversion/qwen3vl.py`'s `Qwen3VLVisionModel` over `MmprojModel`, llama.cpp 0c1e57098): its
//! `clip.*` metadata, and its tensors, some of which the converter splits or renames — Qwen2/2.5's
//! fused `attn.qkv` into `attn.q`, `attn.k`, `attn.v` (rows; Qwen3-VL's stays fused as
//! `attn_qkv`), the Conv3d patch kernel `(d, C, 2, P, P)` into one Conv2d kernel per frame,
//! Qwen3-VL's DeepStack mergers by the tower block they read (`v.deepstack.B.*`). What
//! [`from_mmproj`](super::qwen2_vl::from_mmproj) reads back.

use serde_json::Value;
use tessera_decoder::gguf_write::MetaValue::{self, Bool, Bools, Str, F32, U32};
use tessera_decoder::Activation;
use tessera_vision::qwen2_vl::VisionMlp;

use super::image::{
    processor_stats, ClipHeader, MmprojMetadata, MmprojTensor, Part, ProcessorSettings, CLIP_MEAN, CLIP_STD,
};
use super::qwen2_vl::{pixel_budget, Qwen2VlSpec};

/// The converter's `image_size` when the vision config has none (the tower takes any size).
const IMAGE_SIZE: usize = 560;
/// The `clip.*` metadata in the converter's order.
/// Written beyond the converter: `clip.vision.image_min_pixels` / `image_max_pixels` (the
/// processor's pixel budget) and Qwen2.5-VL's `clip.vision.window_size`, keys of llama.cpp's
/// format its Qwen converter leaves out; without them a reader falls back to its own defaults
/// rather than this checkpoint's processor (llama.cpp: 8–4096 tokens, 112-px windows).
pub(super) fn metadata(
    spec: &Qwen2VlSpec,
    settings: &ProcessorSettings,
    config: &Value,
    text_hidden: usize,
) -> Option<MmprojMetadata> {
    Some(write_metadata(spec, settings, config, text_hidden))
}

fn write_metadata(
    spec: &Qwen2VlSpec,
    settings: &ProcessorSettings,
    config: &Value,
    text_hidden: usize,
) -> MmprojMetadata {
    let t = &spec.tower;
    let u = super::image::gguf_u32;
    let (projector, image_size, ffn, act) = match (&t.windows, t.mlp, &t.qwen3) {
        // Qwen2-VL's `vision_config.hidden_size` (the merger's output) is its
        // `feed_forward_length`, as the converter has it.
        (None, VisionMlp::Plain { .. }, None) => ("qwen2vl_merger", IMAGE_SIZE, t.hidden_size, Activation::QuickGelu),
        (Some(_), VisionMlp::Gated { intermediate }, None) => {
            ("qwen2.5vl_merger", IMAGE_SIZE, intermediate, Activation::Silu)
        }
        // Qwen3-VL's `image_size`: the side of its learned position table, in pixels.
        (None, VisionMlp::Linear { intermediate }, Some(q)) => {
            let side = (q.num_position_embeddings as f64).sqrt() as usize;
            if side * side != q.num_position_embeddings {
                return Err(format!("num_position_embeddings {} is not a square", q.num_position_embeddings));
            }
            ("qwen3vl_merger", side * t.patch_size, intermediate, Activation::GeluTanh)
        }
        _ => return Err("its vision blocks are neither Qwen2-VL's, Qwen2.5-VL's nor Qwen3-VL's".to_string()),
    };
    if t.hidden_act != act {
        return Err(format!("llama.cpp's {projector} runs a {act:?} tower, not {:?}", t.hidden_act));
    }
    let (min_pixels, max_pixels) = pixel_budget(&settings.image);
    let mut md = ClipHeader {
        projection_dim: text_hidden,
        image_size,
        patch_size: t.patch_size,
        width: t.embed_dim,
        feed_forward: ffn,
        blocks: t.depth,
        heads: t.num_heads,
        mean: processor_stats(settings, "image_mean", CLIP_MEAN)?,
        std: processor_stats(settings, "image_std", CLIP_STD)?,
    }
    .keys()?;
    md.push(("clip.projector_type".into(), Str(projector.into())));
    if let Some(w) = &t.windows {
        // `fullatt_block_indexes` as the converter checks it: every n-th block, from n-1.
        let n = w.full_blocks.first().map_or(0, |b| b + 1);
        if n == 0 || w.full_blocks.iter().enumerate().any(|(i, b)| *b != (i + 1) * n - 1) {
            return Err(format!(
                "fullatt_block_indexes {:?} are not every n-th block, which llama.cpp's n_wa_pattern needs",
                w.full_blocks
            ));
        }
        md.push(("clip.use_silu".into(), Bool(true)));
        md.push(("clip.vision.n_wa_pattern".into(), u(n)?));
    }
    let eps = match &t.qwen3 {
        // The text model's `rms_norm_eps`, else 1e-6 (`Qwen3VLVisionModel`).
        Some(_) => config["text_config"]["rms_norm_eps"].as_f64(),
        // The config's top-level `rms_norm_eps` (transformers 4 kept the text model's fields
        // there), else 1e-6, the towers' own.
        None => config["rms_norm_eps"].as_f64(),
    }
    .unwrap_or(1e-6);
    if let Some(q) = &t.qwen3 {
        md.push(("clip.use_gelu".into(), Bool(true)));
        md.push(("clip.vision.spatial_merge_size".into(), u(t.spatial_merge_size)?));
        md.push(("clip.vision.attention.layer_norm_epsilon".into(), F32(eps as f32)));
        // One flag per block; the file cannot order the levels otherwise than by block.
        if q.deepstack.windows(2).any(|w| w[0] >= w[1]) || q.deepstack.iter().any(|&b| b >= t.depth) {
            return Err(format!(
                "deepstack_visual_indexes {:?} are not increasing blocks of the {}-block tower, which llama.cpp's \
                 is_deepstack_layers flags need",
                q.deepstack, t.depth
            ));
        }
        // Written for every tower with blocks, all false for Qwen3.5's (no DeepStack).
        md.push((
            "clip.vision.is_deepstack_layers".into(),
            Bools((0..t.depth).map(|b| q.deepstack.contains(&b)).collect()),
        ));
    } else {
        md.push(("clip.vision.attention.layer_norm_epsilon".into(), F32(eps as f32)));
    }
    md.push(("clip.vision.image_min_pixels".into(), u(min_pixels)?));
    md.push(("clip.vision.image_max_pixels".into(), u(max_pixels)?));
    if let Some(w) = &t.windows {
        md.push(("clip.vision.window_size".into(), u(w.size)?));
    }
    Ok(md)
}

/// What Qwen3-VL's converter adds to the text model's GGUF (`Qwen3VLTextModel`, architecture
/// `qwen3vl`): the number of DeepStack levels. Qwen3.5's text class (`qwen35`) adds nothing.
pub(super) fn text_metadata(spec: &Qwen2VlSpec, arch: &str) -> Vec<(String, MetaValue)> {
    match &spec.tower.qwen3 {
        Some(q) if arch == "qwen3vl" => vec![(format!("{arch}.n_deepstack_layers"), U32(q.deepstack.len() as u32))],
        _ => Vec::new(),
    }
}

/// The mmproj tensors of the checkpoint tensor `stored` (under `visual.` or `model.visual.`);
/// `deepstack`: Qwen3-VL's DeepStack blocks (`None`: Qwen2-VL or Qwen2.5-VL).
pub(super) fn tensors(deepstack: Option<&[usize]>, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
    let name = stored.strip_prefix("model.").filter(|r| r.starts_with("visual.")).unwrap_or(stored);
    let one = |name: String| vec![MmprojTensor::named(name, dims)];
    if let Some(blocks) = deepstack {
        // DeepStack merger `i` as the block it reads (`v.deepstack.B.*`); `qkv` stays fused.
        let level = name.strip_prefix("visual.deepstack_merger_list.").and_then(|r| r.split_once('.'));
        if let Some((block, rest)) = level.and_then(|(i, rest)| Some((blocks.get(i.parse::<usize>().ok()?)?, rest))) {
            return one(format!("visual.blocks.{block}.deepstack_merger.{rest}"));
        }
    } else if name.contains(".attn.qkv.") && dims.first().is_some_and(|r| r % 3 == 0) {
        return ["q", "k", "v"]
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let mut d = dims.to_vec();
                d[0] /= 3;
                let part = Some(Part { outer: 1, parts: 3, index });
                MmprojTensor {
                    name: name.replace(".attn.qkv.", &format!(".attn.{p}.")),
                    dims: d,
                    part,
                    permute_heads: None,
                    change: None,
                }
            })
            .collect();
    }
    match dims {
        [d, c, 2, p, q] if name == "visual.patch_embed.proj.weight" => (0..2)
            .map(|index| MmprojTensor {
                name: if index == 0 { name.to_string() } else { format!("{name}.1") },
                dims: vec![*d, *c, *p, *q],
                part: Some(Part { outer: d * c, parts: 2, index }),
                permute_heads: None,
                change: None,
            })
            .collect(),
        _ => one(name.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_and_3d_tensors_split_as_the_converter_splits_them() {
        let qkv = tensors(None, "model.visual.blocks.1.attn.qkv.weight", &[6, 4]);
        let names: Vec<_> = qkv.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["visual.blocks.1.attn.q.weight", "visual.blocks.1.attn.k.weight", "visual.blocks.1.attn.v.weight"]
        );
        let x: Vec<f32> = (0..24).map(|i| i as f32).collect();
        assert_eq!(qkv[1].part.map(|p| p.take(&x)), Some((8..16).map(|i| i as f32).collect()));
        // (d=2, C=1, T=2, 1, 2): frame 1 of each output channel.
        let patch = tensors(None, "visual.patch_embed.proj.weight", &[2, 1, 2, 1, 2]);
        assert_eq!(patch[1].name, "visual.patch_embed.proj.weight.1");
        assert_eq!(patch[1].dims, [2, 1, 1, 2]);
        let y: Vec<f32> = (0..8).map(|i| i as f32).collect();
        assert_eq!(patch[1].part.map(|p| p.take(&y)), Some(vec![2.0, 3.0, 6.0, 7.0]));
        assert_eq!(tensors(None, "visual.merger.mlp.0.weight", &[4, 4])[0].part, None);
    }

    /// Qwen3-VL: `qkv` stays fused, DeepStack merger `i` becomes the block it reads, the patch
    /// kernel is split as Qwen2-VL's.
    #[test]
    fn qwen3_tensors_keep_qkv_and_name_deepstack_by_block() {
        let blocks: &[usize] = &[1, 4];
        let qkv = tensors(Some(blocks), "model.visual.blocks.2.attn.qkv.weight", &[6, 4]);
        assert_eq!((qkv.len(), qkv[0].name.as_str(), qkv[0].part), (1, "visual.blocks.2.attn.qkv.weight", None));
        let level = tensors(Some(blocks), "model.visual.deepstack_merger_list.1.linear_fc2.bias", &[8]);
        assert_eq!(level[0].name, "visual.blocks.4.deepstack_merger.linear_fc2.bias");
        assert_eq!(tensors(Some(blocks), "model.visual.patch_embed.proj.weight", &[2, 1, 2, 1, 2]).len(), 2);
    }
}
