//! The parts tests/proxies/clients.rs puts together: the real ratekeeper binary
//! (which a test freezes and kills), each client's demo app as a child
//! process on a free loopback port, and what the apps are configured with.

pub mod launch;

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::binary::{KillOnDrop, serve};
use crate::support::{Signal, fresh_dir, path_str, send_signal, wait_until};

/// The `check` token of a ratekeeper started with tokens.
pub const TOKEN: &str = "clients-check-token-0123456789abcdef";
/// Units of policy `api` per key.
pub const LIMIT: usize = 3;
/// What ratekeeper says of policy `api`, and the clients must pass on.
pub const API_POLICY_HEADER: &str = "\"burst\";q=3;w=3600";

// Token buckets, not fixed windows: a window boundary in the middle of a
// test would hand out a fresh budget, and these refill too slowly to
// matter within one. `jobs` frees a unit every 2 s, for `wait_ms`.
const POLICIES: &str = r#"
[policies.api]
limits = [{ name = "burst", algorithm = "token_bucket", limit = 3, window = "1h" }]

[policies.jobs]
limits = [{ name = "pace", algorithm = "token_bucket", limit = 1, window = "2s" }]
"#;

/// `ratekeeper serve` (embedded store) with the policies above.
pub struct Ratekeeper {
    child: Option<KillOnDrop>,
    pub url: String,
    /// A file holding [`TOKEN`], for RATEKEEPER_TOKEN_FILE.
    pub token_file: PathBuf,
}

impl Ratekeeper {
    /// With `tokens`, every `/v1/*` request needs `Bearer TOKEN`.
    pub fn start(tokens: bool) -> Ratekeeper {
        let dir = fresh_dir("clients");
        let policies = dir.join("policies.toml");
        std::fs::write(&policies, POLICIES).unwrap();
        let token_file = dir.join("client-token");
        std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
        let service_tokens = dir.join("tokens");
        std::fs::write(&service_tokens, format!("check {TOKEN}\n")).unwrap();
        let mut env = vec![("RATEKEEPER_POLICIES__FILE", path_str(&policies))];
        if tokens {
            env.push(("RATEKEEPER_AUTH__TOKENS_FILE", path_str(&service_tokens)));
        }
        let (child, addr) = serve(&env);
        Ratekeeper {
            child: Some(child),
            url: format!("http://{addr}"),
            token_file,
        }
    }

    /// SIGSTOP: connections are still accepted (the kernel's backlog) but
    /// nothing is answered, so only the client's timeout ends a check.
    pub fn freeze(&self) {
        let pid = self.child.as_ref().expect("running").0.id();
        assert!(send_signal(pid, Signal::SIGSTOP), "SIGSTOP to {pid}");
        // kill() returns before every thread has stopped: on a loaded
        // machine a thread got to answer one more check (a 429 where the
        // fallback was due). Stopped means every thread shows state T.
        wait_until(Duration::from_secs(5), "ratekeeper stopped", || {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
            tasks.flatten().all(|task| {
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
                state.is_some_and(|s| s.starts_with('T'))
            })
        });
    }

    /// SIGKILL: connections are refused from now on.
    pub fn kill(&mut self) {
        drop(self.child.take());
    }
}

/// How a client is handed the token, if at all.
#[derive(Clone, Copy)]
pub enum Token {
    None,
    /// RATEKEEPER_TOKEN
    Env,
    /// RATEKEEPER_TOKEN_FILE
    File,
}

/// What a client does when ratekeeper gives no decision.
#[derive(Clone, Copy)]
pub enum Fallback {
    Open,
    Closed,
}

/// A client's configuration: every variable of its README that the test
/// sets, the failure mode, the token and the timeout included.
pub fn client_env(
    rk: &Ratekeeper,
    fallback: Fallback,
    token: Token,
    timeout: Duration,
) -> Vec<(String, String)> {
    let mode = match fallback {
        Fallback::Open => "open",
        Fallback::Closed => "closed",
    };
    let mut env = vec![
        ("RATEKEEPER_URL".to_string(), rk.url.clone()),
        ("RATEKEEPER_POLICY".into(), "api".into()),
        (
            "RATEKEEPER_TIMEOUT_MS".into(),
            timeout.as_millis().to_string(),
        ),
        ("RATEKEEPER_FAILURE_MODE".into(), mode.into()),
    ];
    match token {
        Token::None => {}
        Token::Env => env.push(("RATEKEEPER_TOKEN".into(), TOKEN.into())),
        Token::File => env.push((
            "RATEKEEPER_TOKEN_FILE".into(),
            path_str(&rk.token_file).into(),
        )),
    }
    env
}

/// `command` with `env`, and none of the operator's RATEKEEPER_* or
/// proxies: a client must talk to the test's ratekeeper, directly.
pub fn configured(command: &mut Command, env: &[(String, String)]) {
    for (name, _) in std::env::vars() {
        if name.starts_with("RATEKEEPER_") {
            command.env_remove(name);
        }
    }
    command
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost")
        .envs(env.iter().map(|(k, v)| (k, v)));
}

/// A demo app (a web server behind a client middleware) as a child
/// process; its stdout and stderr are kept, for its log lines.
pub struct DemoApp {
    _child: KillOnDrop,
    pub base: String,
    output: Arc<Mutex<String>>,
}

/// One answer of a demo app, and how long it took.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub elapsed: Duration,
}

impl Reply {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
}

impl DemoApp {
    /// Starts `command` and waits until it prints the `http://127.0.0.1:PORT`
    /// it listens on (each binds port 0: no port is picked and then lost).
    pub fn spawn(what: &str, mut command: Command, env: &[(String, String)]) -> DemoApp {
        configured(&mut command, env);
        let mut child = KillOnDrop(
            command
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start the {what} demo app: {e}")),
        );
        let output = Arc::new(Mutex::new(String::new()));
        drain(Box::new(child.0.stdout.take().unwrap()), output.clone());
        drain(Box::new(child.0.stderr.take().unwrap()), output.clone());
        // A cold Python import on a loaded machine takes seconds.
        let deadline = Instant::now() + Duration::from_secs(30);
        let base = loop {
            if let Some(base) = listening_on(&output.lock().unwrap()) {
                break base;
            }
            let exited = child.0.try_wait().unwrap();
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "the {what} demo app never said where it listens ({exited:?}):\n{}",
                output.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        DemoApp {
            _child: child,
            base,
            output,
        }
    }

    /// `GET /`, with `X-API-Key: api_key`.
    pub async fn get(&self, api_key: &str) -> Reply {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(10));
        self.send(client.build().unwrap(), Some(api_key)).await
    }

    /// `GET /` without an API key, from `address` (a loopback address of
    /// its own): the middleware keys it by that address.
    pub async fn get_from(&self, address: IpAddr) -> Reply {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .local_address(address);
        self.send(client.build().unwrap(), None).await
    }

    async fn send(&self, client: reqwest::Client, api_key: Option<&str>) -> Reply {
        let mut request = client.get(format!("{}/", self.base));
        if let Some(key) = api_key {
            request = request.header("x-api-key", key);
        }
        let started = Instant::now();
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        response.bytes().await.unwrap();
        Reply {
            status,
            headers,
            elapsed: started.elapsed(),
        }
    }

    /// Everything the app printed so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }
}

fn drain(mut pipe: Box<dyn std::io::Read + Send>, output: Arc<Mutex<String>>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            output
                .lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
}

/// `http://127.0.0.1:PORT` from a startup line such as uvicorn's
/// "Uvicorn running on http://127.0.0.1:PORT" or "listening on ...".
fn listening_on(output: &str) -> Option<String> {
    const PREFIX: &str = "http://127.0.0.1:";
    // Whole lines only: a port read half-written would be another port.
    let whole = &output[..output.rfind('\n')?];
    let line = whole
        .lines()
        .find(|l| l.contains("running on") || l.contains("listening on"))?;
    let rest = &line[line.find(PREFIX)? + PREFIX.len()..];
    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!port.is_empty()).then(|| format!("{PREFIX}{port}"))
}

/// A client's fallback took at most its timeout plus `margin`, and, when
/// only the timeout could end it (`timed_out`), at least the timeout.
pub fn assert_fallback_time(
    what: &str,
    elapsed: Duration,
    timeout: Duration,
    margin: Duration,
    timed_out: bool,
) {
    eprintln!("{what}: fallback in {} ms", elapsed.as_millis());
    assert!(
        elapsed <= timeout + margin,
        "{what}: took {elapsed:?}, more than the timeout {timeout:?} + {margin:?}"
    );
    if timed_out {
        assert!(
            elapsed >= timeout,
            "{what}: answered in {elapsed:?}, before its timeout {timeout:?}: not the configured one"
        );
    }
}
