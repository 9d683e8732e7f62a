//! A real OTLP trace receiver: `tests/otel/receiver.py`, the OpenTelemetry
//! protobuf definitions (PyPI's opentelemetry-proto) behind a grpcio server
//! and an HTTP server, installed into a virtualenv on first use. Each span
//! it receives is a JSON line of a file the tests read.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::binary::KillOnDrop;
use super::venv::{pip_tools, python_of};

const PINS: [&str; 3] = [
    "opentelemetry-proto==1.45.2",
    "grpcio==1.85.4",
    "protobuf==7.36.2",
];

/// The receiver, running; the spans it got are lines of `out`.
pub struct Receiver {
    _child: KillOnDrop,
    pub grpc: u16,
    pub http: u16,
    out: PathBuf,
}

impl Receiver {
    pub fn start() -> Receiver {
        let python = python_of(&pip_tools("otlp-receiver", &PINS, "bin/python"));
        let out = super::fresh_dir("otlp").join("spans.jsonl");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/otel/receiver.py");
        let mut child = KillOnDrop(
            Command::new(python)
                .args([script, out.to_str().unwrap(), "0", "0"])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        BufReader::new(child.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ports: Vec<u16> = line
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("the receiver did not start: {line:?}"))
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        Receiver {
            _child: child,
            grpc: ports[0],
            http: ports[1],
            out,
        }
    }

    /// Every span received so far. A line the receiver is still writing
    /// (no newline yet) is left for the next read.
    pub fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The spans of `trace` (hex), once `enough` says they have all come.
    pub fn trace(&self, trace: &str, enough: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            let spans: Vec<Value> = self
                .spans()
                .into_iter()
                .filter(|s| s["trace_id"] == trace)
                .collect();
            if enough(&spans) || Instant::now() > until {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The spans named `name`.
pub fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}
