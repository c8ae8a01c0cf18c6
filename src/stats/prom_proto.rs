//! The Prometheus client data model (`io.prometheus.client`, `metrics.proto`) as prost
//! messages: what the protobuf exposition is made of. Written out here because the
//! `prometheus` crate's generated messages predate native histograms. Field numbers and
//! types are the proto's; only the fields kiln writes are declared (decoders skip the rest).

/// `io.prometheus.client.MetricType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum MetricType {
    Counter = 0,
    Gauge = 1,
    Summary = 2,
    Untyped = 3,
    Histogram = 4,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Gauge {
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Counter {
    #[prost(double, tag = "1")]
    pub value: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Quantile {
    #[prost(double, tag = "1")]
    pub quantile: f64,
    #[prost(double, tag = "2")]
    pub value: f64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    #[prost(message, repeated, tag = "3")]
    pub quantile: Vec<Quantile>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Untyped {
    #[prost(double, tag = "1")]
    pub value: f64,
}

/// `google.protobuf.Timestamp`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Exemplar {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(double, tag = "2")]
    pub value: f64,
    #[prost(message, optional, tag = "3")]
    pub timestamp: Option<Timestamp>,
}

/// A classic bucket.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    #[prost(uint64, tag = "1")]
    pub cumulative_count: u64,
    #[prost(double, tag = "2")]
    pub upper_bound: f64,
    #[prost(message, optional, tag = "3")]
    pub exemplar: Option<Exemplar>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketSpan {
    #[prost(sint32, tag = "1")]
    pub offset: i32,
    #[prost(uint32, tag = "2")]
    pub length: u32,
}

/// Classic buckets (`bucket`) and native ones (`schema` … `positive_delta`) side by side.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Histogram {
    #[prost(uint64, tag = "1")]
    pub sample_count: u64,
    #[prost(double, tag = "2")]
    pub sample_sum: f64,
    #[prost(message, repeated, tag = "3")]
    pub bucket: Vec<Bucket>,
    #[prost(sint32, tag = "5")]
    pub schema: i32,
    #[prost(double, tag = "6")]
    pub zero_threshold: f64,
    #[prost(uint64, tag = "7")]
    pub zero_count: u64,
    #[prost(message, repeated, tag = "9")]
    pub negative_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, packed = "false", tag = "10")]
    pub negative_delta: Vec<i64>,
    #[prost(message, repeated, tag = "12")]
    pub positive_span: Vec<BucketSpan>,
    #[prost(sint64, repeated, packed = "false", tag = "13")]
    pub positive_delta: Vec<i64>,
    /// Exemplars of the native histogram (read by Prometheus 2.50 and later).
    #[prost(message, repeated, tag = "16")]
    pub exemplars: Vec<Exemplar>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Metric {
    #[prost(message, repeated, tag = "1")]
    pub label: Vec<LabelPair>,
    #[prost(message, optional, tag = "2")]
    pub gauge: Option<Gauge>,
    #[prost(message, optional, tag = "3")]
    pub counter: Option<Counter>,
    #[prost(message, optional, tag = "4")]
    pub summary: Option<Summary>,
    #[prost(message, optional, tag = "5")]
    pub untyped: Option<Untyped>,
    #[prost(int64, tag = "6")]
    pub timestamp_ms: i64,
    #[prost(message, optional, tag = "7")]
    pub histogram: Option<Histogram>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MetricFamily {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub help: String,
    #[prost(enumeration = "MetricType", tag = "3")]
    pub r#type: i32,
    #[prost(message, repeated, tag = "4")]
    pub metric: Vec<Metric>,
}
