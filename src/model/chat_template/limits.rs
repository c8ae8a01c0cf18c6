//! Bounds on one chat-template render. A template comes from the model file or the operator,
//! never from a request, but a model downloaded from a hub is not always trustworthy: a loop
//! over `range(10**5)` nested three deep, a macro that calls itself, or `{{ 'x' * 10**8 }}` in
//! a loop must fail the request that triggered it, not hang a worker or exhaust memory.
//!
//! minijinja gives three of the bounds: its fuel (instructions per render), its recursion
//! limit, and its own caps (`range` refuses more than 100,000 items, a repeated string more
//! than 100 MB). kiln adds the output cap, counted both where output is written and where
//! a value is emitted, so `{% set x %}...{% endset %}` captures count too.
//!
//! Not bounded: memory that a template builds without emitting it, e.g. a string doubled
//! through `namespace` a few dozen times; minijinja has no memory budget.

use std::sync::atomic::{AtomicUsize, Ordering};

use minijinja::value::{Object, Value};
use minijinja::{Environment, Error, ErrorKind, Output, State};

/// The bounds of one render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderLimits {
    /// minijinja instructions one render may execute (its `fuel`).
    pub fuel: u64,
    /// minijinja's recursion counter; a loop level costs 1, a macro call about 10.
    pub recursion: usize,
    /// Bytes one render may produce: its output and every emitted value, captured or not.
    pub max_output_bytes: usize,
}

impl Default for RenderLimits {
    /// Far above what real templates use (a few hundred instructions per message, recursion
    /// of a few dozen for nested tool schemas) and low enough that a runaway render ends
    /// within about a second.
    fn default() -> Self {
        Self {
            fuel: 20_000_000,
            recursion: 200,
            max_output_bytes: 16 << 20,
        }
    }
}

impl RenderLimits {
    /// The defaults with an output cap that also fits `max_prompt_bytes` of message text
    /// several times over (the template adds its own text around each message).
    pub fn for_prompt_bytes(max_prompt_bytes: usize) -> Self {
        let defaults = Self::default();
        Self {
            max_output_bytes: defaults.max_output_bytes.max(max_prompt_bytes.saturating_mul(4)),
            ..defaults
        }
    }

    /// Sets the fuel, the recursion limit and the counting formatter on `env`.
    pub(super) fn apply(&self, env: &mut Environment<'static>) {
        env.set_fuel(Some(self.fuel));
        env.set_recursion_limit(self.recursion);
        let cap = self.max_output_bytes;
        env.set_formatter(move |out: &mut Output, state: &State, value: &Value| {
            let len = value.as_str().map_or_else(|| value.to_string().len(), str::len);
            let counter = state.get_or_set_temp_object(EMITTED_BYTES, EmittedBytes::default);
            let total = counter.0.fetch_add(len, Ordering::Relaxed).saturating_add(len);
            if total > cap {
                return Err(
                    Error::new(ErrorKind::InvalidOperation, "chat template output too large")
                        .with_source(LimitHit(RenderLimit::OutputSize)),
                );
            }
            minijinja::escape_formatter(out, state, value)
        });
    }
}

/// The limit a render ran into: the template is at fault, not the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenderLimit {
    Fuel,
    Recursion,
    OutputSize,
    /// minijinja's `range` refuses more than 100,000 items.
    RangeSize,
}

impl std::fmt::Display for RenderLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RenderLimit::Fuel => "instruction budget",
            RenderLimit::Recursion => "recursion limit",
            RenderLimit::OutputSize => "output size limit",
            RenderLimit::RangeSize => "range size limit",
        })
    }
}

/// The per-render count of emitted bytes, kept in minijinja's per-render temps.
const EMITTED_BYTES: &str = "kiln_emitted_bytes";

#[derive(Debug, Default)]
struct EmittedBytes(AtomicUsize);

impl Object for EmittedBytes {}

/// Marks the formatter's error so [`limit_hit`] can tell it from the template's own errors.
#[derive(Debug)]
struct LimitHit(RenderLimit);

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "chat template {}", self.0)
    }
}

impl std::error::Error for LimitHit {}

/// The limit behind a render error, if one was hit.
pub(super) fn limit_hit(err: &Error) -> Option<RenderLimit> {
    if err.kind() == ErrorKind::OutOfFuel {
        return Some(RenderLimit::Fuel);
    }
    if err.kind() == ErrorKind::InvalidOperation {
        // minijinja's own caps, told apart by their messages (it has no kinds for them).
        match err.detail() {
            Some("recursion limit exceeded") => return Some(RenderLimit::Recursion),
            Some("repeated string is too large") => return Some(RenderLimit::OutputSize),
            Some("range has too many elements") => return Some(RenderLimit::RangeSize),
            _ => {}
        }
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(hit) = e.downcast_ref::<LimitHit>() {
            return Some(hit.0);
        }
        source = e.source();
    }
    None
}

/// Collects the rendered text, refusing to grow past `cap` bytes.
pub(super) struct CappedOutput {
    pub bytes: Vec<u8>,
    pub cap: usize,
    pub overflowed: bool,
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        Self {
            bytes: Vec::new(),
            cap,
            overflowed: false,
        }
    }
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.cap {
            self.overflowed = true;
            return Err(std::io::Error::other("chat template output too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
