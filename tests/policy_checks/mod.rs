//! Building policies in tests and reading `/v1/check` answers: shared by
//! the policies API tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use ratekeeper::domain::{
    Algorithm, Bounds, Limit, Policy, PolicySet, Rule, RuleInput, WindowInput,
};
use serde_json::Value;

use crate::support::TestApp;

pub fn limit(name: &str, algorithm: Algorithm, n: u64, window: &str, burst: Option<u64>) -> Limit {
    let input = RuleInput {
        limit: n,
        window: Some(WindowInput::Text(window.into())),
        algorithm: Some(algorithm),
        burst,
        ..Default::default()
    };
    Limit {
        name: name.into(),
        rule: Rule::new(&input, &Bounds::default()).expect("a valid rule"),
        scope: None,
        level: None,
    }
}

/// A concurrency limit: `n` in flight, leases living `ttl`.
pub fn lease_limit(name: &str, n: u64, ttl: &str) -> Limit {
    let input = RuleInput {
        limit: n,
        lease_ttl: Some(WindowInput::Text(ttl.into())),
        algorithm: Some(Algorithm::Concurrency),
        ..Default::default()
    };
    Limit {
        name: name.into(),
        rule: Rule::new(&input, &Bounds::default()).expect("a valid rule"),
        scope: None,
        level: None,
    }
}

pub fn policy(name: &str, limits: Vec<Limit>) -> Policy {
    Policy {
        name: name.into(),
        description: None,
        failure_mode: None,
        shadow: false,
        limits: limits.into(),
        overrides: HashMap::new(),
        forward: Default::default(),
        lease: None,
    }
}

pub fn install(app: &TestApp, policies: Vec<Policy>) {
    app.policies.store(Arc::new(PolicySet::from_policies(
        policies,
        "test".into(),
        None,
    )));
}

/// The example policy: 10/s with a burst of 20, and 10 000 a day.
pub fn api_policy() -> Policy {
    policy(
        "api",
        vec![
            limit("burst", Algorithm::TokenBucket, 10, "1s", Some(20)),
            limit("daily", Algorithm::FixedWindow, 10_000, "1d", None),
        ],
    )
}

pub fn error(body: &Value) -> (&str, &str) {
    (
        body["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("not an error: {body}")),
        body["error"]["message"].as_str().unwrap(),
    )
}

pub fn limits_field(body: &Value, field: &str) -> Vec<Value> {
    body["limits"]
        .as_array()
        .unwrap_or_else(|| panic!("no limits in {body}"))
        .iter()
        .map(|l| l[field].clone())
        .collect()
}
