//! The names llama.cpp's `convert_hf_to_gguf.py --mmproj` gives Gemma 4's vision tower and
//! `embed_vision` in an `mmproj` GGUF (`conversion/gemma.py`, `Gemma4VisionAudioModel`;
//! projector type `gemma4v`; llama.cpp 0c1e57098 as vendored by llama-cpp-python 0.3.36). The
//! Hugging Face names are read under the root `gemma4v.` (`gemma4v.vision_tower.…`,
//! `gemma4v.embed_vision.…`). Every tensor is stored as in the checkpoint but two: the clipped
//! linears' 0-d bounds (`input_min` …) are 1-d of one value (read as scalars all the same), and
//! the patch embedding `patch_embedder.input_proj` `(d, p·p·3)` is a Conv2d kernel `(d, 3, p, p)`,
//! named here `patch_embedder.conv.weight` (the tower turns it back into the linear).

/// `hf`: a name under the root `gemma4v.` (without it) → its name in the mmproj.
pub fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "vision_tower.patch_embedder.conv.weight" => "v.patch_embd.weight",
        "vision_tower.patch_embedder.position_embedding_table" => "v.position_embd.weight",
        "vision_tower.std_bias" => "v.std_bias",
        "vision_tower.std_scale" => "v.std_scale",
        "embed_vision.embedding_projection.weight" => "mm.input_projection.weight",
        _ => "",
    };
    if !fixed.is_empty() {
        return Some(fixed.into());
    }
    let (layer, rest) = hf.strip_prefix("vision_tower.encoder.layers.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    // A clipped linear's weight is `<proj>.linear.weight`, its bounds `<proj>.input_min` ….
    let (module, kind) = match module.strip_suffix(".linear") {
        Some(proj) => (proj, kind),
        None => (module, kind),
    };
    let mapped = match module {
        "input_layernorm" => "ln1",
        "post_attention_layernorm" => "attn_post_norm",
        "pre_feedforward_layernorm" => "ln2",
        "post_feedforward_layernorm" => "ffn_post_norm",
        "self_attn.q_norm" => "attn_q_norm",
        "self_attn.k_norm" => "attn_k_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_out",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    match kind {
        "weight" | "input_min" | "input_max" | "output_min" | "output_max" => {
            Some(format!("v.blk.{layer}.{mapped}.{kind}"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn names_follow_the_converter() {
        for (hf, gguf) in [
            ("vision_tower.patch_embedder.conv.weight", "v.patch_embd.weight"),
            ("vision_tower.patch_embedder.position_embedding_table", "v.position_embd.weight"),
            ("vision_tower.std_bias", "v.std_bias"),
            ("embed_vision.embedding_projection.weight", "mm.input_projection.weight"),
            ("vision_tower.encoder.layers.0.input_layernorm.weight", "v.blk.0.ln1.weight"),
            ("vision_tower.encoder.layers.1.post_attention_layernorm.weight", "v.blk.1.attn_post_norm.weight"),
            ("vision_tower.encoder.layers.1.pre_feedforward_layernorm.weight", "v.blk.1.ln2.weight"),
            ("vision_tower.encoder.layers.0.post_feedforward_layernorm.weight", "v.blk.0.ffn_post_norm.weight"),
            ("vision_tower.encoder.layers.0.self_attn.q_norm.weight", "v.blk.0.attn_q_norm.weight"),
            ("vision_tower.encoder.layers.0.self_attn.o_proj.linear.weight", "v.blk.0.attn_out.weight"),
            ("vision_tower.encoder.layers.1.self_attn.k_proj.input_min", "v.blk.1.attn_k.input_min"),
            ("vision_tower.encoder.layers.1.mlp.down_proj.output_max", "v.blk.1.ffn_down.output_max"),
            ("vision_tower.encoder.layers.0.mlp.gate_proj.linear.weight", "v.blk.0.ffn_gate.weight"),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        assert_eq!(gguf_name("vision_tower.encoder.layers.0.self_attn.v_norm.weight"), None);
        assert_eq!(gguf_name("vision_tower.patch_embedder.input_proj.weight"), None);
    }
}
