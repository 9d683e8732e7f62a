//! `POST /v1/settle` refusing what names no reservation the store holds,
//! black box, on the embedded store and on a real Redis: ids that are not
//! ids, made up, edited or expired are 404 and change nothing; answers the
//! store did not give (degraded, a shadow policy's denial) carry none.

use crate::policy_checks;
use crate::settle::{reserve, settle, with};
use crate::support;

use std::time::Duration;

use policy_checks::{error, install, limit, policy};
use ratekeeper::domain::{Algorithm, Reservation};
use serde_json::json;
use support::{TestApp, settings, unique_key};

for_each_store!(app: unknown_expired_forged_and_edited_reservations_are_404);

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn b64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(4) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, c)| {
            n | (B64.iter().position(|a| a == c).unwrap() as u32) << (18 - 6 * i)
        });
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

fn b64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// Every way of naming a reservation the store does not hold is 404
/// `unknown_reservation` and changes nothing: not an id, an id the caller
/// made itself for a real check's description, a real id with its key,
/// cost or nonce edited, and one whose TTL ran out (the units stay spent).
async fn unknown_expired_forged_and_edited_reservations_are_404(app: &TestApp) {
    let key = unique_key("forged");
    let body = json!({"key": key, "limit": 5, "window": "1h", "algorithm": "fixed_window"});
    let (_, id) = reserve(app, &body, 5).await;
    let id = id.unwrap();
    let raw = b64_decode(&id);
    let (nonce, description) = (&raw[..17], &raw[17..]);
    let text = String::from_utf8(description.to_vec()).unwrap();
    assert!(text.contains("\"cost\":5"), "{text}");
    let edited = |from: &str, to: &str| {
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(text.replace(from, to).as_bytes());
        b64_encode(&bytes)
    };
    let mut other_nonce = raw.clone();
    other_nonce[3] ^= 0x55;
    let (_, made_up) = Reservation::new(text.as_bytes(), 600_000);
    let mut flipped = id.clone().into_bytes();
    flipped[id.len() / 2] = if flipped[id.len() / 2] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let cases = [
        ("not an id".to_owned(), "not an id"),
        (String::new(), "empty"),
        (made_up, "made up by the caller"),
        (edited("\"cost\":5", "\"cost\":4"), "cost edited"),
        (edited(&key, &unique_key("other")), "key edited"),
        (edited("\"limit\":5", "\"limit\":50"), "limit edited"),
        (b64_encode(&other_nonce), "nonce edited"),
        (String::from_utf8(flipped).unwrap(), "a character flipped"),
    ];
    for (id, what) in &cases {
        let (status, answer) = settle(app, id, 0).await;
        assert_eq!(
            (status, error(&answer).0),
            (404, "unknown_reservation"),
            "{what}: {answer}"
        );
    }
    let (_, look) = app.check(with(&body, json!({"cost": 0}))).await;
    assert_eq!(look["remaining"], 0, "nothing given back: {look}");
    // The real one still settles, once.
    assert_eq!(settle(app, &id, 0).await.1["remaining"], 5);
    // Expired: the units stay spent.
    let key = unique_key("expired");
    let body = json!({"key": key, "limit": 5, "window": "1h", "algorithm": "fixed_window"});
    let (_, answer) = app
        .check(with(&body, json!({"cost": 2, "reservation_ttl": "50ms"})))
        .await;
    assert_eq!(answer["reservation"]["expires_in_ms"], 50, "{answer}");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let id = answer["reservation"]["id"].as_str().unwrap();
    let (status, answer) = settle(app, id, 0).await;
    assert_eq!((status, error(&answer).0), (404, "unknown_reservation"));
    let (_, look) = app.check(with(&body, json!({"cost": 0}))).await;
    assert_eq!(look["remaining"], 3, "{look}");
}

/// A reservation is the store's: an answer of the failure policy (Redis
/// unreachable, failing open) and a shadow policy's allowed denial carry
/// none.
#[tokio::test]
async fn degraded_and_shadow_answers_carry_no_reservation() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let mut config = settings(Some(&nowhere));
    let redis = config.redis.as_mut().unwrap();
    redis.timeout = Duration::from_millis(100);
    config.failure.mode = ratekeeper::domain::FailureMode::Open;
    let app = TestApp::spawn(config).await;
    let body = json!({"key": unique_key("down"), "limit": 5, "window": "1h"});
    let (answer, id) = reserve(&app, &body, 1).await;
    assert_eq!(
        (
            answer["allowed"].as_bool(),
            answer["degraded"].as_bool(),
            id
        ),
        (Some(true), Some(true), None),
        "{answer}"
    );
    app.stop().await;

    let app = TestApp::spawn(settings(None)).await;
    let mut shadow = policy(
        "shadow",
        vec![limit("hour", Algorithm::FixedWindow, 1, "1h", None)],
    );
    shadow.shadow = true;
    install(&app, vec![shadow]);
    let body = json!({"policy": "shadow", "key": unique_key("shadow")});
    let (first, id) = reserve(&app, &body, 1).await;
    assert!(id.is_some(), "{first}");
    let (second, id) = reserve(&app, &body, 1).await;
    assert_eq!(
        (second["allowed"].as_bool(), second["shadow"].as_bool(), id),
        (Some(true), Some(true), None),
        "{second}"
    );
}
