//! A streaming client that stops reading: actix stops polling the response body once the
//! socket and its write buffer are full, so the engine's tokens pile up for nobody. This
//! watches the body: when it has something ready (it handed out a chunk, or the engine woke
//! it) and is not polled again within the stall timeout, the client is taken as gone and the
//! request's choices are aborted (their blocks freed, counted as `abort`). Time spent waiting
//! for the engine never counts.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use futures_util::Stream;

use super::generation::AbortHandle;

/// What the body's last poll left behind.
#[derive(Debug, Default)]
struct WatchState {
    /// Since when the body has had something ready (a chunk handed out, or a wake-up from the
    /// engine) without being polled; cleared by every poll.
    ready_since: Option<Instant>,
    finished: bool,
}

impl WatchState {
    fn mark_ready(&mut self) {
        self.ready_since.get_or_insert_with(Instant::now);
    }
}

fn lock(state: &Mutex<WatchState>) -> std::sync::MutexGuard<'_, WatchState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records a wake-up (the engine has output for the body), then passes it on.
struct RecordingWaker {
    state: Arc<Mutex<WatchState>>,
    inner: Waker,
}

impl Wake for RecordingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.state).mark_ready();
        self.inner.wake_by_ref();
    }
}

/// A response body under watch.
pub struct StallWatch<S> {
    inner: S,
    state: Arc<Mutex<WatchState>>,
    /// The recording waker handed to `inner`, kept while actix polls with the same waker
    /// (the usual case), so a poll costs no allocation.
    /// `(outer, recording)`: the task's waker and the one wrapping it.
    waker: Option<(Waker, Waker)>,
}

impl<S> StallWatch<S> {
    /// A waker that records the wake-up, then wakes `outer` (the task polling the body).
    fn recording_waker(&mut self, outer: &Waker) -> Waker {
        if let Some((cached_outer, recording)) = &self.waker
            && cached_outer.will_wake(outer)
        {
            return recording.clone();
        }
        let recording = Waker::from(Arc::new(RecordingWaker {
            state: Arc::clone(&self.state),
            inner: outer.clone(),
        }));
        self.waker = Some((outer.clone(), recording.clone()));
        recording
    }
}

impl<S: Stream + Unpin> Stream for StallWatch<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        lock(&self.state).ready_since = None;
        let waker = self.recording_waker(cx.waker());
        let next = Pin::new(&mut self.inner).poll_next(&mut Context::from_waker(&waker));
        let mut state = lock(&self.state);
        match &next {
            Poll::Ready(Some(_)) => state.mark_ready(),
            Poll::Ready(None) => state.finished = true,
            Poll::Pending => {}
        }
        next
    }
}

impl<S> Drop for StallWatch<S> {
    fn drop(&mut self) {
        lock(&self.state).finished = true;
    }
}

/// Wraps `body` and starts its watchdog on the current actix worker: after `timeout` without
/// the client taking a ready chunk, every handle is aborted.
pub fn watch_stalls<S: Stream + Unpin>(body: S, handles: Vec<AbortHandle>, timeout: Duration) -> StallWatch<S> {
    let state = Arc::new(Mutex::new(WatchState::default()));
    let watched = Arc::clone(&state);
    let check_every = (timeout / 4).max(Duration::from_millis(10));
    actix_web::rt::spawn(async move {
        loop {
            actix_web::rt::time::sleep(check_every).await;
            let state = lock(&watched);
            if state.finished {
                return;
            }
            if state.ready_since.is_some_and(|since| since.elapsed() >= timeout) {
                tracing::warn!(
                    timeout_s = timeout.as_secs_f64(),
                    "a streaming client stopped reading; aborting its request"
                );
                for handle in &handles {
                    handle.abort();
                }
                return;
            }
        }
    });
    StallWatch {
        inner: body,
        state,
        waker: None,
    }
}
