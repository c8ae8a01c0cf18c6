//! kiln's own writer of the gathered metric families, for both `/metrics` listeners.
//!
//! The `prometheus` crate's `TextEncoder` writes bucket bounds as Rust prints floats
//! (`le="1"`); vLLM's Python client writes them as Python does (`le="1.0"`), dashboards
//! select `le="1.0"`, and Prometheus does not normalise the label. So bounds and quantiles
//! are written as Python's `repr(float)`; everything else follows the text format 0.0.4 as
//! the crate writes it. The format is a parameter so that OpenMetrics (with exemplars) can
//! join as a second `ExpositionFormat` without a second walk over the families.

use std::fmt::Write as _;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// The formats `/metrics` can answer in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpositionFormat {
    /// Prometheus text format 0.0.4, the default.
    PrometheusText,
}

impl ExpositionFormat {
    /// The `Content-Type` of a response in this format.
    pub const fn content_type(self) -> &'static str {
        match self {
            Self::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// Writes `families` in `format`.
pub fn encode(families: &[MetricFamily], format: ExpositionFormat) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let mut writer = SampleWriter { out: &mut out, format };
    for family in families {
        writer.family(family);
    }
    out
}

/// Writes one family at a time; the per-format differences live here.
struct SampleWriter<'a> {
    out: &'a mut String,
    format: ExpositionFormat,
}

impl SampleWriter<'_> {
    fn family(&mut self, family: &MetricFamily) {
        let name = family.name();
        let kind = match family.get_field_type() {
            MetricType::COUNTER => "counter",
            MetricType::GAUGE => "gauge",
            MetricType::HISTOGRAM => "histogram",
            MetricType::SUMMARY => "summary",
            MetricType::UNTYPED => "untyped",
        };
        self.header(name, kind, family.help());
        for metric in family.get_metric() {
            match family.get_field_type() {
                MetricType::COUNTER => self.sample(name, "", metric, None, metric.get_counter().value()),
                MetricType::GAUGE => self.sample(name, "", metric, None, metric.get_gauge().value()),
                MetricType::UNTYPED => self.sample(name, "", metric, None, metric.untyped.value()),
                MetricType::HISTOGRAM => self.histogram(name, metric),
                MetricType::SUMMARY => self.summary(name, metric),
            }
        }
    }

    /// `# HELP` and `# TYPE` (OpenMetrics will add `# UNIT` and its own type names here).
    fn header(&mut self, name: &str, kind: &str, help: &str) {
        match self.format {
            ExpositionFormat::PrometheusText => {
                if !help.is_empty() {
                    let _ = writeln!(self.out, "# HELP {name} {}", escape(help, false));
                }
                let _ = writeln!(self.out, "# TYPE {name} {kind}");
            }
        }
    }

    fn histogram(&mut self, name: &str, metric: &Metric) {
        let h = metric.get_histogram();
        let mut inf_seen = false;
        for bucket in h.get_bucket() {
            let bound = bucket.upper_bound();
            inf_seen |= bound == f64::INFINITY;
            let le = python_float_repr(bound);
            self.sample(
                name,
                "_bucket",
                metric,
                Some(("le", &le)),
                bucket.cumulative_count() as f64,
            );
        }
        if !inf_seen {
            self.sample(
                name,
                "_bucket",
                metric,
                Some(("le", "+Inf")),
                h.get_sample_count() as f64,
            );
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

    fn sample(&mut self, name: &str, suffix: &str, metric: &Metric, extra: Option<(&str, &str)>, value: f64) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        write_labels(self.out, metric.get_label(), extra);
        self.out.push(' ');
        self.out.push_str(&sample_value(value));
        if metric.timestamp_ms() != 0 {
            let _ = write!(self.out, " {}", metric.timestamp_ms());
        }
        self.out.push('\n');
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
mod tests {
    use super::*;

    #[test]
    fn floats_are_written_as_pythons_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.25, "0.25"),
            (0.001, "0.001"),
            (2560.0, "2560.0"),
            (5000.0, "5000.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (0.3, "0.3"),
            (1.5, "1.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345e20, "1.2345e+20"),
            (123.456, "123.456"),
            (-2.5, "-2.5"),
            (16777216.0, "16777216.0"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (v, want) in cases {
            assert_eq!(python_float_repr(v), want, "{v:?}");
        }
    }

    /// Every line as the `prometheus` crate's encoder writes it, but the bounds.
    #[test]
    fn matches_the_crates_encoder_but_for_bucket_bounds() {
        use crate::stats::data::{IterationStats, SchedulerStats};
        use crate::stats::exporter::build_telemetry;
        use crate::stats::exporter::test_support::{config, finished};
        use prometheus::Encoder as _;

        let t = build_telemetry(&config("vllm:")).unwrap();
        let iteration = IterationStats {
            num_batched_tokens: 7,
            time_to_first_token_s: vec![0.9],
            finished: vec![finished(crate::engine::types::FinishReason::Stop, 3)],
            ..Default::default()
        };
        let instruments = t.instruments.as_ref().unwrap();
        instruments.record_step_for_test(&SchedulerStats::default(), &iteration);
        let families = t.registry.gather();
        let ours = encode(&families, ExpositionFormat::PrometheusText);
        let mut theirs = Vec::new();
        prometheus::TextEncoder::new().encode(&families, &mut theirs).unwrap();
        let theirs = String::from_utf8(theirs).unwrap();
        assert_eq!(ours.lines().count(), theirs.lines().count());
        let mut bounds = 0;
        for (a, b) in ours.lines().zip(theirs.lines()) {
            let (Some(la), Some(lb)) = (label(a, "le"), label(b, "le")) else {
                assert_eq!(a, b);
                continue;
            };
            bounds += 1;
            let strip = |line: &str, le: &str| line.replace(&format!("le=\"{le}\""), "le=\"\"");
            assert_eq!(strip(a, &la), strip(b, &lb), "{a} / {b}");
            let parse = |s: &str| {
                if s == "+Inf" {
                    f64::INFINITY
                } else {
                    s.parse::<f64>().unwrap()
                }
            };
            assert_eq!(parse(&la), parse(&lb));
            assert!(la.contains('.') || la == "+Inf", "{a}");
        }
        assert!(bounds > 100, "{bounds} bucket lines");
        let ttft = "vllm:time_to_first_token_seconds_bucket";
        for le in ["0.001", "0.25", "1.0", "2560.0", "+Inf"] {
            let line = ours
                .lines()
                .find(|l| l.starts_with(ttft) && l.contains(&format!("le=\"{le}\"")));
            assert!(line.is_some(), "no le=\"{le}\" in\n{ours}");
        }
        assert!(
            ours.contains(
                "vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"smollm2\",le=\"1.0\"} 1\n"
            ),
            "{ours}"
        );
    }

    /// The value of label `name` in a sample line.
    fn label(line: &str, name: &str) -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        let len = line[start..].find('"')?;
        Some(line[start..start + len].to_owned())
    }
}
