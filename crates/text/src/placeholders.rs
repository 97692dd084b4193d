//! Image placeholders: each image's placeholder token in a prompt (`<image>`) is replaced by
//! the text its model's processor writes for it, before tokenization — as transformers'
//! processors do (`Idefics3Processor`, `LlavaProcessor`, `PaliGemmaProcessor`, v5.23).

use crate::error::{Result, TextError};

/// Replaces the `n`-th occurrence of `placeholder` in `text` with `replacements[n]`. The number of
/// placeholders must equal the number of images.
pub fn expand_placeholders(text: &str, placeholder: &str, replacements: &[String]) -> Result<String> {
    let found = if placeholder.is_empty() { 0 } else { text.matches(placeholder).count() };
    if found != replacements.len() {
        return Err(TextError::Placeholders {
            placeholder: placeholder.to_string(),
            found,
            images: replacements.len(),
        });
    }
    let mut out = String::with_capacity(text.len() + replacements.iter().map(String::len).sum::<usize>());
    let mut rest = text;
    for r in replacements {
        // `found` counted these occurrences, so each one is there.
        let at = rest.find(placeholder).unwrap_or(rest.len());
        out.push_str(&rest[..at]);
        out.push_str(r);
        rest = &rest[(at + placeholder.len()).min(rest.len())..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Idefics3 / SmolVLM: the text for one image split into `rows × cols` tiles plus a global view
/// (`rows = cols = 0`: one unsplit view); `image_run` is the image token repeated `image_seq_len`
/// times.
pub fn idefics3_image_prompt(rows: usize, cols: usize, image_run: &str) -> String {
    const FAKE: &str = "<fake_token_around_image>";
    const GLOBAL: &str = "<global-img>";
    if rows == 0 && cols == 0 {
        return format!("{FAKE}{GLOBAL}{image_run}{FAKE}");
    }
    let mut s = String::new();
    for r in 1..=rows {
        for c in 1..=cols {
            s.push_str(&format!("{FAKE}<row_{r}_col_{c}>{image_run}"));
        }
        s.push('\n');
    }
    s.push_str(&format!("\n{FAKE}{GLOBAL}{image_run}{FAKE}"));
    s
}

/// PaliGemma's prompt layout: `<image>` per image, then BOS, the prompt and a newline. A prompt
/// that already holds image tokens keeps them and gets BOS after the last one.
pub fn paligemma_prompt(prompt: &str, images: usize, image_token: &str, bos: &str) -> String {
    match prompt.rfind(image_token) {
        Some(at) => {
            let end = at + image_token.len();
            format!("{}{bos}{}\n", &prompt[..end], &prompt[end..])
        }
        None => format!("{}{bos}{prompt}\n", image_token.repeat(images)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_in_order_and_must_match_the_images() {
        let out = expand_placeholders("a<image>b<image>c", "<image>", &["X".into(), "YY".into()]).unwrap();
        assert_eq!(out, "aXbYYc");
        let err = expand_placeholders("a<image>b", "<image>", &[]).unwrap_err().to_string();
        assert!(err.contains("1 `<image>` placeholder") && err.contains("0 image"), "{err}");
    }

    #[test]
    fn idefics3_layout() {
        assert_eq!(
            idefics3_image_prompt(0, 0, "II"),
            "<fake_token_around_image><global-img>II<fake_token_around_image>"
        );
        assert_eq!(
            idefics3_image_prompt(1, 2, "I"),
            "<fake_token_around_image><row_1_col_1>I<fake_token_around_image><row_1_col_2>I\n\n\
             <fake_token_around_image><global-img>I<fake_token_around_image>"
        );
    }

    #[test]
    fn paligemma_layout() {
        assert_eq!(paligemma_prompt("caption en", 1, "<image>", "<bos>"), "<image><bos>caption en\n");
        assert_eq!(paligemma_prompt("<image>answer en x", 1, "<image>", "<bos>"), "<image><bos>answer en x\n");
        assert_eq!(paligemma_prompt("", 2, "<image>", "<bos>"), "<image><image><bos>\n");
    }
}
