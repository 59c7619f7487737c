package activities

import (
	"sync"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
)

// A SKU's max_per_customer counts the customer's open and confirmed checkouts; an ended one
// gives its units back. A refused checkout is recorded as ended, with the limit as its
// reason, so a retry answers the same.
func TestRecordCheckoutEnforcesMaxPerCustomer(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	a := &Activities{Store: store.New(pool)}
	sku, other := randomID("LIM-"), randomID("FREE-")
	testenv.PutSKU(t, pool, sku, 100, 100, "usd")
	testenv.PutSKU(t, pool, other, 100, 100, "usd")
	if _, err := pool.Exec(t.Context(), `UPDATE skus SET max_per_customer = 3 WHERE sku = $1`, sku); err != nil {
		t.Fatal(err)
	}
	customer := randomID("u-")
	record := func(qty int64, skus ...string) shop.CheckoutRecord {
		t.Helper()
		in := steps.RecordCheckoutInput{CheckoutID: randomID("c-"), CustomerID: customer}
		for _, s := range skus {
			in.Items = append(in.Items, shop.Item{SKU: s, Quantity: qty})
		}
		rec, err := a.RecordCheckout(t.Context(), in)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	first := record(2, sku)
	if first.Status != shop.RecordOpen {
		t.Fatalf("first checkout of 2 (limit 3): %+v", first)
	}
	if r := record(2, sku, other); r.Status != "out_of_stock" || r.Reason != shop.RejectCustomerLimit || r.EndedAt == nil {
		t.Errorf("2 more of a SKU with 2 of 3 taken: status %q reason %q ended %v; want out_of_stock, %s, ended", r.Status, r.Reason, r.EndedAt, shop.RejectCustomerLimit)
	}
	if r := record(1, sku); r.Status != shop.RecordOpen {
		t.Errorf("the third unit: %+v, want open", r)
	}
	if r := record(5, other); r.Status != shop.RecordOpen {
		t.Errorf("a SKU without a limit: %+v, want open", r)
	}
	// An expired checkout gives its units back; a confirmed one keeps counting.
	if err := a.Store.RecordOutcome(t.Context(), store.Outcome{CheckoutID: first.CheckoutID, Status: "expired"}); err != nil {
		t.Fatal(err)
	}
	second := record(2, sku)
	if second.Status != shop.RecordOpen {
		t.Fatalf("after the first expired: %+v, want open", second)
	}
	paid := steps.ConfirmOrderInput{CheckoutID: second.CheckoutID, CustomerID: customer, Items: []shop.Item{{SKU: sku, Quantity: 2, UnitPriceCents: 100}},
		AmountCents: 200, Currency: "usd", PaymentProvider: "stripe", PaymentRef: "pi_" + second.CheckoutID}
	recordPayment(t, a, paid)
	if _, _, err := a.Store.ConfirmOrder(t.Context(), store.Order(paid)); err != nil {
		t.Fatal(err)
	}
	if r := record(1, sku); r.Status != "out_of_stock" || r.Reason != shop.RejectCustomerLimit {
		t.Errorf("a fourth unit with 2 bought and 1 open: %+v, want refused", r)
	}
	// Another customer is not affected.
	in := steps.RecordCheckoutInput{CheckoutID: randomID("c-"), CustomerID: randomID("u-"), Items: []shop.Item{{SKU: sku, Quantity: 3}}}
	if r, err := a.RecordCheckout(t.Context(), in); err != nil || r.Status != shop.RecordOpen {
		t.Errorf("another customer's 3: %+v %v, want open", r, err)
	}
}

// The per-customer count is judged one checkout at a time: a thousand concurrent checkouts
// of one customer hold exactly the limit, and the open-checkouts cap is exact too.
func TestRecordCheckoutCustomerLimitsUnderConcurrency(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	sku := randomID("LIM-")
	testenv.PutSKU(t, pool, sku, 10_000, 100, "usd")
	if _, err := pool.Exec(t.Context(), `UPDATE skus SET max_per_customer = 2 WHERE sku = $1`, sku); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		maxOpen  int
		qty      int64
		wantOpen int
		reason   string
	}{
		{"max_per_customer 2, one unit each", 0, 1, 2, shop.RejectCustomerLimit},
		{"open cap 1 under max_per_customer 2", 1, 1, 1, shop.RejectTooManyOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := store.New(pool)
			db.MaxOpenPerCustomer = tc.maxOpen
			a := &Activities{Store: db}
			customer := randomID("u-")
			var wg sync.WaitGroup
			var mu sync.Mutex
			got := map[string]int{}
			for range 1000 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rec, err := a.RecordCheckout(t.Context(), steps.RecordCheckoutInput{CheckoutID: randomID("c-"), CustomerID: customer, Items: []shop.Item{{SKU: sku, Quantity: tc.qty}}})
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						got["error: "+err.Error()]++
						return
					}
					got[rec.Status+" "+rec.Reason]++
				}()
			}
			wg.Wait()
			if got[shop.RecordOpen+" "] != tc.wantOpen || got["out_of_stock "+tc.reason] != 1000-tc.wantOpen {
				t.Errorf("1000 concurrent checkouts of one customer: %v; want %d open, the rest refused as %s", got, tc.wantOpen, tc.reason)
			}
			if n := testenv.Count(t, pool, `SELECT count(*) FROM checkouts WHERE customer_id = $1 AND ended_at IS NULL`, customer); n != int64(tc.wantOpen) {
				t.Errorf("%d open checkouts in postgres, want %d", n, tc.wantOpen)
			}
		})
	}
}
