//! Allocator tuning for inference: a forward pass allocates and frees the same large
//! activations (hundreds of KiB to tens of MiB) layer after layer. glibc serves those with
//! `mmap` and returns them with `munmap`, so every layer pays page faults and the kernel's
//! zeroing of fresh pages (7% of a prefill, 20% of a vision tower in profiles). Raising the
//! mmap and trim thresholds keeps freed blocks in the heap for reuse; the peak footprint is
//! unchanged (the same buffers exist at the peak either way).

/// Keeps large freed allocations for reuse (glibc on Linux; a no-op elsewhere). Call once at
/// start-up, from a binary: it changes the process-wide allocator.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters; it is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 512 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The system allocator, plus a memory budget for threads started by [`with_memory_budget`]:
/// a binary that renders untrusted code (chat templates shipped with downloaded checkpoints)
/// installs it with `#[global_allocator]`. Elsewhere a thread's budget is one thread-local read
/// per allocation. Without it installed, budgets are not enforced.
pub struct BudgetedAlloc;

thread_local! {
    /// Bytes this thread may still allocate; `usize::MAX`: no budget.
    static LEFT: Cell<usize> = const { Cell::new(usize::MAX) };
    /// Raised when this thread ran out of its budget (the caller's flag).
    static EXHAUSTED: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
}

/// Set by the first allocation through [`BudgetedAlloc`]: whether budgets are enforced in this
/// process (if not, [`with_memory_budget`] runs its work inline).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Takes `n` bytes from this thread's budget; a thread that runs out stops here for good
/// (it is a [`with_memory_budget`] thread: its caller sees the flag and returns an error).
/// Failing the allocation instead would abort the process.
#[inline]
fn charge(n: usize) {
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
    let left = LEFT.with(Cell::get);
    if left == usize::MAX {
        return;
    }
    // A panic's report (a backtrace is symbolised with large allocations) is let through: the
    // thread holds the output lock while it prints, and the work ends with the unwinding.
    if n <= left || std::thread::panicking() {
        LEFT.with(|l| l.set(left.saturating_sub(n)));
        return;
    }
    let flag = EXHAUSTED.with(Cell::get);
    if !flag.is_null() {
        // SAFETY: the flag is owned by an `Arc` that this thread's closure keeps alive.
        unsafe { (*flag).store(true, Ordering::Release) };
    }
    loop {
        // Nothing here allocates.
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[inline]
fn refund(n: usize) {
    let left = LEFT.with(Cell::get);
    if left != usize::MAX {
        LEFT.with(|l| l.set(left.saturating_add(n).min(usize::MAX - 1)));
    }
}

// SAFETY: every call goes to `System` with the caller's arguments; the budget only counts.
unsafe impl GlobalAlloc for BudgetedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        refund(layout.size());
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            charge(new_size - layout.size());
        } else {
            refund(layout.size() - new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// Why [`with_memory_budget`] returned no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetError {
    /// The work allocated more than its budget (counting what it freed); its thread is parked
    /// for good, holding at most the budget.
    Exhausted,
    /// The work panicked, or its thread could not start.
    Failed,
}

/// Runs `work` on a thread of its own that may hold at most `bytes` of heap at once (when
/// [`BudgetedAlloc`] is the global allocator) and returns its result. Past the budget the
/// thread stops inside the allocation that would pass it, and this returns
/// [`BudgetError::Exhausted`] instead of the process dying of an allocation failure. Where
/// another allocator is installed nothing can be enforced, and `work` runs on this thread.
pub fn with_memory_budget<T: Send + 'static>(
    bytes: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> std::result::Result<T, BudgetError> {
    if !budgets_enforced() {
        return std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|_| BudgetError::Failed);
    }
    let exhausted = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::sync_channel(1);
    let flag = exhausted.clone();
    let started = std::thread::Builder::new().name("tessera-budgeted".into()).spawn(move || {
        EXHAUSTED.with(|e| e.set(Arc::as_ptr(&flag)));
        LEFT.with(|l| l.set(bytes.min(usize::MAX - 1)));
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        LEFT.with(|l| l.set(usize::MAX));
        EXHAUSTED.with(|e| e.set(std::ptr::null()));
        let _ = tx.send(out.ok());
        drop(flag);
    });
    if started.is_err() {
        return Err(BudgetError::Failed);
    }
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(Some(out)) => return Ok(out),
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => return Err(BudgetError::Failed),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if exhausted.load(Ordering::Acquire) {
                    return Err(BudgetError::Exhausted);
                }
            }
        }
    }
}

/// Whether [`BudgetedAlloc`] is this process's global allocator (it has served an allocation;
/// the one probe allocation made by the first call settles it: the global allocator never
/// changes, so the answer is kept).
pub fn budgets_enforced() -> bool {
    static ENFORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENFORCED.get_or_init(|| {
        drop(std::hint::black_box(Box::new(0u64)));
        INSTALLED.load(Ordering::Relaxed)
    })
}
