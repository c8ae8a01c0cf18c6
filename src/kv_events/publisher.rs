//! The ZeroMQ publisher, off the engine's hot path: the scheduler hands each step's events to
//! a bounded channel (never waiting; a full channel drops the batch and counts it), and a
//! thread of its own encodes them and sends them as vLLM's `ZmqEventPublisher` does:
//!
//! - PUB, multipart `[topic, sequence (8 bytes, big-endian), payload (msgpack EventBatch)]`,
//!   the sequence counting batches from 0;
//! - ROUTER (`replay_endpoint`): a request `[identity, "", start (8 bytes, big-endian)]` gets
//!   `[identity, "", topic, sequence, payload]` for every buffered batch from `start` on, then
//!   the end marker `[identity, "", "", -1 (8 bytes), ""]`. Clients use a DEALER socket.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc::{self, error::TrySendError};
use zeromq::{PubSocket, RouterSocket, Socket, SocketEvent, SocketOptions, SocketRecv, SocketSend, ZmqMessage};

use super::encode::encode_batch;
use crate::config::KvEventsConfig;
use crate::kv_cache::events::KvCacheEvent;

/// vLLM's end-of-replay sequence: -1 as 8 signed big-endian bytes.
const END_SEQ: [u8; 8] = [0xff; 8];

/// One engine step's events, stamped when the step ended.
struct PendingBatch {
    ts: f64,
    events: Vec<KvCacheEvent>,
}

/// The scheduler's end of the channel. Batches it accepts get sequences 0, 1, 2, … in order.
#[derive(Debug)]
pub struct KvEventSender {
    tx: mpsc::Sender<PendingBatch>,
    accepted: u64,
    dropped: u64,
}

impl KvEventSender {
    /// Queues one step's events (nothing when there are none); never waits.
    pub fn send(&mut self, events: Vec<KvCacheEvent>) {
        if events.is_empty() {
            return;
        }
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        match self.tx.try_send(PendingBatch { ts, events }) {
            Ok(()) => self.accepted += 1,
            Err(TrySendError::Full(_) | TrySendError::Closed(_)) => {
                self.dropped += 1;
                if self.dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped = self.dropped,
                        "KV-event publisher behind; batches dropped (subscribers will miss events)"
                    );
                }
            }
        }
    }

    /// Batches queued for publishing so far; the last one has sequence `accepted() - 1`.
    pub fn accepted(&self) -> u64 {
        self.accepted
    }

    /// Batches dropped because the publisher's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Binds (or starts connecting) the sockets on a thread of their own and returns the
/// channel to it. Bind failures are returned here, so a bad endpoint stops kiln at start.
/// Engine `dp_rank` publishes on the endpoints offset by its rank and stamps its batches with
/// it, as vLLM's data-parallel engines do.
pub fn start_publisher(config: &KvEventsConfig, dp_rank: u32) -> anyhow::Result<KvEventSender> {
    let (tx, rx) = mpsc::channel(config.max_queue_size);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut config = config.clone();
    config.endpoint = offset_endpoint_port(&config.endpoint, dp_rank);
    config.replay_endpoint = offset_endpoint_port(&config.replay_endpoint, dp_rank);
    std::thread::Builder::new()
        .name("kv-events".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime,
                Err(e) => {
                    let _ = ready_tx.send(Err(anyhow::Error::new(e)));
                    return;
                }
            };
            runtime.block_on(async move {
                match Publisher::open(&config, dp_rank).await {
                    Ok(publisher) => {
                        let _ = ready_tx.send(Ok(()));
                        publisher.run(rx).await;
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            });
        })
        .context("starting the KV-event publisher thread")?;
    ready_rx
        .recv()
        .context("the KV-event publisher thread ended at start")??;
    Ok(KvEventSender {
        tx,
        accepted: 0,
        dropped: 0,
    })
}

/// vLLM's `offset_endpoint_port`: rank `r` of a TCP endpoint listens `r` ports further on;
/// an in-process or IPC endpoint gets `_dp{r}` appended. Rank 0 (and port 0) keep theirs.
pub fn offset_endpoint_port(endpoint: &str, dp_rank: u32) -> String {
    if dp_rank == 0 || endpoint.is_empty() {
        return endpoint.to_owned();
    }
    if endpoint.starts_with("tcp://")
        && let Some((base, port)) = endpoint.rsplit_once(':')
        && let Ok(port) = port.parse::<u32>()
        && port > 0
    {
        return format!("{base}:{}", port + dp_rank);
    }
    if endpoint.starts_with("tcp://") {
        return endpoint.to_owned();
    }
    format!("{endpoint}_dp{dp_rank}")
}

/// vLLM's rule: an endpoint with `*` or `::` binds, any other connects.
fn binds(endpoint: &str) -> bool {
    endpoint.contains('*') || endpoint.contains("::")
}

struct Publisher {
    socket: PubSocket,
    /// Set when the PUB socket connects (rather than binds): reconnect after a disconnect.
    connect_to: Option<String>,
    monitor: futures_util::stream::BoxStream<'static, SocketEvent>,
    replay: Option<RouterSocket>,
    topic: Bytes,
    next_seq: u64,
    buffer: VecDeque<(u64, Bytes)>,
    buffer_steps: usize,
    /// The engine's data-parallel rank, in every batch.
    dp_rank: u32,
}

impl Publisher {
    async fn open(config: &KvEventsConfig, dp_rank: u32) -> anyhow::Result<Self> {
        let mut options = SocketOptions::default();
        options.no_connect_timeout();
        let mut socket = PubSocket::with_options(options);
        let monitor = socket.monitor().boxed();
        let connect_to = if binds(&config.endpoint) {
            // zmq.rs resolves hosts by name: `*` is spelled 0.0.0.0.
            let endpoint = config.endpoint.replace('*', "0.0.0.0");
            let bound = socket
                .bind(&endpoint)
                .await
                .with_context(|| format!("binding kv_events.endpoint {}", config.endpoint))?;
            tracing::info!(endpoint = %bound, "publishing KV-cache events");
            None
        } else {
            Some(config.endpoint.clone())
        };
        let replay = match config.replay_endpoint.as_str() {
            "" => None,
            endpoint => {
                let mut router = RouterSocket::new();
                let bound = router
                    .bind(&endpoint.replace('*', "0.0.0.0"))
                    .await
                    .with_context(|| format!("binding kv_events.replay_endpoint {endpoint}"))?;
                tracing::info!(endpoint = %bound, "serving KV-event replays");
                Some(router)
            }
        };
        Ok(Self {
            socket,
            connect_to,
            monitor,
            replay,
            topic: Bytes::from(config.topic.clone().into_bytes()),
            next_seq: 0,
            buffer: VecDeque::with_capacity(config.buffer_steps.min(1024)),
            buffer_steps: config.buffer_steps,
            dp_rank,
        })
    }

    /// Publishes until the scheduler's sender is dropped.
    async fn run(mut self, mut rx: mpsc::Receiver<PendingBatch>) {
        self.connect().await;
        loop {
            tokio::select! {
                batch = rx.recv() => match batch {
                    Some(batch) => self.publish(batch).await,
                    None => break,
                },
                request = next_request(&mut self.replay) => match request {
                    Ok(request) => self.serve_replay(request).await,
                    Err(e) => tracing::debug!(error = %e, "KV-event replay socket"),
                },
                Some(event) = self.monitor.next() => {
                    if matches!(event, SocketEvent::Disconnected(_)) {
                        self.connect().await;
                    }
                }
            }
        }
        tracing::debug!("KV-event publisher stopped");
    }

    /// In connect mode, (re)connects to the subscriber, retrying with backoff; batches wait
    /// in the channel meanwhile.
    async fn connect(&mut self) {
        let Some(endpoint) = self.connect_to.clone() else {
            return;
        };
        loop {
            match self.socket.connect(&endpoint).await {
                Ok(()) => {
                    tracing::info!(%endpoint, "publishing KV-cache events (connected)");
                    return;
                }
                Err(e) => {
                    tracing::warn!(%endpoint, error = %e, "KV-event subscriber unreachable; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn publish(&mut self, batch: PendingBatch) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let payload = Bytes::from(encode_batch(batch.ts, &batch.events, self.dp_rank));
        let frames = vec![
            self.topic.clone(),
            Bytes::copy_from_slice(&seq.to_be_bytes()),
            payload.clone(),
        ];
        if let Err(e) = self.socket.send(message(frames)).await {
            tracing::warn!(seq, error = %e, "publishing a KV-event batch failed");
        }
        if self.buffer.len() == self.buffer_steps {
            self.buffer.pop_front();
        }
        self.buffer.push_back((seq, payload));
    }

    async fn serve_replay(&mut self, request: ZmqMessage) {
        let frames = request.into_vec();
        let [client, _, start] = frames.as_slice() else {
            tracing::warn!(frames = frames.len(), "invalid KV-event replay request");
            return;
        };
        let Ok(start) = <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes) else {
            tracing::warn!("KV-event replay request without an 8-byte start sequence");
            return;
        };
        let Some(router) = self.replay.as_mut() else {
            return;
        };
        let empty = Bytes::new();
        for (seq, payload) in self.buffer.iter().filter(|(seq, _)| *seq >= start) {
            let frames = vec![
                client.clone(),
                empty.clone(),
                self.topic.clone(),
                Bytes::copy_from_slice(&seq.to_be_bytes()),
                payload.clone(),
            ];
            if router.send(message(frames)).await.is_err() {
                return; // the client left
            }
        }
        let end = vec![
            client.clone(),
            empty.clone(),
            empty.clone(),
            Bytes::from_static(&END_SEQ),
            empty,
        ];
        let _ = router.send(message(end)).await;
    }
}

/// The next replay request, or never when there is no replay socket.
async fn next_request(replay: &mut Option<RouterSocket>) -> zeromq::ZmqResult<ZmqMessage> {
    match replay {
        Some(router) => router.recv().await,
        None => std::future::pending().await,
    }
}

fn message(frames: Vec<Bytes>) -> ZmqMessage {
    ZmqMessage::try_from(frames).expect("frames are never empty")
}

#[cfg(test)]
mod tests {
    use super::offset_endpoint_port;

    #[test]
    fn each_rank_gets_its_own_endpoint_as_in_vllm() {
        assert_eq!(offset_endpoint_port("tcp://*:5557", 0), "tcp://*:5557");
        assert_eq!(offset_endpoint_port("tcp://*:5557", 1), "tcp://*:5558");
        assert_eq!(offset_endpoint_port("tcp://[::1]:5557", 2), "tcp://[::1]:5559");
        assert_eq!(offset_endpoint_port("ipc:///tmp/kv", 1), "ipc:///tmp/kv_dp1");
        assert_eq!(offset_endpoint_port("", 1), "");
        assert_eq!(offset_endpoint_port("tcp://127.0.0.1:0", 1), "tcp://127.0.0.1:0");
    }
}
