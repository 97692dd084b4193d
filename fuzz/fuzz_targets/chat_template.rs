//! A chat template (the bytes up to the first NUL) rendered over a conversation with system,
//! user and assistant turns and an image part: the step and output limits bound the work.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_text::{ChatTemplate, ContentPart, Message};

fuzz_target!(|data: &[u8]| {
    let source = data.split(|&b| b == 0).next().unwrap_or_default();
    let Ok(source) = std::str::from_utf8(source) else { return };
    let Ok(template) = ChatTemplate::new(source, Some("<s>".into()), Some("</s>".into())) else { return };
    let messages = [
        Message::text("system", "Be brief."),
        Message::parts("user", vec![ContentPart::Image, ContentPart::Text { text: "What is this?".into() }]),
        Message::text("assistant", "A cat."),
        Message::text("user", "And its colour?"),
    ];
    let _ = template.render(&messages, true);
});
