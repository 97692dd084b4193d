//! Row-invariant arithmetic for batched decoding: inside [`row_invariant`], every matmul of
//! this crate computes each row of its output with the same operations in the same order as
//! it would for that row alone, however many rows the call has. A server that decodes many
//! sequences in one step (each weight read once for all of them) then gives every sequence
//! the tokens it gets when it runs alone.
//!
//! What it switches: quantized matmuls keep the few-token path (activations quantized per
//! row, integer dot products per row) instead of the GEMM tiles that start at
//! [`GEMM_MIN_TOKENS`](crate::GEMM_MIN_TOKENS) rows, and dense f32 linears run each row as the
//! one-row product a single token gets.

use std::cell::Cell;

thread_local! {
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with row-invariant matmuls on this thread (the thread that calls the kernels).
pub fn row_invariant<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ACTIVE.with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(ACTIVE.with(|a| a.replace(true)));
    f()
}

/// Whether the calling thread is inside [`row_invariant`].
pub(crate) fn active() -> bool {
    ACTIVE.with(Cell::get)
}
