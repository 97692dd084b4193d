//! Micro-benchmark of the dense f32 layers at a vision tower's shapes: `cargo run --release -p
//! tessera-kernels --example densebench -- [TOKENS] [WIDTH] [FFN] [HEADS] [THREADS] [REPS] [attention]` prints
//! each op's time and GFLOP/s (SigLIP-base at 512 px: 1024 768 3072 12); a seventh argument
//! `attention` times attention alone.
use std::time::Instant;
use tessera_kernels::attention::{AttentionShape, KvLayout};
use tessera_kernels::dense::{attend_many, linear, DenseWeight, Epilogue, LinearArgs};
use tessera_kernels::{PackedF32, ThreadPool};

fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

fn lin<'a>(
    x: &'a [f32],
    m: usize,
    k: usize,
    w: DenseWeight<'a>,
    n: usize,
    bias: &'a [f32],
    epilogue: Epilogue,
) -> LinearArgs<'a> {
    LinearArgs { x, m, k, w, n, bias: Some(&bias[..n]), residual: None, epilogue }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (t, w, f, heads, threads, reps) = (num(1, 1024), num(2, 768), num(3, 3072), num(4, 12), num(5, 2), num(6, 5));
    let pool = ThreadPool::new(threads);
    // The process's CPU seconds (all threads; on a shared VM the time the host takes away is
    // not in it, where it is in the wall clock).
    let cpu = || {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let f: Vec<f64> =
            stat.rsplit(')').next().unwrap_or("").split_whitespace().map(|v| v.parse().unwrap_or(0.0)).collect();
        f.get(11).zip(f.get(12)).map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
    };
    let time = |name: &str, flop: f64, run: &mut dyn FnMut()| {
        run();
        let (t0, c0) = (Instant::now(), cpu());
        for _ in 0..reps {
            run();
        }
        let s = t0.elapsed().as_secs_f64() / reps as f64;
        let c = (cpu() - c0) / reps as f64 / threads as f64;
        println!(
            "{name:<28} {:8.2} ms  {:7.1} GFLOP/s   CPU time / threads {:8.2} ms  {:7.1} GFLOP/s",
            s * 1e3,
            flop / s / 1e9,
            c * 1e3,
            flop / c / 1e9
        );
    };
    let x = rand(t * w, 1);
    let h = rand(t * f, 2);
    let (wq, w1, w2) = (rand(w * w, 3), rand(f * w, 4), rand(w * f, 5));
    let b = rand(f.max(w), 6);
    let mut out = vec![0f32; t * f.max(3 * w)];
    let (pq, p1, p2) =
        (PackedF32::new(&wq, w, w).unwrap(), PackedF32::new(&w1, f, w).unwrap(), PackedF32::new(&w2, w, f).unwrap());
    let only_attention = args.get(7).is_some_and(|a| a == "attention");
    for (name, [dq, d1, d2]) in [
        ("rows", [DenseWeight::Rows(&wq), DenseWeight::Rows(&w1), DenseWeight::Rows(&w2)]),
        ("packed", [DenseWeight::Packed(&pq), DenseWeight::Packed(&p1), DenseWeight::Packed(&p2)]),
    ]
    .into_iter()
    .filter(|_| !only_attention)
    {
        time(&format!("linear w->w {name}"), 2.0 * (t * w * w) as f64, &mut || {
            linear(&pool, lin(&x, t, w, dq, w, &b, Epilogue::None), &mut out[..t * w]).unwrap()
        });
        time(&format!("linear w->ffn gelu {name}"), 2.0 * (t * w * f) as f64, &mut || {
            linear(&pool, lin(&x, t, w, d1, f, &b, Epilogue::GeluTanh), &mut out[..t * f]).unwrap()
        });
        time(&format!("linear ffn->w {name}"), 2.0 * (t * w * f) as f64, &mut || {
            linear(&pool, lin(&h, t, f, d2, w, &b, Epilogue::None), &mut out[..t * w]).unwrap()
        });
    }
    let d = w / heads;
    let qkv = rand(t * 3 * w, 7);
    let s = AttentionShape { batch: 1, heads, kv_heads: heads, tq: t, tk: t, head_dim: d };
    let l = |off: usize| KvLayout { offset: off, batch_stride: t * 3 * w, head_stride: d, row_stride: 3 * w };
    let mut o = vec![0f32; t * w];
    time("attention (bidirectional)", 4.0 * (t * t * w) as f64, &mut || {
        attend_many(&pool, s, &qkv, l(0), &qkv, l(w), &qkv, l(2 * w), 0.125, &|_| 0..t, &mut o).unwrap()
    });
}
