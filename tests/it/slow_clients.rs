//! Slow clients on raw sockets: a slow-loris crowd does not hold up a normal request and is
//! cut off at the head timeout; a body that never finishes arriving gets 408.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use kiln::executor::fake::FakeBehaviour;
use serde_json::json;

use crate::common::start_fake;

const HEAD_TIMEOUT_S: f64 = 2.0;

/// Reads what the server sends until it closes the connection (which must happen within 5 s);
/// the status line's code, if it sent one.
fn status_of_reply(socket: &mut TcpStream) -> Option<u16> {
    socket.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut reply = Vec::new();
    if let Err(e) = socket.read_to_end(&mut reply) {
        assert_ne!(
            e.kind(),
            std::io::ErrorKind::WouldBlock,
            "the server kept the connection open"
        );
        assert_ne!(
            e.kind(),
            std::io::ErrorKind::TimedOut,
            "the server kept the connection open"
        );
    }
    let text = String::from_utf8_lossy(&reply);
    text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

#[test]
fn a_slow_loris_crowd_neither_delays_a_request_nor_outlives_the_head_timeout() {
    let t = start_fake(FakeBehaviour::default(), |c| {
        c.server.request_head_timeout_s = HEAD_TIMEOUT_S
    });
    let opened = Instant::now();
    let mut crowd: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut s = TcpStream::connect(t.server.addr).expect("connect");
            s.write_all(b"POST /v1/completions HTTP/1.1\r\nx-slow: ")
                .expect("start of head");
            s
        })
        .collect();
    // One more header byte from each, then a normal request while all 200 are still open.
    for s in &mut crowd {
        let _ = s.write_all(b"a");
    }
    let (status, body) = t.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 4}));
    assert_eq!(status, 200, "{body}");
    assert!(
        opened.elapsed().as_secs_f64() < HEAD_TIMEOUT_S,
        "the normal request finished while the crowd was still connected"
    );
    // Past the head timeout the server has answered each 408 or closed it.
    let mut cut_off = 0;
    for s in crowd.iter_mut().take(20) {
        match status_of_reply(s) {
            Some(408) | None => cut_off += 1,
            Some(other) => panic!("a slow head got {other}"),
        }
    }
    assert_eq!(cut_off, 20);
    assert!(
        opened.elapsed().as_secs_f64() >= HEAD_TIMEOUT_S,
        "not cut off before the timeout"
    );
}

#[test]
fn a_body_that_never_finishes_gets_408() {
    let t = start_fake(FakeBehaviour::default(), |c| c.server.request_body_timeout_s = 1.0);
    let mut s = TcpStream::connect(t.server.addr).expect("connect");
    let head = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n",
        t.server.addr
    );
    s.write_all(head.as_bytes()).expect("head");
    s.write_all(br#"{"prompt": "#).expect("part of the body");
    assert_eq!(status_of_reply(&mut s), Some(408));
    // The server still serves.
    let (status, body) = t.post("/v1/completions", &json!({"prompt": "hi", "max_tokens": 2}));
    assert_eq!(status, 200, "{body}");
}
