//! The sparse exponential buckets of a Prometheus native histogram, for one series.
//!
//! Bucket `i` at schema `s` holds the values in `(2^((i-1)/2^s), 2^(i/2^s)]`, so each bucket is
//! `2^(2^-s)` times as wide as the one below it, whatever the unit. Schema 3 (buckets 9 % wide)
//! keeps a quantile within about 4.5 % of the truth when it is read at a bucket's middle, and
//! within one bucket (9 %) whatever the interpolation: the "about 5 %" a latency SLO needs,
//! with no bucket list to choose. Values at or below the zero threshold (negatives included,
//! which latencies never are) count in the zero bucket. The bucket count is bounded: past
//! [`MAX_BUCKETS`] the schema drops by one, merging neighbours pairwise, as the Go client does.

use std::collections::BTreeMap;

/// The schema a series starts at: 2^(1/8) ≈ 1.09 between bucket bounds.
pub const START_SCHEMA: i32 = 3;
/// The coarsest schema a reduction may reach (Prometheus accepts -4..=8).
const MIN_SCHEMA: i32 = -4;
/// At most this many populated buckets a series (162 at schema 3 span 1 ms to 1,000 s).
pub const MAX_BUCKETS: usize = 160;
/// The width of the zero bucket: the Go client's default, 2^-128. Non-zero, so Prometheus
/// reads the series as native even before its first observation.
pub const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

/// The upper bounds of the 2^s buckets of one power of two, as fractions of it, at schema 3
/// (the Go client's table: exact, so a value on a bound lands in the bucket below it).
const SCHEMA_3_BOUNDS: [f64; 8] = [
    0.5,
    0.545_253_866_332_628_8,
    0.594_603_557_501_360_5,
    0.648_419_777_325_504_8,
    0.707_106_781_186_547_5,
    0.771_105_412_703_970_4,
    0.840_896_415_253_714_4,
    0.917_004_043_204_671_1,
];

/// One series' native histogram state.
#[derive(Debug, Clone, PartialEq)]
pub struct NativeBuckets {
    schema: i32,
    zero_count: u64,
    positive: BTreeMap<i32, u64>,
    negative: BTreeMap<i32, u64>,
    count: u64,
    sum: f64,
}

impl Default for NativeBuckets {
    fn default() -> Self {
        Self {
            schema: START_SCHEMA,
            zero_count: 0,
            positive: BTreeMap::new(),
            negative: BTreeMap::new(),
            count: 0,
            sum: 0.0,
        }
    }
}

/// A run of consecutive buckets: `offset` from the end of the previous span (from 0 for the
/// first), `length` buckets long; the exposition's `BucketSpan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub offset: i32,
    pub length: u32,
}

/// One sign's buckets as the exposition writes them: spans, then each bucket's count as the
/// difference from the bucket before it (the first from 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpansAndDeltas {
    pub spans: Vec<Span>,
    pub deltas: Vec<i64>,
}

impl NativeBuckets {
    pub fn observe(&mut self, value: f64) {
        if value.is_nan() {
            return;
        }
        self.count += 1;
        self.sum += value;
        if value.abs() <= ZERO_THRESHOLD {
            self.zero_count += 1;
            return;
        }
        let side = if value > 0.0 {
            &mut self.positive
        } else {
            &mut self.negative
        };
        *side.entry(bucket_index(value.abs(), self.schema)).or_default() += 1;
        while self.positive.len() + self.negative.len() > MAX_BUCKETS && self.schema > MIN_SCHEMA {
            self.halve_resolution();
        }
    }

    pub fn schema(&self) -> i32 {
        self.schema
    }

    pub fn zero_count(&self) -> u64 {
        self.zero_count
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }

    pub fn positive(&self) -> SpansAndDeltas {
        spans_and_deltas(&self.positive)
    }

    pub fn negative(&self) -> SpansAndDeltas {
        spans_and_deltas(&self.negative)
    }

    /// The populated positive buckets, `(index, count)` in order.
    pub fn positive_buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.positive.iter().map(|(i, c)| (*i, *c))
    }

    /// The populated negative buckets (of `-value`), `(index, count)` in order.
    pub fn negative_buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        self.negative.iter().map(|(i, c)| (*i, *c))
    }

    /// What was observed since `earlier`, a copy of this series taken before (a delta OTLP
    /// export). `earlier` is first reduced to this schema (a reduction since then merged
    /// buckets), so every bucket of the difference is one of this series' buckets.
    pub fn since(&self, earlier: &NativeBuckets) -> NativeBuckets {
        let mut before = earlier.clone();
        while before.schema > self.schema {
            before.halve_resolution();
        }
        let minus = |now: &BTreeMap<i32, u64>, then: &BTreeMap<i32, u64>| {
            now.iter()
                .map(|(i, c)| (*i, c.saturating_sub(then.get(i).copied().unwrap_or(0))))
                .filter(|(_, c)| *c > 0)
                .collect()
        };
        NativeBuckets {
            schema: self.schema,
            zero_count: self.zero_count.saturating_sub(before.zero_count),
            positive: minus(&self.positive, &before.positive),
            negative: minus(&self.negative, &before.negative),
            count: self.count.saturating_sub(before.count),
            sum: self.sum - before.sum,
        }
    }

    /// One schema coarser: bucket `i` becomes `ceil(i / 2)`, which covers it exactly.
    fn halve_resolution(&mut self) {
        for side in [&mut self.positive, &mut self.negative] {
            let mut merged = BTreeMap::new();
            for (index, count) in std::mem::take(side) {
                *merged.entry(index.div_euclid(2) + index.rem_euclid(2)).or_insert(0) += count;
            }
            *side = merged;
        }
        self.schema -= 1;
    }
}

/// The bucket `value` (> 0) falls in at `schema`: the smallest `i` with `value <= 2^(i/2^s)`.
pub fn bucket_index(value: f64, schema: i32) -> i32 {
    let (frac, exp) = frexp(value);
    if schema == START_SCHEMA {
        let within = SCHEMA_3_BOUNDS.partition_point(|b| *b < frac) as i32;
        return within + (exp - 1) * SCHEMA_3_BOUNDS.len() as i32;
    }
    // Other schemas only arise from halving schema 3; index at 3, then halve.
    let mut index = bucket_index(value, START_SCHEMA);
    for _ in schema..START_SCHEMA {
        index = index.div_euclid(2) + index.rem_euclid(2);
    }
    index
}

/// The bounds `(lower, upper]` of bucket `index` at `schema`.
pub fn bucket_bounds(index: i32, schema: i32) -> (f64, f64) {
    let width = 2f64.powf(2f64.powi(-schema));
    let upper = width.powi(index);
    (upper / width, upper)
}

/// `value = frac * 2^exp` with `frac` in `[0.5, 1)`, for a positive, finite, normal `value`
/// (subnormals sit far below the zero threshold); infinity lands past every bucket.
fn frexp(value: f64) -> (f64, i32) {
    if value.is_infinite() {
        return (0.5, 1025);
    }
    let bits = value.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32 - 1022;
    let frac = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (frac, exp)
}

fn spans_and_deltas(buckets: &BTreeMap<i32, u64>) -> SpansAndDeltas {
    let mut out = SpansAndDeltas::default();
    let mut next_index = None; // the index right after the last bucket written
    let mut previous_count = 0i64;
    for (&index, &count) in buckets {
        match next_index {
            Some(next) if next == index => out.spans.last_mut().expect("a span is open").length += 1,
            Some(next) => out.spans.push(Span {
                offset: index - next,
                length: 1,
            }),
            None => out.spans.push(Span {
                offset: index,
                length: 1,
            }),
        }
        out.deltas.push(count as i64 - previous_count);
        previous_count = count as i64;
        next_index = Some(index + 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_lands_in_the_bucket_whose_bounds_hold_it() {
        assert_eq!(bucket_index(1.0, 3), 0, "a bound belongs to the bucket below it");
        assert_eq!(bucket_index(2.0, 3), 8);
        assert_eq!(bucket_index(0.5, 3), -8);
        assert_eq!(bucket_index(1.05, 3), 1);
        // log2(0.001) * 8 = -79.7: bucket -79.
        assert_eq!(bucket_index(0.001, 3), -79);
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            // Values from 1 µs to about 1,000 s, spread evenly in log space.
            let value = 1e-6 * 10f64.powf((seed % 9_000_000) as f64 / 1e6);
            for schema in [3, 2, 0, -2] {
                let (lower, upper) = bucket_bounds(bucket_index(value, schema), schema);
                let slack = 1e-12 * value; // bucket_bounds rounds: powf, not the table
                assert!(
                    lower - slack < value && value <= upper + slack,
                    "{value} in ({lower}, {upper}]"
                );
            }
        }
        let (lower, upper) = bucket_bounds(bucket_index(0.3, 3), 3);
        assert!(
            (upper / lower - 2f64.powf(0.125)).abs() < 1e-12,
            "schema 3: 9 % wide buckets"
        );
    }

    #[test]
    fn spans_skip_empty_buckets_and_counts_are_deltas() {
        let mut h = NativeBuckets::default();
        for v in [1.0, 1.0, 1.05, 2.0, 2.0, 2.0, 0.0, -1.0] {
            h.observe(v);
        }
        assert_eq!((h.count(), h.sum(), h.zero_count()), (8, 8.05, 1));
        let positive = h.positive();
        // Buckets 0 (2), 1 (1) and 8 (3): a span at 0 of 2, then 6 empty, then one of 1.
        assert_eq!(
            positive.spans,
            vec![Span { offset: 0, length: 2 }, Span { offset: 6, length: 1 }]
        );
        assert_eq!(positive.deltas, vec![2, -1, 2]);
        assert_eq!(h.negative().spans, vec![Span { offset: 0, length: 1 }]);
        assert_eq!(h.negative().deltas, vec![1]);
        h.observe(f64::NAN);
        assert_eq!(h.count(), 8, "NaN is not an observation");
    }

    #[test]
    fn a_delta_is_what_came_since_even_across_a_reduction() {
        let mut h = NativeBuckets::default();
        for v in [1.0, 1.05, 2.0, 0.0] {
            h.observe(v);
        }
        let earlier = h.clone();
        h.observe(2.0);
        h.observe(1.05);
        let d = h.since(&earlier);
        assert_eq!((d.count(), d.zero_count(), d.schema()), (2, 0, 3));
        assert!((d.sum() - 3.05).abs() < 1e-12);
        assert_eq!(d.positive_buckets().collect::<Vec<_>>(), [(1, 1), (8, 1)]);
        // Enough new buckets to reduce the schema: the earlier copy is reduced first.
        for i in -200..200 {
            h.observe(2f64.powf((f64::from(i) - 0.5) / 8.0));
        }
        assert!(h.schema() < 3);
        let d = h.since(&earlier);
        assert_eq!(d.schema(), h.schema());
        assert_eq!(d.count(), 402);
        assert_eq!(d.positive_buckets().map(|(_, c)| c).sum::<u64>(), 402);
        let mut merged = earlier.clone();
        while merged.schema() > h.schema() {
            merged.halve_resolution();
        }
        for (i, c) in h.positive_buckets() {
            let before = merged.positive.get(&i).copied().unwrap_or(0);
            let delta = d.positive.get(&i).copied().unwrap_or(0);
            assert_eq!(before + delta, c, "bucket {i}");
        }
    }

    #[test]
    fn too_many_buckets_halve_the_resolution_and_keep_every_count() {
        let mut h = NativeBuckets::default();
        // 400 distinct schema-3 buckets, a value in the middle of each: from 2^-25 to 2^25.
        let middle = |i: i32| 2f64.powf((f64::from(i) - 0.5) / 8.0);
        for i in -200..200 {
            h.observe(middle(i));
        }
        assert!(h.positive.len() <= MAX_BUCKETS, "{}", h.positive.len());
        assert_eq!(h.schema(), 1, "400 -> 200 -> 100 buckets");
        assert_eq!(h.positive_buckets().map(|(_, c)| c).sum::<u64>(), 400);
        // Every value still sits inside its (now wider) bucket.
        for i in -200..200 {
            let value = middle(i);
            let index = bucket_index(value, h.schema());
            assert!(h.positive.contains_key(&index), "{value}");
        }
    }
}
