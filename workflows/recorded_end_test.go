package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// A run that chooses an end after Postgres recorded another answers the recorded end. Support
// reset a confirmed saga to a point before its payment, without the signals: the new run never
// sees the payment and its timer fires, while Postgres holds the order the first run confirmed
// and Redis the holds it committed. Here the first run's confirm is done by hand at 1 minute.
func TestARunThatEndsAfterAConfirmedOrderAnswersTheOrder(t *testing.T) {
	f, phone, in := phoneCheckout(t, 1)
	f.reserveAt(0, "req-1")
	p := paid("evt_earlier_run", 99_900)
	f.env.RegisterDelayedCallback(func() {
		ctx := context.Background()
		f.recordPayment(in.CheckoutID, p)
		rec := f.recorded(in.CheckoutID)
		if _, _, err := f.acts.Store.ConfirmOrder(ctx, store.Order{CheckoutID: in.CheckoutID, CustomerID: in.CustomerID, Items: rec.Items,
			AmountCents: rec.AmountCents, Currency: rec.Currency, PaymentProvider: p.Provider, PaymentRef: p.PaymentRef}); err != nil {
			t.Errorf("confirm the earlier run's order: %v", err)
		}
		if _, err := f.acts.CommitStock(ctx, steps.StockInput{CheckoutID: in.CheckoutID, SKU: phone, Quantity: 1}); err != nil {
			t.Errorf("commit the earlier run's hold: %v", err)
		}
	}, time.Minute)

	v := f.run(in)

	if v.Status != shop.StatusConfirmed || v.OrderID == nil || *v.OrderID != shop.OrderID(in.CheckoutID) {
		t.Fatalf("the run ended %s (order %v, reason %q), want the confirmed order Postgres records", v.Status, v.OrderID, deref(v.Reason))
	}
	if v.NeedsAttention {
		t.Error("the run was flagged: it released a hold it did not hold")
	}
	if rec := f.recorded(in.CheckoutID); rec.Status != string(shop.StatusConfirmed) {
		t.Errorf("postgres %s, want confirmed", rec.Status)
	}
	if lv := f.level(phone); lv.Sold != 1 || lv.Held != 0 || lv.Available != 9 {
		t.Errorf("phone sold %d held %d available %d, want 1, 0, 9", lv.Sold, lv.Held, lv.Available)
	}
	if len(f.refunds) != 0 {
		t.Errorf("refunds %+v, want none", f.refunds)
	}
}
