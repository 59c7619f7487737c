package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A Standard Webhooks payment ref is free text of up to 255 characters. Support must be able
// to retry its stuck refund through the API like a Stripe one: the ref arrives percent-encoded
// in the path and names the same workflow the webhook handler started.
func TestSupportRetriesRefundOfLongStandardRef(t *testing.T) {
	// No payment provider is configured: the refund gets stuck and waits for support.
	p := checkouttest.Start(t, checkouttest.Options{})
	tc := p.Temporal
	admin := checkouttest.Admin(checkouttest.AdminToken)

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

	var v workflows.RefundView
	a, err := p.Client.Do(ctx, http.MethodPost, "/v1/admin/refunds/"+provider+"/"+url.PathEscape(ref)+"/retry", nil, admin, &v)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, a.Code, "retry refund answered %s, want 200 with the refund", a.Body)
	if v.PaymentRef != ref || v.Provider != provider {
		t.Errorf("retried refund of %s %q, want %s %q", v.Provider, v.PaymentRef, provider, ref)
	}

	a, err = p.Client.Do(ctx, http.MethodPost, "/v1/admin/refunds/"+provider+"/"+strings.Repeat("y", 256)+"/retry", nil, admin, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, a.Code, "retry of a 256-character ref answered %s", a.Body)
	require.Equal(t, "invalid_request", a.Problem)
	var prob api.Problem
	require.NoError(t, json.Unmarshal(a.Body, &prob))
	assertNames(t, prob, "payment_ref")
}

func waitRefundStatus(t *testing.T, tc client.Client, workflowID, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		var v workflows.RefundView
		q, err := tc.QueryWorkflow(ctx, workflowID, "", workflows.QueryStatus)
		return err == nil && q.Get(&v) == nil && v.Status == want
	}, 30*time.Second, 50*time.Millisecond, "refund %s never reached %q", workflowID, want)
}
