//! Micro-benchmark of one quantized matmul: `cargo run --release -p tessera-kernels --example
//! kbench -- [TYPE] [ROWS] [COLS] [TOKENS] [THREADS] [rows|panels]` prints GMAC/s and GB/s of weights read
//! for each instruction set this CPU has, or only the one `TESSERA_KERNELS` names (`avx2`, …).
use std::time::Instant;
use tessera_kernels::{Isa, Layout, QMatrix, QType, ThreadPool};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let t = match args.get(1).map(|s| s.as_str()).unwrap_or("Q4_1") {
        "Q4_0" => QType::Q4_0,
        "Q5_0" => QType::Q5_0,
        "Q5_1" => QType::Q5_1,
        "Q8_0" => QType::Q8_0,
        "Q4_K" => QType::Q4K,
        "Q5_K" => QType::Q5K,
        "Q6_K" => QType::Q6K,
        _ => QType::Q4_1,
    };
    let num = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (rows, cols, m, threads) = (num(2, 1536), num(3, 576), num(4, 1), num(5, 1));
    let nb = rows * cols / t.block_elems();
    let mut data = vec![0u8; nb * t.block_bytes()];
    let mut s = 0x1234_5678u32;
    for b in data.iter_mut() {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        *b = s as u8;
    }
    // Sane f16 scales at the start (and end for Q6_K) of each block.
    for blk in data.chunks_exact_mut(t.block_bytes()) {
        let at = if t == QType::Q6K { 208 } else { 0 };
        blk[at..at + 2].copy_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
    }
    // The layout this CPU prefers, or the one named.
    let w = match args.get(6).map(|s| s.as_str()) {
        Some("rows") => QMatrix::with_layout(t, rows, cols, data, Layout::Rows),
        Some("panels") => QMatrix::with_layout(t, rows, cols, data, Layout::Panels),
        _ => QMatrix::new(t, rows, cols, data),
    }
    .expect("matrix");
    let x: Vec<f32> = (0..m * cols).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let mut out = vec![0f32; m * rows];
    let pool = ThreadPool::new(threads);
    let isas = match std::env::var("TESSERA_KERNELS") {
        Ok(_) => vec![Isa::best()],
        Err(_) => Isa::available(),
    };
    for isa in isas {
        let reps = (2_000_000_000 / (rows * cols * m)).max(3);
        w.matmul_with(isa, &pool, &x, m, &mut out).expect("warm-up");
        let (start, cpu0) = (Instant::now(), thread_cpu_ns());
        for _ in 0..reps {
            w.matmul_with(isa, &pool, &x, m, &mut out).expect("matmul");
        }
        let s = start.elapsed().as_secs_f64() / reps as f64;
        // This thread's time on a CPU (Linux): on a busy machine it leaves out the time the
        // thread waited for one, so with one thread it is the kernel's own cost.
        let cpu = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) => format!("  {:8.1} µs on CPU (this thread)", (b - a) as f64 / reps as f64 / 1e3),
            _ => String::new(),
        };
        println!(
            "{t} {:?} {rows}x{cols} m={m} threads={threads} {:>12}: {:8.1} µs  {:6.1} GMAC/s  {:5.1} GB/s{cpu}",
            w.layout(),
            isa.name(),
            s * 1e6,
            (rows * cols * m) as f64 / s / 1e9,
            w.bytes().len() as f64 / s / 1e9
        );
    }
}

/// Nanoseconds the calling thread has run on a CPU (`/proc/thread-self/schedstat`'s first field).
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat").ok()?.split_whitespace().next()?.parse().ok()
}
