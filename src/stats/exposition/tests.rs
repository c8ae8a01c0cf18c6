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
        time_to_first_token_s: vec![0.9.into()],
        finished: vec![finished(crate::engine::types::FinishReason::Stop, 3)],
        ..Default::default()
    };
    let instruments = t.instruments.as_ref().unwrap();
    instruments.record_step_for_test(&SchedulerStats::default(), &iteration);
    let families = t.registry.gather();
    let ours = encode(&families, ExpositionFormat::PrometheusText, &Default::default());
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
        // Python's repr: a decimal point, or an exponent (`1e-05`: the grammar mask bounds,
        // in the gather from start now that the store declares its series there).
        assert!(la.contains('.') || la.contains("e-") || la == "+Inf", "{a}");
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
        ours.contains("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"smollm2\",le=\"1.0\"} 1\n"),
        "{ours}"
    );
}

/// The value of label `name` in a sample line.
fn label(line: &str, name: &str) -> Option<String> {
    let start = line.find(&format!("{name}=\""))? + name.len() + 2;
    let len = line[start..].find('"')?;
    Some(line[start..start + len].to_owned())
}

mod openmetrics {
    use super::super::*;
    use crate::engine::trace_context::TraceContext;
    use crate::engine::types::FinishReason;
    use crate::stats::data::{IterationStats, Observation, SchedulerStats};
    use crate::stats::exporter::build_telemetry;
    use crate::stats::exporter::test_support::{config, finished};
    use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType, Untyped};

    const TRACE: TraceContext = TraceContext {
        trace_id: [0x4b; 16],
        span_id: [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef],
    };

    /// kiln's exposition after one step with a traced first token (0.9 s), an untraced one
    /// and a traced finished request, in both formats.
    fn after_a_traced_step() -> (String, String) {
        let t = build_telemetry(&config("vllm:")).unwrap();
        let mut traced = finished(FinishReason::Stop, 3);
        traced.trace = Some(TRACE);
        let iteration = IterationStats {
            num_batched_tokens: 7,
            time_to_first_token_s: vec![Observation::new(0.9, Some(TRACE)), 0.03.into()],
            inter_token_latency_s: vec![Observation::new(0.02, Some(TRACE))],
            finished: vec![traced, finished(FinishReason::Length, 2)],
            ..Default::default()
        };
        let instruments = t.instruments.as_ref().unwrap();
        instruments.record_step_for_test(&SchedulerStats::default(), &iteration);
        let families = t.registry.gather();
        let exemplars = t.exemplars.snapshot();
        (
            encode(&families, ExpositionFormat::OpenMetrics, &exemplars),
            encode(&families, ExpositionFormat::PrometheusText, &exemplars),
        )
    }

    fn exemplar_lines(text: &str) -> Vec<&str> {
        text.lines().filter(|l| l.contains(" # {")).collect()
    }

    #[test]
    fn buckets_carry_the_traced_observation_and_the_document_ends_with_eof() {
        let (om, text) = after_a_traced_step();
        assert!(om.ends_with("\n# EOF\n"), "{om}");
        assert_eq!(om.matches("# EOF").count(), 1);
        let trace = "4b".repeat(16);
        let ttft = exemplar_lines(&om)
            .into_iter()
            .filter(|l| l.starts_with("vllm:time_to_first_token_seconds_bucket{"))
            .collect::<Vec<_>>();
        assert_eq!(ttft.len(), 1, "{om}");
        let (sample, exemplar) = ttft[0].split_once(" # ").unwrap();
        assert_eq!(
            sample,
            "vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"smollm2\",le=\"1.0\"} 2"
        );
        let prefix = format!("{{trace_id=\"{trace}\",span_id=\"0123456789abcdef\"}} 0.9 ");
        let timestamp: f64 = exemplar.strip_prefix(&prefix).expect(exemplar).parse().unwrap();
        assert!(timestamp > 1.7e9, "{exemplar}");
        // The untraced 0.03 s first token left its bucket without an exemplar.
        let untraced = om
            .lines()
            .find(|l| l.starts_with("vllm:time_to_first_token_seconds_bucket{") && l.contains("le=\"0.04\""))
            .unwrap();
        assert!(untraced.ends_with("} 1"), "{untraced}");
        // Text 0.0.4 has no exemplars and no `# EOF`.
        assert!(exemplar_lines(&text).is_empty() && !text.contains("# EOF"));
    }

    /// The store names series as the exporter does: every latency family of the issue gets
    /// its exemplar (a renamed instrument or label would silently lose them).
    #[test]
    fn every_latency_family_carries_an_exemplar() {
        let (om, _) = after_a_traced_step();
        let lines = exemplar_lines(&om);
        for family in [
            "vllm:time_to_first_token_seconds",
            "vllm:inter_token_latency_seconds",
            "vllm:request_time_per_output_token_seconds",
            "vllm:e2e_request_latency_seconds",
            "vllm:request_queue_time_seconds",
            "vllm:request_prefill_time_seconds",
            "vllm:request_decode_time_seconds",
            "vllm:request_inference_time_seconds",
            "gen_ai_server_request_duration_seconds",
            "gen_ai_server_time_to_first_token_seconds",
            "gen_ai_server_time_per_output_token_seconds",
        ] {
            let bucket = format!("{family}_bucket{{");
            let found: Vec<_> = lines.iter().filter(|l| l.starts_with(&bucket)).collect();
            assert_eq!(found.len(), 1, "{family}: {found:?}");
        }
        assert_eq!(lines.len(), 11, "{lines:#?}");
        // Exemplar label sets stay within OpenMetrics' 128 characters.
        for line in lines {
            let labels = line.split(" # ").nth(1).unwrap().split('}').next().unwrap();
            assert!(labels.chars().count() < 128, "{labels}");
        }
    }

    #[test]
    fn counters_are_declared_without_total_and_sampled_with_it() {
        let (om, text) = after_a_traced_step();
        assert!(om.contains("# TYPE vllm:prompt_tokens counter\n"), "{om}");
        assert!(om.contains("# HELP vllm:prompt_tokens "));
        assert!(om.contains("\nvllm:prompt_tokens_total{engine=\"0\",model_name=\"smollm2\"} 0\n"));
        assert!(!om.contains("# TYPE vllm:prompt_tokens_total"));
        assert!(om.contains("# TYPE vllm:request_success counter\n"));
        assert!(om.contains("# TYPE vllm:num_requests_running gauge\n"));
        assert!(om.contains("# TYPE vllm:time_to_first_token_seconds histogram\n"));
        // Text 0.0.4 keeps the crate's spelling.
        assert!(text.contains("# TYPE vllm:prompt_tokens_total counter\n"));
    }

    fn family(name: &str, help: &str, kind: MetricType, metric: Metric) -> MetricFamily {
        let mut f = MetricFamily::default();
        f.set_name(name.to_owned());
        f.set_help(help.to_owned());
        f.set_field_type(kind);
        f.mut_metric().push(metric);
        f
    }

    #[test]
    fn escaping_types_and_timestamps_follow_each_format() {
        let mut label = LabelPair::default();
        label.set_name("path".to_owned());
        label.set_value("a\"b\\c\nd".to_owned());
        let mut counter = Metric::from_label(vec![label]);
        let mut value = Counter::default();
        value.set_value(3.0);
        counter.set_counter(value);
        counter.set_timestamp_ms(1_733_000_000_123);
        let mut untyped = Metric::default();
        let mut u = Untyped::default();
        u.set_value(1.5);
        untyped.untyped = Some(u).into();
        let mut g = Gauge::default();
        g.set_value(f64::NEG_INFINITY);
        let gauge = Metric::from_gauge(g);
        let families = [
            family("requests", "Say \"hi\" \\ twice\nplease", MetricType::COUNTER, counter),
            family("mystery", "", MetricType::UNTYPED, untyped),
            family("low", "lowest", MetricType::GAUGE, gauge),
        ];
        let none = HistogramSnapshot::default();
        let om = encode(&families, ExpositionFormat::OpenMetrics, &none);
        assert_eq!(
            om,
            "# HELP requests Say \\\"hi\\\" \\\\ twice\\nplease\n\
             # TYPE requests counter\n\
             requests_total{path=\"a\\\"b\\\\c\\nd\"} 3 1733000000.123\n\
             # TYPE mystery unknown\n\
             mystery 1.5\n\
             # HELP low lowest\n\
             # TYPE low gauge\n\
             low -Inf\n\
             # EOF\n"
        );
        let text = encode(&families, ExpositionFormat::PrometheusText, &none);
        assert_eq!(
            text,
            "# HELP requests Say \"hi\" \\\\ twice\\nplease\n\
             # TYPE requests counter\n\
             requests{path=\"a\\\"b\\\\c\\nd\"} 3 1733000000123\n\
             # TYPE mystery untyped\n\
             mystery 1.5\n\
             # HELP low lowest\n\
             # TYPE low gauge\n\
             low -Inf\n"
        );
    }

    #[test]
    fn content_types() {
        assert_eq!(
            ExpositionFormat::OpenMetrics.content_type(),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert_eq!(
            ExpositionFormat::PrometheusText.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }
}
