//! The names llama.cpp's `convert_hf_to_gguf.py --mmproj` gives Qwen2-VL's, Qwen2.5-VL's and
//! Qwen3-VL's vision tower and merger in an `mmproj` GGUF (`conversion/qwenvl.py`,
//! `conversion/qwen3vl.py`, gguf-py's `tensor_mapping.py`; llama.cpp 0c1e57098 as vendored by
//! llama-cpp-python 0.3.36). Tensors are stored as in the checkpoint except three, whose
//! Hugging Face names here are the converter's own intermediate names:
//! - Qwen2/2.5-VL's `attn.qkv` is split into `attn.q`, `attn.k`, `attn.v` (`v.blk.N.attn_q`, …);
//! - the Conv3d patch kernel `(d, C, 2, P, P)` is split into one Conv2d kernel per frame,
//!   `patch_embed.proj.weight` (frame 0) and `patch_embed.proj.weight.1` (frame 1);
//! - Qwen3-VL's DeepStack mergers are named by the tower block they read
//!   (`v.deepstack.B.*`), here `blocks.B.deepstack_merger.*`.

/// `hf`: a name under the tower's root `visual.` (without it) → its name in the mmproj.
pub fn gguf_name(hf: &str) -> Option<String> {
    let top = match hf {
        "patch_embed.proj.weight" => Some("v.patch_embd.weight"),
        "patch_embed.proj.weight.1" => Some("v.patch_embd.weight.1"),
        "patch_embed.proj.bias" => Some("v.patch_embd.bias"),
        "pos_embed.weight" => Some("v.position_embd.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.to_string());
    }
    let (module, kind) = hf.rsplit_once('.')?;
    if let Some(merger) = module.strip_prefix("merger.") {
        let mapped = match merger {
            "ln_q" | "norm" => "v.post_ln",
            "mlp.0" | "linear_fc1" => "mm.0",
            "mlp.2" | "linear_fc2" => "mm.2",
            _ => return None,
        };
        return Some(format!("{mapped}.{kind}"));
    }
    let (block, module) = module.strip_prefix("blocks.")?.split_once('.')?;
    let block: usize = block.parse().ok()?;
    let mapped = match module {
        "norm1" => "ln1",
        "norm2" => "ln2",
        "attn.qkv" => "attn_qkv",
        "attn.q" => "attn_q",
        "attn.k" => "attn_k",
        "attn.v" => "attn_v",
        "attn.proj" => "attn_out",
        "mlp.fc1" | "mlp.linear_fc1" | "mlp.up_proj" => "ffn_up",
        "mlp.fc2" | "mlp.linear_fc2" | "mlp.down_proj" => "ffn_down",
        "mlp.gate_proj" => "ffn_gate",
        "deepstack_merger.norm" => return Some(format!("v.deepstack.{block}.norm.{kind}")),
        "deepstack_merger.linear_fc1" => return Some(format!("v.deepstack.{block}.fc1.{kind}")),
        "deepstack_merger.linear_fc2" => return Some(format!("v.deepstack.{block}.fc2.{kind}")),
        _ => return None,
    };
    Some(format!("v.blk.{block}.{mapped}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn names_follow_the_converter() {
        for (hf, gguf) in [
            ("patch_embed.proj.weight.1", "v.patch_embd.weight.1"),
            ("blocks.3.attn.q.bias", "v.blk.3.attn_q.bias"),
            ("blocks.0.mlp.gate_proj.weight", "v.blk.0.ffn_gate.weight"),
            ("blocks.1.deepstack_merger.linear_fc2.weight", "v.deepstack.1.fc2.weight"),
            ("merger.mlp.2.bias", "mm.2.bias"),
            ("merger.norm.weight", "v.post_ln.weight"),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        assert_eq!(gguf_name("blocks.0.attn.unknown.weight"), None);
    }
}
