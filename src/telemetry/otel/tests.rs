use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use super::{Edge, RootSampler};

fn parent(sampled: bool) -> SpanContext {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(
        TraceId::from(7u128),
        SpanId::from(9u64),
        flags,
        true,
        TraceState::default(),
    )
}

#[test]
fn a_parent_based_sampler_follows_the_parent_and_the_ratio_decides_roots() {
    let off = RootSampler {
        parent_based: true,
        ratio: 0.0,
    };
    assert!(off.sample(&parent(true)));
    assert!(!off.sample(&parent(false)));
    assert!(!(0..1000).any(|_| off.sample(&SpanContext::empty_context())));
    let on = RootSampler {
        parent_based: true,
        ratio: 1.0,
    };
    assert!(!on.sample(&parent(false)));
    assert!((0..1000).all(|_| on.sample(&SpanContext::empty_context())));
}

#[test]
fn a_sampler_that_is_not_parent_based_ignores_the_parent() {
    let ratio = RootSampler {
        parent_based: false,
        ratio: 0.0,
    };
    assert!(!ratio.sample(&parent(true)));
    let half = RootSampler {
        parent_based: false,
        ratio: 0.5,
    };
    let kept = (0..10_000).filter(|_| half.sample(&parent(false))).count();
    assert!((4_000..6_000).contains(&kept), "{kept} of 10 000 at 0.5");
}

#[test]
fn the_key_hash_is_hmac_sha256() {
    // RFC 4231, test case 2 (key "Jefe"), its first 16 bytes.
    let edge = Edge {
        sampler: RootSampler {
            parent_based: true,
            ratio: 1.0,
        },
        key_secret: Some(b"Jefe".to_vec()),
    };
    assert_eq!(
        edge.key_hash("what do ya want for nothing?").as_deref(),
        Some("5bdcc146bf60754e6a042426089575c7")
    );
    let none = Edge {
        key_secret: None,
        ..edge
    };
    assert_eq!(none.key_hash("k"), None);
}
