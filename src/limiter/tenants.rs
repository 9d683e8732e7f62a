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
use crate::domain::Decision;
use crate::tenants::now_ms;

impl Limiter {
    /// Stage 0: a blocked key's check is answered denied.
    pub(super) fn blocked(&self, step: &mut Step<'_, '_>) {
        if !step.route.check || !step.is_pending() {
            return;
        }
        let Some(tenants) = &self.tenants else {
            return;
        };
        let view = tenants.view();
        let check = step.check();
        let Some(block) = view.rules(&check.key).and_then(|r| r.block.as_ref()) else {
            return;
        };
        let now = now_ms();
        if block.applies(check.policy.as_deref(), now) {
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
        let Some(exemption) = view.rules(&check.key).and_then(|r| r.exemption.as_ref()) else {
            return;
        };
        if let State::Answered(Ok(answer)) = &mut step.state
            && answer.decision.tenant.is_none()
            && exemption.applies(check.policy.as_deref(), now_ms())
        {
            answer.decision.exempt();
        }
    }
}
