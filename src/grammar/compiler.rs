//! Compiles a request's [`StructuredOutput`] into a [`CompiledGrammar`] off the hot path: in
//! a bounded pool of blocking threads, under size, fuel and time limits, with the results kept
//! in a bounded LRU cache keyed by the SHA-256 of the constraint's source.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::TokEnv;
use llguidance::{CancellationHandle, JsonCompileOptions, Matcher, ParserFactory};
use lru::LruCache;
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::GrammarError;
use super::regex_size::{MAX_REGEX_POSITIONS, expanded_positions};
use crate::engine::structured_output::{CompiledGrammar, StructuredOutput};

/// The operator's limits on what a request may ask to compile.
#[derive(Debug, Clone, PartialEq)]
pub struct GrammarLimits {
    /// Largest schema, regex, grammar or list of choices, in bytes of source.
    pub max_source_bytes: usize,
    /// Longest a compile may take before the request is refused.
    pub compile_timeout: Duration,
    /// Compiled grammars kept for reuse.
    pub cache_entries: usize,
    /// Compiles running at once (each holds a blocking thread).
    pub max_concurrent_compiles: usize,
}

impl Default for GrammarLimits {
    fn default() -> Self {
        Self {
            max_source_bytes: 64 * 1024,
            compile_timeout: Duration::from_secs(5),
            cache_entries: 256,
            max_concurrent_compiles: 2,
        }
    }
}

/// A compiled grammar and how it was obtained, for the compile metrics.
#[derive(Debug, Clone)]
pub struct CompileOutcome {
    pub grammar: CompiledGrammar,
    /// Seconds spent compiling; `None` on a cache hit.
    pub compile_seconds: Option<f64>,
}

/// The grammar compiler of one served model (its vocabulary is fixed).
pub struct GrammarCompiler {
    factory: ParserFactory,
    cache: Mutex<LruCache<[u8; 32], CompiledGrammar>>,
    permits: Arc<Semaphore>,
    limits: GrammarLimits,
}

impl GrammarCompiler {
    pub fn new(env: &TokEnv, limits: GrammarLimits) -> Result<Self, GrammarError> {
        let mut factory = ParserFactory::new_simple(env).map_err(|e| GrammarError::Vocabulary(e.to_string()))?;
        factory.quiet();
        factory.limits_mut().verbose_errors = false;
        let entries = NonZeroUsize::new(limits.cache_entries.max(1)).expect("at least one entry");
        Ok(Self {
            factory,
            cache: Mutex::new(LruCache::new(entries)),
            permits: Arc::new(Semaphore::new(limits.max_concurrent_compiles.max(1))),
            limits,
        })
    }

    pub fn limits(&self) -> &GrammarLimits {
        &self.limits
    }

    /// Compiled grammars in the cache.
    pub fn cached(&self) -> usize {
        self.lock_cache().len()
    }

    /// Compiles `output` on a blocking thread (or takes it from the cache), giving up after
    /// the compile timeout. The async caller never blocks. A compile given up on (timed out,
    /// or its caller dropped) frees its slot at once and is cancelled: it stops at
    /// llguidance's next check, or before its first mask when the parser is still being
    /// built (which llguidance's fuel limits bound), and its result is not cached.
    pub async fn compile(self: &Arc<Self>, output: &StructuredOutput) -> Result<CompileOutcome, GrammarError> {
        let key = self.check_and_key(output)?;
        if let Some(grammar) = self.lock_cache().get(&key).cloned() {
            return Ok(CompileOutcome {
                grammar,
                compile_seconds: None,
            });
        }
        let timeout = self.limits.compile_timeout;
        let this = Arc::clone(self);
        let output = output.clone();
        let cancel = CompileCancel::default();
        let _cancel_when_given_up = CancelOnDrop(cancel.clone());
        let work = async move {
            // Held here, not by the blocking thread: dropping this future frees the slot.
            let _permit = Arc::clone(&this.permits)
                .acquire_owned()
                .await
                .map_err(|_| GrammarError::Timeout(timeout))?;
            tokio::task::spawn_blocking(move || this.compile_uncached(key, &output, &cancel))
                .await
                .map_err(|e| GrammarError::Invalid(format!("the compiler failed: {e}")))?
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| GrammarError::Timeout(timeout))?
    }

    /// Compiles on the calling thread (tests, benchmarks, and callers already off the hot
    /// path); uses and fills the cache like [`Self::compile`].
    pub fn compile_blocking(&self, output: &StructuredOutput) -> Result<CompileOutcome, GrammarError> {
        let key = self.check_and_key(output)?;
        if let Some(grammar) = self.lock_cache().get(&key).cloned() {
            return Ok(CompileOutcome {
                grammar,
                compile_seconds: None,
            });
        }
        self.compile_uncached(key, output, &CompileCancel::default())
    }

    /// Takes every compile slot (tests: a compile then waits until its timeout).
    #[cfg(test)]
    pub(crate) fn occupy_every_slot(&self) -> tokio::sync::OwnedSemaphorePermit {
        let slots = self.limits.max_concurrent_compiles.max(1) as u32;
        Arc::clone(&self.permits)
            .try_acquire_many_owned(slots)
            .expect("an idle compiler")
    }

    fn compile_uncached(
        &self,
        key: [u8; 32],
        output: &StructuredOutput,
        cancel: &CompileCancel,
    ) -> Result<CompileOutcome, GrammarError> {
        let start = Instant::now();
        let given_up = GrammarError::Timeout(self.limits.compile_timeout);
        let grammar = top_level_grammar(output)?;
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| GrammarError::Invalid(e.to_string()))?;
        let mut matcher = Matcher::new(Ok(parser)).into_cancellable();
        if !cancel.watch(matcher.cancellation_handle()) {
            return Err(given_up);
        }
        // The first mask finds what only shows up in the lexer (and warms its cache).
        let first_mask = matcher.compute_mask();
        if cancel.unwatch() {
            return Err(given_up);
        }
        first_mask.map_err(|e| GrammarError::Invalid(e.to_string()))?;
        let grammar = CompiledGrammar::new(matcher);
        self.lock_cache().put(key, grammar.clone());
        Ok(CompileOutcome {
            grammar,
            compile_seconds: Some(start.elapsed().as_secs_f64()),
        })
    }

    fn check_and_key(&self, output: &StructuredOutput) -> Result<[u8; 32], GrammarError> {
        let (tag, sources) = source_parts(output);
        let bytes: usize = sources.iter().map(|s| s.len()).sum();
        if bytes > self.limits.max_source_bytes {
            return Err(GrammarError::TooLarge {
                bytes,
                limit: self.limits.max_source_bytes,
            });
        }
        if let StructuredOutput::Regex(regex) = output
            && let Some(positions) = expanded_positions(regex).filter(|&p| p > MAX_REGEX_POSITIONS)
        {
            return Err(GrammarError::RegexTooLarge {
                positions,
                limit: MAX_REGEX_POSITIONS,
            });
        }
        let mut hasher = Sha256::new();
        hasher.update(tag.as_bytes());
        for source in sources {
            // Length-prefixed, so ["a,b"] and ["a", "b"] differ.
            hasher.update((source.len() as u64).to_le_bytes());
            hasher.update(source.as_bytes());
        }
        Ok(hasher.finalize().into())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, LruCache<[u8; 32], CompiledGrammar>> {
        self.cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One compile's cancellation, shared by the request waiting for it and the blocking thread
/// running it. The matcher's handle is watched only during the first mask, so a cached
/// grammar is never cancelled after the fact.
#[derive(Clone, Default)]
struct CompileCancel(Arc<Mutex<CancelState>>);

#[derive(Default)]
struct CancelState {
    cancelled: bool,
    running: Option<CancellationHandle>,
}

impl CompileCancel {
    fn lock(&self) -> std::sync::MutexGuard<'_, CancelState> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn cancel(&self) {
        let mut state = self.lock();
        state.cancelled = true;
        if let Some(handle) = state.running.take() {
            handle.cancel();
        }
    }

    /// Watches a running matcher; false when the compile was given up already.
    fn watch(&self, handle: Option<CancellationHandle>) -> bool {
        let mut state = self.lock();
        state.running = handle;
        !state.cancelled
    }

    /// Stops watching; true when the compile was given up meanwhile.
    fn unwatch(&self) -> bool {
        let mut state = self.lock();
        state.running = None;
        state.cancelled
    }
}

/// Cancels its compile when dropped: the request stopped waiting (done, timed out or gone).
struct CancelOnDrop(CompileCancel);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// The compiled form's identity: a tool's schema and a `json_schema` with the same text
/// share one cache entry.
fn source_parts(output: &StructuredOutput) -> (&'static str, Vec<&str>) {
    match output {
        StructuredOutput::JsonObject => ("json_object", Vec::new()),
        StructuredOutput::JsonSchema(s) | StructuredOutput::Tool(s) => ("json_schema", vec![s.as_str()]),
        StructuredOutput::Regex(s) => ("regex", vec![s.as_str()]),
        StructuredOutput::Choice(choices) => ("choice", choices.iter().map(String::as_str).collect()),
        StructuredOutput::Grammar(s) => ("grammar", vec![s.as_str()]),
    }
}

/// llguidance's input for each kind of constraint. JSON is compact (no whitespace between
/// tokens) unless the schema's own `x-guidance` options say otherwise, so a valid answer
/// costs the fewest tokens.
fn top_level_grammar(output: &StructuredOutput) -> Result<TopLevelGrammar, GrammarError> {
    Ok(match output {
        StructuredOutput::JsonObject => {
            TopLevelGrammar::from_json_schema(compact(serde_json::json!({"type": "object"})))
        }
        StructuredOutput::JsonSchema(text) | StructuredOutput::Tool(text) => {
            let schema: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| GrammarError::Invalid(format!("the schema is not valid JSON: {e}")))?;
            TopLevelGrammar::from_json_schema(compact(schema))
        }
        StructuredOutput::Regex(rx) => TopLevelGrammar::from_regex(rx),
        StructuredOutput::Choice(choices) => {
            if choices.is_empty() {
                return Err(GrammarError::Invalid("the list of choices is empty".into()));
            }
            // Lark string literals are JSON strings.
            let alternatives: Vec<String> = choices
                .iter()
                .map(|c| serde_json::to_string(c).expect("a string serialises"))
                .collect();
            TopLevelGrammar::from_lark(format!("start: {}", alternatives.join(" | ")))
        }
        StructuredOutput::Grammar(text) if super::gbnf::is_gbnf(text) => {
            TopLevelGrammar::from_lark(super::gbnf::gbnf_to_lark(text))
        }
        StructuredOutput::Grammar(lark) => TopLevelGrammar::from_lark(lark.clone()),
    })
}

fn compact(mut schema: serde_json::Value) -> serde_json::Value {
    if let Some(object) = schema.as_object()
        && !object.contains_key("x-guidance")
    {
        JsonCompileOptions {
            whitespace_flexible: false,
            ..JsonCompileOptions::default()
        }
        .apply_to(&mut schema);
    }
    schema
}
