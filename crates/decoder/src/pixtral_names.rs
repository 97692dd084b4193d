//! The names llama.cpp's `convert_hf_to_gguf.py --mmproj` gives Mistral 3's Pixtral tower and
//! projector in an `mmproj` GGUF (`conversion/llava.py`, `LlavaVisionModel`, and gguf-py's
//! `tensor_mapping.py`; llama.cpp 0c1e57098 as vendored by llama-cpp-python 0.3.36). The Hugging
//! Face names are read under the root `pixtral.` (`pixtral.vision_tower.…`,
//! `pixtral.multi_modal_projector.…`), not the checkpoint's own roots: LLaVA's projector is also
//! `multi_modal_projector.linear_1`, stored as `mm.0` where Pixtral's is `mm.1`. Tensors are
//! stored as in the checkpoint except the tower's `q_proj` / `k_proj`, whose rows the converter
//! permutes for interleaved RoPE as it does a Llama's (the reader rotates them interleaved).

/// `hf`: a name under the root `pixtral.` (without it) → its name in the mmproj.
pub fn gguf_name(hf: &str) -> Option<String> {
    let (module, kind) = hf.rsplit_once('.')?;
    if let Some(projector) = module.strip_prefix("multi_modal_projector.") {
        let mapped = match projector {
            "norm" => "mm.input_norm",
            "patch_merger.merging_layer" => "mm.patch_merger",
            "linear_1" => "mm.1",
            "linear_2" => "mm.2",
            _ => return None,
        };
        return Some(format!("{mapped}.{kind}"));
    }
    let tower = module.strip_prefix("vision_tower.")?;
    let top = match tower {
        "patch_conv" => Some("v.patch_embd"),
        "ln_pre" => Some("v.pre_ln"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(format!("{t}.{kind}"));
    }
    let (layer, module) = tower.strip_prefix("transformer.layers.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let mapped = match module {
        "attention_norm" => "ln1",
        "ffn_norm" => "ln2",
        "attention.q_proj" => "attn_q",
        "attention.k_proj" => "attn_k",
        "attention.v_proj" => "attn_v",
        "attention.o_proj" => "attn_out",
        "feed_forward.gate_proj" => "ffn_gate",
        "feed_forward.up_proj" => "ffn_up",
        "feed_forward.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("v.blk.{layer}.{mapped}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn names_follow_the_converter() {
        for (hf, gguf) in [
            ("vision_tower.patch_conv.weight", "v.patch_embd.weight"),
            ("vision_tower.ln_pre.weight", "v.pre_ln.weight"),
            ("vision_tower.transformer.layers.2.attention.o_proj.weight", "v.blk.2.attn_out.weight"),
            ("vision_tower.transformer.layers.0.attention_norm.weight", "v.blk.0.ln1.weight"),
            ("vision_tower.transformer.layers.1.feed_forward.gate_proj.weight", "v.blk.1.ffn_gate.weight"),
            ("multi_modal_projector.norm.weight", "mm.input_norm.weight"),
            ("multi_modal_projector.patch_merger.merging_layer.weight", "mm.patch_merger.weight"),
            ("multi_modal_projector.linear_1.weight", "mm.1.weight"),
            ("multi_modal_projector.linear_2.bias", "mm.2.bias"),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        assert_eq!(gguf_name("vision_tower.transformer.layers.0.attention.qkv.weight"), None);
        assert_eq!(gguf_name("multi_modal_projector.linear_3.weight"), None);
    }
}
