package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// Anyone who reaches Temporal (its Web UI offers a signal action, its CLI signals with JSON of their own) can send a
// saga a payment signal with the right amount. Only a payment that a verified webhook or the
// provider recorded pays: this one confirms nothing, refunds nothing (it names a real
// buyer's payment of another checkout), ends nothing, and is flagged. The checkout keeps
// waiting, and its buyer's own verified payment, before expires_at, confirms it.
func TestAPaymentSignalSentWithTheTemporalCLIDoesNotConfirm(t *testing.T) {
	t.Parallel()
	s, id := payStackWithCheckout(t, "c-forged-")
	ctx := t.Context()
	// A real payment of another buyer, which the forger names.
	victim := s.openNew(t, "c-victim-", 600)
	pi := s.fake.AddIntent(victim, "succeeded", unitPrice, "usd")
	s.sendStripe(t, s.api, stripeEvent("evt_"+victim, "payment_intent.succeeded", victim, pi, unitPrice))

	forged, _ := json.Marshal(shop.Payment{Provider: "stripe", EventID: "evt_forged", Outcome: shop.PaymentSucceeded,
		PaymentRef: pi, AmountCents: unitPrice, Currency: "usd"})
	// The JSON as `temporal workflow signal --input` or the UI's signal form sends it.
	if err := s.temporal.SignalWorkflow(ctx, shop.WorkflowID(id), "", workflows.SignalPayment, json.RawMessage(forged)); err != nil {
		t.Fatalf("signal %s: %v", workflows.SignalPayment, err)
	}

	eventually(t, "the forged signal flagged", func() (bool, string) {
		v := s.view(t, id)
		return v.NeedsAttention, fmt.Sprintf("%s, needs attention %v", v.Status, v.NeedsAttention)
	})
	if v := s.view(t, id); v.Status != shop.StatusAwaitingPayment {
		t.Errorf("after the forged signal the checkout is %s (%+v), want still awaiting_payment", v.Status, v)
	}
	if st, orders := s.pgStatus(t, id); orders != 0 || st != shop.RecordOpen {
		t.Errorf("postgres: %s with %d orders, want open with no order", st, orders)
	}
	if n := s.refundsOf(pi); n != 0 {
		t.Errorf("the victim's payment was refunded %d times", n)
	}
	eventually(t, "the victim's checkout confirmed", func() (bool, string) {
		st, orders := s.pgStatus(t, victim)
		return st == string(shop.StatusConfirmed) && orders == 1, st
	})

	// The buyer pays for real: the verified webhook confirms the checkout the signal left open.
	own := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	if code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, own, unitPrice)); code != 200 {
		t.Fatalf("the buyer's webhook: %d %s", code, status)
	}
	var v shop.View
	if err := s.temporal.GetWorkflow(ctx, shop.WorkflowID(id), "").Get(ctx, &v); err != nil {
		t.Fatal(err)
	}
	if st, orders := s.pgStatus(t, id); v.Status != shop.StatusConfirmed || st != string(shop.StatusConfirmed) || orders != 1 {
		t.Errorf("after the buyer's verified payment: saga %s (reason %v), postgres %s with %d orders; want confirmed with 1 order", v.Status, v.Reason, st, orders)
	}
	if n := s.refundsOf(own, pi); n != 0 {
		t.Errorf("%d refunds of the buyer's and the victim's payments, want none", n)
	}
}

// The runbook's way to push a late payment through (docs/support.md): the buyer paid, the
// webhook is late, and support's payment signal from the Web UI changes nothing. The
// reconciliation started as the runbook says asks Stripe, records the payment as verified, and
// the checkout confirms; the webhook, when it comes, changes nothing and refunds nothing.
func TestSupportPushesALatePaymentThroughWithReconciliation(t *testing.T) {
	t.Parallel()
	s, id := payStackWithCheckout(t, "c-push-")
	ctx := t.Context()
	pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
	if err := s.temporal.SignalWorkflow(ctx, shop.WorkflowID(id), "", workflows.SignalPayment, shop.Payment{Provider: "stripe",
		EventID: "evt_support_" + id, Outcome: shop.PaymentSucceeded, PaymentRef: pi, AmountCents: unitPrice, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "support's signal flagged", func() (bool, string) {
		v := s.view(t, id)
		return v.NeedsAttention && v.Status == shop.StatusAwaitingPayment, fmt.Sprintf("%s, needs attention %v", v.Status, v.NeedsAttention)
	})

	wfID := "reconcile-support-" + id
	// The runbook's `temporal workflow start --type ReconcilePayments --input '{...}'`, then
	// its result, through the SDK with the same JSON.
	run, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wfID, TaskQueue: "checkout"},
		"ReconcilePayments", json.RawMessage(`{"within_seconds": 86400}`))
	if err != nil {
		t.Fatalf("start ReconcilePayments: %v", err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("ReconcilePayments: %v", err)
	}

	var v shop.View
	if err := s.temporal.GetWorkflow(ctx, shop.WorkflowID(id), "").Get(ctx, &v); err != nil {
		t.Fatal(err)
	}
	if st, orders := s.pgStatus(t, id); v.Status != shop.StatusConfirmed || st != string(shop.StatusConfirmed) || orders != 1 {
		t.Fatalf("after reconciliation: saga %s, postgres %s with %d orders; want confirmed with 1 order", v.Status, st, orders)
	}
	if code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice)); code != 200 {
		t.Errorf("the late webhook: %d %s", code, status)
	}
	if _, orders := s.pgStatus(t, id); orders != 1 || s.refundsOf(pi) != 0 {
		t.Errorf("after the late webhook: %d orders, %d refunds; want 1 order, no refund", orders, s.refundsOf(pi))
	}
}
