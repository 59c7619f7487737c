package workflows_test

import (
	"context"
	"testing"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// orphan records a successful payment of 10.00 USD for a checkout that does not exist (yet),
// received ageSQL ago (a Postgres interval).
func (f *fixture) orphan(checkoutID, ref, ageSQL string) {
	f.t.Helper()
	f.orphanPayment(checkoutID, shop.Payment{Provider: "stripe", EventID: "evt_" + ref, Outcome: shop.PaymentSucceeded,
		PaymentRef: ref, AmountCents: 1_000, Currency: "usd"}, ageSQL)
}

// orphanPayment records payment p for a checkout that does not exist (yet), received ageSQL
// ago, as the webhook handler records a payment no checkout has.
func (f *fixture) orphanPayment(checkoutID string, p shop.Payment, ageSQL string) {
	f.t.Helper()
	ctx := context.Background()
	ev := shop.PaymentEvent{Provider: p.Provider, EventID: p.EventID, Type: "payment_intent.succeeded",
		CheckoutID: checkoutID, PaymentRef: p.PaymentRef, AmountCents: p.AmountCents, Currency: p.Currency,
		Outcome: string(p.Outcome), Payload: []byte(`{}`)}
	if _, err := f.acts.Store.RecordPaymentEvent(ctx, ev); err != nil {
		f.t.Fatal(err)
	}
	if err := f.acts.Store.MarkPaymentEventDelivered(ctx, ev.Provider, ev.EventID, shop.DispositionOrphan); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `UPDATE payment_events SET received_at = now() - $3::interval WHERE provider = $1 AND event_id = $2`,
		ev.Provider, ev.EventID, ageSQL); err != nil {
		f.t.Fatal(err)
	}
}

// Orphan payments that no checkout claimed within OrphanRefundAfter are refunded, once; a
// young one waits for its checkout, and one whose checkout exists is that checkout's.
func TestRefundOrphansRefundsOnlyUnclaimedOldOrphans(t *testing.T) {
	f := newFixture(t)
	phone := f.sku(10, 1_000, 2)
	line := shop.Item{SKU: phone, Quantity: 1}
	claimed := input(line)
	f.orphan("never-came", "pi_old", "2 hours")
	f.orphan("", "pi_no_metadata", "3 hours")
	f.orphan("still-coming", "pi_young", "1 minute")
	f.orphan(claimed.CheckoutID, "pi_claimed", "2 hours")
	if _, err := f.acts.RecordCheckout(context.Background(), steps.RecordCheckoutInput{
		CheckoutID: claimed.CheckoutID, CustomerID: claimed.CustomerID, Items: []shop.Item{line}}); err != nil {
		t.Fatal(err)
	}

	f.env.ExecuteWorkflow(workflows.RefundOrphans, workflows.RefundOrphansInput{})
	var res workflows.RefundOrphansResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}

	got := map[string]bool{}
	for _, r := range f.refunds {
		got[r.PaymentRef] = true
	}
	if res.Refunded != 2 || !got["pi_old"] || !got["pi_no_metadata"] || len(f.refunds) != 2 {
		t.Errorf("refunded %d: %v; want pi_old and pi_no_metadata only", res.Refunded, got)
	}

	// A second sweep over the same rows refunds nothing again.
	again := newFixtureOver(t, f)
	again.env.ExecuteWorkflow(workflows.RefundOrphans, workflows.RefundOrphansInput{})
	if err := again.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if len(again.refunds) != 2 {
		// The sweep re-starts refunds whose row is not recorded yet (the mock records none):
		// the Refund workflow's id makes that harmless, so it must pick exactly those two.
		t.Errorf("second sweep refunded %d, want the same 2 (no refund row recorded by the mock)", len(again.refunds))
	}
	for _, r := range again.refunds {
		if r.PaymentRef != "pi_old" && r.PaymentRef != "pi_no_metadata" {
			t.Errorf("second sweep refunded %s", r.PaymentRef)
		}
	}
}
