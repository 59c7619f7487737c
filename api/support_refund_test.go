package api_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A Standard Webhooks payment ref is free text of up to 255 characters. Support must be able
// to retry its stuck refund through the API like a Stripe one: the ref arrives percent-encoded
// in the path and names the same workflow the webhook handler started.
func TestSupportRetriesRefundOfLongStandardRef(t *testing.T) {
	srv := testenv.DevServer(t, workflows.SearchAttributeTypes)
	tc := srv.Client()
	_, pool := testenv.Postgres(t)
	db := store.New(pool)
	// No payment provider is configured: the refund gets stuck and waits for support.
	w := worker.New(tc, &activities.Activities{Store: db, Stock: lua.New(testenv.Redis(t))})
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
	h := newHarness(t, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })

	provider := "acme-pay"
	ref := "pay/" + strings.Repeat("x-:%", 59) + testenv.RandomID("abc") // 255 characters
	if len(ref) != 255 {
		t.Fatalf("test ref is %d characters", len(ref))
	}
	in := workflows.RefundInput{CheckoutID: testenv.RandomID("c-"), CustomerID: "u-9", Provider: provider, PaymentRef: ref,
		EventID: "evt_1", AmountCents: 1_000, Currency: "usd", Reason: "test"}
	ctx := t.Context()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: workflows.RefundWorkflowID(provider, ref), TaskQueue: workflows.TaskQueue,
	}, workflows.Refund, in)
	if err != nil {
		t.Fatalf("start refund: %v", err)
	}
	waitRefundStatus(t, tc, run.GetID(), workflows.RefundStuck)

	rec := h.do(t, request{method: http.MethodPost, path: "/v1/admin/refunds/" + provider + "/" + url.PathEscape(ref) + "/retry", header: bearer(testAdminToken)})
	if rec.Code != http.StatusOK {
		t.Fatalf("retry refund: %d %s, want 200 with the refund", rec.Code, rec.Body)
	}
	var v workflows.RefundView
	decodeJSON(t, rec, &v)
	if v.PaymentRef != ref || v.Provider != provider {
		t.Errorf("retried refund of %s %q, want %s %q", v.Provider, v.PaymentRef, provider, ref)
	}

	rec = h.do(t, request{method: http.MethodPost, path: "/v1/admin/refunds/" + provider + "/" + strings.Repeat("y", 256) + "/retry", header: bearer(testAdminToken)})
	assertNames(t, problemOf(t, rec, http.StatusUnprocessableEntity, "invalid_request"), "payment_ref")
}

func waitRefundStatus(t *testing.T, tc client.Client, workflowID, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var v workflows.RefundView
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		q, err := tc.QueryWorkflow(ctx, workflowID, "", workflows.QueryStatus)
		cancel()
		if err == nil && q.Get(&v) == nil && v.Status == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("refund %s is %q, want %q", workflowID, v.Status, want)
}
