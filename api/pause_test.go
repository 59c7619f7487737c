package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// TestAPausedCheckoutIsAnsweredFromPostgres: support pauses a saga (the Web UI's Pause, server
// 1.30+ with frontend.WorkflowPauseEnabled, which workflows.DevServerFlags sets), and the
// server then rejects its queries. A GET
// answers at once from the checkout's record in Postgres, awaiting payment with its hold, and
// says it is paused; once support unpauses it, the saga answers again.
func TestAPausedCheckoutIsAnsweredFromPostgres(t *testing.T) {
	l := newLive(t, nil, nil)
	l.startWorker(t)
	phone, id := l.openPhoneCheckout(t)
	get := func() (int, api.CheckoutView, time.Duration) {
		start := time.Now()
		rec := l.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + id, header: buyerOf(id)})
		var v api.CheckoutView
		_ = json.Unmarshal(rec.Body.Bytes(), &v)
		return rec.Code, v, time.Since(start)
	}

	ws := l.tc.WorkflowService()
	if _, err := ws.PauseWorkflowExecution(t.Context(), &workflowservice.PauseWorkflowExecutionRequest{
		Namespace: "default", WorkflowId: shop.WorkflowID(id), Identity: "support", Reason: "looking into it", RequestId: testenv.RandomID("pause-"),
	}); err != nil {
		t.Fatalf("pause %s: %v", shop.WorkflowID(id), err)
	}
	code, v, took := get()
	if code != http.StatusOK || !v.Paused || v.Status != shop.StatusAwaitingPayment || v.ExpiresAt == nil || v.Attention == "" {
		t.Fatalf("GET of a paused checkout = %d %+v, want 200 awaiting_payment from Postgres, paused, with its expiry and a word why", code, v)
	}
	if took > 5*time.Second {
		t.Errorf("GET of a paused checkout took %s: it waited for the saga", took)
	}
	l.assertHeld(t, phone, 1)
	// The server refuses updates too: a cancel is answered 503 with Retry-After (come back
	// once support resumes it), not the update limit's 429.
	rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + id + "/cancel", header: buyerOf(id)})
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Errorf("cancel of a paused checkout = %d %s, want 503 with Retry-After", rec.Code, rec.Body)
	}

	if _, err := ws.UnpauseWorkflowExecution(t.Context(), &workflowservice.UnpauseWorkflowExecutionRequest{
		Namespace: "default", WorkflowId: shop.WorkflowID(id), Identity: "support", RequestId: testenv.RandomID("unpause-"),
	}); err != nil {
		t.Fatalf("unpause %s: %v", shop.WorkflowID(id), err)
	}
	waitFor(t, "the saga answering again", func() bool {
		code, v, _ := get()
		return code == http.StatusOK && !v.Paused && v.Status == shop.StatusAwaitingPayment
	})
}
