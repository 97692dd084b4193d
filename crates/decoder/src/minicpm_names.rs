//! The names llama.cpp's `convert_hf_to_gguf.py --mmproj` gives MiniCPM-V 4.6's tower and
//! mergers in an `mmproj` GGUF (`conversion/minicpm.py`, `MiniCPMV4_6VisionModel`, and gguf-py's
//! `tensor_mapping.py`; llama.cpp 0c1e57098 as vendored by llama-cpp-python 0.3.36). The Hugging
//! Face names are read under the root `minicpm.` (`minicpm.vision_tower.…`, `minicpm.merger.…`):
//! the SigLIP tower's names are [`gguf_vision_name`](crate::weights::gguf_vision_name)'s
//! (`v.blk.N.*`, `v.patch_embd`, `v.position_embd`, `v.post_ln`), the window-attention ViT merger
//! is `v.vit_merger.*` (its `pre_norm` / `linear_1` / `linear_2` the `ds_ln` / `ds_ffn_up` /
//! `ds_ffn_down` of its downsample MLP) and the final merger's one MLP `mm.input_norm`, `mm.up`,
//! `mm.down` (the converter maps `mlp.0` only). Every tensor is stored as in the checkpoint.

/// `hf`: a name under the root `minicpm.` (without it) → its name in the mmproj.
pub fn gguf_name(hf: &str) -> Option<String> {
    let (module, kind) = hf.rsplit_once('.')?;
    if let Some(merger) = module.strip_prefix("merger.mlp.0.") {
        let mapped = match merger {
            "pre_norm" => "mm.input_norm",
            "linear_1" => "mm.up",
            "linear_2" => "mm.down",
            _ => return None,
        };
        return Some(format!("{mapped}.{kind}"));
    }
    let tower = module.strip_prefix("vision_tower.")?;
    if let Some(window) = tower.strip_prefix("vit_merger.") {
        let mapped = match window {
            "layer_norm1" => "ln1",
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.out_proj" => "attn_out",
            "pre_norm" => "ds_ln",
            "linear_1" => "ds_ffn_up",
            "linear_2" => "ds_ffn_down",
            _ => return None,
        };
        return Some(format!("v.vit_merger.{mapped}.{kind}"));
    }
    crate::weights::gguf_vision_name(&format!("model.vision_model.{tower}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn names_follow_the_converter() {
        for (hf, gguf) in [
            ("vision_tower.embeddings.patch_embedding.weight", "v.patch_embd.weight"),
            ("vision_tower.embeddings.position_embedding.weight", "v.position_embd.weight"),
            ("vision_tower.encoder.layers.2.self_attn.out_proj.bias", "v.blk.2.attn_out.bias"),
            ("vision_tower.encoder.layers.0.mlp.fc1.weight", "v.blk.0.ffn_up.weight"),
            ("vision_tower.post_layernorm.weight", "v.post_ln.weight"),
            ("vision_tower.vit_merger.layer_norm1.bias", "v.vit_merger.ln1.bias"),
            ("vision_tower.vit_merger.self_attn.k_proj.weight", "v.vit_merger.attn_k.weight"),
            ("vision_tower.vit_merger.pre_norm.weight", "v.vit_merger.ds_ln.weight"),
            ("vision_tower.vit_merger.linear_2.bias", "v.vit_merger.ds_ffn_down.bias"),
            ("merger.mlp.0.pre_norm.weight", "mm.input_norm.weight"),
            ("merger.mlp.0.linear_1.weight", "mm.up.weight"),
            ("merger.mlp.0.linear_2.bias", "mm.down.bias"),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        assert_eq!(gguf_name("merger.mlp.1.linear_1.weight"), None, "one merger MLP");
    }
}
