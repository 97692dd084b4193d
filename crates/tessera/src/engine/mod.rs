//! Continuous batching: one scheduler thread owns every generation in flight. Between decode
//! steps it takes new requests and runs a budget of prompt blocks ([`Model::prefill_blocks`]:
//! chunked prefill, so a long prompt does not stall the running streams); each decode step
//! then runs the next token of every decoding sequence through the decoder together
//! ([`Model::decode_rows`]: the weights are read once per step for the whole batch, each
//! sequence keeps its own KV cache and positions). A sequence leaves the batch when it ends
//! or when its client goes away, and its cache is freed at once.
//!
//! Two caches spare repeated work. Encoded images are kept by content (an LRU bounded in
//! bytes). And the KV cache of every finished sequence is kept (an LRU bounded by
//! `kv_cache_bytes`): a new prompt continues from the longest cached prefix that ends on one
//! of its block ends, so a chat's next turn, which resends the history and its images, runs
//! only what is new since the last turn's prompt.
//!
//! Batch invariance: the decode step's kernels compute each row as they would alone, and a
//! prompt's blocks depend on the prompt alone, so a greedy request gets the same tokens
//! whether it runs alone, among 63 others, or after a cached prefix.
//!
//! The engine knows nothing of HTTP: a request's events go to its [`Sink`], a callback that
//! returns `false` once nobody listens.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use candle_core::{DType, Tensor};
use tessera_decoder::{KvCache, Trace};

mod caches;

use caches::{position_keys, ImageCache, ImageKey, PrefixCache};

use crate::error::{Result, TesseraError};
use crate::generate::{GenerateParams, GenerationOutput, SampledToken, Sequence, Timings};
use crate::model::Model;
use crate::prompt::{Chunk, ImageInputs, Prompt};

/// Prompt positions prefilled between two decode steps (whole blocks, at least one: the last
/// one may pass it).
const PREFILL_POSITIONS_PER_STEP: usize = 512;

/// How many sequences run at once and how many may wait.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Sequences decoded together in one step.
    pub max_batch: usize,
    /// Requests waiting for a place in the batch; more are refused ([`TesseraError::Busy`]).
    pub max_queue: usize,
    /// Bytes of encoded image features kept for reuse (a chat resends its images every turn);
    /// least recently used first out. 0: no cache.
    pub image_cache_bytes: usize,
    /// Bytes of finished sequences' KV caches kept for prompts that share their prefix (a
    /// chat's next turn); least recently used first out. 0: no cache.
    pub kv_cache_bytes: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self { max_batch: 64, max_queue: 256, image_cache_bytes: 256 << 20, kv_cache_bytes: 1 << 30 }
    }
}

/// What happens to a request.
#[derive(Debug)]
pub enum Event {
    /// Newly completed text (stop strings and incomplete characters held back).
    Text(String),
    /// With `logprobs`: the tokens sampled since the last such event, sent before the text
    /// they complete.
    Tokens(Vec<SampledToken>),
    /// Generation ended; the whole output (text, ids, finish reason, log-probabilities).
    Done(Box<GenerationOutput>),
    /// The request failed (bad prompt, context overflow, non-finite logits).
    Error(TesseraError),
}

/// Where a request's events go. Returning `false` means the client is gone: the request is
/// cancelled and its cache freed.
pub type Sink = Box<dyn FnMut(Event) -> bool + Send>;

/// Counters for `/metrics`, updated by the scheduler.
#[derive(Debug, Default)]
pub struct EngineStats {
    pub requests: AtomicU64,
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub failed: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
    /// Requests submitted and not yet prefilled.
    pub queued: AtomicUsize,
    /// Sequences in the running batch.
    pub active: AtomicUsize,
    pub decode_steps: AtomicU64,
    /// Sum over decode steps of their batch size (mean batch = this / `decode_steps`).
    pub decode_rows: AtomicU64,
    /// Time from submission to the first token, summed (µs), over `first_tokens` requests.
    pub time_to_first_token_us: AtomicU64,
    pub first_tokens: AtomicU64,
    /// Images whose features came from the cache, and those encoded.
    pub image_cache_hits: AtomicU64,
    pub image_cache_misses: AtomicU64,
    /// Bytes the image cache holds.
    pub image_cache_bytes: AtomicUsize,
    /// Prompts that continued from a cached prefix, and those that found none.
    pub prefix_cache_hits: AtomicU64,
    pub prefix_cache_misses: AtomicU64,
    /// Prompt positions taken from cached prefixes, and those computed.
    pub prefix_reused_positions: AtomicU64,
    pub prefilled_positions: AtomicU64,
    /// Bytes and sequences the prefix cache holds.
    pub prefix_cache_bytes: AtomicUsize,
    pub prefix_cache_entries: AtomicUsize,
}

struct Job {
    prompt: Prompt,
    params: GenerateParams,
    sink: Sink,
    submitted: Instant,
}

/// A running scheduler; dropping it lets the running requests finish, then stops the thread.
pub struct Engine {
    model: Arc<Model>,
    config: EngineConfig,
    stats: Arc<EngineStats>,
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    pub fn start(model: Arc<Model>, config: EngineConfig) -> Result<Self> {
        if config.max_batch == 0 {
            return Err(TesseraError::InvalidInput("the engine's max_batch must be at least 1".into()));
        }
        let stats = Arc::new(EngineStats::default());
        let (tx, rx) = mpsc::channel();
        let thread = {
            let (model, stats, max_batch) = (model.clone(), stats.clone(), config.max_batch);
            let images = ImageCache::new(config.image_cache_bytes);
            let prefixes = PrefixCache::new(config.kv_cache_bytes);
            std::thread::Builder::new()
                .name("tessera-scheduler".into())
                .spawn(move || Scheduler { model: &model, stats: &stats, max_batch, images, prefixes }.run(rx))
                .map_err(|e| TesseraError::InvalidInput(format!("cannot start the scheduler thread: {e}")))?
        };
        Ok(Self { model, config, stats, jobs: Some(tx), thread: Some(thread) })
    }

    pub fn model(&self) -> &Arc<Model> {
        &self.model
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Queues a generation; its events go to `sink`. Refused with [`TesseraError::Busy`] when
    /// `max_queue` requests already wait.
    pub fn submit(&self, prompt: Prompt, params: GenerateParams, sink: Sink) -> Result<()> {
        let queued = self.stats.queued.fetch_add(1, Ordering::SeqCst);
        if queued >= self.config.max_queue {
            self.stats.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(TesseraError::Busy(format!("{queued} requests are already waiting")));
        }
        let job = Job { prompt, params, sink, submitted: Instant::now() };
        let sent = self.jobs.as_ref().map(|tx| tx.send(job).is_ok()).unwrap_or(false);
        if !sent {
            self.stats.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(TesseraError::Busy("the engine has stopped".into()));
        }
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Runs one generation through the scheduler and waits for it (what the CLI would do
    /// through a server); `on_text` receives the text as it streams.
    pub fn generate(
        &self,
        prompt: Prompt,
        params: GenerateParams,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<GenerationOutput> {
        let (tx, rx) = mpsc::channel();
        self.submit(prompt, params, Box::new(move |e| tx.send(e).is_ok()))?;
        for event in rx {
            match event {
                Event::Text(t) => on_text(&t),
                Event::Tokens(_) => {}
                Event::Done(out) => return Ok(*out),
                Event::Error(e) => return Err(e),
            }
        }
        Err(TesseraError::InvalidInput("the scheduler stopped before the request ended".into()))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.jobs = None; // the scheduler ends once its requests are done
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A sequence in the running batch.
struct Active<'m> {
    seq: Sequence<'m>,
    prompt: Prompt,
    /// The prompt's positions (for the prefix cache) and block ends.
    keys: Vec<u64>,
    ends: Vec<usize>,
    cache: KvCache,
    next: u32,
    /// Generated tokens whose log-probabilities were sent (with `logprobs`).
    tokens_sent: usize,
    sink: Sink,
    prompt_s: f64,
    decode_start: Instant,
}

/// Calls `f` on `t`'s values: borrowed from a contiguous f32 CPU tensor, copied from any other.
fn with_f32_values<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&v[a..b]));
        }
    }
    Ok(f(&t.flatten_all()?.to_vec1::<f32>()?))
}

/// A sequence whose prompt is still being prefilled, block by block.
struct Prefilling<'m> {
    seq: Sequence<'m>,
    job: Job,
    keys: Vec<u64>,
    /// The prompt's images' [`ImageCache::key`]s, hashed once for prefix matching and the
    /// image cache.
    image_keys: Vec<ImageKey>,
    ends: Vec<usize>,
    cache: KvCache,
    /// Its images' features once encoded, until its prompt is in: a later block that holds more
    /// of an image's tokens takes them from here, whether or not the image cache kept them
    /// (too large for it, evicted by other requests between blocks, or turned off).
    encoded: ImageInputs,
    /// Time spent on its blocks so far.
    prompt_s: f64,
}

struct Scheduler<'a> {
    model: &'a Model,
    stats: &'a EngineStats,
    max_batch: usize,
    images: ImageCache,
    prefixes: PrefixCache,
}

impl<'a> Scheduler<'a> {
    fn run(mut self, jobs: Receiver<Job>) {
        let mut waiting: VecDeque<Job> = VecDeque::new();
        let mut prefilling: VecDeque<Prefilling<'a>> = VecDeque::new();
        let mut active: Vec<Active<'a>> = Vec::new();
        let mut open = true;
        loop {
            if active.is_empty() && prefilling.is_empty() && waiting.is_empty() {
                if !open {
                    return;
                }
                match jobs.recv() {
                    Ok(job) => waiting.push_back(job),
                    Err(_) => return,
                }
            }
            loop {
                match jobs.try_recv() {
                    Ok(job) => waiting.push_back(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            while active.len() + prefilling.len() < self.max_batch {
                let Some(job) = waiting.pop_front() else { break };
                self.stats.queued.fetch_sub(1, Ordering::SeqCst);
                prefilling.extend(self.admit(job));
            }
            // Prompt blocks between decode steps, up to a budget of positions (at least one
            // block), oldest prompt first: arrivals join quickly and a long prompt is cut into
            // blocks instead of stalling the running streams.
            let mut budget = PREFILL_POSITIONS_PER_STEP;
            while budget > 0 {
                let Some(mut p) = prefilling.pop_front() else { break };
                let done = p.cache.len();
                match self.prefill_block(&mut p) {
                    Ok(None) => {
                        budget = budget.saturating_sub(p.cache.len() - done);
                        prefilling.push_front(p);
                    }
                    Ok(Some(row)) => {
                        budget = budget.saturating_sub(p.cache.len() - done);
                        active.extend(self.first_token(p, row));
                    }
                    Err(e) => self.fail(&mut p.job.sink, e),
                }
            }
            if !active.is_empty() {
                self.decode_step(&mut active);
            }
            self.stats.active.store(active.len() + prefilling.len(), Ordering::Relaxed);
        }
    }

    /// Checks `job`'s prompt and finds the longest cached prefix it continues from; `None`
    /// when it fails at once.
    fn admit(&mut self, mut job: Job) -> Option<Prefilling<'a>> {
        let model = self.model;
        let prefixes = &mut self.prefixes;
        let stats = self.stats;
        let started = (|| -> Result<_> {
            let seq = Sequence::new(model, &job.prompt, &job.params)?;
            let ends = model.prefill_blocks(&job.prompt);
            let image_keys: Vec<ImageKey> = job.prompt.images().iter().map(ImageCache::key).collect();
            let keys = if prefixes.max_bytes > 0 { position_keys(&job.prompt, &image_keys) } else { Vec::new() };
            let cached = if keys.is_empty() { None } else { prefixes.lookup(&keys, &ends, stats)? };
            Ok((seq, ends, keys, image_keys, cached.unwrap_or_else(|| model.new_cache())))
        })();
        match started {
            Ok((seq, ends, keys, image_keys, cache)) => {
                let encoded = ImageInputs::default();
                Some(Prefilling { seq, job, keys, image_keys, ends, cache, encoded, prompt_s: 0.0 })
            }
            Err(e) => {
                self.fail(&mut job.sink, e);
                None
            }
        }
    }

    /// Runs `p`'s next prompt block; once the whole prompt is in, the logits of its last
    /// position.
    fn prefill_block(&mut self, p: &mut Prefilling<'a>) -> Result<Option<Vec<f32>>> {
        let model = self.model;
        let start = Instant::now();
        let done = p.cache.len();
        let end = p.ends.iter().copied().find(|&e| e > done).unwrap_or(p.job.prompt.len());
        // The block's images, from the cache of encoded images (or encoded into it) once each.
        for chunk in p.job.prompt.chunks_in(done..end) {
            if let Chunk::Image { image: i, .. } = chunk {
                if !p.encoded.contains(i) {
                    let img = &p.job.prompt.images()[i];
                    let key = p.image_keys.get(i).copied().unwrap_or_else(|| ImageCache::key(img));
                    p.encoded.insert(i, self.images.features(model, img, key, self.stats)?);
                }
            }
        }
        let hidden = model.forward(&p.job.prompt, done..end, &mut p.cache, &mut p.encoded, &mut Trace::default())?;
        self.stats.prefilled_positions.fetch_add((end - done) as u64, Ordering::Relaxed);
        self.keep_recurrent_prefix(p, end);
        let row = match end == p.job.prompt.len() {
            true => Some(model.last_logits(&hidden)?.to_vec1::<f32>()?),
            false => None,
        };
        p.prompt_s += start.elapsed().as_secs_f64();
        Ok(row)
    }

    /// Takes the first token of a prefilled prompt (`row`: its last position's logits).
    fn first_token(&mut self, p: Prefilling<'a>, row: Vec<f32>) -> Option<Active<'a>> {
        let Prefilling { mut seq, job, keys, ends, cache, prompt_s, .. } = p;
        self.stats.prompt_tokens.fetch_add(job.prompt.len() as u64, Ordering::Relaxed);
        let ttft = job.submitted.elapsed().as_micros() as u64;
        self.stats.time_to_first_token_us.fetch_add(ttft, Ordering::Relaxed);
        self.stats.first_tokens.fetch_add(1, Ordering::Relaxed);
        let mut text = String::new();
        let next = seq.accept(self.model, &job.prompt, &row, None, &mut |t| text.push_str(t));
        let a = Active {
            seq,
            prompt: job.prompt,
            keys,
            ends,
            cache,
            next: 0,
            tokens_sent: 0,
            sink: job.sink,
            prompt_s,
            decode_start: Instant::now(),
        };
        self.after_token(a, next, text)
    }

    /// One decode step of every active sequence; those that end or are cancelled leave.
    fn decode_step(&mut self, active: &mut Vec<Active<'a>>) {
        let ids: Vec<u32> = active.iter().map(|a| a.next).collect();
        let mut caches: Vec<KvCache> =
            active.iter_mut().map(|a| std::mem::replace(&mut a.cache, KvCache::new(0, 0))).collect();
        let result = self.model.decode_rows(&ids, &mut caches).and_then(|l| Ok((l.to_dtype(DType::F32)?, l.dim(1)?)));
        for (a, c) in active.iter_mut().zip(caches) {
            a.cache = c;
        }
        let (logits, width) = match result {
            Ok(l) => l,
            Err(e) => {
                let msg = e.to_string();
                for mut a in active.drain(..) {
                    self.fail(
                        &mut a.sink,
                        TesseraError::InvalidInput(format!("the batched decode step failed: {msg}")),
                    );
                }
                return;
            }
        };
        self.stats.decode_steps.fetch_add(1, Ordering::Relaxed);
        self.stats.decode_rows.fetch_add(ids.len() as u64, Ordering::Relaxed);
        let model = self.model;
        let mut keep = Vec::with_capacity(active.len());
        // Each row read where it lies (a step's logits are 3 MB at 16 rows of a 49k vocabulary).
        let sampled = with_f32_values(&logits, |all| {
            for (mut a, row) in active.drain(..).zip(all.chunks_exact(width.max(1))) {
                let mut text = String::new();
                let next = a.seq.accept(model, &a.prompt, row, None, &mut |t| text.push_str(t));
                keep.extend(self.after_token(a, next, text));
            }
        });
        if let Err(e) = sampled {
            let msg = e.to_string();
            for mut a in active.drain(..) {
                self.fail(&mut a.sink, TesseraError::InvalidInput(format!("the batched decode step failed: {msg}")));
            }
        }
        *active = keep;
    }

    /// Sends what a token produced; gives the sequence back while it goes on (its next token
    /// set). Ends it (and sends the output) when it finished, failed or its client left.
    fn after_token(&mut self, mut a: Active<'a>, next: Result<Option<u32>>, text: String) -> Option<Active<'a>> {
        let next = match next {
            Ok(n) => n,
            Err(e) => {
                self.fail(&mut a.sink, e);
                return None;
            }
        };
        self.stats.generated_tokens.fetch_add(u64::from(next.is_some()), Ordering::Relaxed);
        let tokens = a.seq.sampled_tokens(a.tokens_sent);
        a.tokens_sent += tokens.len();
        let sent = tokens.is_empty() || (a.sink)(Event::Tokens(tokens));
        if !sent || (!text.is_empty() && !(a.sink)(Event::Text(text))) {
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
            self.keep_prefix(&a);
            return None;
        }
        match next {
            Some(n) => {
                a.next = n;
                Some(a)
            }
            None => {
                self.finish(a);
                None
            }
        }
    }

    /// A cache with linear-attention states (Qwen3.5's Gated DeltaNet) cannot be cut back to a
    /// block end once it has run past it, so it is offered to the prefix cache as it stands at
    /// the last block end before the prompt's end (`end`, just run): the point a chat's next
    /// turn continues from. Only that one end is kept (a later prompt sharing less, such as
    /// only a system prompt, runs whole).
    fn keep_recurrent_prefix(&mut self, p: &Prefilling<'a>, end: usize) {
        let len = p.job.prompt.len();
        let last = p.ends.iter().find(|&&e| e > end).is_none_or(|&e| e >= len);
        if self.prefixes.max_bytes == 0 || p.keys.is_empty() || end >= len || !last || !p.cache.is_recurrent() {
            return;
        }
        let ends = p.ends.iter().copied().filter(|&e| e <= end).collect();
        if let Err(e) = self.prefixes.store(p.keys[..end].to_vec(), ends, &p.cache, self.stats) {
            tracing::warn!("the prefix cache could not keep a prompt's start: {e}");
        }
    }

    /// Offers `a`'s KV cache (its prompt and the tokens run after it) to the prefix cache; a
    /// recurrent one was offered during its prefill ([`keep_recurrent_prefix`](Self::keep_recurrent_prefix)).
    fn keep_prefix(&mut self, a: &Active<'a>) {
        if self.prefixes.max_bytes == 0 || a.keys.is_empty() || a.cache.is_recurrent() {
            return;
        }
        let fed = a.cache.len().saturating_sub(a.keys.len());
        let keys = a.keys.iter().copied().chain(a.seq.generated().iter().take(fed).map(|&id| u64::from(id))).collect();
        if let Err(e) = self.prefixes.store(keys, a.ends.clone(), &a.cache, self.stats) {
            tracing::warn!("the prefix cache could not keep a sequence: {e}");
        }
    }

    fn finish(&mut self, a: Active<'a>) {
        self.keep_prefix(&a);
        let Active { seq, prompt, mut sink, prompt_s, decode_start, .. } = a;
        let timings = Timings::new(prompt.len(), seq.generated().len(), prompt_s, decode_start.elapsed().as_secs_f64());
        let mut rest = String::new();
        match seq.finish(self.model, timings, &mut |t| rest.push_str(t)) {
            Ok(out) => {
                if !rest.is_empty() && !sink(Event::Text(rest)) {
                    self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                self.stats.completed.fetch_add(1, Ordering::Relaxed);
                sink(Event::Done(Box::new(out)));
            }
            Err(e) => self.fail(&mut sink, e),
        }
    }

    fn fail(&self, sink: &mut Sink, e: TesseraError) {
        self.stats.failed.fetch_add(1, Ordering::Relaxed);
        sink(Event::Error(e));
    }
}
