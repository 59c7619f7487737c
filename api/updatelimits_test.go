package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// TestTooManyUpdatesInFlightIsRetryable: every POST of a cart is one reservation update on
// its saga, and Temporal admits only so many in flight per workflow (10 by default; 1 here).
// A POST over the limit must answer 429 or 503 with Retry-After, never 500. No worker runs,
// so the first POST's update stays in flight. On this server the SDK retries the
// ResourceExhausted itself until the request's deadline, so the answer is the deadline's 503;
// TestTemporalProblemMapsUpdateLimits covers the error when it does reach the API.
func TestTooManyUpdatesInFlightIsRetryable(t *testing.T) {
	l := newLive(t, []string{"--dynamic-config-value", "history.maxInFlightUpdates=1"}, func(cfg *api.Config, _ *api.Deps) {
		cfg.RequestTimeout = 5 * time.Second
	})
	phone := l.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	id := testenv.RandomID("c-")
	body := cart(id, "u-1", phone, 1)

	first := make(chan int, 1)
	go func() {
		rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: strings.NewReader(body)})
		first <- rec.Code
	}()
	waitFor(t, "the first POST's saga", func() bool { return l.sagaExists(t, id) })

	start := time.Now()
	rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: strings.NewReader(body)})
	t.Logf("second POST: %d in %s: %s", rec.Code, time.Since(start).Round(time.Millisecond), rec.Body)
	if rec.Code != http.StatusTooManyRequests && rec.Code != http.StatusServiceUnavailable {
		t.Errorf("POST over the in-flight update limit = %d %s, want 429 or 503", rec.Code, rec.Body)
	}
	if rec.Header().Get("Retry-After") == "" {
		t.Errorf("POST over the in-flight update limit has no Retry-After")
	}
	t.Logf("first POST: %d", <-first)
}

// TestTotalUpdateLimitIsNotA500: Temporal refuses any update past a workflow's total (2,000
// by default; 2 here), and every POST and cancel of a cart is one. Past it a retried POST is
// answered from the saga's view (it needs no update to know the answer), and a cancel gets
// 429 with Retry-After, never 500.
func TestTotalUpdateLimitIsNotA500(t *testing.T) {
	l := newLive(t, []string{"--dynamic-config-value", "history.maxTotalUpdates=2"}, nil)
	l.startWorker(t)
	phone := l.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	id := testenv.RandomID("c-")
	body := cart(id, "u-1", phone, 1)
	for i, want := range []int{http.StatusCreated, http.StatusOK, http.StatusOK, http.StatusOK} {
		if code, got := l.post(t, body, nil); code != want {
			t.Errorf("POST %d of cart %s = %d %s, want %d", i+1, id, code, got, want)
		}
	}
	if code, got := l.post(t, cart(id, "u-1", phone, 2), nil); code != http.StatusUnprocessableEntity {
		t.Errorf("POST of cart %s with another body past the limit = %d %s, want 422", id, code, got)
	}
	rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + id + "/cancel", header: buyerOf(id)})
	t.Logf("cancel past the limit: %d %s", rec.Code, rec.Body)
	if rec.Code != http.StatusTooManyRequests && rec.Code != http.StatusServiceUnavailable {
		t.Errorf("cancel past the total update limit = %d %s, want 429 or 503", rec.Code, rec.Body)
	}
	if rec.Header().Get("Retry-After") == "" {
		t.Errorf("cancel past the total update limit has no Retry-After")
	}
	l.assertHeld(t, phone, 1)
}

// TestOtherBodiesSpendNoneOfTheSagasUpdates: a caller who posts a buyer's cart id with other
// contents, under fresh keys, is refused by the saga before its request enters the history, so
// it cannot spend the workflow's total of updates (2,000 by default; 3 here) and leave the
// buyer unable to cancel.
func TestOtherBodiesSpendNoneOfTheSagasUpdates(t *testing.T) {
	l := newLive(t, []string{"--dynamic-config-value", "history.maxTotalUpdates=3"}, nil)
	l.startWorker(t)
	phone, id := l.openPhoneCheckout(t)
	for i := range 10 {
		code, got := l.post(t, cart(id, fmt.Sprintf("bot-%d", i), phone, 2), map[string]string{"Idempotency-Key": testenv.RandomID("junk-")})
		if code != http.StatusConflict || !strings.Contains(got, `"checkout_exists"`) {
			t.Errorf("POST %d of the buyer's cart with other contents = %d %s, want 409 checkout_exists", i+1, code, got)
		}
	}
	rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + id + "/cancel", header: buyerOf(id)})
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"cancelled"`) {
		t.Errorf("the buyer's cancel after 10 foreign POSTs = %d %s, want 200 cancelled", rec.Code, rec.Body)
	}
	l.assertHeld(t, phone, 0)
}
