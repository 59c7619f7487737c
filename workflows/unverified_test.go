package workflows_test

import (
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A payment signal that no verified event recorded (sent from the Temporal Web UI, the CLI
// or any Temporal client) is flagged and otherwise ignored: the 201 is a promise until
// expires_at, so the saga keeps waiting, and the buyer's verified payment confirms it.

// strayThenVerified runs a phone checkout in which stray is signalled at 1 minute without any
// recorded event, and the buyer's verified payment comes at 3 minutes (12 before expires_at).
func strayThenVerified(t *testing.T, stray shop.Payment) {
	t.Helper()
	f, phone, in := phoneCheckout(t, 1)
	res := f.reserveAt(0, "req-1")
	f.env.RegisterDelayedCallback(func() {
		f.env.SignalWorkflow(workflows.SignalPayment, stray)
	}, time.Minute)
	f.payAt(3*time.Minute, paid("evt_real", 99_900))

	v := f.run(in)

	if res.View.Status != shop.StatusAwaitingPayment {
		t.Fatalf("reservation = %s, want awaiting_payment", res.View.Status)
	}
	if v.Status != shop.StatusConfirmed || f.orders(in.CheckoutID) != 1 || len(f.refunds) != 0 {
		t.Fatalf("a verified payment before expires_at after a stray %s signal ended %s (reason %q) with %d orders and %d refunds, want confirmed with 1 order and none",
			stray.Outcome, v.Status, deref(v.Reason), f.orders(in.CheckoutID), len(f.refunds))
	}
	if !v.NeedsAttention {
		t.Errorf("the stray %s signal was not flagged (NeedsAttention false)", stray.Outcome)
	}
	if lv := f.level(phone); lv.Sold != 1 || lv.Held != 0 {
		t.Errorf("phone sold %d held %d, want 1 sold, 0 held", lv.Sold, lv.Held)
	}
}

func TestAStraySucceededSignalLeavesTheCheckoutWaitingForVerifiedMoney(t *testing.T) {
	strayThenVerified(t, paid("evt_ui_typo", 99_900))
}

func TestAStrayCanceledSignalLeavesTheCheckoutWaitingForVerifiedMoney(t *testing.T) {
	stray := paid("evt_ui_cancel", 99_900)
	stray.Outcome = shop.PaymentCanceled
	strayThenVerified(t, stray)
}

// A stray failed signal is not the buyer's failed card: a checkout nobody paid expires.
func TestAStrayFailedSignalDoesNotMakeAnExpiryAPaymentFailure(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	f.reserveAt(0, "req-1")
	stray := paid("evt_ui_failed", 99_900)
	stray.Outcome = shop.PaymentFailed
	f.env.RegisterDelayedCallback(func() {
		f.env.SignalWorkflow(workflows.SignalPayment, stray)
	}, time.Minute)

	v := f.run(in)

	if v.Status != shop.StatusExpired {
		t.Fatalf("a checkout nobody paid, after a stray failed signal, ended %s (reason %q), want expired", v.Status, deref(v.Reason))
	}
	if !v.NeedsAttention {
		t.Error("the stray failed signal was not flagged (NeedsAttention false)")
	}
	if lv := f.level(phone); lv.Held != 0 || lv.Sold != 0 {
		t.Errorf("phone held %d sold %d, want both 0", lv.Held, lv.Sold)
	}
}

// A verified failed card still counts: with no payment after it, the checkout ends payment_failed.
func TestAVerifiedFailedCardStillEndsAnUnpaidCheckoutPaymentFailed(t *testing.T) {
	f, _, in := phoneCheckout(t, 1)
	f.reserveAt(0, "req-1")
	failed := paid("evt_card_declined", 99_900)
	failed.Outcome = shop.PaymentFailed
	f.payAt(time.Minute, failed)

	v := f.run(in)

	if v.Status != shop.StatusPaymentFailed {
		t.Fatalf("a verified failed card and no payment ended %s (reason %q), want payment_failed", v.Status, deref(v.Reason))
	}
	if v.NeedsAttention {
		t.Error("a verified failed card flagged the checkout")
	}
}
