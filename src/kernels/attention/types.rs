//! The shapes the attention kernels share: one sequence's span of the step and the heads'
//! geometry.

/// One sequence's share of the step.
#[derive(Debug, Clone)]
pub struct SequenceSpan<'a> {
    /// First row of the sequence's new tokens in the flattened step.
    pub first_row: usize,
    /// New tokens (queries) of the sequence this step.
    pub len: usize,
    /// Cache slot of every context position, `0 .. context`; the new tokens are the last `len`.
    pub slots: &'a [i64],
}

/// Head layout of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

impl HeadShape {
    /// Panics unless the query heads group evenly over the KV heads: the kernels read KV head
    /// `head / (num_heads / num_kv_heads)`, which would run past a K/V row otherwise.
    pub fn check(&self) {
        assert!(
            self.num_heads > 0 && self.num_kv_heads > 0 && self.head_dim > 0,
            "empty head shape {self:?}"
        );
        assert!(
            self.num_heads.is_multiple_of(self.num_kv_heads),
            "{} query heads cannot be grouped over {} KV heads",
            self.num_heads,
            self.num_kv_heads
        );
    }
}

impl SequenceSpan<'_> {
    /// Panics unless the span's new tokens are rows `first_row ..` of a `tokens`-row step and
    /// its context (which holds them) has a slot in a `cache_rows`-row cache for every position.
    pub fn check(&self, tokens: usize, cache_rows: usize) {
        assert!(
            self.len <= self.slots.len(),
            "a span of {} new tokens has only {} context slots",
            self.len,
            self.slots.len()
        );
        assert!(
            self.first_row + self.len <= tokens,
            "span rows {}..{} outside the step's {tokens} rows",
            self.first_row,
            self.first_row + self.len
        );
        assert!(
            self.slots.iter().all(|&s| s >= 0 && (s as usize) < cache_rows),
            "a context slot lies outside the cache's {cache_rows} rows"
        );
    }
}
