//! `tessera eval`: the evaluation harness. Exact-match accuracy per task over a question file
//! (JSON lines: image, question, answer, task), and optionally how much of the answers' image
//! attention falls on the shape each question names.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use tessera::GenerateParams;

use crate::common::{load, out, read_text, ModelArgs};

#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// JSON lines with `image` (relative to the file), `question`, `answer` and `task`.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm/eval/questions.jsonl"))]
    questions: PathBuf,
    /// Evaluate only the first N questions.
    #[arg(long)]
    limit: Option<usize>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Also measure where the answers look: for questions with `named_patches` (the patches of
    /// the shape the question names), the share of the answer tokens' image attention (mean over
    /// layers and heads) that falls on those patches, against their share of the image area.
    #[arg(long)]
    attention: bool,
}

/// Attention on the named shape's patches, summed over questions.
#[derive(Default)]
struct AttentionShare {
    questions: usize,
    attention: f64,
    area: f64,
}

impl AttentionShare {
    /// Adds one question: `rows` are the answer tokens' attention rows (images first).
    fn add(&mut self, rows: &[Vec<f32>], image_tokens: usize, named: &[usize]) -> Result<()> {
        if rows.is_empty() || image_tokens == 0 {
            return Ok(());
        }
        if let Some(bad) = named.iter().find(|&&p| p >= image_tokens) {
            bail!("named patch {bad} is out of range: the image has {image_tokens} patches");
        }
        let mut share = 0.0;
        for row in rows {
            let image = &row[..image_tokens.min(row.len())];
            let total: f64 = image.iter().map(|&w| w as f64).sum();
            share += named.iter().filter_map(|&p| image.get(p)).map(|&w| w as f64).sum::<f64>() / total.max(1e-12);
        }
        self.questions += 1;
        self.attention += share / rows.len() as f64;
        self.area += named.len() as f64 / image_tokens as f64;
        Ok(())
    }
}

/// Answers every question greedily and prints exact-match accuracy per task (a table or JSON).
pub fn run(args: EvalArgs) -> Result<()> {
    let (model, _) = load(&args.model)?;
    let text = read_text(&args.questions)?;
    let base = args.questions.parent().map(PathBuf::from).unwrap_or_default();
    let mut per_task: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    let params = GenerateParams { max_new_tokens: 32, capture_attention: args.attention, ..Default::default() };
    let mut shares: std::collections::BTreeMap<String, AttentionShare> = Default::default();
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        if args.limit.is_some_and(|n| i >= n) {
            break;
        }
        let q: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: invalid JSON", args.questions.display(), i + 1))?;
        let field = |k: &str| -> Result<String> {
            q.get(k)
                .and_then(|v| v.as_str())
                .map(String::from)
                .with_context(|| format!("{} line {}: missing `{k}`", args.questions.display(), i + 1))
        };
        let image = tessera::load_image(&base.join(field("image")?), tessera::DEFAULT_MAX_PIXELS)?;
        let prompt = model.encode_prompt(&field("question")?, None, false, std::slice::from_ref(&image))?;
        let out = model.generate(&prompt, &params, &mut |_| {})?;
        let entry = per_task.entry(field("task")?).or_default();
        entry.1 += 1;
        if out.text.trim() == field("answer")?.trim() {
            entry.0 += 1;
        }
        if let (Some(rows), Some(named)) = (&out.attention, q.get("named_patches")) {
            let named: Vec<usize> = serde_json::from_value(named.clone()).with_context(|| {
                format!("{} line {}: `named_patches` is not a list of patch indices", args.questions.display(), i + 1)
            })?;
            shares.entry(field("task")?).or_default().add(rows, out.image_tokens, &named)?;
        }
    }
    let total: (usize, usize) = per_task.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    if args.json {
        let tasks: serde_json::Map<String, serde_json::Value> = per_task
            .iter()
            .map(|(t, (ok, n))| {
                (t.clone(), serde_json::json!({"correct": ok, "total": n, "accuracy": *ok as f64 / *n as f64}))
            })
            .collect();
        let attention: serde_json::Map<String, serde_json::Value> = shares
            .iter()
            .map(|(t, a)| {
                let n = a.questions.max(1) as f64;
                (t.clone(), serde_json::json!({"questions": a.questions, "attention_share": a.attention / n, "area_share": a.area / n}))
            })
            .collect();
        let mut report = serde_json::json!({"tasks": tasks, "correct": total.0, "total": total.1});
        if args.attention {
            report["attention"] = attention.into();
        }
        out!("{report}");
    } else {
        out!("| task | correct | total | exact match |");
        out!("| --- | --- | --- | --- |");
        for (t, (ok, n)) in per_task.iter().chain(std::iter::once((&"all".to_string(), &total))) {
            out!("| {t} | {ok} | {n} | {:.1}% |", 100.0 * *ok as f64 / (*n).max(1) as f64);
        }
        if args.attention {
            out!("");
            out!("| task | questions | answer's image attention on the named shape | the shape's share of the image |");
            out!("| --- | --- | --- | --- |");
            for (t, a) in &shares {
                let n = a.questions.max(1) as f64;
                out!("| {t} | {} | {:.1}% | {:.1}% |", a.questions, 100.0 * a.attention / n, 100.0 * a.area / n);
            }
        }
    }
    Ok(())
}
