//! A persistent thread pool for matmuls: `n − 1` workers started once, each job split into
//! exactly `n` parts (the caller runs part 0), so a decode matmul costs one wake-up and one
//! join, not a task per row. Workers spin briefly between jobs (decode matmuls come every few
//! microseconds), then sleep on a condition variable.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{KernelError, Result};

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// The running job; written only while `generation` is even-settled and no worker reads it.
    job: UnsafeCell<Option<*const Job>>,
    generation: AtomicU64,
    pending: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    sleep_lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written by the submitting thread only while no worker runs a job (under
// `submit`), and read by workers only between the generation bump and their `pending`
// decrement, during which the submitter keeps the pointee alive and does not write.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// A pointer into one output that the pool's parts write, each its own disjoint elements.
pub(crate) struct SendPtr<T>(pub(crate) *mut T);
// SAFETY: shared only for writes to disjoint elements, which every user states at the write.
unsafe impl<T> Sync for SendPtr<T> {}
unsafe impl<T> Send for SendPtr<T> {}

/// Runs `f(r, row r of out)` for each `width`-wide row of `out`: on the calling thread when
/// there are fewer than `min_rows` rows (or one thread), else in one run of contiguous rows
/// per pool thread.
pub fn for_each_row<T: Send>(
    pool: &ThreadPool,
    out: &mut [T],
    width: usize,
    min_rows: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) -> Result<()> {
    if width == 0 {
        return Ok(());
    }
    let rows = out.len() / width;
    if rows < min_rows.max(2) || pool.threads() == 1 {
        for (r, o) in out.chunks_exact_mut(width).enumerate() {
            f(r, o);
        }
        return Ok(());
    }
    let per = rows.div_ceil(pool.threads());
    let dst = SendPtr(out.as_mut_ptr());
    pool.run(&|part| {
        let dst = &dst;
        for r in (part * per).min(rows)..((part + 1) * per).min(rows) {
            // SAFETY: row r's `width` elements lie inside `out` (at least rows · width long);
            // only the part that owns row r makes a slice of them.
            f(r, unsafe { std::slice::from_raw_parts_mut(dst.0.add(r * width), width) });
        }
    })
}

/// Runs `f(b)` for every block `b < blocks`, each pool thread a contiguous run of them in order
/// (the calling thread alone for one block or one thread): for work that reads its own input
/// (a load's file reads) as well as computing, so that no thread waits for another's reads.
/// The error of the lowest block that failed comes back. `f` must not use the pool itself.
pub(crate) fn try_blocks<E: Send>(
    pool: &ThreadPool,
    blocks: usize,
    f: &(dyn Fn(usize) -> std::result::Result<(), E> + Sync),
) -> std::result::Result<(), E> {
    if blocks < 2 || pool.threads() == 1 {
        return (0..blocks).try_for_each(f);
    }
    let per = blocks.div_ceil(pool.threads());
    let failed: Mutex<Option<(usize, E)>> = Mutex::new(None);
    let ran = pool.run(&|part| {
        for b in (part * per).min(blocks)..((part + 1) * per).min(blocks) {
            if let Err(e) = f(b) {
                let mut failed = failed.lock().unwrap_or_else(|e| e.into_inner());
                if failed.as_ref().is_none_or(|(at, _)| b < *at) {
                    *failed = Some((b, e));
                }
                return;
            }
        }
    });
    if let Some((_, e)) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(e);
    }
    if ran.is_err() {
        // A worker panicked (no input can make it): the same work on this thread.
        return (0..blocks).try_for_each(f);
    }
    Ok(())
}

/// The pool. [`ThreadPool::global`] is the one the matmuls use.
pub struct ThreadPool {
    n: usize,
    shared: Arc<Shared>,
    submit: Mutex<()>,
    workers: Vec<JoinHandle<()>>,
}

/// How long a worker spins for the next job before it sleeps: decode matmuls come every few
/// microseconds, with Candle's small ops in between.
const SPIN: Duration = Duration::from_micros(200);

impl ThreadPool {
    /// A pool of `n` threads in all (the caller's included).
    pub fn new(n: usize) -> Self {
        let n = n.max(1);
        let shared = Arc::new(Shared {
            job: UnsafeCell::new(None),
            generation: AtomicU64::new(0),
            pending: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            sleep_lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..n)
            .filter_map(|idx| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("tessera-kernel-{idx}"))
                    .spawn(move || worker(idx, &shared))
                    .ok()
            })
            .collect::<Vec<_>>();
        // If the OS refused threads, run with those it gave.
        let n = workers.len() + 1;
        Self { n, shared, submit: Mutex::new(()), workers }
    }

    /// The process-wide pool, sized by `RAYON_NUM_THREADS` (the variable Candle also reads,
    /// and `--threads` sets) or else the number of cores.
    pub fn global() -> &'static ThreadPool {
        static POOL: OnceLock<ThreadPool> = OnceLock::new();
        POOL.get_or_init(|| ThreadPool::new(default_threads()))
    }

    pub fn threads(&self) -> usize {
        self.n
    }

    /// Runs `f(0) … f(n−1)` on the pool's `n` threads and returns when all are done.
    pub fn run(&self, f: &(dyn Fn(usize) + Sync)) -> Result<()> {
        if self.n == 1 {
            return catch_unwind(AssertUnwindSafe(|| f(0))).map_err(|_| KernelError::WorkerPanicked);
        }
        let _guard = self.submit.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: we hold `submit` and the previous job has fully finished (pending was 0), so
        // no worker reads `job`. The lifetime is erased; we wait below until every worker is
        // done with it before returning.
        unsafe {
            let ptr: *const Job = std::mem::transmute::<&(dyn Fn(usize) + Sync), &'static Job>(f);
            *s.job.get() = Some(ptr);
        }
        s.panicked.store(false, Ordering::Relaxed);
        s.pending.store(self.n - 1, Ordering::Relaxed);
        s.generation.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            drop(s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner()));
            s.wake.notify_all();
        }
        let mine = catch_unwind(AssertUnwindSafe(|| f(0)));
        let start = Instant::now();
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: every worker has finished the job.
        unsafe { *s.job.get() = None };
        if mine.is_err() || s.panicked.load(Ordering::Relaxed) {
            return Err(KernelError::WorkerPanicked);
        }
        Ok(())
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        drop(self.shared.sleep_lock.lock().unwrap_or_else(|e| e.into_inner()));
        self.shared.wake.notify_all();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(idx: usize, s: &Shared) {
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            if s.generation.load(Ordering::Acquire) != seen {
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) || start.elapsed() < SPIN {
                std::hint::spin_loop();
                continue;
            }
            let mut g = s.sleep_lock.lock().unwrap_or_else(|e| e.into_inner());
            s.sleepers.fetch_add(1, Ordering::SeqCst);
            while s.generation.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
            }
            s.sleepers.fetch_sub(1, Ordering::SeqCst);
            drop(g);
        }
        seen = s.generation.load(Ordering::Acquire);
        // SAFETY: the submitter set `job` before bumping the generation and keeps it alive
        // until `pending` reaches 0.
        if let Some(job) = unsafe { *s.job.get() } {
            let f = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| f(idx))).is_err() {
                s.panicked.store(true, Ordering::Relaxed);
            }
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

/// More threads than this are never started, whatever the environment asks.
pub const MAX_THREADS: usize = 256;

/// `RAYON_NUM_THREADS` if set to a positive number, else the available parallelism
/// (at most [`MAX_THREADS`]).
pub fn default_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
        .min(MAX_THREADS)
}
