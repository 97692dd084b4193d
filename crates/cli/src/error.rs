//! How a failed command is reported: one line, `error: …` (printed by `main`), the causes joined
//! by `: ` as anyhow's `{:#}` joins them, and never a backtrace.
//!
//! Candle attaches a backtrace to its errors when `RUST_BACKTRACE` (or `RUST_LIB_BACKTRACE`) is
//! set, and its `Display` prints every frame after the message (issue 37: on a CUDA build,
//! `--device cuda` on a machine without a GPU printed 14 `<unknown>` frames). The library strips
//! them from the errors it returns (`tessera_decoder::error::without_backtrace`); this also covers
//! the Candle errors the CLI meets itself (reading and writing tensors) and any message that still
//! spans lines.

use std::fmt::Write as _;

/// `e` and its causes on one line, without backtraces.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for (i, cause) in e.chain().enumerate() {
        let text = match cause.downcast_ref::<candle_core::Error>() {
            Some(c) => candle_text(c),
            None => cause.to_string(),
        };
        let _ = write!(line, "{}{}", if i == 0 { "" } else { ": " }, flatten(&text));
    }
    line
}

/// A Candle error's message with its backtraces left out; a context goes before its error.
fn candle_text(e: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match e {
        E::WithBacktrace { inner, .. } => candle_text(inner),
        E::WithPath { inner, path } => format!("path: {path:?} {}", candle_text(inner)),
        E::Context { inner, context } => format!("{context}: {}", candle_text(inner)),
        e => e.to_string(),
    }
}

/// `text` up to a backtrace that a wrapper's message carries (a standard library backtrace
/// prints its frames as `   0: symbol`, `   1: …`), its remaining lines joined by `: `.
fn flatten(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("0: "))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traced(inner: candle_core::Error) -> candle_core::Error {
        candle_core::Error::WithBacktrace {
            inner: Box::new(inner),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        }
    }

    #[test]
    fn candle_backtraces_are_left_out() {
        let e = traced(candle_core::Error::Msg("no CUDA-capable device is detected".into()));
        assert!(e.to_string().lines().count() > 1, "Candle prints the frames after the message");
        let e = anyhow::Error::new(e).context("device `cuda:0` is not available");
        assert_eq!(one_line(&e), "device `cuda:0` is not available: no CUDA-capable device is detected");
        let nested = traced(candle_core::Error::Msg("bad".into())).with_path("/m/x.safetensors").context("reading");
        assert_eq!(one_line(&anyhow::Error::new(traced(nested))), "reading: path: \"/m/x.safetensors\" bad");
    }

    #[test]
    fn a_backtrace_inside_another_error_is_cut_off() {
        // A library error that wraps a traced Candle error without stripping it (transparently:
        // its message is Candle's, frames included).
        let e = tessera::TesseraError::Candle(traced(candle_core::Error::Msg("shape mismatch".into())));
        assert!(e.to_string().lines().count() > 1);
        let e = anyhow::Error::new(e).context("loading model `m`");
        assert_eq!(one_line(&e), "loading model `m`: shape mismatch");
    }

    #[test]
    fn one_line_error_chains_read_as_anyhow_prints_them() {
        let e = anyhow::anyhow!("no such file or folder").context("cannot load model `x`").context("loading");
        assert_eq!(one_line(&e), format!("{e:#}"));
        assert_eq!(one_line(&anyhow::anyhow!("first\n\n  second ")), "first: second");
    }
}
