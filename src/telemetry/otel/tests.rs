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
    // With a parent, on its trace id: the same id, the same answer; the
    // ids whose last 8 bytes are low are kept.
    let with_id = |low: u64| {
        SpanContext::new(
            TraceId::from(u128::from(low)),
            SpanId::from(9u64),
            TraceFlags::default(),
            true,
            TraceState::default(),
        )
    };
    assert!(half.sample(&with_id(1)));
    assert!(!half.sample(&with_id(u64::MAX)));
    let kept = (0..10_000u64)
        .filter(|i| half.sample(&with_id(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))))
        .count();
    assert!((4_000..6_000).contains(&kept), "{kept} of 10 000 at 0.5");
    let roots = (0..10_000)
        .filter(|_| half.sample(&SpanContext::empty_context()))
        .count();
    assert!((4_000..6_000).contains(&roots), "{roots} of 10 000 at 0.5");
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
