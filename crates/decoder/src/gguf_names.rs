//! Hugging Face tensor names as llama.cpp's GGUF files name them: the text decoders' (Llama
//! family, and Gemma 2/3's four norms per layer) and the vision towers' of `mmproj` files.
//! [`Weights`](crate::Weights) reads a GGUF through them, so that architectures are written
//! once with Hugging Face names; the exporter writes through them.

/// Translates a Hugging Face tensor name to llama.cpp's GGUF name (Llama-family decoders).
pub fn gguf_name(hf: &str) -> Option<String> {
    text_gguf_name(hf, false)
}

/// [`gguf_name`] for decoders with Gemma 2/3's four norms per layer, which llama.cpp's tensor
/// map (gguf-py's `tensor_mapping.py`, `llama-arch.cpp`) names apart from Llama's:
/// `post_attention_layernorm` (the attention output's norm) is `post_attention_norm`,
/// `pre_feedforward_layernorm` (the MLP input's) `ffn_norm`, `post_feedforward_layernorm`
/// `post_ffw_norm`. A GGUF is read this way when it holds `blk.0.post_ffw_norm.weight` or
/// `blk.0.post_attention_norm.weight`: Qwen3.5's (`qwen35`) one norm after attention, the MLP's
/// input norm that transformers calls `post_attention_layernorm`, is llama.cpp's
/// `post_attention_norm` too.
pub fn gguf_sandwich_name(hf: &str) -> Option<String> {
    text_gguf_name(hf, true)
}

fn text_gguf_name(hf: &str, sandwich: bool) -> Option<String> {
    let top = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        // Gemma 4's per-layer inputs (PLE).
        "model.embed_tokens_per_layer.weight" => Some("per_layer_token_embd.weight"),
        "model.per_layer_model_projection.weight" => Some("per_layer_model_proj.weight"),
        "model.per_layer_projection_norm.weight" => Some("per_layer_proj_norm.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    // Gated DeltaNet's parameters without a `.weight` (llama.cpp's `ssm_a` holds −exp(A_log):
    // `DeltaLayout::LlamaCpp`).
    match rest {
        "linear_attn.A_log" => return Some(format!("blk.{layer}.ssm_a")),
        "linear_attn.dt_bias" => return Some(format!("blk.{layer}.ssm_dt.bias")),
        // Gemma 4's layer scalar (a buffer; the converter appends `.weight`).
        "layer_scalar" => return Some(format!("blk.{layer}.layer_output_scale.weight")),
        _ => {}
    }
    let (module, kind) = rest.rsplit_once('.')?;
    let mapped = match (module, sandwich) {
        ("post_attention_layernorm", true) => "post_attention_norm",
        ("pre_feedforward_layernorm", true) => "ffn_norm",
        ("post_feedforward_layernorm", true) => "post_ffw_norm",
        (module, _) => match module {
            "input_layernorm" => "attn_norm",
            "post_attention_layernorm" => "ffn_norm",
            "self_attn.q_proj" => "attn_q",
            "self_attn.k_proj" => "attn_k",
            "self_attn.v_proj" => "attn_v",
            "self_attn.o_proj" => "attn_output",
            "self_attn.q_norm" => "attn_q_norm",
            "self_attn.k_norm" => "attn_k_norm",
            "mlp.gate_proj" => "ffn_gate",
            "mlp.up_proj" => "ffn_up",
            "mlp.down_proj" => "ffn_down",
            // Gemma 4's per-layer input gate, projection and norm.
            "per_layer_input_gate" => "inp_gate",
            "per_layer_projection" => "proj",
            "post_per_layer_input_norm" => "post_norm",
            // Gated DeltaNet (llama.cpp's `qwen35` / `qwen3next` tensors).
            "linear_attn.in_proj_qkv" => "attn_qkv",
            "linear_attn.in_proj_z" => "attn_gate",
            "linear_attn.in_proj_a" => "ssm_alpha",
            "linear_attn.in_proj_b" => "ssm_beta",
            "linear_attn.conv1d" => "ssm_conv1d",
            "linear_attn.norm" => "ssm_norm",
            "linear_attn.out_proj" => "ssm_out",
            _ => return None,
        },
    };
    Some(format!("blk.{layer}.{mapped}.{kind}"))
}

/// Translates a Hugging Face vision tower or connector tensor name to the name llama.cpp's
/// converters write in an `mmproj` GGUF (gguf-py's `tensor_mapping.py` and `constants.py`, and
/// `tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py` for LLaVA; llama.cpp 0c1e57098 as
/// vendored by llama-cpp-python 0.3.36). The tower under `model.vision_model` (SigLIP, or CLIP
/// with its class embedding and `pre_layrnorm`), the connector under `model.connector`
/// (Idefics3's pixel-shuffle projection) or `multi_modal_projector` (LLaVA's two linears, Gemma
/// 3's soft-embedding norm and input projection); Qwen's towers under `visual.`
/// ([`qwen_vl_names`](crate::qwen_vl_names)), Mistral 3's Pixtral under `pixtral.`
/// ([`pixtral_names`](crate::pixtral_names), whose tower's q/k rows are permuted), MiniCPM-V
/// 4.6's under `minicpm.` ([`minicpm_names`](crate::minicpm_names)), InternVL's InternViT under
/// `internvl.` ([`internvl_names`](crate::internvl_names)), Gemma 4's tower under `gemma4v.`
/// ([`gemma4v_names`](crate::gemma4v_names)). The
/// converters store every other one as it is in the checkpoint (no permutation or transpose:
/// GGUF's reversed dimension order is undone by the reader), the patch embedding as
/// the Conv2d kernel `(d, 3, p, p)`. `mlp.fc1` / `fc2` are `ffn_up` / `ffn_down` as the current
/// converter names them; the LLaVA script writes them the other way round, which the mmproj
/// reader undoes as llama.cpp's `clip.cpp` does.
pub fn gguf_vision_name(hf: &str) -> Option<String> {
    if let Some(rest) = hf.strip_prefix("visual.") {
        return crate::qwen_vl_names::gguf_name(rest);
    }
    if let Some(rest) = hf.strip_prefix("pixtral.") {
        return crate::pixtral_names::gguf_name(rest);
    }
    if let Some(rest) = hf.strip_prefix("internvl.") {
        return crate::internvl_names::gguf_name(rest);
    }
    if let Some(rest) = hf.strip_prefix("minicpm.") {
        return crate::minicpm_names::gguf_name(rest);
    }
    if let Some(rest) = hf.strip_prefix("gemma4v.") {
        return crate::gemma4v_names::gguf_name(rest);
    }
    if let Some(kind) = hf.strip_prefix("model.connector.modality_projection.proj.") {
        return Some(format!("mm.model.fc.{kind}"));
    }
    if let Some(rest) = hf.strip_prefix("multi_modal_projector.") {
        // Gemma 3's projector (the converter writes `mm_input_projection_weight` as
        // `mm_input_projection.weight`).
        match rest {
            "mm_input_projection_weight" | "mm_input_projection.weight" => {
                return Some("mm.input_projection.weight".into())
            }
            "mm_soft_emb_norm.weight" => return Some("mm.soft_emb_norm.weight".into()),
            _ => {}
        }
        let (module, kind) = rest.rsplit_once('.')?;
        let index = match module {
            "linear_1" => 0,
            "linear_2" => 2,
            _ => return None,
        };
        return Some(format!("mm.{index}.{kind}"));
    }
    let rest = hf.strip_prefix("model.vision_model.")?;
    if rest == "embeddings.class_embedding" {
        return Some("v.class_embd".into());
    }
    let (module, kind) = rest.rsplit_once('.')?;
    let top = match module {
        "embeddings.patch_embedding" => Some("v.patch_embd"),
        "embeddings.position_embedding" => Some("v.position_embd"),
        "pre_layrnorm" => Some("v.pre_ln"),
        "post_layernorm" => Some("v.post_ln"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(format!("{t}.{kind}"));
    }
    let (layer, module) = module.strip_prefix("encoder.layers.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let mapped = match module {
        "layer_norm1" => "ln1",
        "layer_norm2" => "ln2",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.out_proj" => "attn_out",
        "mlp.fc1" => "ffn_up",
        "mlp.fc2" => "ffn_down",
        _ => return None,
    };
    Some(format!("v.blk.{layer}.{mapped}.{kind}"))
}
