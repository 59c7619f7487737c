package api_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/metrics"
)

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
