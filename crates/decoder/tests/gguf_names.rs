//! Hugging Face tensor names translated to llama.cpp's GGUF names: a text model's (`blk.N.*`)
//! and an `mmproj`'s (`v.*`, `mm.*`, as llama.cpp's `convert_hf_to_gguf.py --mmproj` writes
//! Idefics3 / SmolVLM, LLaVA and Gemma 3), and what neither translates.

use tessera_decoder::weights::{gguf_name, gguf_sandwich_name, gguf_vision_name};

/// Gemma 2/3's four norms per layer, as gguf-py's tensor map names them for `gemma3`; the rest
/// as for Llama.
#[test]
fn gemma_layer_norms_take_their_own_names() {
    for (hf, gguf) in [
        ("model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"),
        ("model.layers.0.post_attention_layernorm.weight", "blk.0.post_attention_norm.weight"),
        ("model.layers.4.pre_feedforward_layernorm.weight", "blk.4.ffn_norm.weight"),
        ("model.layers.4.post_feedforward_layernorm.weight", "blk.4.post_ffw_norm.weight"),
        ("model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"),
        ("model.layers.2.self_attn.k_norm.weight", "blk.2.attn_k_norm.weight"),
        ("model.layers.2.mlp.gate_proj.weight", "blk.2.ffn_gate.weight"),
        ("model.norm.weight", "output_norm.weight"),
    ] {
        assert_eq!(gguf_sandwich_name(hf).as_deref(), Some(gguf), "{hf}");
    }
    // Llama's layer has two norms: the one after attention feeds the MLP.
    assert_eq!(gguf_name("model.layers.0.post_attention_layernorm.weight").as_deref(), Some("blk.0.ffn_norm.weight"));
    assert_eq!(gguf_name("model.layers.0.pre_feedforward_layernorm.weight"), None);
}

/// Gemma 4's per-layer inputs and layer scalar, as gguf-py's tensor map names them for `gemma4`
/// (tests/fixtures/vlm/gemma4-pair-tiny-gguf/SOURCES.md's tensor table).
#[test]
fn gemma4_per_layer_names_translate_as_the_converter_writes_them() {
    for (hf, gguf) in [
        ("model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"),
        ("model.per_layer_model_projection.weight", "per_layer_model_proj.weight"),
        ("model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"),
        ("model.layers.3.per_layer_input_gate.weight", "blk.3.inp_gate.weight"),
        ("model.layers.3.per_layer_projection.weight", "blk.3.proj.weight"),
        ("model.layers.3.post_per_layer_input_norm.weight", "blk.3.post_norm.weight"),
        ("model.layers.5.layer_scalar", "blk.5.layer_output_scale.weight"),
    ] {
        assert_eq!(gguf_sandwich_name(hf).as_deref(), Some(gguf), "{hf}");
    }
}

/// Qwen3.5's Gated DeltaNet layers, as gguf-py's tensor map names them for `qwen35` (a layer's
/// one post-attention norm, the MLP's input, is `post_attention_norm` there: the sandwich names).
#[test]
fn gated_delta_net_names_translate_as_the_converter_writes_them() {
    for (hf, gguf) in [
        ("model.layers.1.linear_attn.in_proj_qkv.weight", "blk.1.attn_qkv.weight"),
        ("model.layers.1.linear_attn.in_proj_z.weight", "blk.1.attn_gate.weight"),
        ("model.layers.1.linear_attn.in_proj_a.weight", "blk.1.ssm_alpha.weight"),
        ("model.layers.1.linear_attn.in_proj_b.weight", "blk.1.ssm_beta.weight"),
        ("model.layers.1.linear_attn.conv1d.weight", "blk.1.ssm_conv1d.weight"),
        ("model.layers.1.linear_attn.norm.weight", "blk.1.ssm_norm.weight"),
        ("model.layers.1.linear_attn.out_proj.weight", "blk.1.ssm_out.weight"),
        ("model.layers.1.linear_attn.A_log", "blk.1.ssm_a"),
        ("model.layers.1.linear_attn.dt_bias", "blk.1.ssm_dt.bias"),
    ] {
        assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        assert_eq!(gguf_sandwich_name(hf).as_deref(), Some(gguf), "{hf}");
    }
    assert_eq!(
        gguf_sandwich_name("model.layers.3.post_attention_layernorm.weight").as_deref(),
        Some("blk.3.post_attention_norm.weight")
    );
    assert_eq!(gguf_name("model.layers.1.linear_attn.unknown.weight"), None);
}

#[test]
fn text_and_vision_names_translate_as_the_converter_writes_them() {
    for (hf, gguf) in [
        ("model.embed_tokens.weight", "token_embd.weight"),
        ("model.layers.3.self_attn.q_proj.weight", "blk.3.attn_q.weight"),
        ("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"),
    ] {
        assert_eq!(gguf_name(hf).as_deref(), Some(gguf), "{hf}");
        assert_eq!(gguf_vision_name(hf), None, "{hf}");
    }
    for (hf, gguf) in [
        ("model.vision_model.embeddings.patch_embedding.weight", "v.patch_embd.weight"),
        ("model.vision_model.embeddings.patch_embedding.bias", "v.patch_embd.bias"),
        ("model.vision_model.embeddings.position_embedding.weight", "v.position_embd.weight"),
        ("model.vision_model.encoder.layers.0.layer_norm1.weight", "v.blk.0.ln1.weight"),
        ("model.vision_model.encoder.layers.11.layer_norm2.bias", "v.blk.11.ln2.bias"),
        ("model.vision_model.encoder.layers.1.self_attn.q_proj.weight", "v.blk.1.attn_q.weight"),
        ("model.vision_model.encoder.layers.1.self_attn.k_proj.bias", "v.blk.1.attn_k.bias"),
        ("model.vision_model.encoder.layers.1.self_attn.v_proj.weight", "v.blk.1.attn_v.weight"),
        ("model.vision_model.encoder.layers.1.self_attn.out_proj.weight", "v.blk.1.attn_out.weight"),
        ("model.vision_model.encoder.layers.2.mlp.fc1.weight", "v.blk.2.ffn_up.weight"),
        ("model.vision_model.encoder.layers.2.mlp.fc2.bias", "v.blk.2.ffn_down.bias"),
        ("model.vision_model.post_layernorm.weight", "v.post_ln.weight"),
        ("model.connector.modality_projection.proj.weight", "mm.model.fc.weight"),
        // LLaVA (the legacy script): CLIP's class embedding and pre-norm, the two-linear projector.
        ("model.vision_model.embeddings.class_embedding", "v.class_embd"),
        ("model.vision_model.pre_layrnorm.weight", "v.pre_ln.weight"),
        ("model.vision_model.pre_layrnorm.bias", "v.pre_ln.bias"),
        ("multi_modal_projector.linear_1.weight", "mm.0.weight"),
        ("multi_modal_projector.linear_2.bias", "mm.2.bias"),
        // Gemma 3: the soft-embedding norm and the input projection (a bare parameter).
        ("multi_modal_projector.mm_soft_emb_norm.weight", "mm.soft_emb_norm.weight"),
        ("multi_modal_projector.mm_input_projection_weight", "mm.input_projection.weight"),
        // ... and as the converter renames it (`_weight` → `.weight`), `tessera quantize`'s name.
        ("multi_modal_projector.mm_input_projection.weight", "mm.input_projection.weight"),
    ] {
        assert_eq!(gguf_vision_name(hf).as_deref(), Some(gguf), "{hf}");
        assert_eq!(gguf_name(hf), None, "{hf}");
    }
    for unknown in [
        "model.vision_model.encoder.layers.x.mlp.fc1.weight",
        "model.vision_model.encoder.layers.0.mlp.fc3.weight",
        "vision_model.post_layernorm.weight",
        "model.connector.other.weight",
        "multi_modal_projector.linear_3.weight",
        "model.vision_model.embeddings.class_embedding.weight",
    ] {
        assert_eq!((gguf_name(unknown), gguf_vision_name(unknown)), (None, None), "{unknown}");
    }
}
