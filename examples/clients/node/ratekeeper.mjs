// A rate limit middleware for Node's built-in `http` server (and Express,
// which takes the same `(req, res, next)` shape), asking ratekeeper before
// each request with the built-in `fetch`. No npm packages.
//
//   import { ratekeeper } from './ratekeeper.mjs';
//   const limit = ratekeeper({ policy: 'api' });
//   http.createServer((req, res) => limit(req, res, () => res.end('hello\n')));
//
// Each request is checked with POST /v1/check in the policy form. A denial
// is answered 429 with Retry-After and ratekeeper's RateLimit /
// RateLimit-Policy; an allowed request goes on to `next`, its response
// carrying the same two headers. When ratekeeper gives no decision
// (unreachable, no answer within the timeout, a 5xx, or a refusal such as a
// 401 for a missing token) the request fails open (`next`) or, with
// failureMode 'closed', gets a 503. See README.md beside this file.
//
// Connections are kept alive by fetch's global dispatcher (undici), shared
// by every request of the process.

import { readFileSync } from 'node:fs';

/** The client's API key, else its address: the same keys as ratekeeper's
 * forward-auth default (key_from = ["header:x-api-key", "ip"]), so a
 * policy's overrides serve both. null leaves the request unlimited. */
export function defaultKey(req) {
  const apiKey = req.headers['x-api-key'];
  if (apiKey) return `h:x-api-key=${apiKey}`;
  const address = req.socket.remoteAddress;
  if (!address) return null;
  // A dual-stack socket reports IPv4 clients as ::ffff:a.b.c.d.
  return `ip:${address.startsWith('::ffff:') ? address.slice(7) : address}`;
}

function tokenFromEnv(env) {
  // A file first: a mounted secret keeps the token out of the process
  // environment (which /proc/<pid>/environ shows), as ratekeeper does.
  if (env.RATEKEEPER_TOKEN_FILE) {
    return readFileSync(env.RATEKEEPER_TOKEN_FILE, 'utf8').trim() || null;
  }
  return env.RATEKEEPER_TOKEN || null;
}

/** One log line per `everyMs` at most, with a count of the rest: an outage
 * under load must be visible without flooding the log. */
function throttled(log, everyMs = 10_000) {
  let nextAt = 0;
  let skipped = 0;
  return (message) => {
    const now = Date.now();
    if (now < nextAt) {
      skipped += 1;
      return;
    }
    log(skipped ? `${message} (and ${skipped} more since the last such line)` : message);
    nextAt = now + everyMs;
    skipped = 0;
  };
}

/** The middleware; every option left out is read from `env` (RATEKEEPER_*). */
export function ratekeeper(options = {}) {
  const env = options.env ?? process.env;
  const base = (options.url ?? env.RATEKEEPER_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, '');
  const checkUrl = `${base}/v1/check`;
  const policy = options.policy ?? env.RATEKEEPER_POLICY ?? 'api';
  const timeoutMs = options.timeoutMs ?? Number(env.RATEKEEPER_TIMEOUT_MS ?? 200);
  const mode = options.failureMode ?? env.RATEKEEPER_FAILURE_MODE ?? 'open';
  if (mode !== 'open' && mode !== 'closed') {
    throw new Error(`failureMode must be 'open' or 'closed', got '${mode}'`);
  }
  const failClosed = mode === 'closed';
  const keyOf = options.key ?? defaultKey;
  const cost = options.cost ?? 1;
  const token = options.token ?? tokenFromEnv(env);
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const action = failClosed ? 'failing closed (503)' : 'failing open (request allowed)';
  const outage = throttled((m) => console.warn(m));
  const refused = throttled((m) => console.error(m));
  // fetch loads undici on its first call: the first check of a process
  // took ~100 ms more than the next ones here, half of the default
  // timeout. This loads it now, and opens a pooled connection too.
  // /healthz needs no token; a failure here means nothing.
  fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) })
    .then((response) => response.arrayBuffer())
    .catch(() => {});

  // ratekeeper's decision and headers, or null when it gave none.
  async function check(key) {
    let response;
    try {
      response = await fetch(checkUrl, {
        method: 'POST',
        headers,
        body: JSON.stringify({ policy, key, cost }),
        // Bounds the whole call, connecting and reading the body included.
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (response.status === 200) {
        const decision = await response.json();
        if (typeof decision === 'object' && decision !== null) {
          return { decision, headers: response.headers };
        }
        outage(`ratekeeper at ${checkUrl} answered 200 with a body that is not a decision; ${action}`);
        return null;
      }
      const body = await response.text();
      if (response.status >= 500) {
        outage(`ratekeeper at ${checkUrl} answered ${response.status}; ${action}`);
        return null;
      }
      // 401/403 (token missing, wrong or revoked) or 422 (unknown policy):
      // our configuration is wrong, not the end user's request, so it must
      // not become a 429. Loud, since it lasts until someone fixes it.
      refused(
        `ratekeeper at ${checkUrl} refused our check with ${response.status} ${errorCode(body)}: ` +
          "fix the middleware's configuration (RATEKEEPER_TOKEN_FILE / RATEKEEPER_TOKEN, " +
          `RATEKEEPER_POLICY); ${action}`,
      );
      return null;
    } catch (error) {
      const why =
        error.name === 'TimeoutError'
          ? `no answer within ${timeoutMs} ms`
          : `unreachable (${error.cause?.code ?? error.message})`;
      outage(`ratekeeper at ${checkUrl} ${why}; ${action}`);
      return null;
    }
  }

  return async function limit(req, res, next) {
    const key = keyOf(req);
    if (key == null) return next();
    const answer = await check(key);
    if (answer === null) {
      if (!failClosed) return next();
      return respond(res, 503, { 'retry-after': '1' }, 'rate_limiter_unavailable',
        'the rate limiter is unavailable: retry shortly');
    }
    const copied = {};
    for (const name of ['ratelimit', 'ratelimit-policy']) {
      const value = answer.headers.get(name);
      if (value !== null) copied[name] = value;
    }
    if (answer.decision.allowed) {
      for (const [name, value] of Object.entries(copied)) res.setHeader(name, value);
      return next();
    }
    const retry = Math.max(1, Math.ceil((answer.decision.retry_after_ms ?? 1000) / 1000));
    return respond(res, 429, { 'retry-after': String(retry), ...copied }, 'rate_limited',
      `too many requests: retry after ${retry} s`);
  };
}

function respond(res, status, headers, code, message) {
  const body = JSON.stringify({ error: { code, message } });
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(body);
}

// ratekeeper's error code (`missing_token`, ...); never our request's headers.
function errorCode(body) {
  try {
    return `(${JSON.parse(body).error.code})`;
  } catch {
    return '';
  }
}
