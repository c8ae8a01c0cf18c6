//! The threads that turn engine events into client output (detokenizing, stop strings, the
//! prompt echo and logprob texts), so the HTTP workers only forward finished pieces and stay
//! free for other clients. Each thread drives its own small async runtime; choices are
//! spread over the threads in turn, and a choice's heavy preamble (decoding a long prompt and
//! its alternatives) runs on that runtime's blocking pool so it never stalls the others.

use std::future::Future;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Builder, Handle};

/// The process's output threads, one per CPU it may use.
pub struct OutputPool {
    threads: Vec<Handle>,
    next: AtomicUsize,
}

impl OutputPool {
    /// The pool, started on first use (servers in one process share it).
    pub fn shared() -> &'static OutputPool {
        static POOL: OnceLock<OutputPool> = OnceLock::new();
        POOL.get_or_init(|| {
            let threads = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
            OutputPool::start(threads)
        })
    }

    fn start(threads: usize) -> Self {
        let threads = (0..threads.max(1))
            .map(|i| {
                // One blocking thread each: heavy preambles queue there instead of taking
                // every core from the engine and the other choices.
                let runtime = Builder::new_current_thread()
                    .enable_time()
                    .max_blocking_threads(1)
                    .thread_name("kiln-output-blocking")
                    .build()
                    .expect("an output runtime starts");
                let handle = runtime.handle().clone();
                std::thread::Builder::new()
                    .name(format!("kiln-output-{i}"))
                    .spawn(move || runtime.block_on(std::future::pending::<()>()))
                    .expect("an output thread starts");
                handle
            })
            .collect();
        Self {
            threads,
            next: AtomicUsize::new(0),
        }
    }

    /// Runs `task` on the next output thread.
    pub fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len();
        self.threads[i].spawn(task);
    }
}
