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
