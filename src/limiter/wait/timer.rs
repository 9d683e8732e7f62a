//! Where a waiting check's time comes from and how it sleeps: tokio's timer
//! in production, a [`ManualTimer`] that tests move by hand (the same
//! [`ManualClock`] then drives the embedded store, so the store's refills
//! and the waiters' sleeps follow one clock).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::domain::{Clock, ManualClock};

pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A monotonic clock in microseconds, and sleeping until one of its instants.
pub trait Timer: Send + Sync + 'static {
    fn now_us(&self) -> u64;
    fn sleep_until(&self, at_us: u64) -> Sleep;
}

/// tokio's timer: microseconds since the timer was made.
#[derive(Debug, Clone, Copy)]
pub struct TokioTimer(tokio::time::Instant);

impl Default for TokioTimer {
    fn default() -> Self {
        TokioTimer(tokio::time::Instant::now())
    }
}

impl Timer for TokioTimer {
    fn now_us(&self) -> u64 {
        self.0.elapsed().as_micros() as u64
    }

    fn sleep_until(&self, at_us: u64) -> Sleep {
        Box::pin(tokio::time::sleep_until(
            self.0 + Duration::from_micros(at_us),
        ))
    }
}

/// A timer that moves only when [`advance_us`](Self::advance_us) is called;
/// sleepers whose instant has come are woken then.
#[derive(Clone)]
pub struct ManualTimer {
    clock: ManualClock,
    moved: Arc<watch::Sender<()>>,
}

impl ManualTimer {
    pub fn new(clock: ManualClock) -> ManualTimer {
        ManualTimer {
            clock,
            moved: Arc::new(watch::Sender::new(())),
        }
    }

    pub fn advance_us(&self, by_us: u64) {
        self.clock.advance_us(by_us);
        self.moved.send_replace(());
    }
}

impl Timer for ManualTimer {
    fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    fn sleep_until(&self, at_us: u64) -> Sleep {
        let clock = self.clock.clone();
        let mut moved = self.moved.subscribe();
        Box::pin(async move {
            while clock.now_us() < at_us {
                if moved.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}
