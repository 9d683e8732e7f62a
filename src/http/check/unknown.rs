//! The `unknown_policy` answer: the name asked for, and the loaded ones
//! within a budget.

use std::fmt::Write as _;

use crate::domain::PolicySet;

/// Room for the list of loaded names in an `unknown_policy` message.
const NAMES_BUDGET: usize = 1024;

/// `unknown policy "x"; loaded: "a", "b" (and 3 more)`, the list cut to
/// about 1 KiB so a file of thousands of policies doesn't make a huge body.
pub(in crate::http) fn unknown_policy(set: &PolicySet, name: &str) -> String {
    // The name is the client's: quote it, and only its first 64 characters.
    let shown: String = name.chars().take(64).collect();
    let cut = if shown.len() < name.len() { "..." } else { "" };
    let mut message = format!("policy: unknown policy {shown:?}{cut}; ");
    if set.is_empty() {
        message.push_str("no policies are loaded (set policies.file or --policies)");
        return message;
    }
    message.push_str("loaded: ");
    let mut listed = 0;
    for (i, policy) in set.iter().enumerate() {
        let item = format!("{:?}", &*policy.name);
        if listed > 0 && message.len() + item.len() + 2 > NAMES_BUDGET {
            break;
        }
        if i > 0 {
            message.push_str(", ");
        }
        message.push_str(&item);
        listed += 1;
    }
    let more = set.len() - listed;
    if more > 0 {
        let _ = write!(message, " (and {more} more)");
    }
    // The policies with levels, which a file holds few of.
    let levels: Vec<String> = set
        .hierarchies()
        .take(16)
        .map(|h| format!("{:?}", &*h.name))
        .collect();
    if !levels.is_empty() {
        let _ = write!(
            message,
            "; with levels (checked with ids): {}",
            levels.join(", ")
        );
    }
    message
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::domain::{Limit, Policy, Rule};

    fn set_of(n: usize) -> PolicySet {
        let rule = Rule::new(
            &crate::domain::RuleInput {
                limit: 1,
                window: Some(crate::domain::WindowInput::Seconds(1)),
                algorithm: None,
                burst: None,
                ..Default::default()
            },
            &crate::domain::Bounds::default(),
        )
        .unwrap();
        let policies = (0..n).map(|i| Policy {
            name: Arc::from(format!("policy_number_{i:04}")),
            description: None,
            failure_mode: None,
            shadow: false,
            limits: Arc::new([Limit {
                name: Arc::from("l"),
                rule,
                scope: None,
                level: None,
            }]),
            overrides: Default::default(),
            forward: Default::default(),
            lease: None,
        });
        PolicySet::from_policies(policies, String::new(), None)
    }

    #[test]
    fn unknown_policy_lists_names_within_a_budget() {
        let few = unknown_policy(&set_of(2), "nope");
        assert_eq!(
            few,
            "policy: unknown policy \"nope\"; loaded: \"policy_number_0000\", \"policy_number_0001\""
        );
        let many = unknown_policy(&set_of(500), "nope");
        assert!(many.len() <= NAMES_BUDGET + 32, "{}", many.len());
        let listed = many.matches("policy_number_").count();
        assert!(listed > 10, "{many}");
        assert!(
            many.ends_with(&format!(" (and {} more)", 500 - listed)),
            "{many}"
        );
        let none = unknown_policy(&PolicySet::empty(), &"x".repeat(100));
        assert!(none.contains("no policies are loaded"), "{none}");
        assert!(
            none.contains(&format!("\"{}\"...;", "x".repeat(64))),
            "{none}"
        );
    }
}
