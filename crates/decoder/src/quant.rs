//! Load-time quantization of a checkpoint's matrices: which GGUF type each one gets, as
//! llama-quantize chooses it (llama.cpp `src/llama-quant.cpp`, `llama_tensor_get_type`,
//! `llama_tensor_get_type_impl` and `tensor_type_fallback`, 0c1e57098 as vendored by
//! llama-cpp-python 0.3.36, without an importance matrix or overrides).
//!
//! [`tensor_type`] is that rule for the mixes tessera offers ([`QuantMix`]); [`role_of`] sorts
//! a Hugging Face tensor name into llama.cpp's tensor categories (what `tensor_get_category`
//! finds in the GGUF name the converter gives it), and [`QuantPlan`] holds what the rule needs
//! of the whole checkpoint (layer counts, tied embeddings) and tallies what it chose.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use tessera_kernels::QType;

/// A llama-quantize file type tessera can quantize to at load time.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantMix {
    Q4_0,
    Q4_K_M,
    Q5_K_M,
    Q6_K,
    Q8_0,
}

impl QuantMix {
    pub const ALL: [QuantMix; 5] = [Self::Q4_0, Self::Q4_K_M, Self::Q5_K_M, Self::Q6_K, Self::Q8_0];

    pub const fn name(self) -> &'static str {
        match self {
            Self::Q4_0 => "Q4_0",
            Self::Q4_K_M => "Q4_K_M",
            Self::Q5_K_M => "Q5_K_M",
            Self::Q6_K => "Q6_K",
            Self::Q8_0 => "Q8_0",
        }
    }

    /// The type most matrices get (`llama_ftype_get_default_type`).
    pub const fn default_type(self) -> QType {
        match self {
            Self::Q4_0 => QType::Q4_0,
            Self::Q4_K_M => QType::Q4K,
            Self::Q5_K_M => QType::Q5K,
            Self::Q6_K => QType::Q6K,
            Self::Q8_0 => QType::Q8_0,
        }
    }

    /// llama.cpp's `general.file_type` for this mix (`llama_ftype`: `LLAMA_FTYPE_MOSTLY_*`).
    pub const fn file_type(self) -> u32 {
        match self {
            Self::Q4_0 => 2,
            Self::Q8_0 => 7,
            Self::Q4_K_M => 15,
            Self::Q5_K_M => 17,
            Self::Q6_K => 18,
        }
    }

    /// The accepted names, for messages: `Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0`.
    pub fn accepted() -> String {
        Self::ALL.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
    }
}

impl std::fmt::Display for QuantMix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for QuantMix {
    type Err = String;
    /// A mix by its llama-quantize name, in any case (`q4_k_m`).
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| format!("unknown quantization type `{s}`: accepted types are {}", Self::accepted()))
    }
}

/// llama.cpp's tensor categories (`tensor_category`), and the tensors it never quantizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Output,
    TokenEmbd,
    AttnV,
    /// A fused q/k/v projection (counted with `attn_v` by llama.cpp).
    AttnQkv,
    AttnK,
    AttnQ,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Other,
    /// Kept as it is: norms, patch and position embeddings (`tensor_allows_quantization`).
    Kept,
}

/// llama.cpp's category of a tensor by its GGUF name (`tensor_get_category`: substrings of the
/// name), [`Role::Kept`] for what `tensor_allows_quantization` keeps (norms, an mmproj's patch
/// and position embeddings and patch merger, anything not ending in `weight`).
pub fn role_of_gguf(name: &str) -> Role {
    // Gemma 4's `per_layer_model_proj` is kept too ("not too big").
    const KEPT: [&str; 6] =
        ["_norm.weight", ".position_embd", ".patch_embd", ".patch_merger", "ssm_conv1d", "per_layer_model_proj"];
    if !name.ends_with("weight") || KEPT.iter().any(|k| name.contains(k)) {
        return Role::Kept;
    }
    match name {
        "output.weight" => return Role::Output,
        // Gemma 4's per-layer embedding is a token embedding to llama-quantize.
        "token_embd.weight" | "per_layer_token_embd.weight" => return Role::TokenEmbd,
        _ => {}
    }
    const CATEGORIES: [(&str, Role); 9] = [
        ("attn_qkv.weight", Role::AttnQkv),
        ("attn_v.weight", Role::AttnV),
        ("attn_k.weight", Role::AttnK),
        ("attn_q.weight", Role::AttnQ),
        ("attn_output.weight", Role::AttnOutput),
        ("ffn_up", Role::FfnUp),
        ("ffn_gate", Role::FfnGate),
        ("ffn_down", Role::FfnDown),
        ("", Role::Other),
    ];
    CATEGORIES.iter().find(|(part, _)| name.contains(part)).map_or(Role::Other, |(_, role)| *role)
}

/// The category of a Hugging Face tensor name, as llama.cpp gives the GGUF name its converter
/// writes for it (`q_proj` → `attn_q`, `fc2` → `ffn_down`, `lm_head` → `output`, …).
pub fn role_of(hf: &str) -> Role {
    let Some(stem) = hf.strip_suffix(".weight") else { return Role::Kept };
    // Qwen3-VL's learned position table is `pos_embed` (`v.position_embd`); Pixtral's patch
    // kernel is `patch_conv` (`v.patch_embd`), Mistral 3's `patch_merger` (`mm.patch_merger`).
    if stem.contains("norm")
        || stem.contains("patch_embed")
        || stem.contains("patch_conv")
        // Gated DeltaNet's conv kernel (`ssm_conv1d`).
        || stem.ends_with("conv1d")
        || stem.contains("patch_merger")
        || stem.contains("position_embed")
        || stem.ends_with("pos_embed")
        // Gemma 4's `per_layer_model_proj`, which llama-quantize keeps.
        || stem.ends_with("per_layer_model_projection")
    {
        return Role::Kept;
    }
    let mut parts = stem.rsplit('.');
    let last = parts.next().unwrap_or("");
    let parent = parts.next().unwrap_or("");
    match last {
        "lm_head" => Role::Output,
        // Gemma 4's per-layer embedding (`per_layer_token_embd`), a token embedding to llama.cpp.
        "embed_tokens" | "embed_tokens_per_layer" => Role::TokenEmbd,
        "v_proj" => Role::AttnV,
        // Gated DeltaNet's `in_proj_qkv` is llama.cpp's `attn_qkv` too.
        "qkv" | "qkv_proj" | "in_proj_qkv" => Role::AttnQkv,
        "k_proj" => Role::AttnK,
        "q_proj" => Role::AttnQ,
        "o_proj" | "out_proj" => Role::AttnOutput,
        "proj" if parent == "attn" => Role::AttnOutput,
        // Qwen2-VL's fused `attn.qkv` as the converter splits it for an mmproj.
        "q" if parent == "attn" => Role::AttnQ,
        "k" if parent == "attn" => Role::AttnK,
        "v" if parent == "attn" => Role::AttnV,
        "up_proj" | "fc1" => Role::FfnUp,
        "gate_proj" => Role::FfnGate,
        "down_proj" | "fc2" => Role::FfnDown,
        // Qwen3-VL's tower MLP (`v.blk.N.ffn_up` / `ffn_down`); its mergers' `linear_fc*` are
        // `mm.N` and `v.deepstack.N.fc*`, of no category.
        "linear_fc1" if parent == "mlp" => Role::FfnUp,
        "linear_fc2" if parent == "mlp" => Role::FfnDown,
        _ => Role::Other,
    }
}

/// The layer a tensor belongs to: `N` in `….layers.N.…`, `….blocks.N.…` or `….layer.N.…`
/// (InternViT's).
pub fn layer_of(hf: &str) -> Option<usize> {
    let parts: Vec<&str> = hf.split('.').collect();
    parts.windows(2).find(|w| matches!(w[0], "layers" | "blocks" | "layer")).and_then(|w| w[1].parse().ok())
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and every third between.
pub fn use_more_bits(layer: usize, n_layers: usize) -> bool {
    let (i, n) = (layer as i64, n_layers as i64);
    i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2
}

/// Where a matrix sits, for the `_M` mixes' per-layer rules: its layer, the number of
/// `attn_v`-like tensors (llama.cpp's `n_attention_wv`) and of FFN layers (`n_ffn_down`, the
/// model's block count; 0 for an mmproj, whose `clip` architecture llama-quantize reads no
/// block count for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub layer: usize,
    pub n_attn_v: usize,
    pub n_ffn: usize,
}

/// The type llama-quantize gives a matrix of role `role` with rows of `cols` values under
/// `mix`, at `pos`; `tied`: the checkpoint has no separate output matrix, so the token
/// embedding takes the output's rule. `None`: kept unquantized (llama.cpp writes F16 when a
/// row is not whole 32-value blocks, or keeps the tensor's type for the [`Role::Kept`] ones).
pub fn tensor_type(mix: QuantMix, role: Role, cols: usize, pos: Position, tied: bool) -> Option<QType> {
    if role == Role::Kept {
        return None;
    }
    let default = mix.default_type();
    let mut t = default;
    let more_bits = matches!(mix, QuantMix::Q4_K_M | QuantMix::Q5_K_M);
    match role {
        Role::Output | Role::TokenEmbd if role == Role::Output || tied => {
            if !cols.is_multiple_of(default.block_elems()) {
                t = QType::Q8_0;
            } else if t != QType::Q8_0 {
                t = QType::Q6K;
            }
        }
        Role::AttnV | Role::AttnQkv if more_bits && use_more_bits(pos.layer, pos.n_attn_v) => t = QType::Q6K,
        Role::FfnDown if more_bits && use_more_bits(pos.layer, pos.n_ffn) => t = QType::Q6K,
        _ => {}
    }
    fallback(t, cols)
}

/// `tensor_type_fallback`: a 256-value type whose blocks do not tile a row falls back to a
/// 32-value one (`Q4_K` → `Q5_0`, `Q5_K` → `Q5_1`, `Q6_K` → `Q8_0`); a row not of whole
/// 32-value blocks stays unquantized.
pub fn fallback(t: QType, cols: usize) -> Option<QType> {
    let t = if cols.is_multiple_of(t.block_elems()) {
        t
    } else {
        match t {
            QType::Q4K => QType::Q5_0,
            QType::Q5K => QType::Q5_1,
            QType::Q6K => QType::Q8_0,
            other => other,
        }
    };
    cols.is_multiple_of(t.block_elems()).then_some(t)
}

/// What [`tensor_type`] needs of one part of a checkpoint (the text model, or the image
/// side), and the tally of what it chose there.
#[derive(Debug)]
pub struct QuantPlan {
    pub mix: QuantMix,
    pub n_attn_v: usize,
    pub n_ffn: usize,
    pub tied: bool,
    /// The image side's `attn_v`-like matrices by name, numbered as llama-quantize counts them
    /// (`i_attention_wv`); the text model's are numbered by their layer.
    attn_v_index: HashMap<String, usize>,
    /// The image side's matrices' categories by their mmproj names ([`role_of_gguf`]).
    roles: HashMap<String, Role>,
    tally: Mutex<BTreeMap<&'static str, usize>>,
}

impl QuantPlan {
    /// The text model's plan: `layers` decoder layers, `tied` embeddings.
    pub fn text(mix: QuantMix, layers: usize, tied: bool) -> Self {
        let (attn_v_index, roles) = (HashMap::new(), HashMap::new());
        Self { mix, n_attn_v: layers, n_ffn: layers, tied, attn_v_index, roles, tally: Mutex::new(BTreeMap::new()) }
    }

    /// The image side's plan, as llama-quantize treats an mmproj: `tensors` are the image
    /// side's matrices as `(name, its mmproj name if it has one)`. Each is categorized by its
    /// mmproj name as llama.cpp does ([`role_of_gguf`]; else by [`role_of`]); the `attn_v`-like
    /// ones are counted and numbered in llama.cpp's tensor order of those names
    /// (`weight_name_comparer`: an mmproj's `v.blk.N.` names are ordered as text, so block 10
    /// comes before block 2); no block count.
    pub fn vision(mix: QuantMix, tensors: impl IntoIterator<Item = (String, Option<String>)>) -> Self {
        let mut roles = HashMap::new();
        let mut attn_v = Vec::new();
        for (name, gguf) in tensors {
            let role = gguf.as_deref().map_or_else(|| role_of(&name), role_of_gguf);
            if matches!(role, Role::AttnV | Role::AttnQkv) {
                attn_v.push((gguf.clone().unwrap_or_else(|| name.clone()), name.clone()));
            }
            if gguf.is_some() {
                roles.insert(name, role);
            }
        }
        attn_v.sort_by(|a, b| crate::gguf_write::llama_cpp_order(&a.0).cmp(&crate::gguf_write::llama_cpp_order(&b.0)));
        let n_attn_v = attn_v.len();
        let attn_v_index = attn_v.into_iter().enumerate().map(|(i, (_, name))| (name, i)).collect();
        Self { mix, n_attn_v, n_ffn: 0, tied: false, attn_v_index, roles, tally: Mutex::new(BTreeMap::new()) }
    }

    /// The category of the tensor `hf` (a Hugging Face name) under this plan.
    pub fn role(&self, hf: &str) -> Role {
        self.roles.get(hf).copied().unwrap_or_else(|| role_of(hf))
    }

    /// The type of the matrix `hf` (a Hugging Face name) with rows of `cols` values, counted.
    pub fn type_for(&self, hf: &str, cols: usize) -> Option<QType> {
        let layer = self.attn_v_index.get(hf).copied().or_else(|| layer_of(hf)).unwrap_or(0);
        let pos = Position { layer, n_attn_v: self.n_attn_v, n_ffn: self.n_ffn };
        let t = tensor_type(self.mix, self.role(hf), cols, pos, self.tied);
        if let (Some(t), Ok(mut tally)) = (t, self.tally.lock()) {
            *tally.entry(t.name()).or_default() += 1;
        }
        t
    }

    /// What was quantized so far: `Q4_K ×10, Q6_K ×4`.
    pub fn summary(&self) -> String {
        let tally = self.tally.lock().map(|t| t.clone()).unwrap_or_default();
        tally.iter().map(|(t, n)| format!("{t} ×{n}")).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: Position = Position { layer: 0, n_attn_v: 0, n_ffn: 0 };

    fn at(layer: usize, n: usize) -> Position {
        Position { layer, n_attn_v: n, n_ffn: n }
    }

    /// A 12-block tower under Q4_K_M: llama-quantize numbers an mmproj's `attn_v` matrices in
    /// its name order (`v.blk.10` before `v.blk.2`), which gives blocks 0, 4, 7, 8, 9 and 11
    /// the extra bits (as it did SmolVLM-256M's full-size mmproj, 2026-11-29), where numbering by
    /// layer would give 0, 3, 6, 9, 10 and 11; the categories come from the mmproj names (the
    /// window merger's `linear_2` is `ds_ffn_down`, an `ffn_down`).
    #[test]
    fn an_mmproj_is_counted_in_llama_cpps_name_order() {
        let hf = |i: usize| format!("model.vision_model.encoder.layers.{i}.self_attn.v_proj.weight");
        let plan =
            QuantPlan::vision(QuantMix::Q4_K_M, (0..12).map(|i| (hf(i), Some(format!("v.blk.{i}.attn_v.weight")))));
        let more: Vec<usize> = (0..12).filter(|&i| plan.type_for(&hf(i), 256) == Some(QType::Q6K)).collect();
        assert_eq!(more, [0, 4, 7, 8, 9, 11]);
        let merger = "model.vision_tower.vit_merger.linear_2.weight";
        let plan =
            QuantPlan::vision(QuantMix::Q4_K_M, [(merger.to_string(), Some("v.vit_merger.ds_ffn_down.weight".into()))]);
        assert_eq!(plan.role(merger), Role::FfnDown);
        assert_eq!(role_of_gguf("v.position_embd.weight"), Role::Kept);
        assert_eq!(role_of_gguf("mm.patch_merger.weight"), Role::Kept);
        assert_eq!(role_of_gguf("v.blk.3.attn_qkv.weight"), Role::AttnQkv);
    }

    #[test]
    fn names_sort_into_llama_cpp_categories() {
        for (name, role) in [
            ("lm_head.weight", Role::Output),
            ("language_model.lm_head.weight", Role::Output),
            ("model.embed_tokens.weight", Role::TokenEmbd),
            ("model.layers.3.self_attn.v_proj.weight", Role::AttnV),
            ("model.layers.3.self_attn.q_proj.weight", Role::AttnQ),
            ("model.layers.3.self_attn.k_proj.weight", Role::AttnK),
            ("model.layers.3.self_attn.o_proj.weight", Role::AttnOutput),
            ("model.layers.3.mlp.down_proj.weight", Role::FfnDown),
            ("model.layers.3.mlp.gate_proj.weight", Role::FfnGate),
            ("model.layers.3.mlp.up_proj.weight", Role::FfnUp),
            ("model.vision_model.encoder.layers.1.mlp.fc2.weight", Role::FfnDown),
            ("visual.blocks.0.attn.qkv.weight", Role::AttnQkv),
            ("visual.blocks.0.attn.q.weight", Role::AttnQ),
            ("visual.blocks.0.attn.k.weight", Role::AttnK),
            ("visual.blocks.0.attn.v.weight", Role::AttnV),
            ("model.vision_model.encoder.layers.1.self_attn.out_proj.weight", Role::AttnOutput),
            ("visual.blocks.0.attn.qkv.weight", Role::AttnQkv),
            ("visual.blocks.0.attn.proj.weight", Role::AttnOutput),
            ("model.visual.blocks.2.mlp.linear_fc1.weight", Role::FfnUp),
            ("model.visual.blocks.2.mlp.linear_fc2.weight", Role::FfnDown),
            ("visual.merger.linear_fc2.weight", Role::Other),
            ("model.visual.deepstack_merger_list.0.linear_fc2.weight", Role::Other),
            ("model.visual.pos_embed.weight", Role::Kept),
            ("multi_modal_projector.patch_merger.merging_layer.weight", Role::Kept),
            ("vision_tower.patch_conv.weight", Role::Kept),
            ("model.layers.0.linear_attn.conv1d.weight", Role::Kept),
            ("model.layers.0.linear_attn.in_proj_qkv.weight", Role::AttnQkv),
            ("model.connector.modality_projection.proj.weight", Role::Other),
            ("model.vision_model.embeddings.patch_embedding.weight", Role::Kept),
            ("model.vision_model.embeddings.position_embedding.weight", Role::Kept),
            ("model.layers.3.input_layernorm.weight", Role::Kept),
            ("model.layers.3.self_attn.q_proj.bias", Role::Kept),
        ] {
            assert_eq!(role_of(name), role, "{name}");
        }
        assert_eq!(layer_of("model.layers.12.mlp.down_proj.weight"), Some(12));
        assert_eq!(layer_of("visual.blocks.7.attn.qkv.weight"), Some(7));
        assert_eq!(layer_of("model.vision_tower.encoder.layer.3.attention.v_proj.weight"), Some(3));
        assert_eq!(layer_of("lm_head.weight"), None);
    }

    /// `use_more_bits` over 32 layers (a 7B Llama): layers 0–3, 28–31 and 6, 9, …, 27.
    #[test]
    fn more_bits_go_to_the_ends_and_every_third_layer() {
        let picked: Vec<usize> = (0..32).filter(|&i| use_more_bits(i, 32)).collect();
        assert_eq!(picked, [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]);
        // Two layers: only the last (7·2/8 = 1); no block count (an mmproj): every layer.
        assert_eq!((use_more_bits(0, 2), use_more_bits(1, 2)), (false, true));
        assert!((0..4).all(|i| use_more_bits(i, 0)));
    }

    /// The cases of `llama_tensor_get_type_impl` for these mixes, with rows of 4096.
    #[test]
    fn the_mixes_follow_llama_quantize() {
        use QType::*;
        let t = |mix, role, pos| tensor_type(mix, role, 4096, pos, false);
        // Output: Q6_K unless the mix is Q8_0; the token embedding keeps the default type
        // unless the output is tied to it.
        for mix in QuantMix::ALL {
            let out = if mix == QuantMix::Q8_0 { Q8_0 } else { Q6K };
            assert_eq!(t(mix, Role::Output, AT), Some(out), "{mix}");
            assert_eq!(tensor_type(mix, Role::TokenEmbd, 4096, AT, true), Some(out), "{mix}");
            assert_eq!(t(mix, Role::TokenEmbd, AT), Some(mix.default_type()), "{mix}");
        }
        // Q4_K_M / Q5_K_M: attn_v and ffn_down get Q6_K where use_more_bits says so.
        for mix in [QuantMix::Q4_K_M, QuantMix::Q5_K_M] {
            let d = mix.default_type();
            for role in [Role::AttnV, Role::AttnQkv, Role::FfnDown] {
                assert_eq!(t(mix, role, at(0, 32)), Some(Q6K), "{mix} {role:?}");
                assert_eq!(t(mix, role, at(4, 32)), Some(d), "{mix} {role:?}");
                assert_eq!(t(mix, role, at(6, 32)), Some(Q6K), "{mix} {role:?}");
            }
            for role in [Role::AttnQ, Role::AttnK, Role::AttnOutput, Role::FfnUp, Role::FfnGate, Role::Other] {
                assert_eq!(t(mix, role, at(0, 32)), Some(d), "{mix} {role:?}");
            }
        }
        // The single-type mixes: one type everywhere but the output.
        for mix in [QuantMix::Q4_0, QuantMix::Q6_K, QuantMix::Q8_0] {
            for role in [Role::AttnV, Role::FfnDown, Role::AttnQ, Role::Other] {
                assert_eq!(t(mix, role, at(0, 32)), Some(mix.default_type()), "{mix} {role:?}");
            }
        }
        assert_eq!(t(QuantMix::Q4_K_M, Role::Kept, AT), None);
    }

    /// `tensor_type_fallback` and the output rule on rows that 256-value blocks do not tile.
    #[test]
    fn narrow_rows_fall_back_as_llama_quantize() {
        use QType::*;
        assert_eq!(fallback(Q4K, 64), Some(Q5_0));
        assert_eq!(fallback(Q5K, 96), Some(Q5_1));
        assert_eq!(fallback(Q6K, 128), Some(Q8_0));
        assert_eq!(fallback(Q4_0, 64), Some(Q4_0));
        assert_eq!(fallback(Q4K, 48), None);
        assert_eq!(fallback(Q8_0, 48), None);
        // The output of a 64-wide model under Q4_K_M: not whole Q4_K blocks → Q8_0.
        assert_eq!(tensor_type(QuantMix::Q4_K_M, Role::Output, 64, AT, false), Some(Q8_0));
        // Under Q4_0 the output rule asks Q6_K, which falls back to Q8_0 on 64-wide rows.
        assert_eq!(tensor_type(QuantMix::Q4_0, Role::Output, 64, AT, false), Some(Q8_0));
        assert_eq!(tensor_type(QuantMix::Q4_0, Role::Output, 512, AT, false), Some(Q6K));
        // attn_v of the last of two layers: Q6_K → Q8_0 on 64-wide rows.
        assert_eq!(tensor_type(QuantMix::Q4_K_M, Role::AttnV, 64, at(1, 2), false), Some(Q8_0));
        assert_eq!(tensor_type(QuantMix::Q4_K_M, Role::AttnV, 64, at(0, 2), false), Some(Q5_0));
    }

    #[test]
    fn mixes_parse_by_name_in_any_case() {
        assert_eq!("q4_k_m".parse::<QuantMix>(), Ok(QuantMix::Q4_K_M));
        assert_eq!("Q8_0".parse::<QuantMix>(), Ok(QuantMix::Q8_0));
        let err = "Q3_K_S".parse::<QuantMix>().unwrap_err();
        assert!(err.contains("`Q3_K_S`") && err.contains("Q4_0, Q4_K_M, Q5_K_M, Q6_K, Q8_0"), "{err}");
    }
}
