//! The host swap pool's traffic under vLLM's KV-offload names: `kv_offload_total_bytes` and
//! `kv_offload_total_time` (seconds), by `transfer_type` (`GPU_to_CPU` for swap-out,
//! `CPU_to_GPU` for swap-in, as vLLM's offloading connector labels them). Both series start
//! at 0, so a dashboard's `rate` sees the first swap.

use opentelemetry::KeyValue;
use opentelemetry::metrics::Counter;

use super::builder::InstrumentBuilder;
use super::data::{IterationStats, KvTransfer};
use super::family::engine;

const SWAP_OUT: &str = "GPU_to_CPU";
const SWAP_IN: &str = "CPU_to_GPU";

pub(super) struct KvOffloadInstruments {
    bytes: Counter<u64>,
    seconds: Counter<f64>,
}

impl KvOffloadInstruments {
    pub(super) fn new(b: &InstrumentBuilder<'_>) -> Self {
        Self {
            bytes: b.counter(engine::KV_OFFLOAD_TOTAL_BYTES),
            seconds: b.counter_f64(engine::KV_OFFLOAD_TOTAL_TIME),
        }
    }

    pub(super) fn record_initial(&self, model: &[KeyValue]) {
        for direction in [SWAP_OUT, SWAP_IN] {
            self.record(model, direction, KvTransfer::default());
        }
    }

    pub(super) fn record_step(&self, model: &[KeyValue], it: &IterationStats) {
        for (direction, transfer) in [(SWAP_OUT, it.swapped_out), (SWAP_IN, it.swapped_in)] {
            if transfer.bytes > 0 {
                self.record(model, direction, transfer);
            }
        }
    }

    fn record(&self, model: &[KeyValue], direction: &'static str, transfer: KvTransfer) {
        let mut attrs = model.to_vec();
        attrs.push(KeyValue::new("transfer_type", direction));
        self.bytes.add(transfer.bytes, &attrs);
        self.seconds.add(transfer.seconds, &attrs);
    }
}
