//! The primitives against the design notes' worked examples and their slow twins.

use anyhow::Result;
use candle_core::{DType, Device, Tensor, D};
use tessera_decoder::attention::scaled_dot_product_attention_slow;
use tessera_decoder::{
    scaled_dot_product_attention, AttentionMask, Blocks, MaskPlan, NormStyle, RmsNorm, RopeConfig, RopeScaling,
    RopeStyle, RotaryEmbedding,
};

fn t2(rows: &[[f32; 2]]) -> Result<Tensor> {
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    Ok(Tensor::from_vec(flat, (1, 1, rows.len(), 2), &Device::Cpu)?)
}

fn assert_close(a: &[f32], b: &[f32], tol: f32, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "{what}[{i}]: {x} vs {y} (tol {tol})");
    }
}

fn random(shape: &[usize], seed: u64) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    Ok(Tensor::from_vec(v, shape, &Device::Cpu)?)
}

#[test]
fn worked_example_scaled_attention() -> Result<()> {
    let q = t2(&[[0.5, 0.3], [0.2, 0.8], [0.7, 0.1]])?;
    let k = t2(&[[0.6, 0.4], [0.3, 0.9], [0.5, 0.2]])?;
    let v = t2(&[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])?;
    let (out, w) = scaled_dot_product_attention(&q, &k, &v, None, 1.0 / 2f64.sqrt())?;
    let w0: Vec<f32> = w.get(0)?.get(0)?.get(0)?.to_vec1()?;
    let o0: Vec<f32> = out.get(0)?.get(0)?.get(0)?.to_vec1()?;
    assert_close(&w0, &[0.342, 0.342, 0.316], 1e-3, "row 0 weights");
    assert_close(&o0, &[0.5, 0.5], 1e-3, "row 0 output");
    Ok(())
}

#[test]
fn worked_example_unscaled_scores() -> Result<()> {
    let q = t2(&[[1.3, 1.9]])?;
    let kv = t2(&[[1.1, 0.0], [2.0, 1.1], [2.1, 0.1], [0.0, 1.2], [0.2, 0.0], [1.3, 1.9]])?;
    let (out, w) = scaled_dot_product_attention(&q, &kv, &kv, None, 1.0)?;
    let w: Vec<f32> = w.flatten_all()?.to_vec1()?;
    assert_close(&w, &[0.0122, 0.3174, 0.0541, 0.0285, 0.0038, 0.5841], 1e-4, "softmax");
    let o: Vec<f32> = out.flatten_all()?.to_vec1()?;
    assert_close(&o, &[1.52, 1.50], 5e-3, "mixed rows");
    Ok(())
}

#[test]
fn grouped_attention_matches_slow_twin_for_mha_gqa_mqa() -> Result<()> {
    for (heads, kv_heads) in [(4, 4), (6, 2), (4, 1)] {
        let q = random(&[2, heads, 5, 8], 1)?;
        let k = random(&[2, kv_heads, 7, 8], 2)?;
        let v = random(&[2, kv_heads, 7, 8], 3)?;
        let bias = AttentionMask::Causal.bias(5, 7, DType::F32, &Device::Cpu)?;
        let (fast, wf) = scaled_dot_product_attention(&q, &k, &v, bias.as_ref(), 0.35)?;
        let (slow, ws) = scaled_dot_product_attention_slow(&q, &k, &v, bias.as_ref(), 0.35)?;
        let diff = (fast - slow)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-5, "{heads}/{kv_heads}: output diff {diff}");
        let diff = (wf - ws)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "{heads}/{kv_heads}: weight diff {diff}");
    }
    Ok(())
}

#[test]
fn attention_in_query_chunks_equals_one_pass_for_every_mask() -> Result<()> {
    use tessera_decoder::attention::{attention_in_query_chunks, Scores};
    // 9 new queries after 4 cached positions, in chunks of 1, 2, 4 and all 9.
    let q = random(&[1, 6, 9, 8], 5)?;
    let k = random(&[1, 2, 13, 8], 6)?;
    let v = random(&[1, 2, 13, 8], 7)?;
    let masks = [
        AttentionMask::Causal,
        AttentionMask::Bidirectional,
        AttentionMask::PrefixLm { prefix_len: 7 },
        AttentionMask::SlidingWindow { window: 3 },
        AttentionMask::SlidingPrefixLm { prefix_len: 7, window: 3 },
        // Two images among the 13 positions, one of them straddling the cached/new boundary.
        AttentionMask::CausalBlocks { window: None, blocks: Blocks::new(vec![2..6, 8..11])? },
        AttentionMask::CausalBlocks { window: Some(3), blocks: Blocks::new(vec![2..6, 8..11])? },
    ];
    for mask in masks {
        let bias = mask.bias(9, 13, DType::F32, &Device::Cpu)?;
        let (whole, _) = scaled_dot_product_attention(&q, &k, &v, bias.as_ref(), 0.3)?;
        for rows in [1, 2, 4, 9] {
            let chunked = attention_in_query_chunks(&q, &k, &v, &mask, None, Scores::scaled(0.3), rows)?;
            let diff = (&whole - chunked)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-6, "{mask:?} in chunks of {rows}: diff {diff}");
            // f64 takes the bias-adding path (not the fused f32 kernels), here with the bias
            // built once by the caller, as a decoder forward shares it across layers.
            let q64 = q.to_dtype(DType::F64)?;
            let (k64, v64) = (k.to_dtype(DType::F64)?, v.to_dtype(DType::F64)?);
            let shared = MaskPlan::uniform(mask.clone(), 2).biases(9, 13, DType::F64, &Device::Cpu)?;
            let chunked =
                attention_in_query_chunks(&q64, &k64, &v64, &mask, shared.bias_of(&mask), Scores::scaled(0.3), rows)?;
            let diff = (&whole - chunked.to_dtype(DType::F32)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-6, "{mask:?} in chunks of {rows} with a shared bias: diff {diff}");
        }
    }
    // A prompt longer than the CPU path's causal chunk (128 rows) and the generic path's (256):
    // chunks that each multiply only the keys their queries see, after 10 cached positions.
    // f32 runs the CPU kernels, f64 the generic path (the GPU's), with the bias built per chunk
    // and shared; the block-diagonal mask leaves positions outside every block (seeing nothing),
    // one of them the last query of a chunk.
    let q = random(&[1, 4, 300, 8], 8)?;
    let k = random(&[1, 2, 310, 8], 9)?;
    let v = random(&[1, 2, 310, 8], 10)?;
    let (q64, k64, v64) = (q.to_dtype(DType::F64)?, k.to_dtype(DType::F64)?, v.to_dtype(DType::F64)?);
    for mask in [
        AttentionMask::Causal,
        AttentionMask::SlidingWindow { window: 50 },
        AttentionMask::PrefixLm { prefix_len: 200 },
        AttentionMask::SlidingPrefixLm { prefix_len: 200, window: 50 },
        AttentionMask::CausalBlocks { window: Some(50), blocks: Blocks::new(vec![20..120, 150..170])? },
        AttentionMask::BlockDiagonal { blocks: Blocks::new(vec![0..100, 140..265, 270..310])? },
    ] {
        let bias = mask.bias(300, 310, DType::F32, &Device::Cpu)?;
        let (whole, _) = scaled_dot_product_attention(&q, &k, &v, bias.as_ref(), 0.3)?;
        // Rows of queries that see no key are NaN in every path; compare the others.
        let seen: Vec<usize> = (0..300).filter(|&i| !mask.visible_keys(10 + i, 310).is_empty()).collect();
        let seen = Tensor::new(seen.iter().map(|&i| i as u32).collect::<Vec<_>>(), &Device::Cpu)?;
        let rows_seen = |t: &Tensor| t.to_dtype(DType::F32)?.index_select(&seen, 2);
        let whole = rows_seen(&whole)?;
        let chunked = attention_in_query_chunks(&q, &k, &v, &mask, None, Scores::scaled(0.3), 1000)?;
        let diff = (&whole - rows_seen(&chunked)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-5, "{mask:?} over 300 queries: diff {diff}");
        let shared = MaskPlan::uniform(mask.clone(), 1).biases(300, 310, DType::F64, &Device::Cpu)?;
        for bias in [None, shared.bias_of(&mask)] {
            let generic = attention_in_query_chunks(&q64, &k64, &v64, &mask, bias, Scores::scaled(0.3), 1000)?;
            let diff = (&whole - rows_seen(&generic)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(
                diff < 1e-5,
                "{mask:?} over 300 queries, generic path (shared bias: {}): diff {diff}",
                bias.is_some()
            );
        }
    }
    Ok(())
}

#[test]
fn causal_weights_are_rows_summing_to_one_and_zero_above_diagonal() -> Result<()> {
    let q = random(&[1, 2, 6, 4], 4)?;
    let k = random(&[1, 2, 6, 4], 5)?;
    let bias = AttentionMask::Causal.bias(6, 6, DType::F32, &Device::Cpu)?;
    let (_, w) = scaled_dot_product_attention(&q, &k, &k, bias.as_ref(), 0.5)?;
    let sums: Vec<f32> = w.sum(D::Minus1)?.flatten_all()?.to_vec1()?;
    assert_close(&sums, &[1.0; 12], 1e-6, "row sums");
    let w: Vec<Vec<f32>> = w.get(0)?.get(1)?.to_vec2()?;
    for (i, row) in w.iter().enumerate() {
        for (j, x) in row.iter().enumerate() {
            if j > i {
                assert_eq!(*x, 0.0, "weight above the diagonal at ({i},{j})");
            }
        }
    }
    Ok(())
}

#[test]
fn masks_state_their_intent() {
    let m = AttentionMask::PrefixLm { prefix_len: 3 };
    assert!(m.allows(0, 2) && m.allows(2, 0) && !m.allows(2, 3) && m.allows(4, 3) && !m.allows(3, 4));
    assert!(AttentionMask::Causal.allows(3, 3) && !AttentionMask::Causal.allows(2, 3));
    assert!(AttentionMask::Bidirectional.allows(0, 9));
    let w = AttentionMask::SlidingWindow { window: 2 };
    assert!(w.allows(5, 4) && !w.allows(5, 3) && !w.allows(4, 5));
    // Gemma 3: an image (positions 2..5) sees itself both ways, text and the next image
    // (6..8) see it causally, and it does not see ahead into the next image.
    let b = AttentionMask::CausalBlocks { window: None, blocks: blocks(vec![2..5, 6..8]) };
    assert!(b.allows(2, 4) && b.allows(3, 0) && !b.allows(4, 5) && !b.allows(4, 6) && b.allows(6, 3) && b.allows(6, 7));
    assert!(!b.allows(5, 6) && !b.allows(1, 2));
    // In a sliding layer the window still bounds the block from below.
    let s = AttentionMask::CausalBlocks { window: Some(2), blocks: blocks(std::iter::once(2..6).collect()) };
    assert!(s.allows(3, 5) && s.allows(3, 2) && !s.allows(4, 2) && s.allows(4, 5));
    assert!(Blocks::new(vec![0..3, 2..4]).is_err() && Blocks::new(std::iter::once(1..1).collect()).is_err());
}

fn blocks(ranges: Vec<std::ops::Range<usize>>) -> Blocks {
    Blocks::new(ranges).expect("disjoint, non-empty blocks")
}

#[test]
fn visible_key_ranges_are_exactly_the_allowed_keys() {
    let masks = [
        AttentionMask::Causal,
        AttentionMask::Bidirectional,
        AttentionMask::PrefixLm { prefix_len: 4 },
        AttentionMask::PrefixLm { prefix_len: 0 },
        AttentionMask::SlidingWindow { window: 3 },
        AttentionMask::SlidingWindow { window: 1 },
        AttentionMask::SlidingPrefixLm { prefix_len: 4, window: 2 },
        AttentionMask::SlidingPrefixLm { prefix_len: 0, window: 3 },
        AttentionMask::CausalBlocks { window: None, blocks: blocks(vec![1..3, 4..7]) },
        AttentionMask::CausalBlocks { window: Some(2), blocks: blocks(vec![1..3, 4..7]) },
        AttentionMask::CausalBlocks { window: Some(1), blocks: blocks(std::iter::once(0..9).collect()) },
    ];
    for m in masks {
        for kv_len in [1usize, 5, 9] {
            for q in 0..kv_len + 2 {
                let r = m.visible_keys(q, kv_len);
                for k in 0..kv_len {
                    assert_eq!(r.contains(&k), m.allows(q, k), "{m:?} q={q} k={k} kv_len={kv_len}: {r:?}");
                }
                assert!(r.end <= kv_len, "{m:?} q={q}: {r:?} past {kv_len}");
            }
        }
    }
}

#[test]
fn causal_bias_respects_the_cache_offset() -> Result<()> {
    // Two new queries after three cached positions see keys 0..=3 and 0..=4.
    let b = AttentionMask::Causal.bias(2, 5, DType::F32, &Device::Cpu)?.expect("masked");
    let b: Vec<Vec<f32>> = b.to_vec2()?;
    assert_eq!(b[0][3], 0.0);
    assert!(b[0][4].is_infinite());
    assert!(b[1].iter().all(|x| *x == 0.0));
    // A single decode step needs no mask at all.
    assert!(AttentionMask::Causal.bias(1, 9, DType::F32, &Device::Cpu)?.is_none());
    Ok(())
}

fn rope(style: RopeStyle, scaling: RopeScaling) -> Result<RotaryEmbedding> {
    let cfg = RopeConfig { theta: 10_000.0, scaling, style, mrope: None };
    Ok(RotaryEmbedding::new(&cfg, 8, DType::F32, &Device::Cpu)?)
}

#[test]
fn rope_kernels_match_their_slow_twins() -> Result<()> {
    for style in [RopeStyle::Half, RopeStyle::Interleaved] {
        let r = rope(style, RopeScaling::Default)?;
        let x = random(&[2, 3, 5, 8], 7)?;
        let at = r.at_offset(11, 5)?;
        let diff = (at.apply(&x)? - at.apply_slow(&x)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "{style:?}: {diff}");
    }
    Ok(())
}

/// The CPU rotation of a few positions (decode, a batched step's rows) runs on the calling
/// thread; it computes, bit for bit, what Candle's rayon op computes, up to and past the
/// switch-over.
#[test]
fn few_position_rope_is_candles_rope_bit_for_bit() -> Result<()> {
    use tessera_decoder::rope::RopeAngles;
    for style in [RopeStyle::Half, RopeStyle::Interleaved] {
        for t in [1usize, 5, 16, 64, 65] {
            let angles = (random(&[t, 4], 60 + t as u64)? * 40.0)?;
            let at = RopeAngles::from_angles(&angles, style, 8, DType::F32)?;
            let x = random(&[1, 3, t, 8], 70 + t as u64)?;
            let (cos, sin) = (angles.cos()?, angles.sin()?);
            let candle = match style {
                RopeStyle::Half => candle_nn::rotary_emb::rope(&x, &cos, &sin)?,
                RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?,
            };
            let bits = |t: &Tensor| -> Result<Vec<u32>> {
                Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().map(|v| v.to_bits()).collect())
            };
            assert_eq!(bits(&at.apply(&x)?)?, bits(&candle)?, "{style:?}, {t} positions");
            // The same rotation of the (b, t, heads, d) layout a batched step keeps.
            let token_major = at.apply_token_major(&x.transpose(1, 2)?.contiguous()?)?;
            assert_eq!(token_major.dims(), &[1, t, 3, 8]);
            assert_eq!(bits(&token_major.transpose(1, 2)?)?, bits(&candle)?, "{style:?}, {t} positions, token-major");
        }
        // No positions: nothing to rotate (Candle's op would split its input into chunks of 0).
        let none = RopeAngles::from_angles(&Tensor::zeros((0, 4), DType::F32, &Device::Cpu)?, style, 8, DType::F32)?;
        assert_eq!(none.apply(&Tensor::zeros((1, 3, 0, 8), DType::F32, &Device::Cpu)?)?.dims(), &[1, 3, 0, 8]);
    }
    Ok(())
}

#[test]
fn rope_scores_depend_only_on_relative_offset() -> Result<()> {
    let scaling = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 16,
    };
    for (style, scaling) in [(RopeStyle::Half, RopeScaling::Default), (RopeStyle::Interleaved, scaling)] {
        let r = rope(style, scaling)?;
        let q = random(&[1, 1, 1, 8], 8)?;
        let k = random(&[1, 1, 1, 8], 9)?;
        let score = |m: usize, n: usize| -> Result<f32> {
            let s = (r.at_offset(m, 1)?.apply(&q)? * r.at_offset(n, 1)?.apply(&k)?)?.sum_all()?;
            Ok(s.to_scalar::<f32>()?)
        };
        let base = score(5, 2)?;
        for shift in [1, 7, 30] {
            let s = score(5 + shift, 2 + shift)?;
            assert!((s - base).abs() < 1e-4, "{style:?}: shift {shift}: {s} vs {base}");
        }
        assert!((score(5, 4)? - base).abs() > 1e-3, "a different offset should change the score");
    }
    Ok(())
}

#[test]
fn interleaved_rope_on_permuted_rows_equals_half_rope() -> Result<()> {
    // llama.cpp permutes q/k rows so that pairs (i, i+d/2) become (2i, 2i+1).
    let half = rope(RopeStyle::Half, RopeScaling::Default)?;
    let inter = rope(RopeStyle::Interleaved, RopeScaling::Default)?;
    let x = random(&[1, 1, 3, 8], 10)?;
    let perm: Vec<u32> = (0..4).flat_map(|i| [i, i + 4]).collect();
    let perm = Tensor::new(perm.as_slice(), &Device::Cpu)?;
    let a = half.at_offset(2, 3)?.apply(&x)?.index_select(&perm, 3)?;
    let b = inter.at_offset(2, 3)?.apply(&x.index_select(&perm, 3)?.contiguous()?)?;
    let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
    assert!(diff < 1e-6, "{diff}");
    Ok(())
}

#[test]
fn llama3_scaling_keeps_high_and_divides_low_frequencies() {
    let base = RopeConfig { theta: 500_000.0, ..Default::default() }.inv_freq(16);
    let scaled = RopeConfig {
        theta: 500_000.0,
        scaling: RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 32,
        },
        style: RopeStyle::Half,
        mrope: None,
    }
    .inv_freq(16);
    assert_eq!(scaled[0], base[0], "the highest frequency is untouched");
    assert!((scaled[7] - base[7] / 8.0).abs() < 1e-12, "the lowest frequency is divided by the factor");
}

#[test]
fn rms_norm_matches_slow_twin() -> Result<()> {
    let w = random(&[16], 11)?;
    for style in [NormStyle::Plain, NormStyle::OnePlusWeight] {
        let n = RmsNorm::new(w.clone(), 1e-5, style)?;
        let x = random(&[2, 3, 16], 12)?;
        let diff = (n.forward(&x)? - n.forward_slow(&x)?)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-5, "{style:?}: {diff}");
    }
    Ok(())
}

/// The CPU f32 RMSNorm (rows on the kernels' pool) gives Candle's `rms_norm` bit for bit: a
/// row alone, the rows a batched decode step has (on the calling thread in Candle, split
/// across the pool here), past the 32 rows where Candle goes to rayon, strided input, odd widths.
#[test]
fn rms_norm_is_candles_bit_for_bit() -> Result<()> {
    for (rows, dim) in [(1, 576), (3, 7), (16, 576), (33, 64), (100, 13)] {
        let w = random(&[dim], 30 + dim as u64)?;
        let n = RmsNorm::new(w.clone(), 1e-5, NormStyle::Plain)?;
        let x = random(&[rows, dim], 40 + rows as u64)?;
        let bits = |t: &Tensor| -> Result<Vec<u32>> {
            Ok(t.flatten_all()?.to_vec1::<f32>()?.into_iter().map(f32::to_bits).collect())
        };
        assert_eq!(bits(&n.forward(&x)?)?, bits(&candle_nn::ops::rms_norm(&x, &w, 1e-5)?)?, "{rows}×{dim}");
        let xt = random(&[dim, rows], 50)?.t()?;
        let want = candle_nn::ops::rms_norm(&xt.contiguous()?, &w, 1e-5)?;
        assert_eq!(bits(&n.forward(&xt)?)?, bits(&want)?, "{rows}×{dim}, strided");
    }
    Ok(())
}

/// M-RoPE against transformers (scripts/reference_mrope.py → tests/fixtures/mrope_reference.json):
/// Qwen2-VL's sectioned and Qwen3-VL's interleaved layouts, on positions of text, a 2×3 image
/// grid and text continuing after it.
#[test]
fn mrope_matches_transformers_for_qwen2_vl_and_qwen3_vl() -> Result<()> {
    use tessera_decoder::rope::MRope;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/mrope_reference.json");
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let n = |k: &str| fx[k].as_u64().map(|v| v as usize).ok_or_else(|| anyhow::anyhow!("{k}"));
    let (head_dim, heads) = (n("head_dim")?, n("heads")?);
    let floats = |v: &serde_json::Value| -> Vec<f32> {
        v.as_array().into_iter().flatten().filter_map(|x| x.as_f64()).map(|x| x as f32).collect()
    };
    let section: Vec<usize> = serde_json::from_value(fx["mrope_section"].clone())?;
    let positions: Vec<Vec<u32>> = serde_json::from_value(fx["positions"].clone())?;
    let t = positions[0].len();
    let pos = Tensor::new(positions.clone(), &Device::Cpu)?;
    let q = Tensor::from_vec(floats(&fx["q"]), (1, heads, t, head_dim), &Device::Cpu)?;
    for (case, interleaved) in [("qwen2_vl", false), ("qwen3_vl", true)] {
        let mrope = MRope { section: [section[0], section[1], section[2]], interleaved };
        let cfg = RopeConfig { theta: fx["theta"].as_f64().unwrap_or(0.0), mrope: Some(mrope), ..Default::default() };
        let rope = RotaryEmbedding::new(&cfg, head_dim, DType::F32, &Device::Cpu)?;
        let angles = rope.at(&pos)?;
        let expected = floats(&fx["cases"][case]["rotated"]);
        assert_eq!(expected.len(), heads * t * head_dim, "{case}");
        for (what, got) in [("kernel", angles.apply(&q)?), ("slow twin", angles.apply_slow(&q)?)] {
            assert_close(&got.flatten_all()?.to_vec1::<f32>()?, &expected, 1e-5, &format!("{case} {what}"));
        }
        // Text (all streams equal) rotates exactly as one-stream RoPE at those positions.
        let text = Tensor::new(&positions[0][..3], &Device::Cpu)?;
        let one = rope.at(&text)?.apply(&q.narrow(2, 0, 3)?)?;
        let three =
            rope.at(&Tensor::new(vec![positions[0][..3].to_vec(); 3], &Device::Cpu)?)?.apply(&q.narrow(2, 0, 3)?)?;
        assert_eq!(one.flatten_all()?.to_vec1::<f32>()?, three.flatten_all()?.to_vec1::<f32>()?, "{case}");
    }
    // A section that does not cover head_dim/2 is refused.
    let bad = RopeConfig { mrope: Some(MRope { section: [1, 2, 3], interleaved: false }), ..Default::default() };
    assert!(RotaryEmbedding::new(&bad, head_dim, DType::F32, &Device::Cpu).is_err());
    Ok(())
}

#[test]
fn soft_capped_scores_follow_cap_tanh_and_a_huge_cap_changes_nothing() -> Result<()> {
    use tessera_decoder::attention::{capped_attention, Scores};
    let q = random(&[1, 2, 5, 8], 21)?;
    let k = random(&[1, 1, 5, 8], 22)?;
    let v = random(&[1, 1, 5, 8], 23)?;
    let bias = AttentionMask::Causal.bias(5, 5, DType::F32, &Device::Cpu)?;
    let (plain, wp) = scaled_dot_product_attention(&q, &k, &v, bias.as_ref(), 0.7)?;
    let (huge, wh) = capped_attention(&q, &k, &v, bias.as_ref(), Scores { scale: 0.7, softcap: Some(1e6) })?;
    assert!((&plain - &huge)?.abs()?.max_all()?.to_scalar::<f32>()? < 1e-5);
    assert!((&wp - &wh)?.abs()?.max_all()?.to_scalar::<f32>()? < 1e-6);
    // Query row 4 (sees all 5 keys) of head 0, by hand: softmax(cap · tanh(0.7 q·k / cap)).
    let cap = 0.5f32;
    let (_, w) = capped_attention(&q, &k, &v, bias.as_ref(), Scores { scale: 0.7, softcap: Some(cap as f64) })?;
    let qr: Vec<f32> = q.get(0)?.get(0)?.get(4)?.to_vec1()?;
    let ks: Vec<Vec<f32>> = k.get(0)?.get(0)?.to_vec2()?;
    let s: Vec<f32> =
        ks.iter().map(|kr| cap * (0.7 * qr.iter().zip(kr).map(|(a, b)| a * b).sum::<f32>() / cap).tanh()).collect();
    let m = s.iter().cloned().fold(f32::MIN, f32::max);
    let z: f32 = s.iter().map(|x| (x - m).exp()).sum();
    let expected: Vec<f32> = s.iter().map(|x| (x - m).exp() / z).collect();
    assert_close(&w.get(0)?.get(0)?.get(4)?.to_vec1::<f32>()?, &expected, 1e-6, "capped weights");
    Ok(())
}

/// An f16 cache stores what it is given rounded to f16 (half the bytes of an f32 one), keeps
/// its dtype through `copy_prefix`, and returns views the attention reads as they are.
#[test]
fn an_f16_kv_cache_stores_rounded_keys_and_values_in_half_the_bytes() -> Result<()> {
    use tessera_decoder::KvCache;
    let (k, v) = (random(&[1, 2, 5, 8], 31)?, random(&[1, 2, 5, 8], 32)?);
    let mut f32_cache = KvCache::new(1, 64);
    let mut f16_cache = KvCache::new(1, 64).with_dtype(Some(DType::F16));
    f32_cache.append(0, &k, &v)?;
    let (kc, vc) = f16_cache.append(0, &k, &v)?;
    assert_eq!((kc.dtype(), vc.dtype()), (DType::F16, DType::F16));
    let rounded = |t: &Tensor| -> Result<Vec<f32>> {
        Ok(t.flatten_all()?.to_vec1::<f32>()?.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect())
    };
    assert_eq!(kc.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?, rounded(&k)?);
    assert_eq!(vc.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?, rounded(&v)?);
    assert_eq!(f16_cache.bytes() * 2, f32_cache.bytes());
    let copy = f16_cache.copy_prefix(3)?;
    assert_eq!((copy.dtype(), copy.len()), (Some(DType::F16), 3));
    Ok(())
}

/// Appends read keys and values in whatever strides they come (a transposed projection, one
/// row of a batch, an offset view) and land where a contiguous copy would, across the buffer's
/// growth, in each stored dtype: the cache holds exactly `cat(appended).to_dtype(stored)`.
#[test]
fn kv_cache_appends_take_strided_inputs_across_growth_in_every_dtype() -> Result<()> {
    use tessera_decoder::KvCache;
    for stored in [None, Some(DType::F16), Some(DType::BF16)] {
        let mut cache = KvCache::new(2, 600).with_dtype(stored);
        let (mut ks, mut vs) = (Vec::new(), Vec::new());
        // 5 + 1 + 300 crosses the first capacity (256); 300 + … the second.
        for (step, t) in [5usize, 1, 300, 1, 2].into_iter().enumerate() {
            let seed = 40 + step as u64;
            // (1, t, heads, d) seen as (1, heads, t, d); an offset, narrowed view. 13 values a
            // row: the F16C conversion's 8 lanes and a tail.
            let k = random(&[1, t, 2, 13], seed)?.transpose(1, 2)?;
            let v = random(&[1, 2, t + 3, 13], seed + 10)?.narrow(2, 3, t)?;
            assert!(t == 1 || (!k.is_contiguous() && !v.is_contiguous()));
            cache.append(0, &k.contiguous()?, &v.contiguous()?)?;
            let (kc, vc) = cache.append(1, &k, &v)?;
            ks.push(k);
            vs.push(v);
            let dtype = stored.unwrap_or(DType::F32);
            for (got, sent, what) in [(&kc, &ks, "keys"), (&vc, &vs, "values")] {
                let want = Tensor::cat(sent, 2)?.to_dtype(dtype)?;
                assert_eq!(got.dtype(), dtype, "{what}");
                assert_eq!(got.dims(), want.dims(), "{what}");
                let bits = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
                assert_eq!(bits(got)?, bits(&want)?, "{what}, {stored:?}, step {step}");
            }
        }
        assert_eq!(cache.len(), 309);
    }
    Ok(())
}

/// A batched step's `append_row` writes one position of a `(1, heads, n, d)` projection (in
/// any strides) exactly where `append` of that narrowed row would, across growth and in each
/// stored dtype; `layer` gives the buffers and the positions filled; a row past the
/// projection is an error.
#[test]
fn appending_one_row_of_a_batch_equals_appending_that_row_alone() -> Result<()> {
    use tessera_decoder::KvCache;
    for stored in [None, Some(DType::F16), Some(DType::BF16)] {
        let (mut by_row, mut alone) =
            (KvCache::new(1, 600).with_dtype(stored), KvCache::new(1, 600).with_dtype(stored));
        assert!(by_row.layer(0).is_none());
        for step in 0..260u64 {
            // (1, n, heads, d) seen as (1, heads, n, d): strided, as the projections come.
            let k = random(&[1, 4, 2, 13], 70 + step)?.transpose(1, 2)?;
            let v = random(&[1, 4, 2, 13], 900 + step)?.transpose(1, 2)?;
            let row = (step % 4) as usize;
            by_row.append_row(0, &k, &v, row)?;
            alone.append(0, &k.narrow(2, row, 1)?, &v.narrow(2, row, 1)?)?;
        }
        let (kb, vb, len) = by_row.layer(0).expect("appended");
        let (ka, va, la) = alone.layer(0).expect("appended");
        assert_eq!((len, la), (260, 260));
        for (got, want) in [(kb, ka), (vb, va)] {
            let bits = |t: &Tensor| -> Result<Vec<f32>> {
                Ok(t.narrow(2, 0, 260)?.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?)
            };
            assert_eq!(bits(got)?, bits(want)?, "{stored:?}");
        }
        let k = random(&[1, 2, 4, 13], 1)?;
        assert!(by_row.append_row(0, &k, &k, 4).is_err(), "row 4 of 4");
        assert_eq!(by_row.len(), 260);
    }
    Ok(())
}

/// `copy_prefix` keeps exactly the positions asked for (what the prefix cache stores);
/// `resume_from` holds the same values with room to append, so the sequence continuing from it
/// writes its next position in place (its buffers' bytes do not change) and reads what an
/// exact copy that grew would read.
#[test]
fn a_resumed_prefix_appends_in_place_and_holds_what_an_exact_copy_holds() -> Result<()> {
    use tessera_decoder::KvCache;
    for stored in [None, Some(DType::F16)] {
        let mut cache = KvCache::new(2, 600).with_dtype(stored);
        let (k, v) = (random(&[1, 2, 40, 8], 81)?, random(&[1, 2, 40, 8], 82)?);
        for layer in 0..2 {
            cache.append(layer, &k, &v)?;
        }
        let (mut exact, mut resumed) = (cache.copy_prefix(30)?, cache.resume_from(30)?);
        let per_position = 2 * 2 * 2 * 8 * stored.map_or(4, |d| d.size_in_bytes());
        assert_eq!(exact.bytes(), 30 * per_position, "{stored:?}");
        let before = resumed.bytes();
        assert!(before >= 31 * per_position, "{stored:?}: room for the next position");
        let (k1, v1) = (random(&[1, 2, 1, 8], 83)?, random(&[1, 2, 1, 8], 84)?);
        for layer in 0..2 {
            let (ke, ve) = exact.append(layer, &k1, &v1)?;
            let (kr, vr) = resumed.append(layer, &k1, &v1)?;
            let bits = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?) };
            assert_eq!((bits(&ke)?, bits(&ve)?), (bits(&kr)?, bits(&vr)?), "{stored:?}, layer {layer}");
        }
        assert_eq!(resumed.bytes(), before, "{stored:?}: appended in place");
        assert_eq!((exact.len(), resumed.len()), (31, 31));
        assert!(cache.resume_from(41).is_err(), "more positions than cached");
    }
    Ok(())
}

/// A cache that reserves a prompt plus what may follow allocates its buffers once, at the first
/// write, with that many positions (the context at most): appending up to it never regrows
/// them (their bytes do not change), and what it holds equals what a doubling cache holds.
#[test]
fn a_reserved_cache_allocates_once_and_holds_what_a_growing_one_holds() -> Result<()> {
    use tessera_decoder::KvCache;
    let per_position = 2 * 3 * 8 * 4; // keys + values, 3 heads of 8, f32
    let (mut reserved, mut growing) = (KvCache::new(1, 1000), KvCache::new(1, 1000));
    reserved.reserve(300 + 64);
    let (k, v) = (random(&[1, 3, 300, 8], 91)?, random(&[1, 3, 300, 8], 92)?);
    reserved.append(0, &k, &v)?;
    growing.append(0, &k, &v)?;
    assert_eq!(reserved.bytes(), 364 * per_position, "the reserve, at the prompt's write");
    assert_eq!(growing.bytes(), 300 * per_position, "exactly the prompt, without one");
    for step in 0..64u64 {
        let (k1, v1) = (random(&[1, 3, 1, 8], 100 + step)?, random(&[1, 3, 1, 8], 200 + step)?);
        let (kr, vr) = reserved.append(0, &k1, &v1)?;
        let (kg, vg) = growing.append(0, &k1, &v1)?;
        let bits = |t: &Tensor| -> Result<Vec<f32>> { Ok(t.flatten_all()?.to_vec1()?) };
        assert_eq!((bits(&kr)?, bits(&vr)?), (bits(&kg)?, bits(&vg)?), "step {step}");
    }
    assert_eq!(reserved.bytes(), 364 * per_position, "no regrowth up to the reserve");
    assert_eq!(growing.bytes(), 600 * per_position, "doubled at the first decode step");
    // Past the reserve it grows as any cache does; a reserve past the context is the context.
    reserved.append(0, &random(&[1, 3, 1, 8], 7)?, &random(&[1, 3, 1, 8], 8)?)?;
    assert_eq!(reserved.bytes(), 728 * per_position);
    let mut whole = KvCache::new(1, 50);
    whole.reserve(10_000);
    whole.append(0, &random(&[1, 3, 2, 8], 9)?, &random(&[1, 3, 2, 8], 10)?)?;
    assert_eq!(whole.bytes(), 50 * per_position);
    // A copy continuing elsewhere does not inherit the reserve: exactly what was asked for.
    assert_eq!(reserved.copy_prefix(100)?.bytes(), 100 * per_position);
    Ok(())
}
