package e2e

import (
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// Anyone who reaches Temporal (its Web UI offers a signal action, its CLI signals) can send a
// saga a payment signal with the right amount. Only a payment that a verified webhook or the
// provider recorded pays: this one confirms nothing, refunds nothing (it names a real
// buyer's payment of another checkout), and is flagged.
func TestAPaymentSignalSentWithTheTemporalCLIDoesNotConfirm(t *testing.T) {
	t.Parallel()
	s := newPayStack(t)
	ctx := t.Context()
	id := "c-forged-" + testenv.RandomID("")
	s.openCheckout(t, id, 600)
	// A real payment of another buyer, which the forger names.
	victim := "c-victim-" + testenv.RandomID("")
	s.openCheckout(t, victim, 600)
	pi := s.fake.AddIntent(victim, "succeeded", unitPrice, "usd")
	s.sendStripe(t, s.api, stripeEvent("evt_"+victim, "payment_intent.succeeded", victim, pi, unitPrice))

	forged, _ := json.Marshal(shop.Payment{Provider: "stripe", EventID: "evt_forged", Outcome: shop.PaymentSucceeded,
		PaymentRef: pi, AmountCents: unitPrice, Currency: "usd"})
	out, err := exec.Command(testenv.TemporalCLI(t), "workflow", "signal", "--address", s.frontend,
		"--workflow-id", shop.WorkflowID(id), "--name", workflows.SignalPayment, "--input", string(forged)).CombinedOutput()
	if err != nil {
		t.Fatalf("temporal workflow signal: %v\n%s", err, out)
	}

	var v shop.View
	if err := s.temporal.GetWorkflow(ctx, shop.WorkflowID(id), "").Get(ctx, &v); err != nil {
		t.Fatal(err)
	}
	if v.Status == shop.StatusConfirmed || !v.NeedsAttention {
		t.Errorf("saga ended %s (needs attention %v), want not confirmed and flagged", v.Status, v.NeedsAttention)
	}
	if st, orders := s.pgStatus(t, id); orders != 0 || st == string(shop.StatusConfirmed) {
		t.Errorf("postgres: %s with %d orders, want no order", st, orders)
	}
	if n := s.refundsOf(pi); n != 0 {
		t.Errorf("the victim's payment was refunded %d times", n)
	}
	eventually(t, "the victim's checkout confirmed", func() (bool, string) {
		st, orders := s.pgStatus(t, victim)
		return st == string(shop.StatusConfirmed) && orders == 1, st
	})
}
