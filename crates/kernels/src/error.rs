//! Errors of the kernel entry points.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum KernelError {
    #[error("quantized matrix: {0}")]
    Shape(String),
    #[error("a matmul worker thread panicked")]
    WorkerPanicked,
}

pub type Result<T> = std::result::Result<T, KernelError>;
