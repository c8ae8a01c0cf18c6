//! Clients that go away, on raw sockets against the real server: every request, streaming or
//! not, queued, prefilling or decoding, is aborted soon after its client leaves (FIN,
//! half-close, RST, or a client timeout), its blocks freed and counted once as an abort.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use kiln::executor::fake::FakeBehaviour;
use serde_json::{Value, json};

use crate::common::{Tiny, metric_value, scrape_until, start_fake, start_tiny};

/// The ways a client leaves.
#[derive(Debug, Clone, Copy)]
enum Leave {
    /// Closes the socket: FIN.
    Close,
    /// Shuts down its sending side and keeps waiting, as `curl` does on some platforms.
    HalfClose,
    /// Closes with linger 0: RST.
    Reset,
    /// Gives up after a read timeout, then closes.
    Timeout,
}

const LEAVES: [Leave; 4] = [Leave::Close, Leave::HalfClose, Leave::Reset, Leave::Timeout];

/// Sends one POST by hand; the socket stays open until [`leave`].
fn send(addr: SocketAddr, path: &str, body: &Value) -> TcpStream {
    let body = body.to_string();
    let mut socket = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).expect("head");
    socket.write_all(body.as_bytes()).expect("body");
    socket
}

/// Leaves; returns the socket when the client keeps it (half-close), so it is not closed yet.
fn leave(socket: TcpStream, how: Leave) -> Option<TcpStream> {
    match how {
        Leave::Close => drop(socket),
        Leave::HalfClose => {
            socket.shutdown(Shutdown::Write).expect("half-close");
            return Some(socket);
        }
        Leave::Reset => {
            socket2::SockRef::from(&socket)
                .set_linger(Some(Duration::ZERO))
                .expect("linger 0");
            drop(socket);
        }
        Leave::Timeout => {
            let mut socket = socket;
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .expect("timeout");
            let mut buf = [0u8; 1];
            // Nothing arrives for a non-streaming request: the read times out.
            let _ = socket.read(&mut buf);
            drop(socket);
        }
    }
    None
}

fn abort_count(t: &Tiny) -> f64 {
    let (_, text) = t.get_text("/metrics");
    metric_value(&text, "vllm:request_success_total", "finished_reason=\"abort\"").unwrap_or(0.0)
}

/// Waits until the engine holds nothing; returns how long that took.
fn wait_idle(t: &Tiny) -> Duration {
    let start = Instant::now();
    t.wait_for_load(|l| l["running"] == 0 && l["waiting"] == 0 && l["swapped"] == 0 && l["kv_cache_usage"] == 0.0);
    start.elapsed()
}

fn slow(step_ms: u64) -> FakeBehaviour {
    FakeBehaviour {
        step_delay: Duration::from_millis(step_ms),
        ..Default::default()
    }
}

fn long_request(stream: bool) -> Value {
    json!({"prompt": "long", "max_tokens": 200, "ignore_eos": true, "stream": stream})
}

/// Most time from a client leaving to the engine holding nothing (measured: about 1 ms).
/// Loose for a loaded 2-CPU machine, yet far below what the requests would take to run to
/// their end (at least 3 s at the step delays below), so a missed abort still fails.
const ABORT_BOUND: Duration = Duration::from_secs(1);

/// A step delay that makes a 200-token request run for 4 s.
const STEP_MS: u64 = 20;

#[test]
fn a_decoding_request_is_aborted_whichever_way_its_client_leaves() {
    let t = start_fake(slow(STEP_MS), |_| {});
    let mut expected_aborts = 0.0;
    for stream in [false, true] {
        for how in LEAVES {
            let socket = send(t.server.addr, "/v1/completions", &long_request(stream));
            t.wait_for_load(|l| l["running"] == 1 && l["kv_cache_usage"].as_f64() > Some(0.0));
            let kept = leave(socket, how);
            let took = wait_idle(&t);
            expected_aborts += 1.0;
            assert!(took < ABORT_BOUND, "stream={stream} {how:?}: {took:?}");
            drop(kept);
        }
    }
    let aborts = |m: &str| metric_value(m, "vllm:request_success_total", "finished_reason=\"abort\"");
    let metrics = scrape_until(&t, |m| aborts(m) == Some(expected_aborts));
    assert_eq!(aborts(&metrics), Some(expected_aborts));
}

#[test]
fn a_queued_request_is_aborted_when_its_client_leaves() {
    let t = start_fake(slow(STEP_MS), |c| c.engine.max_num_seqs = 1);
    for how in LEAVES {
        let holder = send(t.server.addr, "/v1/completions", &long_request(true));
        t.wait_for_load(|l| l["running"] == 1);
        let queued = send(t.server.addr, "/v1/completions", &long_request(false));
        t.wait_for_load(|l| l["waiting"] == 1);
        let before = abort_count(&t);
        let kept = leave(queued, how);
        let left = Instant::now();
        let load = t.wait_for_load(|l| l["waiting"] == 0);
        let took = left.elapsed();
        assert!(took < ABORT_BOUND, "{how:?}: {took:?}");
        assert_eq!(load["running"], 1, "{how:?}: the holder runs on");
        drop(kept);
        drop(holder);
        wait_idle(&t);
        scrape_until(&t, |m| {
            metric_value(m, "vllm:request_success_total", "finished_reason=\"abort\"") == Some(before + 2.0)
        });
    }
}

#[test]
fn a_prefilling_request_is_aborted_before_its_first_token() {
    // 4 prompt tokens a step at 50 ms a step: a 240-token prompt prefills for 3 s.
    let t = start_fake(slow(50), |c| {
        c.engine.max_num_seqs = 2;
        c.engine.max_num_batched_tokens = 4;
    });
    for how in LEAVES {
        let body = json!({"prompt": vec![5u32; 240], "max_tokens": 8, "ignore_eos": true});
        let socket = send(t.server.addr, "/v1/completions", &body);
        t.wait_for_load(|l| l["running"] == 1 && l["kv_cache_usage"].as_f64() > Some(0.0));
        let kept = leave(socket, how);
        let took = wait_idle(&t);
        assert!(took < ABORT_BOUND, "{how:?}: {took:?}");
        drop(kept);
    }
    let metrics = scrape_until(&t, |m| {
        metric_value(m, "vllm:request_success_total", "finished_reason=\"abort\"") == Some(LEAVES.len() as f64)
    });
    let generated = metric_value(&metrics, "vllm:generation_tokens_total", "");
    assert_eq!(generated, Some(0.0), "aborted before the first token:\n{metrics}");
}

/// What one storm client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StormMove {
    /// Sends part of the head, then closes.
    CutHead,
    /// Sends the whole request, then closes at once.
    LeaveAtOnce,
    /// Sends the whole request, waits a little, then leaves (any way).
    LeaveSoon,
    /// Streams a long completion, reads its first event, then leaves (any way).
    LeaveMidStream,
    /// Reads the whole answer.
    Complete,
}

/// Reads the whole reply (the server closes after it: `connection: close`); true if it ended
/// with a complete, successful answer.
fn read_to_end_ok(mut socket: TcpStream) -> bool {
    socket.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut reply = Vec::new();
    socket.read_to_end(&mut reply).expect("the server answers and closes");
    let text = String::from_utf8_lossy(&reply);
    text.starts_with("HTTP/1.1 200") && (text.contains("\"finish_reason\":\"length\"") || text.contains("[DONE]"))
}

#[test]
fn a_storm_of_a_thousand_leaving_clients_leaves_nothing_behind() {
    use rand::{Rng, SeedableRng};

    const REQUESTS: usize = 1000;
    const CLIENTS: usize = 25;
    let t = start_tiny(|c| {
        c.engine.max_num_seqs = 16;
        c.engine.max_waiting = 4096;
    });
    let addr = t.server.addr;
    let started = Instant::now();
    // Per client: (completed, certainly aborted in the engine, reached the engine or maybe).
    let tallies: Vec<(usize, usize, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(client as u64);
                    let (mut completed, mut aborted, mut maybe) = (0, 0, 0);
                    for _ in 0..REQUESTS / CLIENTS {
                        let how = LEAVES[rng.random_range(0..LEAVES.len())];
                        let step = match rng.random_range(0..5) {
                            0 => StormMove::CutHead,
                            1 => StormMove::LeaveAtOnce,
                            2 => StormMove::LeaveSoon,
                            3 => StormMove::LeaveMidStream,
                            _ => StormMove::Complete,
                        };
                        match step {
                            StormMove::CutHead => {
                                let mut s = TcpStream::connect(addr).expect("connect");
                                let _ = s.write_all(b"POST /v1/completions HTTP/1.1\r\ncontent-le");
                            }
                            StormMove::LeaveAtOnce | StormMove::LeaveSoon => {
                                let body = json!({"prompt": "storm", "max_tokens": 64, "ignore_eos": true});
                                let s = send(addr, "/v1/completions", &body);
                                if step == StormMove::LeaveSoon {
                                    std::thread::sleep(Duration::from_millis(rng.random_range(0..20)));
                                }
                                drop(leave(s, how));
                                maybe += 1;
                            }
                            StormMove::LeaveMidStream => {
                                let body = json!({"prompt": "storm", "max_tokens": 200, "ignore_eos": true, "stream": true});
                                let mut s = send(addr, "/v1/completions", &body);
                                let mut first = [0u8; 256];
                                let n = s.read(&mut first).expect("first bytes of the stream");
                                assert!(n > 0);
                                drop(leave(s, how));
                                aborted += 1;
                            }
                            StormMove::Complete => {
                                let body = json!({"prompt": "storm", "max_tokens": rng.random_range(1..8), "ignore_eos": true});
                                let mut s = TcpStream::connect(addr).expect("connect");
                                let text = body.to_string();
                                let head = format!(
                                    "POST /v1/completions HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
                                     content-type: application/json\r\ncontent-length: {}\r\n\r\n",
                                    text.len()
                                );
                                s.write_all(head.as_bytes()).expect("head");
                                s.write_all(text.as_bytes()).expect("body");
                                assert!(read_to_end_ok(s), "a client that stays gets its answer");
                                completed += 1;
                            }
                        }
                    }
                    (completed, aborted, maybe)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client thread")).collect()
    });
    let completed: usize = tallies.iter().map(|t| t.0).sum();
    let aborted: usize = tallies.iter().map(|t| t.1).sum();
    let maybe: usize = tallies.iter().map(|t| t.2).sum();
    wait_idle(&t);
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "bounded in time: {:?}",
        started.elapsed()
    );
    // Every request that reached the engine ends exactly once: the finished ones as `length`,
    // the streams left mid-way as aborts, and those left around admission as either.
    let count = |m: &str, reason: &str| {
        metric_value(
            m,
            "vllm:request_success_total",
            &format!("finished_reason=\"{reason}\""),
        )
        .unwrap_or(0.0) as usize
    };
    let metrics = scrape_until(&t, |m| count(m, "length") + count(m, "abort") >= completed + aborted);
    let (length, abort) = (count(&metrics, "length"), count(&metrics, "abort"));
    assert!(length >= completed, "completed {completed}, counted {length}");
    assert!(abort >= aborted, "left mid-stream {aborted}, aborts counted {abort}");
    assert!(
        length + abort <= completed + aborted + maybe,
        "more requests ended ({length} + {abort}) than could have reached the engine"
    );
    assert_eq!(count(&metrics, "stop"), 0, "ignore_eos everywhere");
    let load = t.wait_for_load(|l| l["running"] == 0);
    assert_eq!(
        (
            &load["running"],
            &load["waiting"],
            &load["swapped"],
            &load["kv_cache_usage"]
        ),
        (&json!(0), &json!(0), &json!(0), &json!(0.0)),
        "{load}"
    );
}
