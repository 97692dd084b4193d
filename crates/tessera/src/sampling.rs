//! Choosing the next token from logits, as transformers' `generate` does: the repetition
//! penalty first, then temperature, top-k, top-p and min-p, then a draw from the softmax.
//! Temperature 0 means greedy (argmax after the repetition penalty). A seed makes draws
//! reproducible.

use rand::distr::{weighted::WeightedIndex, Distribution};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::error::{Result, TesseraError};

#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f64,
    pub top_k: Option<usize>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    /// > 1 discourages tokens already in the prompt or output (CTRL, Keskar et al. 2019).
    pub repetition_penalty: Option<f64>,
    /// OpenAI's penalties over the generated tokens (not the prompt): each logit loses
    /// `frequency_penalty × count + presence_penalty × (count > 0)`, in [-2, 2].
    pub frequency_penalty: f64,
    pub presence_penalty: f64,
    pub seed: u64,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repetition_penalty: None,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 299_792_458,
        }
    }
}

/// The smallest temperature other than 0 (greedy): logits of ±1e3 divided by it stay finite in f32.
pub const MIN_TEMPERATURE: f64 = 1e-6;

impl SamplingParams {
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(TesseraError::InvalidInput(m));
        if self.temperature.is_nan() || self.temperature < 0.0 || !self.temperature.is_finite() {
            return bad(format!("temperature must be ≥ 0, got {}", self.temperature));
        }
        if self.temperature > 0.0 && self.temperature < MIN_TEMPERATURE {
            // Dividing the logits by it would overflow (f32: 1e-300 is 0).
            return bad(format!(
                "temperature {:e} is too small to divide the logits by: use 0 for greedy decoding, or at least \
                 {MIN_TEMPERATURE:e}",
                self.temperature
            ));
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return bad(format!("top_p must be in (0, 1], got {p}"));
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return bad(format!("min_p must be in [0, 1], got {p}"));
            }
        }
        if self.top_k == Some(0) {
            return bad("top_k must be ≥ 1".into());
        }
        if let Some(r) = self.repetition_penalty {
            if r.is_nan() || r <= 0.0 || !r.is_finite() {
                return bad(format!("repetition_penalty must be > 0, got {r}"));
            }
        }
        for (name, v) in [("frequency_penalty", self.frequency_penalty), ("presence_penalty", self.presence_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        Ok(())
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: StdRng,
}

impl Sampler {
    pub fn new(params: SamplingParams) -> Result<Self> {
        params.validate()?;
        let rng = StdRng::seed_from_u64(params.seed);
        Ok(Self { params, rng })
    }

    /// Picks the next token from `logits` (one row, vocabulary-sized); `history` is every
    /// token so far (prompt and generated), for the repetition penalty, of which the last
    /// `generated` were generated (for the frequency and presence penalties).
    pub fn sample(&mut self, logits: &[f32], history: &[u32], generated: usize) -> Result<u32> {
        if logits.is_empty() {
            return Err(TesseraError::InvalidInput("empty logits".into()));
        }
        let (freq, pres) = (self.params.frequency_penalty as f32, self.params.presence_penalty as f32);
        let penalised = self.params.repetition_penalty.is_some() || freq != 0.0 || pres != 0.0;
        if self.params.is_greedy() && !penalised {
            // A server's batched step samples every row: no copy of a vocabulary-sized row.
            return Ok(argmax(logits));
        }
        let mut scores = logits.to_vec();
        if let Some(penalty) = self.params.repetition_penalty {
            apply_repetition_penalty(&mut scores, history, penalty as f32);
        }
        if freq != 0.0 || pres != 0.0 {
            let mut counts = std::collections::BTreeMap::<u32, u32>::new();
            for &id in &history[history.len().saturating_sub(generated)..] {
                *counts.entry(id).or_default() += 1;
            }
            for (id, n) in counts {
                if let Some(s) = scores.get_mut(id as usize) {
                    *s -= freq * n as f32 + pres;
                }
            }
        }
        if self.params.is_greedy() {
            return Ok(argmax(&scores));
        }
        let t = self.params.temperature as f32;
        scores.iter_mut().for_each(|s| *s /= t);
        if let Some(k) = self.params.top_k {
            apply_top_k(&mut scores, k);
        }
        if let Some(p) = self.params.top_p {
            apply_top_p(&mut scores, p as f32);
        }
        if let Some(p) = self.params.min_p {
            apply_min_p(&mut scores, p as f32);
        }
        let probs = softmax(&scores);
        let dist = WeightedIndex::new(&probs)
            .map_err(|e| TesseraError::InvalidInput(format!("cannot sample from logits: {e}")))?;
        Ok(dist.sample(&mut self.rng) as u32)
    }
}

/// The index of the largest value, the first where several are equal (like `torch.argmax`):
/// what a scan from index 0 keeping the best so far under `>` gives, NaN included (never
/// chosen over a number, and a NaN at index 0 is never replaced). Computed as the maximum over 16 lanes (the
/// compiler's vector max) and then the first index holding it, a few times faster than the
/// scan, whose every step waits on the last comparison.
pub fn argmax(xs: &[f32]) -> u32 {
    const LANES: usize = 16;
    match xs.first() {
        Some(x) if !x.is_nan() => {}
        _ => return 0,
    }
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            if x > *m {
                *m = x;
            }
        }
    }
    let max = lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    xs.iter().position(|&x| x == max).unwrap_or(0) as u32
}

pub fn softmax(xs: &[f32]) -> Vec<f32> {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = xs.iter().map(|x| (x - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

/// `log_softmax` in f64 for accuracy.
pub fn log_softmax(xs: &[f32]) -> Vec<f32> {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = xs.iter().map(|x| (*x as f64 - max).exp()).sum::<f64>().ln() + max;
    xs.iter().map(|x| (*x as f64 - lse) as f32).collect()
}

fn apply_repetition_penalty(scores: &mut [f32], history: &[u32], penalty: f32) {
    let mut seen = vec![false; scores.len()];
    for &id in history {
        let i = id as usize;
        if i < scores.len() && !seen[i] {
            seen[i] = true;
            scores[i] = if scores[i] < 0.0 { scores[i] * penalty } else { scores[i] / penalty };
        }
    }
}

/// Keeps every score ≥ the k-th largest (ties kept, as transformers does).
fn apply_top_k(scores: &mut [f32], k: usize) {
    if k >= scores.len() {
        return;
    }
    let mut sorted = scores.to_vec();
    sorted.sort_by(|a, b| b.total_cmp(a));
    let kth = sorted[k - 1];
    scores.iter_mut().filter(|s| **s < kth).for_each(|s| *s = f32::NEG_INFINITY);
}

/// Nucleus sampling: drops the least likely tokens whose total mass is ≤ 1 − p (keeps ≥ 1).
fn apply_top_p(scores: &mut [f32], p: f32) {
    let probs = softmax(scores);
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| probs[a].total_cmp(&probs[b])); // ascending
    let mut cum = 0f32;
    for (rank, &i) in order.iter().enumerate() {
        cum += probs[i];
        if cum <= 1.0 - p && rank + 1 < order.len() {
            scores[i] = f32::NEG_INFINITY;
        } else {
            break;
        }
    }
}

/// Drops tokens whose probability is below `p` times the top token's.
fn apply_min_p(scores: &mut [f32], p: f32) {
    let probs = softmax(scores);
    let top = probs.iter().copied().fold(0f32, f32::max);
    for (s, q) in scores.iter_mut().zip(&probs) {
        if *q < p * top {
            *s = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    /// The scan `argmax` must agree with.
    fn scan_argmax(xs: &[f32]) -> u32 {
        let mut best = 0;
        for (i, x) in xs.iter().enumerate() {
            if *x > xs[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_is_the_scans_answer_with_ties_nans_infinities_and_signed_zeros() {
        let mut rng = StdRng::seed_from_u64(5);
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1.0, 1.0];
        for len in [0, 1, 2, 15, 16, 17, 33, 100, 1000] {
            for _ in 0..200 {
                let xs: Vec<f32> = (0..len)
                    .map(|_| match rng.random_range(0..10) {
                        0 => specials[rng.random_range(0..specials.len())],
                        // Few distinct values: ties are common.
                        1..=4 => rng.random_range(-3..3) as f32,
                        _ => rng.random_range(-10.0..10.0),
                    })
                    .collect();
                assert_eq!(argmax(&xs), scan_argmax(&xs), "{xs:?}");
            }
        }
        assert_eq!(argmax(&[f32::NAN; 40]), 0);
        assert_eq!(argmax(&[f32::NEG_INFINITY; 40]), 0);
    }

    fn params(temperature: f64) -> SamplingParams {
        SamplingParams { temperature, ..Default::default() }
    }

    #[test]
    fn greedy_picks_argmax_and_penalty_can_change_it() {
        let mut s = Sampler::new(params(0.0)).unwrap();
        assert_eq!(s.sample(&[0.1, 2.0, 1.9], &[], 0).unwrap(), 1);
        let mut s = Sampler::new(SamplingParams { repetition_penalty: Some(1.2), ..params(0.0) }).unwrap();
        assert_eq!(s.sample(&[0.1, 2.0, 1.9], &[1], 0).unwrap(), 2);
        // Negative scores are multiplied, pushing them further down.
        let mut scores = vec![-1.0, 1.0];
        apply_repetition_penalty(&mut scores, &[0, 1, 1], 2.0);
        assert_eq!(scores, vec![-2.0, 0.5]);
    }

    #[test]
    fn frequency_and_presence_penalties_count_generated_tokens_only() {
        // Token 1 is in the prompt only: untouched. Token 2 was generated twice: 2.0 − 2·0.6 − 0.1.
        let p = SamplingParams { frequency_penalty: 0.6, presence_penalty: 0.1, ..params(0.0) };
        let mut s = Sampler::new(p.clone()).unwrap();
        assert_eq!(s.sample(&[0.0, 1.5, 2.0], &[1, 1, 2, 2], 2).unwrap(), 1);
        let mut s = Sampler::new(p).unwrap();
        assert_eq!(s.sample(&[0.0, 1.5, 2.0], &[1, 1, 2, 2], 0).unwrap(), 2);
        let bad = SamplingParams { presence_penalty: 2.5, ..params(0.0) };
        assert!(Sampler::new(bad).is_err());
    }

    #[test]
    fn top_k_top_p_min_p_filter_as_documented() {
        let mut s = vec![1.0, 3.0, 2.0, 3.0];
        apply_top_k(&mut s, 1);
        assert_eq!(s, vec![f32::NEG_INFINITY, 3.0, f32::NEG_INFINITY, 3.0], "ties with the k-th are kept");
        // probs ≈ [0.6652, 0.2447, 0.0900]; p = 0.8 keeps the first two.
        let mut s = vec![2.0, 1.0, 0.0];
        apply_top_p(&mut s, 0.8);
        assert!(s[0].is_finite() && s[1].is_finite() && s[2].is_infinite());
        let mut s = vec![2.0, 1.0, 0.0];
        apply_min_p(&mut s, 0.2);
        assert!(s[0].is_finite() && s[1].is_finite() && s[2].is_infinite());
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_the_distribution() {
        let logits = [0.0f32, 1.0, 2.0];
        let draw = |seed| {
            let mut s = Sampler::new(SamplingParams { seed, ..params(1.0) }).unwrap();
            (0..2000).map(|_| s.sample(&logits, &[], 0).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        let counts = draw(7).iter().fold([0usize; 3], |mut c, &i| {
            c[i as usize] += 1;
            c
        });
        let p = softmax(&logits);
        for i in 0..3 {
            let f = counts[i] as f32 / 2000.0;
            assert!((f - p[i]).abs() < 0.04, "token {i}: {f} vs {}", p[i]);
        }
    }

    #[test]
    fn invalid_parameters_are_refused() {
        assert!(Sampler::new(params(-1.0)).is_err());
        assert!(Sampler::new(SamplingParams { top_p: Some(0.0), ..params(1.0) }).is_err());
        assert!(Sampler::new(SamplingParams { top_k: Some(0), ..params(1.0) }).is_err());
        let err = Sampler::new(params(1e-300)).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("temperature 1e-300") && err.contains("greedy"), "{err}");
        // The smallest allowed temperature still samples (the argmax, practically).
        let mut s = Sampler::new(params(MIN_TEMPERATURE)).unwrap();
        assert_eq!(s.sample(&[1000.0, -1000.0, 999.0], &[], 0).unwrap(), 0);
    }
}
