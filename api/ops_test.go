package api_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/metrics"
)

func TestUnknownRouteAndMethodAreProblems(t *testing.T) {
	h := newHarness(t, nil)
	rec := h.do(t, request{method: http.MethodGet, path: "/v1/nothing-here"})
	problemOf(t, rec, http.StatusNotFound, "not_found")
	rec = h.do(t, request{method: http.MethodDelete, path: "/healthz"})
	problemOf(t, rec, http.StatusMethodNotAllowed, "method_not_allowed")
	// Under /v1 Echo v4's group middleware registers catch-all routes, so a wrong method
	// there is a 404 rather than a 405; either way it is a problem+json.
	rec = h.do(t, request{method: http.MethodDelete, path: "/v1/checkouts"})
	if rec.Code != http.StatusNotFound && rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /v1/checkouts = %d, want 404 or 405", rec.Code)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("DELETE /v1/checkouts Content-Type = %q, want application/problem+json", ct)
	}
}

func TestHealthzAnswersOK(t *testing.T) {
	h := newHarness(t, nil)
	rec := h.do(t, request{method: http.MethodGet, path: "/healthz"})
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"ok"`) {
		t.Errorf("healthz = %d %s, want 200 ok", rec.Code, rec.Body)
	}
}

func TestReadyzIs503WithRetryAfterWhileADependencyIsDown(t *testing.T) {
	ok := func(context.Context) error { return nil }
	t.Run("all ready", func(t *testing.T) {
		h := newHarness(t, func(_ *api.Config, d *api.Deps) {
			d.Ready = map[string]func(context.Context) error{"redis": ok, "postgres": ok}
		})
		rec := h.do(t, request{method: http.MethodGet, path: "/readyz"})
		if rec.Code != http.StatusOK || rec.Header().Get("Retry-After") != "" {
			t.Errorf("readyz = %d (Retry-After %q) %s, want 200", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
		}
	})
	t.Run("one check fails", func(t *testing.T) {
		h := newHarness(t, func(_ *api.Config, d *api.Deps) {
			d.Ready = map[string]func(context.Context) error{
				"redis":    ok,
				"temporal": func(context.Context) error { return errors.New("connection refused") },
			}
		})
		rec := h.do(t, request{method: http.MethodGet, path: "/readyz"})
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("status = %d, want 503; body %s", rec.Code, rec.Body)
		}
		if rec.Header().Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		var body struct {
			Ready  bool              `json:"ready"`
			Checks map[string]string `json:"checks"`
		}
		decodeJSON(t, rec, &body)
		if body.Ready || body.Checks["redis"] != "ok" || !strings.Contains(body.Checks["temporal"], "unavailable") {
			t.Errorf("body = %+v, want not ready, redis ok, temporal unavailable", body)
		}
	})
	t.Run("error text stays in the log", func(t *testing.T) {
		// /readyz is public: a dependency's error names hosts, users and DSN fragments.
		h := newHarness(t, func(_ *api.Config, d *api.Deps) {
			d.Ready = map[string]func(context.Context) error{
				"postgres": func(context.Context) error {
					return errors.New("failed to connect to `user=checkout database=shop host=10.0.0.7`: password authentication failed")
				},
			}
		})
		rec := h.do(t, request{method: http.MethodGet, path: "/readyz"})
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "postgres") {
			t.Errorf("readyz = %d %s, want 503 naming postgres", rec.Code, rec.Body)
		}
		for _, secret := range []string{"10.0.0.7", "user=", "password"} {
			if strings.Contains(rec.Body.String(), secret) {
				t.Errorf("readyz body %s shows the error text %q", rec.Body, secret)
			}
		}
	})
	t.Run("a hanging check is cut off", func(t *testing.T) {
		h := newHarness(t, func(_ *api.Config, d *api.Deps) {
			d.Ready = map[string]func(context.Context) error{
				"postgres": func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() },
			}
		})
		rec := h.do(t, request{method: http.MethodGet, path: "/readyz"})
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "postgres") {
			t.Errorf("readyz = %d %s, want 503 naming postgres", rec.Code, rec.Body)
		}
	})
}

// /readyz is public and each of its checks costs a backend call of up to 2 s: a flood of
// probes is answered from one round of checks a second, and a change still shows within about
// a second.
func TestReadyzFloodCostsOneRoundOfChecksASecond(t *testing.T) {
	var calls atomic.Int64
	var failing atomic.Bool
	h := newHarness(t, func(_ *api.Config, d *api.Deps) {
		d.Ready = map[string]func(context.Context) error{
			"postgres": func(context.Context) error {
				calls.Add(1)
				if failing.Load() {
					return errors.New("connection refused")
				}
				return nil
			},
		}
	})
	probe := func() int {
		rec := httptest.NewRecorder()
		h.e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 10 {
				if code := probe(); code != http.StatusOK {
					t.Errorf("readyz = %d, want 200", code)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Within one second of the first probe one round runs; a flood that took longer may
	// have earned one more per second.
	if n, most := calls.Load(), int64(elapsed/time.Second)+1; n > most {
		t.Errorf("200 probes in %s ran the check %d times, want at most %d", elapsed.Round(time.Millisecond), n, most)
	}
	failing.Store(true)
	changed := time.Now()
	waitFor(t, "/readyz to see the failing check", func() bool { return probe() == http.StatusServiceUnavailable })
	if took := time.Since(changed); took > 2*time.Second {
		t.Errorf("/readyz saw the failing check after %s, want within about a second", took.Round(time.Millisecond))
	}
}

// TestMetricsAreNotPublic: /metrics shows per-SKU hold and release counts (sales velocity)
// and SDK internals, so the public listener does not serve it; the binary serves it on
// API_METRICS_ADDR (api.MetricsHandler).
func TestMetricsAreNotPublic(t *testing.T) {
	h := newHarness(t, nil)
	rec := h.do(t, request{method: http.MethodGet, path: "/metrics"})
	problemOf(t, rec, http.StatusNotFound, "not_found")
}

// Every 503 the API answers is counted by its problem code, which the operator alerts read
// (ops/prometheus/alerts.yml): here Postgres goes away under a checkout request.
func TestUnavailableAnswersAreCounted(t *testing.T) {
	h := newHarness(t, nil)
	sku := h.stockSKU(t, "METRIC-", 10, 1000, 2, "usd")
	counter := metrics.UnavailableAnswers.WithLabelValues("service_unavailable")
	before := testutil.ToFloat64(counter)

	h.pool.Close() // the catalog read fails: a dependency down is 503 service_unavailable
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart(testenv.RandomID("c-"), "u-1", sku, 1))})
	problemOf(t, rec, http.StatusServiceUnavailable, "service_unavailable")

	if got := testutil.ToFloat64(counter) - before; got != 1 {
		t.Errorf("checkout_unavailable_answers_total{code=\"service_unavailable\"} moved by %v, want 1", got)
	}
}
