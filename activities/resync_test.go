package activities

import (
	"testing"

	"github.com/checkout-saga/checkout-saga/steps"
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
	if err := f.confirmUnits(t.Context(), a, 2); err != nil {
		t.Fatal(err)
	}
	f.resyncMidway(func() {
		if _, err := f.actEv.ExecuteActivity(f.acts.CommitStock, steps.StockInput{CheckoutID: a, SKU: f.sku, Quantity: 2}); err != nil {
			t.Fatal(err)
		}
	})
}
