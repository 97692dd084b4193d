//! The fused decode attention against a plain f64 softmax-attention, and its `exp`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tessera_kernels::attention::{attend, AttentionShape, KvLayout};
use tessera_kernels::ops::exp;
use tessera_kernels::ThreadPool;

#[test]
fn exp_is_within_2e_7_relative_on_the_softmax_range() {
    let mut x = -87.0f32;
    while x <= 0.0 {
        let (got, want) = (exp(x) as f64, (x as f64).exp());
        assert!(((got - want) / want).abs() < 2e-7, "exp({x}) = {got}, want {want}");
        x += 0.0137;
    }
    assert_eq!(exp(-200.0), 0.0);
}

#[test]
fn fused_attention_equals_the_f64_reference_for_gqa_masks_and_cache_views() {
    let mut rng = StdRng::seed_from_u64(5);
    // (heads, kv_heads, tq, tk, window): MHA, GQA, MQA; one query and several; a sliding window.
    // Head widths: a multiple of 8 (the AVX2 path), one that is not (the portable path), and
    // one past 64 columns (two column slabs). Groups of up to 4 heads are computed together:
    // groups of 7 and 8 take two passes, and widths of 40 and 24 end in narrower strips.
    let cases = [
        (4, 4, 1, 9, None, 16),
        (6, 2, 3, 11, None, 12),
        (4, 1, 2, 7, Some(3), 72),
        (7, 1, 2, 9, None, 16),
        (9, 3, 1, 10, None, 40),
        (8, 1, 3, 13, Some(5), 24),
    ];
    for (heads, kv_heads, tq, tk, window, d) in cases {
        let (b, cap) = (2, 13); // the cache holds `cap` rows per head, `tk` of them filled
        let q: Vec<f32> = (0..b * heads * tq * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let k: Vec<f32> = (0..b * kv_heads * cap * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let v: Vec<f32> = (0..b * kv_heads * cap * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let layout = KvLayout { offset: 0, batch_stride: kv_heads * cap * d, head_stride: cap * d, row_stride: d };
        let visible = |qp: usize, kp: usize| kp <= qp && window.is_none_or(|w| qp - kp < w);
        let range = |qp: usize| (0..tk).find(|&j| visible(qp, j)).unwrap_or(0)..qp + 1;
        let shape = AttentionShape { batch: b, heads, kv_heads, tq, tk, head_dim: d };
        let scale = 0.25f32;
        for threads in [1, 2, 3] {
            let mut out = vec![0f32; b * tq * heads * d];
            attend(&ThreadPool::new(threads), shape, &q, &k, layout, &v, layout, scale, &range, &mut out)
                .expect("attend");
            for bi in 0..b {
                for h in 0..heads {
                    let kvh = h / (heads / kv_heads);
                    for i in 0..tq {
                        let qp = tk - tq + i;
                        let qrow = &q[((bi * heads + h) * tq + i) * d..][..d];
                        let row = |t: &[f32], j: usize| {
                            t[bi * layout.batch_stride + kvh * layout.head_stride + j * d..][..d].to_vec()
                        };
                        let s: Vec<Option<f64>> = (0..tk)
                            .map(|j| {
                                visible(qp, j).then(|| {
                                    row(&k, j).iter().zip(qrow).map(|(a, b)| *a as f64 * *b as f64).sum::<f64>()
                                        * scale as f64
                                })
                            })
                            .collect();
                        let max = s.iter().flatten().fold(f64::NEG_INFINITY, |m, &x| m.max(x));
                        let p: Vec<f64> = s.iter().map(|x| x.map_or(0.0, |x| (x - max).exp())).collect();
                        let total: f64 = p.iter().sum();
                        for c in 0..d {
                            let want: f64 = (0..tk).map(|j| p[j] * row(&v, j)[c] as f64).sum::<f64>() / total;
                            let got = out[((bi * tq + i) * heads + h) * d + c] as f64;
                            assert!(
                                (got - want).abs() < 1e-5,
                                "h{h}/{kv_heads} q{i} c{c} threads {threads}: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn silu_mul_equals_the_f64_formula() {
    use tessera_kernels::ops::silu_mul;
    let n = 40_000; // above the size that is split across threads
    let g: Vec<f32> = (0..n).map(|i| (i as f32 - 20_000.0) / 900.0).collect();
    let u: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0).collect();
    for threads in [1, 2, 3] {
        let mut out = vec![0f32; n];
        silu_mul(&ThreadPool::new(threads), &g, &u, &mut out).expect("silu_mul");
        for i in 0..n {
            let (x, y) = (g[i] as f64, u[i] as f64);
            let want = x / (1.0 + (-x).exp()) * y;
            assert!((out[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "{x}, {y}: {} vs {want}", out[i]);
        }
    }
}

#[test]
fn gelu_tanh_equals_the_f64_formula() {
    use tessera_kernels::ops::gelu_tanh;
    let n = 40_000; // above the size that is split across threads
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 20_000.0) / 1500.0).collect();
    for threads in [1, 2, 3] {
        let mut out = vec![0f32; n];
        gelu_tanh(&ThreadPool::new(threads), &x, &mut out).expect("gelu");
        for i in 0..n {
            let v = x[i] as f64;
            let want = 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh());
            // f32 evaluation: a few ulps of the result, or of 1e-7 near the zero crossing.
            assert!((out[i] as f64 - want).abs() <= 1e-6 * want.abs() + 1e-7, "{v}: {} vs {want}", out[i]);
        }
    }
}

/// A batched decode step's attention: rows with caches of different lengths (and a sliding
/// window on some), each row bit for bit what `attend` gives that row alone, on 1–3 threads.
#[test]
fn attend_rows_gives_each_row_what_attend_gives_it_alone() {
    use tessera_kernels::attention::{attend_rows, RowAttention};
    let mut rng = StdRng::seed_from_u64(9);
    let (heads, kv_heads, d, scale) = (6, 2, 16, 0.3f32);
    let lens = [1usize, 5, 12, 7, 30];
    let caches: Vec<(Vec<f32>, Vec<f32>, usize)> = lens
        .iter()
        .map(|&tk| {
            let cap = tk + 3; // views over a larger buffer, as the KV cache gives
            let k: Vec<f32> = (0..kv_heads * cap * d).map(|_| rng.random_range(-1.0..1.0)).collect();
            let v: Vec<f32> = (0..kv_heads * cap * d).map(|_| rng.random_range(-1.0..1.0)).collect();
            (k, v, cap)
        })
        .collect();
    let q: Vec<f32> = (0..lens.len() * heads * d).map(|_| rng.random_range(-1.0..1.0)).collect();
    let window = |i: usize| (i % 2 == 1).then_some(4usize);
    let layout =
        |cap: usize| KvLayout { offset: 0, batch_stride: kv_heads * cap * d, head_stride: cap * d, row_stride: d };
    let visible = |i: usize, tk: usize| window(i).map_or(0, |w| tk.saturating_sub(w))..tk;
    for threads in [1, 2, 3] {
        let pool = ThreadPool::new(threads);
        let rows: Vec<RowAttention> = caches
            .iter()
            .zip(lens)
            .enumerate()
            .map(|(i, ((k, v, cap), tk))| RowAttention {
                q: &q[i * heads * d..][..heads * d],
                k,
                kl: layout(*cap),
                v,
                vl: layout(*cap),
                tk,
                visible: visible(i, tk),
            })
            .collect();
        let mut out = vec![0f32; lens.len() * heads * d];
        attend_rows(&pool, &rows, heads, kv_heads, d, scale, &mut out).expect("attend_rows");
        for (i, ((k, v, cap), tk)) in caches.iter().zip(lens).enumerate() {
            let shape = AttentionShape { batch: 1, heads, kv_heads, tq: 1, tk, head_dim: d };
            let mut alone = vec![0f32; heads * d];
            let range = |_qp: usize| visible(i, tk);
            let qi = &q[i * heads * d..][..heads * d];
            attend(&pool, shape, qi, k, layout(*cap), v, layout(*cap), scale, &range, &mut alone).expect("attend");
            let got = &out[i * heads * d..][..heads * d];
            assert!(got.iter().zip(&alone).all(|(a, b)| a.to_bits() == b.to_bits()), "row {i}, {threads} threads");
        }
    }
}

/// An f16 cache: `attend` and `attend_rows` over f16 keys and values give, bit for bit, what
/// they give over f32 copies of the same (rounded) values, for head widths on the AVX2 path
/// (16, 72) and off it (12), on 1–3 threads: the f16 loads convert, the arithmetic is the f32
/// kernel's.
#[test]
fn f16_caches_attend_exactly_like_f32_caches_of_the_same_values() {
    use half::f16;
    use tessera_kernels::attention::{attend_rows, RowAttention};
    let mut rng = StdRng::seed_from_u64(21);
    for (heads, kv_heads, tq, tk, d) in [(6, 2, 1, 37, 16), (4, 4, 3, 11, 12), (9, 3, 1, 70, 72)] {
        let (b, cap) = (2, tk + 5);
        let q: Vec<f32> = (0..b * heads * tq * d).map(|_| rng.random_range(-1.0..1.0)).collect();
        let half_vals = |rng: &mut StdRng| -> Vec<f16> {
            (0..b * kv_heads * cap * d).map(|_| f16::from_f32(rng.random_range(-2.0..2.0))).collect()
        };
        let (k16, v16) = (half_vals(&mut rng), half_vals(&mut rng));
        let widen = |x: &[f16]| x.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
        let (k32, v32) = (widen(&k16), widen(&v16));
        let layout = KvLayout { offset: 0, batch_stride: kv_heads * cap * d, head_stride: cap * d, row_stride: d };
        let shape = AttentionShape { batch: b, heads, kv_heads, tq, tk, head_dim: d };
        let causal = |qp: usize| 0..qp + 1;
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
        for threads in [1, 2, 3] {
            let pool = ThreadPool::new(threads);
            let mut from16 = vec![0f32; b * tq * heads * d];
            let mut from32 = vec![0f32; b * tq * heads * d];
            attend(&pool, shape, &q, &k16, layout, &v16, layout, 0.2, &causal, &mut from16).expect("attend f16");
            attend(&pool, shape, &q, &k32, layout, &v32, layout, 0.2, &causal, &mut from32).expect("attend f32");
            assert!(same(&from16, &from32), "attend, heads {heads}/{kv_heads}, d {d}, {threads} threads");
            if tq == 1 {
                // Each batch entry as a row over its own view (an offset into the buffer).
                #[allow(clippy::too_many_arguments)]
                fn rows<'a, E>(
                    q: &'a [f32],
                    k: &'a [E],
                    v: &'a [E],
                    l: KvLayout,
                    b: usize,
                    heads: usize,
                    d: usize,
                    tk: usize,
                ) -> Vec<RowAttention<'a, E>> {
                    (0..b)
                        .map(|bi| {
                            let view = KvLayout { offset: bi * l.batch_stride, ..l };
                            RowAttention {
                                q: &q[bi * heads * d..][..heads * d],
                                k,
                                kl: view,
                                v,
                                vl: view,
                                tk,
                                visible: 0..tk,
                            }
                        })
                        .collect()
                }
                let mut out16 = vec![0f32; b * heads * d];
                let mut out32 = vec![0f32; b * heads * d];
                let r16 = rows(&q, &k16, &v16, layout, b, heads, d, tk);
                let r32 = rows(&q, &k32, &v32, layout, b, heads, d, tk);
                attend_rows(&pool, &r16, heads, kv_heads, d, 0.2, &mut out16).expect("rows f16");
                attend_rows(&pool, &r32, heads, kv_heads, d, 0.2, &mut out32).expect("rows f32");
                assert!(same(&out16, &out32), "attend_rows, d {d}, {threads} threads");
                assert!(same(&out16, &from16), "attend_rows vs attend, d {d}, {threads} threads");
            }
        }
    }
}
