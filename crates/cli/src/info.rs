//! `tessera info`: what a model is (architecture, sizes, RoPE, dtype, tokenizer, chat template,
//! vision tower), printed one field a line.

use anyhow::Result;

use crate::common::{load, out, ModelArgs};

/// Loads the model and prints what it is.
pub fn run(args: ModelArgs) -> Result<()> {
    let (model, load_s) = load(&args)?;
    let c = model.config();
    let d = &c.decoder;
    let i = model.info();
    out!("model:          {}", i.source.path().display());
    if c.text_family.name() == c.family {
        out!("architecture:   {}", c.family);
    } else {
        out!("architecture:   {} ({} decoder)", c.family, c.text_family.name());
    }
    out!(
        "decoder:        {} layers, width {}, MLP {}, {} heads / {} KV heads ({}), head_dim {}",
        d.num_hidden_layers,
        d.hidden_size,
        d.intermediate_size,
        d.num_attention_heads,
        d.num_key_value_heads,
        match (d.num_attention_heads, d.num_key_value_heads) {
            (h, k) if h == k => "MHA",
            (_, 1) => "MQA",
            _ => "GQA",
        },
        d.head_dim
    );
    out!("rope:           theta {}, scaling {:?}, layout {:?}", d.rope.theta, d.rope.scaling, d.rope.style);
    if let Some(rd) = d.rotary_dim.filter(|&rd| rd < d.head_dim) {
        out!("partial rope:   the first {rd} of {} dims of each head", d.head_dim);
    }
    if let Some(linear) = &d.linear {
        let g = &linear.delta;
        out!(
            "linear layers:  {} of {} Gated DeltaNet ({} key heads of {}, {} value heads of {}, conv {}); a \
             fixed-size state per sequence, prefixes reused only whole",
            linear.layers.iter().filter(|&&l| l).count(),
            d.num_hidden_layers,
            g.key_heads,
            g.key_head_dim,
            g.value_heads,
            g.value_head_dim,
            g.conv_kernel
        );
    }
    if d.attn_output_gate {
        out!("attention:      sigmoid output gate per head");
    }
    if let Some(m) = &d.rope.mrope {
        out!(
            "m-rope:         sections {:?} (temporal, height, width){}",
            m.section,
            if m.interleaved { ", interleaved" } else { "" }
        );
    }
    if let Some(local) = &d.local_rope {
        let n = local.layers.iter().filter(|&&l| l).count();
        out!(
            "local rope:     theta {}, scaling {:?} ({n} of {} layers)",
            local.rope.theta,
            local.rope.scaling,
            d.num_hidden_layers
        );
    }
    let windows: Vec<usize> = c.layer_windows.iter().flatten().copied().collect();
    if let Some(w) = windows.first() {
        out!("sliding window: {w} tokens in {} of {} layers", windows.len(), d.num_hidden_layers);
    }
    out!("context:        {} tokens", d.max_position_embeddings);
    out!("vocabulary:     {} (tied embeddings: {})", vocabulary(&model), c.tie_word_embeddings);
    out!(
        "weights:        {:?}{}",
        i.dtype,
        i.quantization.as_ref().map(|q| format!(" activations; quantized matmuls: {q}")).unwrap_or_default()
    );
    out!("device:         {:?}", model.device());
    out!("tokenizer:      {}", i.tokenizer_source);
    out!("eos ids:        {:?}", model.eos_ids());
    out!("chat template:  {}", i.chat_template_source.as_deref().unwrap_or("none (use --raw)"));
    match model.vision_description() {
        Some(v) if model.max_images() == usize::MAX => out!("vision:         {v}; several images per prompt"),
        Some(v) => out!("vision:         {v}; at most {} image(s) per prompt", model.max_images()),
        None => out!("vision:         none (text-only model)"),
    }
    if let Some(m) = &i.mmproj {
        out!("mmproj:         {}", m.display());
    }
    out!("load time:      {load_s:.2}s");
    Ok(())
}

/// The vocabulary's size, and the embedding's where they differ: checkpoints pad the embedding
/// matrix past their tokenizer (Qwen2-VL: 151936 rows for ~151665 tokens); an id with no token
/// decodes as empty text, a token with no row cannot be embedded.
fn vocabulary(model: &tessera::Model) -> String {
    let tok = model.tokenizer();
    let rows = model.config().vocab_size;
    let tokens = tok.vocab_size();
    let no_text = (0..rows as u32).filter(|&id| tok.id_to_token(id).is_none()).count();
    let no_row = tok.inner().get_vocab(true).values().filter(|&&id| id as usize >= rows).count();
    if tokens == rows && no_text == 0 {
        return format!("{rows} tokens");
    }
    let mut s = format!("{tokens} tokens, embedding {rows} rows");
    if no_text > 0 {
        s += &format!(": {no_text} ids have no text");
    }
    if no_row > 0 {
        s += &format!("{} {no_row} tokens have no embedding row", if no_text > 0 { "," } else { ":" });
    }
    s
}
