"""Schemathesis hooks: the cross-field rules of POST /v1/check.

The body is one of three forms (policy, inline `limits`, single rule),
`levels` of them, or a policy with levels and its `ids`. The rules below apply to the single rule and to each inline
limit alike, and to each level as to a body of its form; inline
limits also need unique names and distinct (algorithm, window) pairs, and
the cost must fit the smallest of them. A policy-form request is valid only
for a policy that is loaded, which no schema can say: the run serves a
policies file with one policy, `fuzz` (tests/tooling/schemathesis.rs), and positive
policy-form cases are pointed at it, with a cost that fits its limits;
negative ones still run and must be rejected.

JSON Schema cannot say "cost is at most limit" or "refilling the bucket takes
at most 366 days": each field is judged on its own. The OpenAPI document
states these rules in the fields' descriptions; here they are taught to the
generator, so that a request it means to be valid is valid. Only cases
generated as valid ("positive") are adjusted, and only in fields valid on
their own, so a request generated to break the schema still breaks it (and
must still be rejected).
"""

import json
import os
import re
import urllib.request

import schemathesis

MAX_LIMIT = 1_000_000_000_000
MAX_WINDOW_US = 366 * 86_400 * 1_000_000
MAX_KEY_BYTES = 512
MAX_SLIDING_LOG_LIMIT = 100_000
UNIT_US = {"ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000, "d": 86_400_000_000}
WINDOW = re.compile(r"([0-9]+)(ms|s|m|h|d)")


def _int(value, low, high):
    """A whole number in range; `3.0` counts, as in JSON Schema (and the server)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return (isinstance(value, int) or value.is_integer()) and low <= value <= high


def _window_us(window):
    if _int(window, 1, 31_622_400):
        return int(window) * 1_000_000
    if isinstance(window, str):
        match = WINDOW.fullmatch(window)
        if match:
            return int(match.group(1)) * UNIT_US[match.group(2)]
    return None


def _positive(case):
    meta = case.meta
    mode = getattr(getattr(getattr(meta, "generation", None), "mode", None), "value", None)
    return mode == "positive"


# The forms of a check, and what a policy's name may be.
CHECK_PATHS = ("/v1/check", "/v1/reset", "/v1/refund", "/v1/release", "/v1/renew")
POLICY_NAME = re.compile(r"[a-z0-9_.-]{1,64}")

# Release and renew name a lease, so their check needs a concurrency limit.
LEASED_PATHS = ("/v1/release", "/v1/renew")


def _positive_check(case):
    # Reset, refund, release and renew take the same forms, with the same
    # rules. A settle names a reservation, which no generated string is:
    # its positive cases are answered 404 unknown_reservation, as documented.
    paths = ("/v1/check", "/v1/reset", "/v1/refund") + LEASED_PATHS
    return _positive(case) and case.operation.path in paths and isinstance(case.body, dict)


@schemathesis.hook
def before_call(context, case, **kwargs):
    """Every phase's calls, the examples' included (map_case does not see
    them): a schema-valid policy name is a 422 unknown_policy unless it is
    the run's one policy, whatever mode generated it; a case negative in
    another field stays negative."""
    if case.operation.path in CHECK_PATHS and isinstance(case.body, dict):
        policy = case.body.get("policy")
        if isinstance(policy, str) and POLICY_NAME.fullmatch(policy):
            case.body["policy"] = TREE if "ids" in case.body else POLICY
    _tenants_call(case)
    if _positive(case) and case.operation.path in CHECK_PATHS and isinstance(case.body, dict):
        _levels_without_policies(case.body)
    if (
        _positive(case)
        and case.operation.path in ("/v1/settle", "/v1/draw")
        and isinstance(case.body, dict)
        and isinstance(case.body.get("reservation"), str)
    ):
        # No generated string names a reservation: a real one, so that a
        # settle reaches more than its 404.
        case.body["reservation"] = _fresh_reservation()


_RESERVED = [0]


def _fresh_reservation():
    """A reservation of a real check on the served instance."""
    _RESERVED[0] += 1
    body = {
        "key": f"fuzz-settle-{os.getpid()}-{_RESERVED[0]}",
        "limit": POLICY_CAPACITY,
        "window": "1h",
        "reservation_ttl": "1m",
    }
    request = urllib.request.Request(
        os.environ["RATEKEEPER_FUZZ_URL"] + "/v1/check",
        data=json.dumps(body).encode(),
        headers={
            "content-type": "application/json",
            "authorization": "Bearer " + os.environ["RATEKEEPER_FUZZ_TOKEN"],
        },
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return json.load(answer)["reservation"]["id"]


@schemathesis.hook
def map_case(context, case):
    if _positive_check(case):
        if case.operation.path in LEASED_PATHS:
            _leased(case.body)
        _within_cross_field_rules(case.body)
        _reservation_ttl(case.body)
    if _positive(case) and case.operation.path == "/v1/settle" and isinstance(case.body, dict):
        # At most MAX_SETTLE_CAPACITIES capacities of the reservation's
        # tightest limit, which no schema can say: 100 fits every limit.
        actual = case.body.get("actual")
        if _int(actual, 0, 2**63) and actual > MAX_SETTLE_CAPACITIES:
            case.body["actual"] = int(actual) % (MAX_SETTLE_CAPACITIES + 1)
    if _positive(case) and case.operation.path == "/v1/draw" and isinstance(case.body, dict):
        # A draw is checked like a check of its cost: within the
        # reservation's limit (POLICY_CAPACITY, _fresh_reservation's).
        _cost_within(case.body, POLICY_CAPACITY)
    if _positive(case) and case.operation.path == "/v1/top" and isinstance(case.query, dict):
        # Its parameter example (`api`) is a policy of the example file,
        # not this run's; any other name is rightly a 422 unknown_policy.
        case.query["policy"] = POLICY
    return case


# The one policy the run serves, and the capacity of its tightest limit.
POLICY = "fuzz"
POLICY_CAPACITY = 1_000_000

# The run's one policy with levels: three levels of POLICY_CAPACITY keyed
# `o:{org}`, `t:{org}/{team}` and `u:{user}` (tests/tooling/schemathesis.rs),
# the ids of the schema's example.
TREE = "fuzz_tree"
TREE_IDS = ("org", "team", "user")
# Room for two escaped values and the text in `t:{org}/{team}`: a value's
# `/` and `\` take two bytes each.
MAX_TREE_ID_BYTES = 120


def _tree_ids(body):
    """The hierarchy form: exactly its ids (any generated map names others,
    a 422), values whose keys fit in MAX_KEY_BYTES, and a cost within its
    levels."""
    body["policy"] = TREE
    values = [v for v in body["ids"].values() if isinstance(v, str) and v] or ["x"]
    ids = {}
    for i, name in enumerate(TREE_IDS):
        value = values[i % len(values)]
        while len(value.encode("utf-8")) > MAX_TREE_ID_BYTES:
            value = value[:-1]
        ids[name] = value or "x"
    body["ids"] = ids
    _cost_within(body, POLICY_CAPACITY)


# A valid wait_ms holds a denied request for up to that long (10 s at most):
# kept short, so a run of thousands of requests stays within its time.
MAX_FUZZ_WAIT_MS = 50


def _within_cross_field_rules(body):
    wait_ms = body.get("wait_ms")
    if _int(wait_ms, 0, 10_000) and wait_ms > MAX_FUZZ_WAIT_MS:
        body["wait_ms"] = int(wait_ms) % (MAX_FUZZ_WAIT_MS + 1)
    if isinstance(body.get("levels"), list):
        _levels(body)
        return body
    if isinstance(body.get("ids"), dict):
        _tree_ids(body)
        return body
    if "policy" in body:
        body["policy"] = POLICY
        _cost_within(body, POLICY_CAPACITY)

    # A key's limit is in bytes; the schema's maxLength counts characters.
    key = body.get("key")
    if isinstance(key, str) and 1 <= len(key) <= MAX_KEY_BYTES:
        while len(key.encode("utf-8")) > MAX_KEY_BYTES:
            key = key[:-1]
        body["key"] = key

    if isinstance(body.get("limits"), list):
        _inline_limits(body)
        return body
    capacity = _rule(body)
    _cost_within(body, capacity)
    return body


def _levels_without_policies(body):
    """The run's one policy holds a concurrency limit (for release and
    renew), which no level may: a level naming a policy becomes a rule of
    the policy's size (every phase's calls, the examples' included)."""
    levels = body.get("levels")
    if not isinstance(levels, list):
        return
    for i, level in enumerate(levels):
        if isinstance(level, dict) and "policy" in level:
            key = level.get("key") if isinstance(level.get("key"), str) else "k"
            levels[i] = {"key": key, "limit": POLICY_CAPACITY, "window": "1h"}


def _levels(body):
    """The levels form: each level within its form's rules, on a key of its
    own (two levels on one counter are a 422), with no concurrency limit
    (a 422 too); the cost within the smallest capacity of every level."""
    capacities = []
    for i, level in enumerate(body["levels"]):
        if not isinstance(level, dict):
            return
        rules = level["limits"] if isinstance(level.get("limits"), list) else [level]
        for rule in rules:
            if isinstance(rule, dict) and rule.get("algorithm") == "concurrency":
                rule["algorithm"] = "sliding_window"
                window = rule.pop("lease_ttl", None)
                if rule.get("window") is None and rule.get("calendar") is None:
                    rule["window"] = window if isinstance(window, str) else "1m"
        _within_cross_field_rules(level)
        level.pop("cost", None)
        key = level.get("key")
        if isinstance(key, str):
            suffix = f"#{i}"
            while len((key + suffix).encode("utf-8")) > MAX_KEY_BYTES:
                key = key[:-1]
            level["key"] = key + suffix
        if "policy" in level:
            capacities.append(POLICY_CAPACITY)
        else:
            for rule in rules:
                capacity = _rule(rule) if isinstance(rule, dict) else None
                if capacity is None or capacity is LEASE:
                    return
                capacities.append(capacity)
    if capacities:
        _cost_within(body, min(capacities))


def _leased(body):
    """A release or renewal: a check with a concurrency limit (the fuzz
    policy has one)."""
    if "policy" in body:
        return
    limits = body.get("limits")
    if isinstance(limits, list):
        if limits and isinstance(limits[0], dict):
            _make_concurrency(limits[0])
    else:
        _make_concurrency(body)


def _make_concurrency(rule):
    rule["algorithm"] = "concurrency"
    if rule.get("lease_ttl") is None:
        rule["lease_ttl"] = rule.get("window") or "30s"


def _inline_limits(body):
    """Each limit within its own rules; unique (algorithm, window) pairs and
    names; at most one concurrency limit; the cost within the smallest
    capacity."""
    kept, pairs = [], set()
    leased = False
    for item in body["limits"]:
        if not isinstance(item, dict):
            return
        if item.get("algorithm") == "concurrency":
            if leased:
                continue
            leased = True
        capacity = _rule(item)
        if item.get("algorithm") == "concurrency":
            window = ("lease", _window_us(item.get("lease_ttl")))
        elif item.get("calendar") is not None:
            window = ("calendar", item.get("calendar"), str(item.get("timezone") or "UTC").lower())
        else:
            window = _window_us(item.get("window"))
        pair = (item.get("algorithm") or "sliding_window", window)
        if pair in pairs:
            continue
        pairs.add(pair)
        kept.append((item, capacity))
    if not kept:
        return
    body["limits"] = [item for item, _ in kept]
    names = set()
    for i, item in enumerate(body["limits"]):
        # An absent or null name is the limit's position, as on the server.
        name = item.get("name")
        if name is None:
            name = str(i)
        if name in names:
            n = i
            while f"n{n}" in names:
                n += 1
            name = item["name"] = f"n{n}"
        names.add(name)
    capacities = [c for _, c in kept if c is not None]
    if len(capacities) == len(kept):
        # A concurrency limit bounds the cost only when it is alone.
        rates = [c for c in capacities if c is not LEASE]
        _cost_within(body, min(rates) if rates else 1)


def _reservation_ttl(body):
    """A check's reservation_ttl within limits.max_reservation_ttl (1h),
    never with a wait_ms above 0 nor on a check whose only limits are
    concurrency limits (both 422s)."""
    if "reservation_ttl" not in body:
        return
    limits = body.get("limits") if isinstance(body.get("limits"), list) else [body]
    only_leases = all(isinstance(l, dict) and l.get("algorithm") == "concurrency" for l in limits)
    if only_leases:
        del body["reservation_ttl"]
        return
    body["reservation_ttl"] = "1m"
    if body.get("wait_ms"):
        body["wait_ms"] = 0


# The most a settle's `actual` may be, in capacities (MAX_SETTLE_CAPACITIES).
MAX_SETTLE_CAPACITIES = 100


def _cost_within(body, capacity):
    if capacity is None:
        return
    if capacity is LEASE:
        capacity = 1
    for field, most in (("cost", capacity), ("reserved", capacity), ("actual", MAX_SETTLE_CAPACITIES * capacity)):
        value = body.get(field)
        if value is not None and _int(value, 0, 2**64) and value > most:
            body[field] = most


# Zones the hooks put in place of generated strings, which name no zone.
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kathmandu")
CALENDARS = ("day", "week", "month", "year")


# Concurrency limits are at most limits.max_concurrency, their leases at
# most limits.max_lease_ttl.
MAX_CONCURRENCY = 10_000
MAX_LEASE_TTL_US = 3_600_000_000
# The capacity of a concurrency limit: one slot whatever the cost, so it
# bounds the cost only when it is a check's only limit (then 1).
LEASE = object()


def _rule(body):
    """Adjusts one rule (the single-rule body, or one inline limit) to its
    cross-field rules; returns its capacity (LEASE for a concurrency
    limit), or None if it is not valid on its own fields anyway."""

    # A concurrency limit: lease_ttl in place of window, no calendar or
    # burst; every other algorithm takes no lease_ttl.
    if body.get("algorithm") == "concurrency":
        for field in ("window", "calendar", "timezone", "burst"):
            body.pop(field, None)
        ttl = body.get("lease_ttl")
        ttl_us = _window_us(ttl)
        if ttl is None or (ttl_us is not None and not 1_000 <= ttl_us <= MAX_LEASE_TTL_US):
            body["lease_ttl"] = "30s"
        limit = body.get("limit")
        if _int(limit, 1, MAX_LIMIT) and limit > MAX_CONCURRENCY:
            body["limit"] = MAX_CONCURRENCY
        return LEASE if _int(body.get("limit"), 1, MAX_LIMIT) else None
    if "policy" not in body:
        body.pop("lease_ttl", None)

    # Exactly one of window and calendar; timezone only with calendar; a
    # calendar is a fixed window's, without burst.
    if body.get("calendar") in CALENDARS:
        body.pop("window", None)
        body["algorithm"] = "fixed_window"
        body.pop("burst", None)
        zone = body.get("timezone")
        if zone is not None and isinstance(zone, str) and zone not in ZONES:
            body["timezone"] = ZONES[len(zone) % len(ZONES)]
        limit = body.get("limit")
        return limit if _int(limit, 1, MAX_LIMIT) else None
    if body.get("calendar") is None and "policy" not in body:
        body.pop("calendar", None)
        body.pop("timezone", None)
        if body.get("window") is None:
            body["window"] = "1m"

    # A window that matches the pattern but lies outside 1ms..366d.
    window = body.get("window")
    window_us = _window_us(window)
    if isinstance(window, str) and window_us is not None and not 1_000 <= window_us <= MAX_WINDOW_US:
        body["window"] = "1m"
        window_us = 60_000_000

    algorithm = body.get("algorithm") or "sliding_window"
    bucket = algorithm in ("token_bucket", "gcra")
    limit = body.get("limit")
    if not _int(limit, 1, MAX_LIMIT) or window_us is None or not 1_000 <= window_us <= MAX_WINDOW_US:
        return None

    if algorithm == "sliding_log" and limit > MAX_SLIDING_LOG_LIMIT:
        limit = body["limit"] = MAX_SLIDING_LOG_LIMIT
    burst = body.get("burst")
    if burst is not None and _int(burst, 1, MAX_LIMIT) and not bucket:
        del body["burst"]
        burst = None
    if bucket:
        # At most one unit per microsecond.
        if limit > window_us:
            limit = body["limit"] = window_us
        interval = window_us // int(limit)
        if burst is None or _int(burst, 1, MAX_LIMIT):
            capacity = limit if burst is None else burst
            if capacity * interval > MAX_WINDOW_US:
                capacity = max(1, MAX_WINDOW_US // interval)
                body["burst"] = capacity
            burst = capacity
    if bucket and burst is not None:
        return burst if _int(burst, 1, MAX_LIMIT) else None
    return limit



# The runtime overrides, blocks and exemptions (tag `tenants`): a policy in
# the path or the body is valid only if loaded (the run's one policy), an
# override names one of its limits (`daily`, fixed_window, no burst), a ttl
# is above 0 and at most 366 days, an expiry in the future, and not both;
# a key and a reason are capped in bytes, which the schema's lengths count
# in characters.
TENANT_PATHS = ("/v1/overrides", "/v1/blocks", "/v1/exemptions")
MAX_REASON_BYTES = 256


def _trim_bytes(text, most):
    while len(text.encode("utf-8")) > most:
        text = text[:-1]
    return text


def _tenants_call(case):
    if not case.operation.path.startswith(TENANT_PATHS):
        return
    params = case.path_parameters or {}
    policy = params.get("policy")
    if isinstance(policy, str) and POLICY_NAME.fullmatch(policy):
        params["policy"] = POLICY
    key = params.get("key")
    if isinstance(key, str) and key:
        params["key"] = _trim_bytes(key, MAX_KEY_BYTES) or "k"
    body = case.body
    if not isinstance(body, dict):
        return
    if isinstance(body.get("policy"), str) and POLICY_NAME.fullmatch(body["policy"]):
        body["policy"] = POLICY
    if not _positive(case):
        return
    if isinstance(body.get("reason"), str):
        body["reason"] = _trim_bytes(body["reason"], MAX_REASON_BYTES)
    ttl = body.get("ttl")
    if isinstance(ttl, str):
        us = _window_us(ttl)
        if us is None or not 1_000 <= us <= MAX_WINDOW_US:
            body["ttl"] = "1h"
        body.pop("expires_at", None)
    elif isinstance(body.get("expires_at"), str):
        body["expires_at"] = _in_an_hour()
    limits = body.get("limits")
    if isinstance(limits, list) and limits and isinstance(limits[0], dict):
        limit = limits[0].get("limit")
        limit = int(limit) if _int(limit, 1, MAX_LIMIT) else 1
        body["limits"] = [{"name": "daily", "limit": limit}]


def _in_an_hour():
    import datetime

    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
    return later.strftime("%Y-%m-%dT%H:%M:%SZ")
