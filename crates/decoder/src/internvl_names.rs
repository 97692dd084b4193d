//! The names llama.cpp's `convert_hf_to_gguf.py --mmproj` gives InternVL's InternViT tower and
//! projector in an `mmproj` GGUF (`conversion/internvl.py`, `InternVisionModel`, and gguf-py's
//! `tensor_mapping.py`, whose entries for this layout are Intern-S1's; llama.cpp 0c1e57098 as
//! vendored by llama-cpp-python 0.3.36). The Hugging Face names are read under the root
//! `internvl.` (`internvl.vision_tower.…`, `internvl.multi_modal_projector.…`): the CLS token is
//! `v.class_embd`, the position table `v.position_embd.weight`, the layer scales `lambda_1` /
//! `lambda_2` `v.blk.N.ls1` / `ls2`, and the projector's LayerNorm and two linears are the
//! original checkpoint's `mlp1.0`, `mlp1.1`, `mlp1.3` (`mm.model.mlp.*`). Every tensor is stored
//! as in the checkpoint.

/// `hf`: a name under the root `internvl.` (without it) → its name in the mmproj.
pub fn gguf_name(hf: &str) -> Option<String> {
    match hf {
        "vision_tower.embeddings.cls_token" => return Some("v.class_embd".into()),
        "vision_tower.embeddings.position_embeddings" => return Some("v.position_embd.weight".into()),
        _ => {}
    }
    let (module, kind) = hf.rsplit_once('.')?;
    if let Some(projector) = module.strip_prefix("multi_modal_projector.") {
        let index = match projector {
            "layer_norm" => 0,
            "linear_1" => 1,
            "linear_2" => 3,
            _ => return None,
        };
        return Some(format!("mm.model.mlp.{index}.{kind}"));
    }
    let tower = module.strip_prefix("vision_tower.")?;
    if tower == "embeddings.patch_embeddings.projection" {
        return Some(format!("v.patch_embd.{kind}"));
    }
    let rest = tower.strip_prefix("encoder.layer.")?;
    let (layer, module, kind) = match rest.split_once('.') {
        // The layer scales have no `.weight`: `encoder.layer.N.lambda_1` splits as (`…N`, `lambda_1`).
        None => {
            let scale = match kind {
                "lambda_1" => "ls1",
                "lambda_2" => "ls2",
                _ => return None,
            };
            (rest, scale, "weight")
        }
        Some((layer, module)) => {
            let mapped = match module {
                "layernorm_before" => "ln1",
                "layernorm_after" => "ln2",
                "attention.q_proj" => "attn_q",
                "attention.k_proj" => "attn_k",
                "attention.v_proj" => "attn_v",
                "attention.projection_layer" => "attn_out",
                "mlp.fc1" => "ffn_up",
                "mlp.fc2" => "ffn_down",
                _ => return None,
            };
            (layer, mapped, kind)
        }
    };
    let layer: usize = layer.parse().ok()?;
    Some(format!("v.blk.{layer}.{module}.{kind}"))
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn names_follow_the_converter() {
        for (hf, gguf) in [
            ("vision_tower.embeddings.cls_token", "v.class_embd"),
            ("vision_tower.embeddings.position_embeddings", "v.position_embd.weight"),
            ("vision_tower.embeddings.patch_embeddings.projection.weight", "v.patch_embd.weight"),
            ("vision_tower.embeddings.patch_embeddings.projection.bias", "v.patch_embd.bias"),
            ("vision_tower.encoder.layer.0.layernorm_before.weight", "v.blk.0.ln1.weight"),
            ("vision_tower.encoder.layer.1.layernorm_after.bias", "v.blk.1.ln2.bias"),
            ("vision_tower.encoder.layer.1.attention.q_proj.bias", "v.blk.1.attn_q.bias"),
            ("vision_tower.encoder.layer.0.attention.projection_layer.weight", "v.blk.0.attn_out.weight"),
            ("vision_tower.encoder.layer.12.mlp.fc1.weight", "v.blk.12.ffn_up.weight"),
            ("vision_tower.encoder.layer.0.mlp.fc2.bias", "v.blk.0.ffn_down.bias"),
            ("vision_tower.encoder.layer.3.lambda_1", "v.blk.3.ls1.weight"),
            ("vision_tower.encoder.layer.0.lambda_2", "v.blk.0.ls2.weight"),
            ("multi_modal_projector.layer_norm.weight", "mm.model.mlp.0.weight"),
            ("multi_modal_projector.linear_1.bias", "mm.model.mlp.1.bias"),
            ("multi_modal_projector.linear_2.weight", "mm.model.mlp.3.weight"),
        ] {
            assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        }
        for unknown in [
            "vision_tower.encoder.layer.0.lambda_3",
            "vision_tower.encoder.layer.x.mlp.fc1.weight",
            "vision_tower.encoder.layer.0.attention.qkv.weight",
            "multi_modal_projector.linear_3.weight",
            "language_model.embed_tokens.weight",
        ] {
            assert_eq!(gguf_name(unknown), None, "{unknown}");
        }
    }
}
