"""A small gateway in front of an OpenAI-compatible streaming endpoint,
spending each completion's tokens on an organisation's, a team's and a
user's budgets at once, through ratekeeper (docs/budgets.md).

    uvicorn gateway:app --host 127.0.0.1 --port 8000

For each ``POST /v1/chat/completions`` with ``"stream": true``:

1. it estimates the prompt's tokens (4 characters a token) and checks them
   on every level, all or nothing, asking for a reservation;
2. it streams the completion from upstream and, before forwarding a chunk
   that would take the usage past what it holds, draws more
   (``POST /v1/draw``, ``DRAW_TOKENS`` at a time, numbered);
3. if a draw is denied it cuts the stream with an ``error`` event
   (``budget_exhausted``) and ``[DONE]``;
4. it settles the reservation with the usage: the upstream's final
   ``usage.total_tokens``, or for a cut stream the estimate plus the
   completion tokens received.

A gateway that dies mid-stream settles nothing: ratekeeper lets the
reservation lapse at its TTL with what was drawn spent.

Who is calling comes from the ``X-Org``, ``X-Team`` and ``X-User`` headers
(a real gateway derives them from its API key). Configured from the
environment:

- ``RATEKEEPER_URL`` (default ``http://127.0.0.1:8080``) and
  ``RATEKEEPER_TOKEN`` (a ``check`` token, if ratekeeper wants one);
- ``UPSTREAM_URL``: the OpenAI-compatible base URL
  (``http://127.0.0.1:9000``);
- ``POLICY`` (``llm``): the policy with levels whose key templates take
  the ``org``, ``team`` and ``user`` ids (``policies.toml``);
- ``LEVELS``: instead, the levels listed in each request, as JSON,
  ``{org}``, ``{team}`` and ``{user}`` filled in;
- ``RESERVATION_TTL`` (``5m``): longer than the longest stream;
- ``DRAW_TOKENS`` (``200``): tokens per draw.
"""

import json
import logging
import math
import os

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
logging.getLogger("httpx").setLevel(logging.WARNING)
log = logging.getLogger("llm-gateway")

RATEKEEPER_URL = os.environ.get("RATEKEEPER_URL", "http://127.0.0.1:8080").rstrip("/")
UPSTREAM_URL = os.environ.get("UPSTREAM_URL", "http://127.0.0.1:9000").rstrip("/")
RESERVATION_TTL = os.environ.get("RESERVATION_TTL", "5m")
DRAW_TOKENS = int(os.environ.get("DRAW_TOKENS", "200"))
# The policy with levels of policies.toml; LEVELS, when set, lists the
# levels in each request instead (JSON, ``{org}``, ``{team}`` and ``{user}``
# filled in).
POLICY = os.environ.get("POLICY", "llm")
LEVELS = os.environ.get("LEVELS")
HEADERS = {"authorization": f"Bearer {os.environ['RATEKEEPER_TOKEN']}"} if os.environ.get("RATEKEEPER_TOKEN") else {}

ratekeeper = httpx.AsyncClient(base_url=RATEKEEPER_URL, headers=HEADERS, timeout=2.0)
upstream = httpx.AsyncClient(base_url=UPSTREAM_URL, timeout=httpx.Timeout(10.0, read=60.0))


def estimate_tokens(text: str) -> int:
    """About 4 characters a token: the gateway's guess before the model's count."""
    return max(1, math.ceil(len(text) / 4))


def prompt_of(body: dict) -> str:
    return "".join(str(m.get("content", "")) for m in body.get("messages", []))


def budget_for(request: Request) -> dict:
    """The check's form: the policy with levels and the caller's ids, or the
    levels listed (``LEVELS``)."""
    ids = {name: request.headers.get(f"x-{name}", "") for name in ("org", "team", "user")}
    missing = [name for name, value in ids.items() if not value]
    if missing:
        raise ValueError(f"missing headers: {', '.join('X-' + m.title() for m in missing)}")
    if not LEVELS:
        return {"policy": POLICY, "ids": ids}
    text = LEVELS
    for name, value in ids.items():
        # JSON-escaped, so an id cannot break out of its string.
        text = text.replace("{" + name + "}", json.dumps(value)[1:-1])
    return {"levels": json.loads(text)}


def event(data) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def error(status: int, code: str, message: str, retry_after_ms: int = 0) -> JSONResponse:
    headers = {"retry-after": str(max(1, math.ceil(retry_after_ms / 1000)))} if retry_after_ms else {}
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


async def completions(request: Request):
    body = await request.json()
    if not body.get("stream"):
        return error(400, "stream_required", "this gateway serves streamed completions only")
    try:
        check = budget_for(request)
    except ValueError as e:
        return error(400, "missing_identity", str(e))
    estimate = estimate_tokens(prompt_of(body))
    try:
        answer = (
            await ratekeeper.post(
                "/v1/check",
                json={**check, "cost": estimate, "reservation_ttl": RESERVATION_TTL},
            )
        ).json()
    except httpx.HTTPError as e:
        # Budgets fail closed: without ratekeeper nothing says what is left.
        log.warning("ratekeeper unreachable: %s", e)
        return error(503, "budget_unavailable", "the budget service is unreachable")
    if "error" in answer:
        return error(500, "budget_error", answer["error"]["message"])
    if not answer["allowed"]:
        return error(429, "budget_exhausted", "a budget is spent", answer["retry_after_ms"])
    reservation = answer["reservation"]["id"]
    return StreamingResponse(stream(body, reservation, estimate), media_type="text/event-stream")


async def stream(body: dict, reservation: str, estimate: int):
    """Forwards the upstream's events, drawing ahead of the usage; settles at the end."""
    held, completion, seq, usage = estimate, 0, 0, None
    try:
        async with upstream.stream("POST", "/v1/chat/completions", json=body) as reply:
            async for line in reply.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]["total_tokens"]
                text = "".join(c.get("delta", {}).get("content") or "" for c in chunk.get("choices", []))
                tokens = estimate_tokens(text) if text else 0
                completion += tokens
                while estimate + completion > held:
                    seq += 1
                    drawn = (
                        await ratekeeper.post(
                            "/v1/draw", json={"reservation": reservation, "cost": DRAW_TOKENS, "seq": seq}
                        )
                    ).json()
                    if "error" in drawn or not drawn["allowed"]:
                        message = drawn.get("error", {}).get("message", "a budget is spent")
                        yield event(
                            {
                                "error": {
                                    "code": "budget_exhausted",
                                    "message": message,
                                    "retry_after_ms": drawn.get("retry_after_ms", 0),
                                    "usage": {"total_tokens": estimate + completion},
                                }
                            }
                        )
                        yield event("[DONE]")
                        return
                    held = drawn["drawn"]
                yield event(chunk)
        yield event("[DONE]")
    finally:
        # The model's own count if it gave one, else what was received.
        actual = usage if usage is not None else estimate + completion
        try:
            await ratekeeper.post("/v1/settle", json={"reservation": reservation, "actual": actual})
        except httpx.HTTPError as e:
            log.warning("settle failed, the reservation lapses at its TTL: %s", e)


app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
