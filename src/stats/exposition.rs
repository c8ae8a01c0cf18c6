//! kiln's own writer of the gathered metric families, for both `/metrics` listeners.
//!
//! The `prometheus` crate's `TextEncoder` writes bucket bounds as Rust prints floats
//! (`le="1"`); vLLM's Python client writes them as Python does (`le="1.0"`), dashboards
//! select `le="1.0"`, and Prometheus does not normalise the label. So bounds and quantiles
//! are written as Python's `repr(float)`; everything else follows the text format 0.0.4 as
//! the crate writes it. OpenMetrics 1.0 is the second format, from the same walk over the
//! families: counters are declared without `_total`, histogram buckets carry the latest
//! exemplar kiln kept for them (`exemplars`), timestamps are seconds, and `# EOF` ends it.

use std::fmt::Write as _;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

use super::histogram_store::{Exemplar, HistogramSnapshot, SeriesExemplars};
use super::sample_filter::SampleFilter;

/// The formats `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpositionFormat {
    /// Prometheus text format 0.0.4, the default.
    PrometheusText,
    /// OpenMetrics 1.0 text, with exemplars; for clients that ask for it.
    OpenMetrics,
}

impl ExpositionFormat {
    /// The `Content-Type` of a response in this format.
    pub const fn content_type(self) -> &'static str {
        match self {
            Self::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Writes `families` in `format`; `exemplars` are written only in OpenMetrics.
pub fn encode(families: &[MetricFamily], format: ExpositionFormat, exemplars: &HistogramSnapshot) -> String {
    encode_selected(families, format, exemplars, None)
}

/// `encode`, with only the samples `filter` asks for (`GET /metrics?name[]=…`); a family
/// none of whose samples is asked for is left out, header included.
pub fn encode_selected(
    families: &[MetricFamily],
    format: ExpositionFormat,
    exemplars: &HistogramSnapshot,
    filter: Option<&SampleFilter>,
) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let mut writer = SampleWriter {
        out: &mut out,
        format,
        filter,
    };
    for family in families {
        if filter.is_some_and(|f| !f.selects_family(family)) {
            continue;
        }
        writer.family(family, exemplars);
    }
    if format == ExpositionFormat::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// Writes one family at a time; the per-format differences live here.
struct SampleWriter<'a> {
    out: &'a mut String,
    format: ExpositionFormat,
    filter: Option<&'a SampleFilter>,
}

impl SampleWriter<'_> {
    fn family(&mut self, family: &MetricFamily, exemplars: &HistogramSnapshot) {
        let name = family.name();
        let om = self.format == ExpositionFormat::OpenMetrics;
        let (kind, family_name) = match family.get_field_type() {
            // OpenMetrics names the counter family without `_total`; its samples keep it.
            MetricType::COUNTER if om => ("counter", name.strip_suffix("_total").unwrap_or(name)),
            MetricType::COUNTER => ("counter", name),
            MetricType::GAUGE => ("gauge", name),
            MetricType::HISTOGRAM => ("histogram", name),
            MetricType::SUMMARY => ("summary", name),
            MetricType::UNTYPED if om => ("unknown", name),
            MetricType::UNTYPED => ("untyped", name),
        };
        self.header(family_name, kind, family.help());
        for metric in family.get_metric() {
            match family.get_field_type() {
                MetricType::COUNTER if om => {
                    self.sample(family_name, "_total", metric, None, metric.get_counter().value());
                }
                MetricType::COUNTER => {
                    self.sample(name, "", metric, None, metric.get_counter().value());
                }
                MetricType::GAUGE => {
                    self.sample(name, "", metric, None, metric.get_gauge().value());
                }
                MetricType::UNTYPED => {
                    self.sample(name, "", metric, None, metric.untyped.value());
                }
                MetricType::HISTOGRAM => {
                    let series = if om {
                        exemplars.series(name, metric.get_label()).map(|s| &s.exemplars)
                    } else {
                        None
                    };
                    self.histogram(name, metric, series)
                }
                MetricType::SUMMARY => self.summary(name, metric),
            }
        }
    }

    /// `# HELP` and `# TYPE`; OpenMetrics escapes `"` in help text too.
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let om = self.format == ExpositionFormat::OpenMetrics;
        if !help.is_empty() {
            let _ = writeln!(self.out, "# HELP {name} {}", escape(help, om));
        }
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn histogram(&mut self, name: &str, metric: &Metric, exemplars: Option<&SeriesExemplars>) {
        let h = metric.get_histogram();
        let mut inf_seen = false;
        for bucket in h.get_bucket() {
            let bound = bucket.upper_bound();
            inf_seen |= bound == f64::INFINITY;
            let le = python_float_repr(bound);
            let count = bucket.cumulative_count() as f64;
            if self.sample(name, "_bucket", metric, Some(("le", &le)), count) {
                self.exemplar(exemplars.and_then(|e| e.for_bucket(bound)));
            }
        }
        if !inf_seen {
            let count = h.get_sample_count() as f64;
            if self.sample(name, "_bucket", metric, Some(("le", "+Inf")), count) {
                self.exemplar(exemplars.and_then(|e| e.for_bucket(f64::INFINITY)));
            }
        }
        self.sample(name, "_sum", metric, None, h.get_sample_sum());
        self.sample(name, "_count", metric, None, h.get_sample_count() as f64);
    }

    fn summary(&mut self, name: &str, metric: &Metric) {
        let s = metric.get_summary();
        for q in s.get_quantile() {
            let quantile = python_float_repr(q.quantile());
            self.sample(name, "", metric, Some(("quantile", &quantile)), q.value());
        }
        self.sample(name, "_sum", metric, None, s.sample_sum());
        self.sample(name, "_count", metric, None, s.sample_count() as f64);
    }

    /// Writes one sample line, unless the filter leaves its name out; says whether it did.
    fn sample(&mut self, name: &str, suffix: &str, metric: &Metric, extra: Option<(&str, &str)>, value: f64) -> bool {
        if let Some(filter) = self.filter
            && !filter.selects(&format!("{name}{suffix}"))
        {
            return false;
        }
        self.out.push_str(name);
        self.out.push_str(suffix);
        write_labels(self.out, metric.get_label(), extra);
        self.out.push(' ');
        self.out.push_str(&sample_value(value));
        match (metric.timestamp_ms(), self.format) {
            (0, _) => {}
            (ms, ExpositionFormat::PrometheusText) => {
                let _ = write!(self.out, " {ms}");
            }
            (ms, ExpositionFormat::OpenMetrics) => {
                let _ = write!(self.out, " {}", ms as f64 / 1000.0);
            }
        }
        self.out.push('\n');
        true
    }

    /// ` # {trace_id="…",span_id="…"} value timestamp` after the bucket line just written.
    fn exemplar(&mut self, exemplar: Option<&Exemplar>) {
        let Some(e) = exemplar else { return };
        self.out.pop(); // the bucket line's newline
        let _ = writeln!(
            self.out,
            " # {{trace_id=\"{}\",span_id=\"{}\"}} {} {:.3}",
            e.trace.trace_id_hex(),
            e.trace.span_id_hex(),
            sample_value(e.value),
            e.timestamp_s
        );
    }
}

fn write_labels(out: &mut String, pairs: &[LabelPair], extra: Option<(&str, &str)>) {
    if pairs.is_empty() && extra.is_none() {
        return;
    }
    let mut separator = '{';
    for (name, value) in pairs.iter().map(|p| (p.name(), p.value())).chain(extra) {
        let _ = write!(out, "{separator}{name}=\"{}\"", escape(value, true));
        separator = ',';
    }
    out.push('}');
}

/// A sample value as the crate writes it (`1`, `0.5`), infinities as the format spells them.
fn sample_value(v: f64) -> String {
    if v == f64::INFINITY {
        "+Inf".to_owned()
    } else if v == f64::NEG_INFINITY {
        "-Inf".to_owned()
    } else {
        v.to_string()
    }
}

/// Escapes `\` and newlines (and `"` in label values), as the text format requires.
fn escape(v: &str, quote: bool) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// `repr(float)` of Python 3: the shortest digits that round-trip, fixed notation for
/// exponents -4..16 with at least one decimal (`1.0`, `0.25`, `2560.0`), scientific
/// otherwise (`1e-05`, `1e+16`), and `+Inf`, `-Inf`, `NaN` as the text format spells them.
pub fn python_float_repr(v: f64) -> String {
    if v.is_nan() {
        return "NaN".to_owned();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned();
    }
    // `{:e}` gives the shortest round-trip digits: "2.56e3", "-1e-5", "0e0".
    let sci = format!("{v:e}");
    let (mantissa, exponent) = sci.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1; // digits before the decimal point
        let fixed = if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!("{}.{}", &digits[..point as usize], &digits[point as usize..])
        };
        format!("{sign}{fixed}")
    } else {
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exponent.unsigned_abs())
    }
}

#[cfg(test)]
mod tests;
