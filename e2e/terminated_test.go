package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A saga that support terminates from the Web UI (or that the server drops at its history
// limit) never records its end, and will never act again: nothing need wait for it. One run
// of the stock reconciler, with the product's own grace, ends the checkout in Postgres,
// releases its hold and starts the refund of a payment that reached Postgres meanwhile (here
// a webhook that could not reach Temporal: recorded, answered 503). The provider's retry of
// that webhook then meets the ended checkout, and the payment is still refunded once.
func TestATerminatedSagaIsSettledByOneReconcileRun(t *testing.T) {
	t.Parallel()
	s, id := payStackWithCheckout(t, "c-term-")
	ctx := t.Context()
	if !s.holds(t, id) {
		t.Fatalf("the open checkout %s holds nothing", id)
	}
	if err := s.temporal.TerminateWorkflow(ctx, shop.WorkflowID(id), "", "support pressed Terminate"); err != nil {
		t.Fatal(err)
	}
	pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	event := stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, pi, unitPrice)
	s.proxy.Cut()
	code, st := s.sendStripe(t, s.cutAPI, event)
	s.proxy.Restore()
	if code != http.StatusServiceUnavailable {
		t.Fatalf("payment through the API that cannot reach Temporal answered %d %q, want 503", code, st)
	}

	res := runWorkflow[steps.ReconcileStockResult](t, s, "reconcile-stock", workflows.ReconcileStock, steps.ReconcileStockInput{})
	if st, orders := s.pgStatus(t, id); st != string(shop.StatusFailed) || orders != 0 {
		t.Fatalf("after one reconciler run the checkout is %s with %d orders, want failed (corrections %v)", st, orders, res.Corrections)
	}
	if s.holds(t, id) {
		t.Fatalf("after one reconciler run the ended checkout still holds %s (corrections %v)", s.sku, res.Corrections)
	}
	if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
		t.Fatalf("refund of the payment ended %+v, want refunded", v)
	}

	if _, st := s.sendStripe(t, s.api, event); st != shop.DispositionLate {
		t.Fatalf("the provider's retry of the payment answered %q, want late_refund", st)
	}
	if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
		t.Fatalf("refund of the payment ended %+v, want refunded", v)
	}
	if n := s.refundsOf(pi); n != 1 {
		t.Fatalf("%d refunds of the payment, want one", n)
	}
}

// A payment webhook that meets a terminated saga settles its checkout itself: the checkout
// ends, its hold is released and the payment is refunded once, with no reconciler run. Until
// then the view does not claim that nothing is held.
func TestAWebhookThatMeetsATerminatedSagaSettlesItsCheckout(t *testing.T) {
	t.Parallel()
	s, id := payStackWithCheckout(t, "c-term-hook-")
	ctx := t.Context()
	if err := s.temporal.TerminateWorkflow(ctx, shop.WorkflowID(id), "", "support pressed Terminate"); err != nil {
		t.Fatal(err)
	}
	if v := s.view(t, id); s.holds(t, id) && v.Reason != nil && strings.Contains(*v.Reason, "nothing is held") {
		t.Errorf("the view of a terminated checkout that holds %s reads %q", s.sku, *v.Reason)
	}

	pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	if _, st := s.sendStripe(t, s.api, stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, pi, unitPrice)); st != shop.DispositionLate {
		t.Fatalf("payment for the terminated saga answered %q, want late_refund", st)
	}
	if st, orders := s.pgStatus(t, id); st != string(shop.StatusFailed) || orders != 0 {
		t.Fatalf("after the webhook the checkout is %s with %d orders, want failed", st, orders)
	}
	if s.holds(t, id) {
		t.Fatalf("after the webhook the ended checkout still holds %s", s.sku)
	}
	if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
		t.Fatalf("refund of the payment ended %+v, want refunded", v)
	}
	if n := s.refundsOf(pi); n != 1 {
		t.Fatalf("%d refunds of the payment, want one", n)
	}
	if v := s.view(t, id); v.Status != shop.StatusFailed {
		t.Fatalf("the settled checkout reads %s, want failed", v.Status)
	}
}

// holds reports whether the checkout holds the stack's SKU in Redis.
func (s *payStack) holds(t *testing.T, checkoutID string) bool {
	t.Helper()
	holds, err := lua.New(testenv.Redis(t)).Holds(t.Context(), s.sku)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range holds {
		if h.CheckoutID == checkoutID {
			return true
		}
	}
	return false
}

// runWorkflow runs one of the product's scheduled workflows once, as its Schedule would.
func runWorkflow[R any](t *testing.T, s *payStack, name string, wf, in any) R {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano()), TaskQueue: workflows.TaskQueue,
	}, wf, in)
	if err != nil {
		t.Fatal(err)
	}
	var res R
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}
