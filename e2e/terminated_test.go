package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A saga that support terminates from the Web UI (or that the server drops at its history
// limit) never records its end. The product must still end it: the stock reconciler records
// it failed and its hold is released; a payment that arrived meanwhile is refunded once by
// the orphan sweep, and one that arrives afterwards is refunded by its webhook.
func TestATerminatedSagaIsEndedItsHoldReleasedAndItsPaymentsRefunded(t *testing.T) {
	t.Parallel()
	s := newPayStack(t)
	ctx := t.Context()
	id := "c-term-" + testenv.RandomID("")
	s.openCheckout(t, id, 600)
	if err := s.temporal.TerminateWorkflow(ctx, shop.WorkflowID(id), "", "support pressed Terminate"); err != nil {
		t.Fatal(err)
	}
	pi1 := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	if _, st := s.sendStripe(t, s.api, stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, pi1, unitPrice)); st != shop.DispositionOrphan {
		t.Fatalf("payment for the terminated saga answered %q, want orphan", st)
	}

	time.Sleep(1100 * time.Millisecond) // older than the reconciler's grace of 1 s
	res := runWorkflow[activities.ReconcileStockResult](t, s, "reconcile-stock", workflows.ReconcileStock, activities.ReconcileStockInput{GraceSeconds: 1})
	if st, orders := s.pgStatus(t, id); st != string(shop.StatusFailed) || orders != 0 {
		t.Fatalf("after the reconciler the checkout is %s with %d orders, want failed (corrections %v)", st, orders, res.Corrections)
	}
	holds, err := lua.New(testenv.Redis(t)).Holds(ctx, s.sku)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range holds {
		if h.CheckoutID == id {
			t.Fatalf("the ended checkout still holds %d x %s", h.Quantity, s.sku)
		}
	}

	swept := runWorkflow[workflows.RefundOrphansResult](t, s, "refund-orphans", workflows.RefundOrphans, workflows.RefundOrphansInput{OlderThanSeconds: 1})
	if swept.Refunded != 1 {
		t.Fatalf("the orphan sweep refunded %d payments, want the one that met the terminated saga", swept.Refunded)
	}
	if v := s.waitRefund(t, pi1); v.Status != workflows.RefundRefunded {
		t.Fatalf("refund of the first payment ended %+v, want refunded", v)
	}
	again := runWorkflow[workflows.RefundOrphansResult](t, s, "refund-orphans-again", workflows.RefundOrphans, workflows.RefundOrphansInput{OlderThanSeconds: 1})
	if again.Refunded != 0 {
		t.Fatalf("a second sweep refunded %d payments, want 0", again.Refunded)
	}

	pi2 := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	if _, st := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.succeeded", id, pi2, unitPrice)); st != shop.DispositionLate {
		t.Fatalf("payment after the end answered %q, want late_refund", st)
	}
	if v := s.waitRefund(t, pi2); v.Status != workflows.RefundRefunded {
		t.Fatalf("refund of the late payment ended %+v, want refunded", v)
	}
	if n := s.refundsOf(pi1, pi2); n != 2 {
		t.Fatalf("%d refunds of the two payments, want one each", n)
	}
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
