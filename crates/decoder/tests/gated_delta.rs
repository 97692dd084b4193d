//! Gated DeltaNet (Qwen3.5's linear-attention layer) against transformers'
//! `Qwen3_5GatedDeltaNet` (scripts/reference_gated_delta.py → tests/fixtures/gated_delta): the
//! output of an 11-token sequence from an empty state, with as many value heads as key heads and
//! with value heads sharing key heads; and the per-sequence state: the sequence run in pieces, or
//! a token at a time as decoding runs it, gives the outputs of the whole and the same state, bit
//! for bit under the kernels' row-invariant matmuls (as batched decoding runs them).

use std::path::PathBuf;

use candle_core::{DType, Device, IndexOp, Tensor};
use tessera_decoder::{DeltaState, GatedDeltaConfig, GatedDeltaNet, Weights};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gated_delta").join(name)
}

fn layer(prefix: &str, value_heads: usize) -> Result<GatedDeltaNet> {
    let vb = Weights::from_safetensors(&[fixture("weights.safetensors")], DType::F32, &Device::Cpu)?;
    let cfg = GatedDeltaConfig {
        hidden_size: 32,
        key_heads: 2,
        value_heads,
        key_head_dim: 8,
        value_head_dim: 6,
        conv_kernel: 4,
        eps: 1e-6,
        layout: Default::default(),
    };
    Ok(GatedDeltaNet::new(&cfg, &vb.pp(format!("{prefix}linear_attn")))?)
}

fn max_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

/// The layer's output for `x` run in pieces of the given lengths, one state throughout.
fn in_pieces(net: &GatedDeltaNet, x: &Tensor, pieces: &[usize]) -> Result<(Tensor, DeltaState)> {
    let mut state = net.new_state();
    let (mut at, mut outs) = (0, Vec::new());
    for &n in pieces {
        outs.push(net.forward(&x.i((.., at..at + n, ..))?, &mut state)?);
        at += n;
    }
    assert_eq!(at, x.dim(1)?, "the pieces cover the sequence");
    Ok((Tensor::cat(&outs, 1)?, state))
}

#[test]
fn gated_delta_net_matches_transformers() -> Result<()> {
    let reference = candle_core::safetensors::load(fixture("reference.safetensors"), &Device::Cpu)?;
    let x = &reference["x"];
    for (prefix, value_heads, key) in [("", 2, "y"), ("grouped.", 4, "y_grouped")] {
        let net = layer(prefix, value_heads)?;
        let (y, _) = in_pieces(&net, x, &[11])?;
        let d = max_diff(&y, &reference[key])?;
        assert!(d < 1e-5, "{key}: the layer's output differs from transformers' by {d}");
        let scale = reference[key].abs()?.max_keepdim(2)?.flatten_all()?.min(0)?.to_scalar::<f32>()?;
        assert!(scale > 1e-2, "{key}: the reference output is too small to test against ({scale})");
    }
    Ok(())
}

#[test]
fn a_sequence_in_pieces_or_token_by_token_gives_the_whole_ones_outputs_and_state() -> Result<()> {
    let reference = candle_core::safetensors::load(fixture("reference.safetensors"), &Device::Cpu)?;
    let x = &reference["x"];
    let net = layer("grouped.", 4)?;
    let (whole, state) = tessera_decoder::row_invariant(|| in_pieces(&net, x, &[11]))?;
    for pieces in [vec![5, 6], vec![3, 1, 7], vec![1; 11]] {
        let (y, s) = tessera_decoder::row_invariant(|| in_pieces(&net, x, &pieces))?;
        assert_eq!(y.flatten_all()?.to_vec1::<f32>()?, whole.flatten_all()?.to_vec1::<f32>()?, "{pieces:?}");
        assert_eq!(s, state, "{pieces:?}: the state after the sequence");
    }
    // The state is what carries the past: a fresh state on the last token answers otherwise.
    let mut fresh = net.new_state();
    let last = net.forward(&x.i((.., 10..11, ..))?, &mut fresh)?;
    let d = max_diff(&last, &whole.i((.., 10..11, ..))?)?;
    assert!(d > 1e-3, "the last token's output does not depend on the state ({d})");
    assert_eq!(state.bytes(), (56 * 3 + 4 * 8 * 6) * 4);
    Ok(())
}
