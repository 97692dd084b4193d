//! Chat templates that build ever larger values (2^40 bytes in 40 steps: no step count or
//! output bound catches them) are stopped by the render's memory budget with an error naming
//! the template, under the allocator the `tessera` binary installs; real templates render.

use tessera_text::{ChatTemplate, Message};

#[global_allocator]
static ALLOC: tessera_kernels::BudgetedAlloc = tessera_kernels::BudgetedAlloc;

#[test]
fn templates_that_grow_values_exponentially_are_stopped_by_the_memory_budget() {
    let messages = [Message::text("user", "hi")];
    for bomb in [
        r#"{% set ns = namespace(s="xxxxxxxx") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"#,
        r#"{% macro grow(s, n) %}{% if n > 0 %}{{ grow(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ grow("xxxxxxxx", 40) }}"#,
        r#"{% set ns = namespace(l=[1, 2, 3, 4]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}"#,
    ] {
        let t = ChatTemplate::with_origin(bomb, None, None, "bomb.jinja".into()).expect("parses");
        for _ in 0..2 {
            // The second render is refused at once (the template is known to exhaust its budget).
            let err = t.render(&messages, true).expect_err("a bomb renders").to_string();
            assert!(err.contains("bomb.jinja") && err.contains("MiB of memory"), "{err}");
        }
    }
    let real = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}";
    let t = ChatTemplate::new(real, None, None).expect("parses");
    assert_eq!(t.render(&messages, true).expect("renders"), "<|user|>hi\n<|assistant|>");
}
