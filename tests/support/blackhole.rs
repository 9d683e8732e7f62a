//! A TCP proxy in front of a Redis node that can black-hole the
//! connections open through it while letting new ones through: what an
//! expired conntrack or NAT entry, or a half-open path, does to a client's
//! connections. No root needed: iptables would do the same on loopback.
//!
//! A black-holed connection stays open on both sides and sends nothing:
//! no FIN, no RST. The bytes each side writes are read and thrown away, so
//! neither side's socket buffer fills and no write ever blocks: only a
//! client that notices the silence itself replaces the connection.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

pub struct Blackhole {
    /// Where clients connect.
    pub port: u16,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    /// Where connections are forwarded; set once, possibly after binding
    /// (a cluster node must know the proxy's port before it starts).
    upstream: OnceLock<u16>,
    /// Connections opened before the last cut have a lower generation.
    generation: AtomicU64,
    /// Every open stream (both sides), to close them on drop.
    streams: Mutex<Vec<TcpStream>>,
    /// Connections accepted, in all.
    accepted: AtomicU64,
    stop: AtomicBool,
}

impl Blackhole {
    /// A proxy to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Blackhole {
        let proxy = Blackhole::bind();
        proxy.forward_to(upstream);
        proxy
    }

    /// A proxy whose upstream is set later with [`forward_to`](Self::forward_to);
    /// connections made before that are closed at once.
    pub fn bind() -> Blackhole {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            upstream: OnceLock::new(),
            generation: AtomicU64::new(0),
            streams: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let accept = {
            let shared = shared.clone();
            std::thread::spawn(move || accept_loop(listener, shared))
        };
        Blackhole {
            port,
            shared,
            accept: Some(accept),
        }
    }

    pub fn forward_to(&self, upstream: u16) {
        self.shared
            .upstream
            .set(upstream)
            .expect("the upstream is set once");
    }

    /// Black-holes every connection open now; later ones pass.
    pub fn cut(&self) {
        self.shared.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for stream in self.shared.streams.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        shared.accepted.fetch_add(1, Ordering::SeqCst);
        let Some(&upstream) = shared.upstream.get() else {
            continue; // dropped: closed
        };
        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let born = shared.generation.load(Ordering::SeqCst);
        {
            let mut streams = shared.streams.lock().unwrap();
            streams.push(client.try_clone().unwrap());
            streams.push(server.try_clone().unwrap());
        }
        for (from, to) in [
            (client.try_clone().unwrap(), server.try_clone().unwrap()),
            (server, client),
        ] {
            let shared = shared.clone();
            std::thread::spawn(move || pump(from, to, born, &shared));
        }
    }
}

/// Copies `from` to `to` until either closes, or, once the connection is
/// cut, swallows what `from` sends.
fn pump(mut from: TcpStream, mut to: TcpStream, born: u64, shared: &Shared) {
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if shared.generation.load(Ordering::SeqCst) != born {
            continue; // black-holed: read and dropped
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    // A black-holed connection passes on no close either.
    if shared.generation.load(Ordering::SeqCst) == born {
        let _ = to.shutdown(Shutdown::Write);
    }
}
