//! Runtime blocks and exemptions (`/v1/blocks`, `/v1/exemptions`), read
//! from the view in force in memory: one lookup by key, nothing at all
//! while none is set.
//! - Stage 0, before the deny cache: a blocked check is denied at once,
//!   nothing asked of the store and nothing spent.
//! - After stage 5: an exempt key's check, decided and spent as usual, is
//!   answered allowed, so `/v1/top` and the metrics still show its load.

use super::Limiter;
use super::pipeline::{State, Step};
use super::request::Answer;
use crate::domain::{Check, Decision};
use crate::store::OpKind;
use crate::tenants::now_ms;

impl Limiter {
    /// Stage 0: a blocked key's check is answered denied.
    pub(super) fn blocked(&self, step: &mut Step<'_, '_>) {
        // A draw spends as a check does: a blocked key's stream is cut.
        let spends = step.route.check || matches!(step.kind(), OpKind::Draw { .. });
        if !spends || !step.is_pending() {
            return;
        }
        let Some(tenants) = &self.tenants else {
            return;
        };
        let view = tenants.view();
        let check = step.check();
        let now = now_ms();
        // A levels check is blocked when any of its levels is.
        let found = find_owner(check, |key, policy| {
            let block = view.rules(key).and_then(|r| r.block.as_ref())?;
            block.applies(policy, now).then_some(block)
        });
        if let Some(block) = found {
            let reason = block.reason.clone();
            let decision = Decision::blocked(check, reason, block.expires_in_ms(now));
            step.answer(Ok(Answer::of(decision)));
        }
    }

    /// After stage 5: an exempt key's check is answered allowed.
    pub(super) fn exempted(&self, step: &mut Step<'_, '_>) {
        if !step.route.check {
            return;
        }
        let Some(tenants) = &self.tenants else {
            return;
        };
        let view = tenants.view();
        let check = step.check();
        let now = now_ms();
        // A levels check is exempt only when every one of its levels is:
        // an exempt user must not spend its organisation's budget freely.
        let not_exempt = find_owner(check, |key, policy| {
            let exempt = view
                .rules(key)
                .and_then(|r| r.exemption.as_ref())
                .is_some_and(|e| e.applies(policy, now));
            (!exempt).then_some(())
        });
        let exempt = not_exempt.is_none();
        if exempt
            && let State::Answered(Ok(answer)) = &mut step.state
            && answer.decision.tenant.is_none()
        {
            answer.decision.exempt();
        }
    }
}

/// The first answer of `f` over the client keys and policies `check`
/// spends on: each level's, or its own (without allocating: this runs on
/// every check while any block or exemption is set).
fn find_owner<'c, T>(
    check: &'c Check,
    mut f: impl FnMut(&'c str, Option<&'c str>) -> Option<T>,
) -> Option<T> {
    if !check.has_levels() {
        return f(&check.key, check.policy.as_deref());
    }
    check
        .level_ranges()
        .into_iter()
        .find_map(|(level, _)| f(&level.key, level.policy.as_deref()))
}
