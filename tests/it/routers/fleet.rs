//! Two kiln replicas, a router process in front of them, and the client traffic the router
//! tests send, measured on each replica's `/metrics`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::load_aware::the_load_reading_policy_prefers_the_less_loaded_replica;
use crate::common::process::{KilnProcess, Launch, free_port};
use crate::common::tool;
use crate::common::wait::{wait_for, wait_for_within};

/// A long shared prompt prefix: several KV blocks of 16 tokens on the tiny model.
pub const SHARED_PREFIX: &str = "You are a careful assistant for a library. The catalogue lists \
    books by author, title, year and shelf; answer questions about where a book stands and \
    whether it can be borrowed, and never invent a shelf that the catalogue does not list.";

/// The replicas, each restartable on its own port.
pub struct Fleet {
    pub replicas: Vec<Option<KilnProcess>>,
    pub ports: Vec<u16>,
    launch: fn(u16) -> KilnProcess,
}

/// A replica on the tiny model, on `port`.
fn launch(port: u16) -> KilnProcess {
    let mut launch = Launch::default().arg("--max-num-seqs", "8");
    launch.port = Some(port);
    launch.start()
}

impl Fleet {
    pub fn start(n: usize) -> Self {
        Self::start_with(n, launch)
    }

    /// `n` replicas, each started by `launch` on its port (and restarted by it).
    pub fn start_with(n: usize, launch: fn(u16) -> KilnProcess) -> Self {
        let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let replicas = ports.iter().map(|&p| Some(launch(p))).collect();
        Self {
            replicas,
            ports,
            launch,
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect()
    }

    /// Kills replica `i` at once (SIGKILL: no drain, as a crash).
    pub fn kill(&mut self, i: usize) {
        drop(self.replicas[i].take());
    }

    pub fn restart(&mut self, i: usize) {
        self.replicas[i] = Some((self.launch)(self.ports[i]));
    }

    /// The replica's metrics text.
    fn metrics(&self, i: usize) -> String {
        reqwest::blocking::get(format!("http://127.0.0.1:{}/metrics", self.ports[i]))
            .and_then(|r| r.text())
            .unwrap_or_default()
    }

    /// Sum of every series of `family` on replica `i` (0 when it is down).
    pub fn counter(&self, i: usize, family: &str) -> f64 {
        self.metrics(i)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.starts_with(&format!("{family}{{")) || l.starts_with(&format!("{family} ")))
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
            .sum()
    }

    /// Requests each replica finished so far.
    pub fn served(&self) -> Vec<f64> {
        (0..self.ports.len())
            .map(|i| self.counter(i, "vllm:request_success_total"))
            .collect()
    }

    pub fn prefix_hits(&self) -> Vec<f64> {
        (0..self.ports.len())
            .map(|i| self.counter(i, "vllm:prefix_cache_hits_total"))
            .collect()
    }
}

/// Per-replica differences between two `served()` readings.
pub fn delta(after: &[f64], before: &[f64]) -> Vec<f64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// A router process; killed when dropped.
pub struct Router {
    child: Child,
    pub url: String,
    log: tempfile::NamedTempFile,
}

impl Router {
    /// Starts `program args...` (the router's own flags, `--port` added) and waits until it
    /// forwards `/v1/models`.
    pub fn start(program_var: &str, args: &[String], port: u16) -> Self {
        let log = tempfile::NamedTempFile::new().expect("log file");
        // vllm-router logs to stdout: both streams into the one file, through one offset.
        let file = log.reopen().expect("log");
        let child = Command::new(tool(program_var))
            .args(args)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("the router starts");
        let mut router = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        let models = format!("{}/v1/models", router.url);
        wait_for_within("the router to forward /v1/models", Duration::from_secs(120), || {
            if let Some(status) = router.child.try_wait().expect("try_wait") {
                panic!("the router exited ({status}):\n{}", router.logs());
            }
            match reqwest::blocking::get(&models) {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(format!("{}: {}", r.status(), router.logs())),
                Err(e) => Err(e.to_string()),
            }
        });
        router
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// `router_traffic.py` through this router; its JSON summary.
    pub fn traffic(&self, args: &[&str]) -> Value {
        let output = self.traffic_command(args).output().expect("python runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "router_traffic.py {args:?} failed:\n{stdout}\n{}\nrouter log:\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.logs()
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{stdout:?}: {e}"))
    }

    /// The traffic command, to run in the background.
    pub fn traffic_command(&self, args: &[&str]) -> Command {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/router_traffic.py");
        let mut command = Command::new(tool("KILN_TEST_PYTHON"));
        command
            .arg(script)
            .arg(format!("{}/v1", self.url))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The checks every policy passes: the client's four calls, and `n` requests all served.
pub fn serves_the_openai_client(router: &Router, n: usize) {
    let check = router.traffic(&["check"]);
    assert_eq!(check["checks"], 4, "{check}");
    let burst = router.traffic(&["burst", &n.to_string(), "2"]);
    assert_eq!(burst["errors"], serde_json::json!([]), "{burst}\n{}", router.logs());
}

/// Sequential requests of one session all land on one replica; distinct sessions on both.
pub fn consistent_hashing_keeps_a_session_on_one_replica(fleet: &Fleet, router: &Router) {
    let before = fleet.served();
    router.traffic(&["burst", "6", "1", "alice"]);
    let moved = delta(&fleet.served(), &before);
    assert!(
        moved.contains(&6.0) && moved.contains(&0.0),
        "one session, one replica: {moved:?}\n{}",
        router.logs()
    );
    let before = fleet.served();
    for session in 0..12 {
        router.traffic(&["burst", "1", "1", &format!("session-{session}")]);
    }
    let moved = delta(&fleet.served(), &before);
    assert!(moved.iter().all(|&m| m > 0.0), "12 sessions spread: {moved:?}");
}

/// Requests sharing a long prefix follow the replica that cached it, and hit its cache.
pub fn a_repeated_prefix_lands_where_it_is_cached(fleet: &Fleet, router: &Router) {
    router.traffic(&["burst", "1", "1", "-", SHARED_PREFIX]);
    let (served, hits) = (fleet.served(), fleet.prefix_hits());
    router.traffic(&["burst", "5", "1", "-", SHARED_PREFIX]);
    let moved = delta(&fleet.served(), &served);
    let hit = delta(&fleet.prefix_hits(), &hits);
    let home = moved.iter().position(|&m| m == 5.0);
    let home = home.unwrap_or_else(|| panic!("all 5 on the replica with the prefix: {moved:?}\n{}", router.logs()));
    assert!(
        hit[home] >= 5.0 * 16.0,
        "each reused at least a block there: hits {hit:?}"
    );
}

/// Round robin sends each replica its share.
pub fn requests_spread(fleet: &Fleet, router: &Router, n: usize, at_least_each: f64) {
    let before = fleet.served();
    router.traffic(&["burst", &n.to_string(), "1"]);
    let moved = delta(&fleet.served(), &before);
    assert!(
        moved.iter().all(|&m| m >= at_least_each),
        "{n} requests spread over the replicas: {moved:?}"
    );
    assert_eq!(moved.iter().sum::<f64>(), n as f64, "{moved:?}");
}

/// A replica killed under traffic: the clients see at most the errors counted (what the
/// router did not retry); after its restart the router sends it traffic again. Returns the
/// number of client errors.
pub fn survives_a_replica_killed_mid_traffic(fleet: &mut Fleet, router: &Router) -> usize {
    let before = fleet.served();
    let traffic = router
        .traffic_command(&["burst", "40", "4"])
        .spawn()
        .expect("traffic starts");
    // Kill replica 1 once it is serving this traffic.
    wait_for("replica 1 to serve some of the burst", || {
        let served = fleet.counter(1, "vllm:request_success_total") - before[1];
        if served >= 2.0 { Ok(()) } else { Err(served) }
    });
    fleet.kill(1);
    let output = traffic.wait_with_output().expect("traffic ends");
    let summary: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    let errors = summary["errors"].as_array().map_or(0, Vec::len);
    assert!(
        errors <= 4,
        "at most the requests in flight on the killed replica fail: {summary}\n{}",
        router.logs()
    );
    assert_eq!(summary["ok"].as_u64(), Some(40 - errors as u64), "{summary}");
    fleet.restart(1);
    wait_for_within(
        "the router to send the restarted replica traffic",
        Duration::from_secs(150),
        || {
            let served = fleet.counter(1, "vllm:request_success_total");
            if served > 0.0 {
                return Ok(());
            }
            router.traffic(&["burst", "4", "2"]);
            Err(format!("replica 1 served {served}"))
        },
    );
    errors
}

/// The flags both routers take after their own leading ones (`leading`): the replicas, the
/// policy, a Prometheus port of their own and health checks every second.
pub fn router_args(leading: &[&str], fleet: &Fleet, policy: &str) -> Vec<String> {
    let mut args: Vec<String> = leading.iter().map(|a| (*a).to_string()).collect();
    args.push("--worker-urls".into());
    args.extend(fleet.urls());
    for (flag, value) in [
        ("--policy", policy),
        ("--prometheus-port", &free_port().to_string()),
        ("--worker-startup-check-interval", "1"),
        ("--health-check-interval-secs", "1"),
        ("--health-success-threshold", "1"),
    ] {
        args.extend([flag.to_string(), value.to_string()]);
    }
    args
}

/// Drives the router `start` launches through each policy (`consistent_hashing` is the
/// router's own name for that policy), then kills a replica under round robin, so that the
/// killed replica is sure to have requests in flight.
pub fn every_policy(name: &str, consistent_hashing: &str, start: impl Fn(&Fleet, &str) -> Router) {
    let mut fleet = Fleet::start(2);
    {
        let router = start(&fleet, "round_robin");
        serves_the_openai_client(&router, 4);
        requests_spread(&fleet, &router, 8, 4.0);
    }
    {
        let router = start(&fleet, "power_of_two");
        serves_the_openai_client(&router, 4);
        requests_spread(&fleet, &router, 12, 1.0);
        the_load_reading_policy_prefers_the_less_loaded_replica(&fleet, &router);
    }
    {
        let router = start(&fleet, consistent_hashing);
        serves_the_openai_client(&router, 4);
        consistent_hashing_keeps_a_session_on_one_replica(&fleet, &router);
    }
    {
        let router = start(&fleet, "cache_aware");
        serves_the_openai_client(&router, 4);
        a_repeated_prefix_lands_where_it_is_cached(&fleet, &router);
    }
    let router = start(&fleet, "round_robin");
    let errors = survives_a_replica_killed_mid_traffic(&mut fleet, &router);
    eprintln!("{name}: {errors} client errors of 40 with a replica killed mid-traffic");
}
