"""Schemathesis hooks: the cross-field rules of POST /v1/check.

JSON Schema cannot say "cost is at most limit" or "refilling the bucket takes
at most 366 days": each field is judged on its own. The OpenAPI document
states these rules in the fields' descriptions; here they are taught to the
generator, so that a request it means to be valid is valid. Only cases
generated as valid ("positive") are adjusted, and only in fields valid on
their own, so a request generated to break the schema still breaks it (and
must still be rejected).
"""

import re

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


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    mode = getattr(getattr(getattr(meta, "generation", None), "mode", None), "value", None)
    if mode == "positive" and case.operation.path == "/v1/check" and isinstance(case.body, dict):
        _within_cross_field_rules(case.body)
    return case


def _within_cross_field_rules(body):

    # A key's limit is in bytes; the schema's maxLength counts characters.
    key = body.get("key")
    if isinstance(key, str) and 1 <= len(key) <= MAX_KEY_BYTES:
        while len(key.encode("utf-8")) > MAX_KEY_BYTES:
            key = key[:-1]
        body["key"] = key

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
        return body

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
    cost = body.get("cost")
    if cost is not None and _int(cost, 0, 2**63):
        ceiling = burst if bucket and burst is not None else limit
        if cost > ceiling:
            body["cost"] = ceiling
    return body
