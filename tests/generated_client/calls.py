"""Calls a live ratekeeper through the Python client that
openapi-python-client generated from openapi.yaml (run by
tests/tooling/generated_client.rs, which generates it and puts it on PYTHONPATH).

argv: BASE_URL TOKEN. Prints one JSON object of what came back, for the
Rust side to check; any exception fails the run.
"""
import json
import sys

from ratekeeper_client import AuthenticatedClient
from ratekeeper_client.api.limits import check, policies, refund, reset, top
from ratekeeper_client.models import (
    AlgorithmName,
    CheckResponse,
    ErrorBody,
    InlineCheck,
    LimitSpec,
    PolicyCheck,
    PolicyReset,
    SingleRuleCheck,
    SingleRuleReset,
    TopBy,
    TopPeriod,
)

base, token = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)


def answer(result):
    assert isinstance(result, CheckResponse), result
    return {
        "allowed": result.allowed,
        "remaining": result.remaining,
        "limit": result.limit,
        "limits": None if not result.limits else [l.name for l in result.limits],
    }


out = {}
out["policy"] = answer(check.sync(client=client, body=PolicyCheck(policy="api", key="gen-1")))
inline = InlineCheck(
    key="gen-2",
    limits=[
        LimitSpec(limit=2, window="1h", algorithm=AlgorithmName.FIXED_WINDOW, name="hourly"),
        LimitSpec(limit=100, window="1d", algorithm=AlgorithmName.FIXED_WINDOW, name="daily"),
    ],
)
out["inline"] = answer(check.sync(client=client, body=inline))
single = SingleRuleCheck(key="gen-3", limit=1, window="1h", algorithm=AlgorithmName.GCRA)
out["single"] = answer(check.sync(client=client, body=single))
out["single_again"] = answer(check.sync(client=client, body=single))
out["reset"] = answer(
    reset.sync(
        client=client,
        body=SingleRuleReset(key="gen-3", limit=1, window="1h", algorithm=AlgorithmName.GCRA),
    )
)
out["single_after_reset"] = answer(check.sync(client=client, body=single))
out["policy_reset"] = answer(reset.sync(client=client, body=PolicyReset(policy="api", key="gen-1")))
# A refund of the inline check's unit: the form is the check's, cost included.
refunded = InlineCheck(key="gen-2", limits=inline.limits, cost=1)
out["refund"] = answer(refund.sync(client=client, body=refunded))
listed = policies.sync(client=client)
out["policies"] = [p.name for p in listed.policies]
hitters = top.sync(client=client, policy="inline", by=TopBy.CHECKED, period=TopPeriod.VALUE_0, limit=5)
out["top"] = {h.key: h.count for h in hitters.keys}
unknown = check.sync(client=client, body=PolicyCheck(policy="nope", key="k"))
assert isinstance(unknown, ErrorBody), unknown
out["unknown_policy"] = unknown.error.code
print(json.dumps(out))
