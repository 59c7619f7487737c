package activities

import (
	"testing"
)

// A resync (a reconcile under the SKU's row lock) can run while a hold's end is half done:
// Postgres already moved on_hand, Redis has not ended the hold yet. The hold's end must still
// leave available + held == on_hand. The fault suite found the first case: a reconcile
// between a confirmed order and its commit lost the order's units for good.

// resyncMidway runs ResyncStock, then checks the SKU once the hold's end finished.
func (f *recoveryFixture) resyncMidway(finish func()) {
	f.t.Helper()
	if _, err := f.acts.Store.ResyncStock(f.t.Context(), f.acts.Stock, f.sku); err != nil {
		f.t.Fatal(err)
	}
	finish()
	if v := f.level(); v.Available+v.Held != v.OnHand || v.Held != 0 {
		f.t.Errorf("after the hold's end: %+v; want available + held == on_hand and nothing held", v)
	}
}

func TestResyncBetweenConfirmAndCommitKeepsTheUnits(t *testing.T) {
	f := newRecoveryFixture(t)
	a := f.checkout(2)
	if _, _, err := f.acts.Store.confirmOrder(t.Context(), ConfirmOrderInput{CheckoutID: a, CustomerID: "u-1",
		Items: []Item{{SKU: f.sku, Quantity: 2, UnitPriceCents: 100}}, AmountCents: 200, Currency: "usd", PaymentProvider: "stripe", PaymentRef: "pi_" + a}); err != nil {
		t.Fatal(err)
	}
	f.resyncMidway(func() {
		if _, err := f.actEv.ExecuteActivity(f.acts.CommitStock, StockInput{CheckoutID: a, SKU: f.sku, Quantity: 2}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestResyncBetweenAnAppliedDecreaseAndItsCommitKeepsTheUnits(t *testing.T) {
	f := newRecoveryFixture(t)
	f.checkout(1) // an open hold beside the change
	ch := stockChange{id: newChangeID(-3), sku: f.sku, delta: -3, reason: "test decrease"}
	if err := f.inv.stage(t.Context(), ch, 5); err != nil {
		t.Fatal(err)
	}
	if applied, err := f.inv.Store.applyChange(t.Context(), ch); err != nil || !applied {
		t.Fatalf("apply: %v %v", applied, err)
	}
	f.resyncMidway(func() {
		f.inv.finish(t.Context(), ch, true)
		f.releaseAll()
	})
}

func TestResyncBeforeAnIncreaseIsAppliedKeepsTheUnits(t *testing.T) {
	for _, applied := range []bool{true, false} {
		f := newRecoveryFixture(t)
		ch := stockChange{id: newChangeID(4), sku: f.sku, delta: 4, reason: "test increase"}
		if err := f.inv.stage(t.Context(), ch, 5); err != nil {
			t.Fatal(err)
		}
		f.resyncMidway(func() {
			if applied {
				if ok, err := f.inv.Store.applyChange(t.Context(), ch); err != nil || !ok {
					t.Fatalf("apply: %v %v", ok, err)
				}
			}
			f.inv.finish(t.Context(), ch, applied)
		})
	}
}

// releaseAll ends every open checkout's hold, as their sagas would.
func (f *recoveryFixture) releaseAll() {
	f.t.Helper()
	holds, err := f.acts.Stock.Holds(f.t.Context(), f.sku)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, h := range holds {
		if _, err := f.acts.Stock.Release(f.t.Context(), f.sku, h.CheckoutID); err != nil {
			f.t.Fatal(err)
		}
	}
}
