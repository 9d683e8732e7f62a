// Package ratekeeper is a net/http middleware that asks ratekeeper before
// each request, with the standard library only.
//
//	cfg, err := ratekeeper.FromEnv() // or a Config of your own
//	http.ListenAndServe(addr, ratekeeper.New(cfg).Handler(mux))
//
// Each request is checked with POST /v1/check in the policy form. A denial
// is answered 429 with Retry-After and ratekeeper's RateLimit and
// RateLimit-Policy; an allowed request goes on to the next handler, its
// response carrying the same two headers. When ratekeeper gives no decision
// (unreachable, no answer within the timeout, a 5xx, or a refusal such as a
// 401 for a missing token) the request fails open (goes on) or, with
// FailClosed, gets a 503. See README.md beside this package.
package ratekeeper

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config says where ratekeeper is and what to do without it.
type Config struct {
	URL        string        // ratekeeper's base URL, e.g. http://127.0.0.1:8080
	Policy     string        // the policy every check names
	Token      string        // a bearer token of scope check; empty: none sent
	Timeout    time.Duration // the longest a check may take before the fallback
	FailClosed bool          // without a decision: 503 (true) or let the request through (false)
	Cost       int           // units each request spends
	// Key gives a request's key; "" leaves the request unlimited. Default: DefaultKey.
	Key func(*http.Request) string
	// Client sends the checks; default: one with a keep-alive pool of its own.
	Client *http.Client
	// Logger gets outages and refusals (never the token); default: log.Default().
	Logger *log.Logger
}

// FromEnv reads RATEKEEPER_URL, RATEKEEPER_POLICY, RATEKEEPER_TOKEN_FILE or
// RATEKEEPER_TOKEN, RATEKEEPER_TIMEOUT_MS and RATEKEEPER_FAILURE_MODE.
func FromEnv() (Config, error) {
	cfg := Config{
		URL:     getenv("RATEKEEPER_URL", "http://127.0.0.1:8080"),
		Policy:  getenv("RATEKEEPER_POLICY", "api"),
		Timeout: 200 * time.Millisecond,
		Cost:    1,
	}
	if ms := os.Getenv("RATEKEEPER_TIMEOUT_MS"); ms != "" {
		n, err := strconv.Atoi(ms)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("RATEKEEPER_TIMEOUT_MS: a positive number of milliseconds, got %q", ms)
		}
		cfg.Timeout = time.Duration(n) * time.Millisecond
	}
	switch mode := getenv("RATEKEEPER_FAILURE_MODE", "open"); mode {
	case "open":
	case "closed":
		cfg.FailClosed = true
	default:
		return cfg, fmt.Errorf("RATEKEEPER_FAILURE_MODE: open or closed, got %q", mode)
	}
	// A file first: a mounted secret keeps the token out of the process
	// environment (which /proc/<pid>/environ shows), as ratekeeper does.
	if path := os.Getenv("RATEKEEPER_TOKEN_FILE"); path != "" {
		token, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("RATEKEEPER_TOKEN_FILE: %w", err)
		}
		cfg.Token = strings.TrimSpace(string(token))
	} else {
		cfg.Token = os.Getenv("RATEKEEPER_TOKEN")
	}
	return cfg, nil
}

// DefaultKey is the client's API key, else its address: the same keys as
// ratekeeper's forward-auth default (key_from = ["header:x-api-key", "ip"]),
// so a policy's overrides serve both.
func DefaultKey(r *http.Request) string {
	if apiKey := r.Header.Get("X-Api-Key"); apiKey != "" {
		return "h:x-api-key=" + apiKey
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return "ip:" + host
}

// NewClient is a client whose pool keeps connections to ratekeeper alive.
func NewClient() *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// The default keeps 2 idle connections per host: under concurrency,
	// most checks would open (and close) a connection of their own.
	transport.MaxIdleConns = 128
	transport.MaxIdleConnsPerHost = 128
	return &http.Client{Transport: transport}
}

// Limiter checks requests with ratekeeper; share one across handlers.
type Limiter struct {
	cfg      Config
	checkURL string
	outage   throttled
	refused  throttled
}

// New fills in cfg's defaults.
func New(cfg Config) *Limiter {
	if cfg.Key == nil {
		cfg.Key = DefaultKey
	}
	if cfg.Client == nil {
		cfg.Client = NewClient()
	}
	if cfg.Logger == nil {
		cfg.Logger = log.Default()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 200 * time.Millisecond
	}
	if cfg.Cost == 0 {
		cfg.Cost = 1
	}
	return &Limiter{cfg: cfg, checkURL: strings.TrimRight(cfg.URL, "/") + "/v1/check"}
}

type decision struct {
	Allowed      bool  `json:"allowed"`
	RetryAfterMs int64 `json:"retry_after_ms"`
}

// Handler wraps next: only requests ratekeeper allows (or the fallback
// lets through) reach it.
func (l *Limiter) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := l.cfg.Key(r)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		d, headers, ok := l.check(r.Context(), key)
		if !ok {
			if !l.cfg.FailClosed {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Retry-After", "1")
			respond(w, http.StatusServiceUnavailable, "rate_limiter_unavailable",
				"the rate limiter is unavailable: retry shortly")
			return
		}
		for _, name := range []string{"RateLimit", "RateLimit-Policy"} {
			if value := headers.Get(name); value != "" {
				w.Header().Set(name, value)
			}
		}
		if d.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		retry := (d.RetryAfterMs + 999) / 1000
		if retry < 1 {
			retry = 1
		}
		w.Header().Set("Retry-After", strconv.FormatInt(retry, 10))
		respond(w, http.StatusTooManyRequests, "rate_limited",
			fmt.Sprintf("too many requests: retry after %d s", retry))
	})
}

// check asks ratekeeper; ok is false when it gave no decision.
func (l *Limiter) check(parent context.Context, key string) (d decision, headers http.Header, ok bool) {
	// Bounds the whole call, connecting and reading the body included; a
	// client that hangs up cancels it too.
	ctx, cancel := context.WithTimeout(parent, l.cfg.Timeout)
	defer cancel()
	body, _ := json.Marshal(map[string]interface{}{"policy": l.cfg.Policy, "key": key, "cost": l.cfg.Cost})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.checkURL, bytes.NewReader(body))
	if err != nil {
		l.unusable(&l.refused, "cannot build a request: %v", err)
		return d, nil, false
	}
	req.Header.Set("Content-Type", "application/json")
	if l.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+l.cfg.Token)
	}
	resp, err := l.cfg.Client.Do(req)
	if err == nil {
		defer resp.Body.Close()
		// Read whole, so the connection goes back to the pool.
		body, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	}
	switch {
	case parent.Err() != nil:
		return d, nil, false // the client is gone: nobody to answer, nothing to report
	case errors.Is(err, context.DeadlineExceeded):
		l.unusable(&l.outage, "no answer within %v", l.cfg.Timeout)
	case err != nil:
		l.unusable(&l.outage, "unreachable (%v)", err)
	case resp.StatusCode >= 500:
		l.unusable(&l.outage, "answered %d", resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		// 401/403 (token missing, wrong or revoked) or 422 (unknown
		// policy): our configuration is wrong, not the end user's request,
		// so it must not become a 429. Loud, since it lasts until fixed.
		l.unusable(&l.refused, "refused our check with %d %s: fix the middleware's configuration "+
			"(RATEKEEPER_TOKEN_FILE / RATEKEEPER_TOKEN, RATEKEEPER_POLICY)", resp.StatusCode, errorCode(body))
	default:
		if err := json.Unmarshal(body, &d); err != nil {
			l.unusable(&l.outage, "answered 200 with a body that is not a decision: %v", err)
			return d, nil, false
		}
		return d, resp.Header, true
	}
	return d, nil, false
}

func (l *Limiter) unusable(t *throttled, format string, args ...interface{}) {
	action := "failing open (request allowed)"
	if l.cfg.FailClosed {
		action = "failing closed (503)"
	}
	t.logf(l.cfg.Logger, "ratekeeper at "+l.checkURL+" "+format+"; "+action, args...)
}

// throttled logs one line per 10 s at most, with a count of the rest: an
// outage under load must be visible without flooding the log.
type throttled struct {
	mu      sync.Mutex
	next    time.Time
	skipped int
}

func (t *throttled) logf(logger *log.Logger, format string, args ...interface{}) {
	t.mu.Lock()
	now := time.Now()
	if now.Before(t.next) {
		t.skipped++
		t.mu.Unlock()
		return
	}
	skipped := t.skipped
	t.next, t.skipped = now.Add(10*time.Second), 0
	t.mu.Unlock()
	if skipped > 0 {
		format += fmt.Sprintf(" (and %d more since the last such line)", skipped)
	}
	logger.Printf(format, args...)
}

func respond(w http.ResponseWriter, status int, code, message string) {
	body, _ := json.Marshal(map[string]map[string]string{"error": {"code": code, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// errorCode is ratekeeper's error code (missing_token, ...); never our
// request's headers.
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return ""
	}
	return "(" + e.Error.Code + ")"
}

func getenv(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}
