"""An ASGI middleware that asks ratekeeper before each HTTP request.

Works under any ASGI framework; with Starlette or FastAPI::

    app.add_middleware(RatekeeperMiddleware, policy="api")

Each HTTP request is checked with ``POST /v1/check`` in the policy form
(``{"policy", "key", "cost"}``). A denial is answered ``429`` with
``Retry-After`` and ratekeeper's ``RateLimit`` / ``RateLimit-Policy``; an
allowed request goes on to the app, and its response carries the same two
headers. When ratekeeper gives no decision (unreachable, no answer within
the timeout, a 5xx, or a refusal such as a 401 for a missing token) the
request fails open (goes on to the app) or, with ``failure_mode="closed"``,
gets a ``503``. See README.md beside this file.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from typing import Any, Callable, Optional

import anyio
import httpx

log = logging.getLogger("ratekeeper")

Scope = dict[str, Any]
KeyFunc = Callable[[Scope], Optional[str]]


def default_key(scope: Scope) -> Optional[str]:
    """The client's API key, else its address.

    The same keys as ratekeeper's forward-auth default
    (``key_from = ["header:x-api-key", "ip"]``), so a policy's overrides
    written for one (``"h:x-api-key=k_acme"``) serve the other too.
    ``None`` (no header, no client address) leaves the request unlimited.
    """
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key" and value:
            return "h:x-api-key=" + value.decode("utf-8", "replace")
    client = scope.get("client")
    return f"ip:{client[0]}" if client else None


def _token_from_env() -> Optional[str]:
    # A file first: a mounted secret keeps the token out of the process
    # environment (which /proc/<pid>/environ shows), as ratekeeper does.
    path = os.environ.get("RATEKEEPER_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as file:
            return file.read().strip() or None
    return os.environ.get("RATEKEEPER_TOKEN") or None


class _Throttled:
    """One log line per `every` seconds at most, with a count of the rest:
    an outage under load must be visible without flooding the log."""

    def __init__(self, every: float = 10.0) -> None:
        self.every = every
        self.next_at = 0.0
        self.skipped = 0

    def log(self, level: int, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now < self.next_at:
            self.skipped += 1
            return
        if self.skipped:
            message += " (and %d more since the last such line)"
            args += (self.skipped,)
        self.next_at, self.skipped = now + self.every, 0
        log.log(level, message, *args)


class RatekeeperMiddleware:
    """Rate limits HTTP requests with ratekeeper; every argument left out
    is read from the environment (``RATEKEEPER_*``, see README.md)."""

    def __init__(
        self,
        app: Callable,
        *,
        policy: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        timeout: Optional[float] = None,
        failure_mode: Optional[str] = None,
        key_func: KeyFunc = default_key,
        cost: int = 1,
        client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        env = os.environ.get
        self.app = app
        self.policy = policy or env("RATEKEEPER_POLICY", "api")
        self.base = (url or env("RATEKEEPER_URL", "http://127.0.0.1:8080")).rstrip("/")
        self.check_url = self.base + "/v1/check"
        if timeout is None:
            timeout = int(env("RATEKEEPER_TIMEOUT_MS", "200")) / 1000
        self.timeout = timeout
        mode = failure_mode or env("RATEKEEPER_FAILURE_MODE", "open")
        if mode not in ("open", "closed"):
            raise ValueError(f"failure_mode must be 'open' or 'closed', got {mode!r}")
        self.fail_closed = mode == "closed"
        self.key_func = key_func
        self.cost = cost
        token = token if token is not None else _token_from_env()
        # Sent per request rather than set on the client, so a client
        # passed in works too. httpx never logs request headers.
        self._auth = {"authorization": f"Bearer {token}"} if token else {}
        # One client for every request: its pool keeps connections alive.
        self._owns_client = client is None
        self.client = client or httpx.AsyncClient(timeout=self.timeout)
        self._outage = _Throttled()
        self._refused = _Throttled()

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._lifespan_send(send))
            return
        key = self.key_func(scope) if scope["type"] == "http" else None
        if key is None:  # websockets, and requests the key function leaves out
            await self.app(scope, receive, send)
            return
        answer = await self._check(key)
        if answer is None:
            await self._fallback(scope, receive, send)
            return
        decision, headers = answer
        copied = [
            (name.encode(), headers[name].encode())
            for name in ("ratelimit", "ratelimit-policy")
            if name in headers
        ]
        if decision.get("allowed"):
            await self.app(scope, receive, _adding_headers(send, copied))
            return
        retry = max(1, math.ceil(decision.get("retry_after_ms", 1000) / 1000))
        message = f"too many requests: retry after {retry} s"
        await _respond(send, 429, [(b"retry-after", str(retry).encode()), *copied], "rate_limited", message)

    async def _check(self, key: str) -> Optional[tuple[dict, httpx.Headers]]:
        """ratekeeper's decision and headers, or None when it gave none."""
        body = {"policy": self.policy, "key": key, "cost": self.cost}
        try:
            # httpx's timeout bounds each phase; this bounds the whole call,
            # waiting for a pooled connection included.
            with anyio.fail_after(self.timeout):
                response = await self.client.post(self.check_url, json=body, headers=self._auth)
        except TimeoutError:
            why = f"no answer within {self.timeout * 1000:.0f} ms"
            return self._unusable(self._outage, logging.WARNING, why)
        except httpx.HTTPError as error:
            why = f"unreachable ({type(error).__name__}: {error})"
            return self._unusable(self._outage, logging.WARNING, why)
        if response.status_code >= 500:
            return self._unusable(self._outage, logging.WARNING, f"answered {response.status_code}")
        if response.status_code != 200:
            # 401/403 (token missing, wrong or revoked) or 422 (unknown
            # policy): our configuration is wrong, not the end user's
            # request, so it must not become a 429. Loud, since it lasts
            # until someone fixes it.
            return self._unusable(
                self._refused,
                logging.ERROR,
                f"refused our check with {response.status_code} {_error_code(response)}: fix the "
                "middleware's configuration (RATEKEEPER_TOKEN_FILE / RATEKEEPER_TOKEN, RATEKEEPER_POLICY)",
            )
        try:
            decision = response.json()
        except ValueError:
            decision = None
        if not isinstance(decision, dict):
            return self._unusable(self._outage, logging.WARNING, "answered 200 with a body that is not a decision")
        return decision, response.headers

    def _unusable(self, throttle: _Throttled, level: int, why: str) -> None:
        action = "failing closed (503)" if self.fail_closed else "failing open (request allowed)"
        throttle.log(level, "ratekeeper at %s %s; %s", self.check_url, why, action)
        return None

    async def _fallback(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if self.fail_closed:
            message = "the rate limiter is unavailable: retry shortly"
            await _respond(send, 503, [(b"retry-after", b"1")], "rate_limiter_unavailable", message)
        else:
            await self.app(scope, receive, send)

    def _lifespan_send(self, send: Callable) -> Callable:
        async def wrapped(message: dict) -> None:
            if message["type"] == "lifespan.startup.complete":
                await self._warm_up()
            elif message["type"] == "lifespan.shutdown.complete" and self._owns_client:
                await self.client.aclose()
            await send(message)

        return wrapped

    async def _warm_up(self) -> None:
        """Opens a pooled connection before the first request, whose check
        would otherwise pay for it out of its timeout. `/healthz` needs no
        token; a ratekeeper that is down delays startup by 1 s at most."""
        with anyio.move_on_after(1.0):
            try:
                await self.client.get(self.base + "/healthz")
            except httpx.HTTPError:
                pass


def _adding_headers(send: Callable, extra: list[tuple[bytes, bytes]]) -> Callable:
    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start" and extra:
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped


async def _respond(send: Callable, status: int, headers: list, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def _error_code(response: httpx.Response) -> str:
    """ratekeeper's error code (`missing_token`, ...); never the request's headers."""
    try:
        return f"({response.json()['error']['code']})"
    except (ValueError, KeyError, TypeError):
        return ""
