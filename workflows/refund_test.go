package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The Refund workflow runs with the real RefundPayment activity and the real Stripe client,
// pointed at a local Stripe API that keeps refunds and honours idempotency keys.

func refundFixture(t *testing.T) (*fixture, *stripetest.Server, workflows.RefundInput) {
	f := newRealFixture(t)
	stripe := stripetest.New(t)
	f.acts.Payments = map[string]payments.Provider{"stripe": payments.NewStripe(stripe.Key(), payments.WithStripeAPIURL(stripe.URL()))}
	pi := stripe.AddIntent("c-late", "succeeded", 99_900, "usd")
	return f, stripe, workflows.RefundInput{CheckoutID: "c-late", CustomerID: "u-9", Provider: "stripe", PaymentRef: pi,
		EventID: "evt_late", AmountCents: 99_900, Currency: "usd", Reason: "payment arrived after the checkout was expired"}
}

func (f *fixture) refundStatus(t *testing.T, key string) string {
	var status string
	if err := f.pool.QueryRow(context.Background(), `SELECT status FROM refunds WHERE refund_key = $1`, key).Scan(&status); err != nil {
		t.Fatalf("read refund %s: %v", key, err)
	}
	return status
}

func TestRefundIssuedOnce(t *testing.T) {
	f, stripe, in := refundFixture(t)

	f.env.ExecuteWorkflow(workflows.Refund, in)
	var v workflows.RefundView
	if err := f.env.GetWorkflowResult(&v); err != nil {
		t.Fatal(err)
	}

	if v.Status != workflows.RefundRefunded || v.ProviderRefundID == "" {
		t.Fatalf("refund %+v, want refunded with the provider's id", v)
	}
	refunds := stripe.Refunds()
	if len(refunds) != 1 || refunds[0].PaymentIntent != in.PaymentRef || refunds[0].Amount != 99_900 {
		t.Errorf("stripe has refunds %+v, want one full refund of %s", refunds, in.PaymentRef)
	}
	if got := stripe.Requests()[0].Header.Get("Idempotency-Key"); got != workflows.RefundIdempotencyKey(in) {
		t.Errorf("Idempotency-Key %q, want %q", got, workflows.RefundIdempotencyKey(in))
	}
	if s := f.refundStatus(t, workflows.RefundIdempotencyKey(in)); s != workflows.RefundRefunded {
		t.Errorf("postgres records the refund as %q", s)
	}
}

func TestRefundRefusedWaitsForSupport(t *testing.T) {
	f, stripe, in := refundFixture(t)
	stripe.FailNextRefunds(stripetest.Answer{Status: 400, ErrType: "invalid_request_error", Code: "charge_disputed", Message: "Charge has been charged back."})
	var stuck workflows.RefundView
	f.env.RegisterDelayedCallback(func() {
		v, err := f.env.QueryWorkflow(workflows.QueryStatus)
		if err == nil {
			_ = v.Get(&stuck)
		}
		if s := f.refundStatus(t, workflows.RefundIdempotencyKey(in)); s != workflows.RefundStuck {
			t.Errorf("postgres records the stuck refund as %q", s)
		}
	}, time.Hour)
	retry := f.updateAt(2*time.Hour, workflows.UpdateRetry, "r1", workflows.RetryRequest{})

	f.env.ExecuteWorkflow(workflows.Refund, in)
	var v workflows.RefundView
	if err := f.env.GetWorkflowResult(&v); err != nil {
		t.Fatal(err)
	}

	if stuck.Status != workflows.RefundStuck || !strings.Contains(stuck.Attention, "charge_disputed") {
		t.Errorf("while refused: %+v, want stuck with the provider's reason", stuck)
	}
	if retry.rejected != nil || v.Status != workflows.RefundRefunded || len(stripe.Refunds()) != 1 {
		t.Errorf("after support's retry: %+v (retry %+v), stripe refunds %d; want refunded once", v, retry, len(stripe.Refunds()))
	}
}
