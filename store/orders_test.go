package store_test

import (
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// recordCart stocks two SKUs and records a checkout for qa x A (300 each) and qb x B (700 each).
func recordCart(t *testing.T, pool *pgxpool.Pool, onHandA, onHandB, qa, qb int64) (skuA, skuB string, rec shop.CheckoutRecord) {
	t.Helper()
	skuA, skuB = testenv.RandomID("A-"), testenv.RandomID("B-")
	testenv.PutSKU(t, pool, skuA, onHandA, 300, "usd")
	testenv.PutSKU(t, pool, skuB, onHandB, 700, "usd")
	rec, err := store.New(pool).InsertCheckout(t.Context(), shop.CheckoutRecord{
		CheckoutID: testenv.RandomID("c-"), CustomerID: "u-2", Currency: "usd", AmountCents: qa*300 + qb*700,
		Items: []shop.Item{{SKU: skuA, Quantity: qa, UnitPriceCents: 300}, {SKU: skuB, Quantity: qb, UnitPriceCents: 700}},
	}, nil)
	if err != nil {
		t.Fatalf("record checkout: %v", err)
	}
	return skuA, skuB, rec
}

func confirmInput(rec shop.CheckoutRecord) store.Order {
	return store.Order{
		CheckoutID: rec.CheckoutID, CustomerID: rec.CustomerID, Items: rec.Items,
		AmountCents: rec.AmountCents, Currency: rec.Currency, PaymentProvider: "fakepay", PaymentRef: "pay-1",
	}
}

// verifiedEvent is the verified event a webhook records for the payment of in, which a confirm
// requires; its id is the payment's, so recording it twice records it once.
func verifiedEvent(in store.Order) shop.PaymentEvent {
	return shop.PaymentEvent{Provider: in.PaymentProvider, EventID: "evt-" + in.CheckoutID + "-" + in.PaymentRef,
		Type: "payment.succeeded", CheckoutID: in.CheckoutID, PaymentRef: in.PaymentRef, AmountCents: in.AmountCents,
		Currency: in.Currency, Outcome: string(shop.PaymentSucceeded), Payload: []byte("{}")}
}

// verify records the payment of in as verified (verifiedEvent).
func verify(t *testing.T, s *store.Store, in store.Order) {
	t.Helper()
	if _, err := s.RecordPaymentEvent(t.Context(), verifiedEvent(in)); err != nil {
		t.Fatal(err)
	}
}

// mustConfirm confirms the order of the recorded cart (confirmInput), paid by a verified
// payment, failing the test on an error; it returns the order id and whether this call
// created it.
func mustConfirm(t *testing.T, s *store.Store, rec shop.CheckoutRecord) (orderID string, created bool) {
	t.Helper()
	verify(t, s, confirmInput(rec))
	orderID, created, err := s.ConfirmOrder(t.Context(), confirmInput(rec))
	if err != nil {
		t.Fatalf("confirm order: %v", err)
	}
	return orderID, created
}

func TestConfirmOrderWritesEverythingOnce(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	skuA, skuB, rec := recordCart(t, pool, 10, 4, 3, 4)

	orderID, created := mustConfirm(t, s, rec)
	if orderID != shop.OrderID(rec.CheckoutID) || !created {
		t.Errorf("confirm = (%q, created %v), want (%q, true)", orderID, created, shop.OrderID(rec.CheckoutID))
	}

	var o struct {
		CheckoutID, CustomerID, Currency, Provider, Ref string
		Amount                                          int64
	}
	if err := pool.QueryRow(t.Context(), `
		SELECT checkout_id, customer_id, currency, payment_provider, payment_ref, amount_cents FROM orders WHERE order_id = $1`,
		orderID).Scan(&o.CheckoutID, &o.CustomerID, &o.Currency, &o.Provider, &o.Ref, &o.Amount); err != nil {
		t.Fatalf("read order %s: %v", orderID, err)
	}
	if o.CheckoutID != rec.CheckoutID || o.CustomerID != "u-2" || o.Currency != "usd" ||
		o.Provider != "fakepay" || o.Ref != "pay-1" || o.Amount != 3*300+4*700 {
		t.Errorf("order row %+v does not match the checkout %+v", o, rec)
	}
	for _, line := range []struct {
		sku          string
		q, unitPrice int64
	}{{skuA, 3, 300}, {skuB, 4, 700}} {
		var q, price int64
		if err := pool.QueryRow(t.Context(), `SELECT quantity, unit_price_cents FROM order_lines WHERE order_id = $1 AND sku = $2`,
			orderID, line.sku).Scan(&q, &price); err != nil {
			t.Fatalf("read order line %s: %v", line.sku, err)
		}
		if q != line.q || price != line.unitPrice {
			t.Errorf("order line %s = %d x %d, want %d x %d", line.sku, q, price, line.q, line.unitPrice)
		}
		var dOnHand, dSold int64
		if err := pool.QueryRow(t.Context(), `
			SELECT delta_on_hand, delta_sold FROM inventory_ledger WHERE sku = $1 AND checkout_id = $2`,
			line.sku, rec.CheckoutID).Scan(&dOnHand, &dSold); err != nil {
			t.Fatalf("read the one ledger row of %s for the checkout: %v", line.sku, err)
		}
		if dOnHand != -line.q || dSold != line.q {
			t.Errorf("ledger row for %s: delta_on_hand %d, delta_sold %d; want %d, %d", line.sku, dOnHand, dSold, -line.q, line.q)
		}
	}
	wantA := testenv.SKURow{OnHand: 7, Sold: 3, LedgerRows: 2, LedgerOnHand: 7, LedgerSold: 3}
	wantB := testenv.SKURow{OnHand: 0, Sold: 4, LedgerRows: 2, LedgerOnHand: 0, LedgerSold: 4}
	if got := testenv.ReadSKU(t, pool, skuA); got != wantA {
		t.Errorf("%s after confirm: %+v, want %+v", skuA, got, wantA)
	}
	if got := testenv.ReadSKU(t, pool, skuB); got != wantB {
		t.Errorf("%s after confirm (sells its last unit): %+v, want %+v", skuB, got, wantB)
	}
	confirmed, err := s.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if confirmed.Status != "confirmed" || confirmed.OrderID != orderID || confirmed.EndedAt == nil {
		t.Errorf("checkout after confirm: status %q, order %q, ended_at %v; want confirmed, %s, set",
			confirmed.Status, confirmed.OrderID, confirmed.EndedAt, orderID)
	}

	// A retry finds the order and changes nothing.
	again, created, err := s.ConfirmOrder(t.Context(), confirmInput(rec))
	if err != nil {
		t.Fatalf("confirm order again: %v", err)
	}
	if again != orderID || created {
		t.Errorf("second confirm = (%q, created %v), want (%q, false)", again, created, orderID)
	}
	if got := testenv.ReadSKU(t, pool, skuA); got != wantA {
		t.Errorf("%s after second confirm: %+v, want unchanged %+v", skuA, got, wantA)
	}
	if got := testenv.ReadSKU(t, pool, skuB); got != wantB {
		t.Errorf("%s after second confirm: %+v, want unchanged %+v", skuB, got, wantB)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM order_lines WHERE order_id = $1`, orderID); n != 2 {
		t.Errorf("%d order lines after second confirm, want 2", n)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM orders`); n != 1 {
		t.Errorf("%d orders after second confirm, want 1", n)
	}
	after, err := s.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if !after.EndedAt.Equal(*confirmed.EndedAt) {
		t.Errorf("second confirm moved ended_at from %v to %v", confirmed.EndedAt, after.EndedAt)
	}
}

// A confirm for another payment of a checkout whose order exists is refused, so that payment
// is refunded instead of being matched to the old order and kept (a second saga after
// retention). Before the fix it answered the old order as a success.
func TestConfirmOrderRefusesAnotherPaymentOfAConfirmedCheckout(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	skuA, _, rec := recordCart(t, pool, 10, 4, 3, 4)
	mustConfirm(t, s, rec)
	other := confirmInput(rec)
	other.PaymentRef = "pay-2"
	verify(t, s, other)
	if _, _, err := s.ConfirmOrder(t.Context(), other); !errors.Is(err, store.ErrPaidOtherwise) {
		t.Errorf("confirm with a second payment: %v, want %v", err, store.ErrPaidOtherwise)
	}
	if got := testenv.ReadSKU(t, pool, skuA); got.Sold != 3 {
		t.Errorf("%s: %+v, want the 3 units of the first order sold, nothing more", skuA, got)
	}
}

// lateRefund is the refund, in status, of payment ref of the checkout of in, as the saga asks
// for a payment that came after the checkout ended.
func lateRefund(in store.Order, ref, status string) store.Refund {
	return store.Refund{ID: "refund-" + in.CheckoutID + "-" + ref, CheckoutID: in.CheckoutID,
		Provider: in.PaymentProvider, PaymentRef: ref, AmountCents: in.AmountCents, Currency: in.Currency,
		Reason: "payment arrived after the checkout was cancelled", Status: status}
}

// Every payment is one order or one refund: a refund asked for the payment that paid an
// order is refused (ErrPaymentKept) and writes nothing, while another payment of the same
// checkout is refunded as before. (A saga's run judged the order's payment late, after an
// earlier attempt of its workflow task had confirmed the order in a local activity: the
// payment was both ordered and refunded.)
func TestARefundOfThePaymentOfAnOrderIsRefused(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	_, _, rec := recordCart(t, pool, 10, 4, 1, 1)
	mustConfirm(t, s, rec)
	in := confirmInput(rec)
	refund := func(ref, status string) error { return s.RecordRefund(t.Context(), lateRefund(in, ref, status)) }
	if err := refund(in.PaymentRef, "requested"); !errors.Is(err, store.ErrPaymentKept) {
		t.Errorf("refund of the order's payment: %v, want %v", err, store.ErrPaymentKept)
	}
	if err := refund("pay-2", "requested"); err != nil {
		t.Fatalf("refund of another payment: %v", err)
	}
	if err := refund("pay-2", "refunded"); err != nil {
		t.Fatalf("refund of another payment, refunded: %v", err)
	}
	rows := map[string]string{}
	r, err := pool.Query(t.Context(), `SELECT payment_ref, status FROM refunds WHERE checkout_id = $1`, rec.CheckoutID)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var ref, status string
		if err := r.Scan(&ref, &status); err != nil {
			t.Fatal(err)
		}
		rows[ref] = status
	}
	if want := map[string]string{"pay-2": "refunded"}; !reflect.DeepEqual(rows, want) {
		t.Errorf("refunds %v, want %v", rows, want)
	}
}

// The other order of the same race: a payment whose refund is recorded confirms no order,
// and nothing is written (the checkout stays open, its units on hand). Another payment of the
// checkout still confirms it.
func TestAConfirmWithARefundedPaymentIsRefused(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	skuA, _, rec := recordCart(t, pool, 10, 4, 1, 1)
	in := confirmInput(rec)
	verify(t, s, in)
	if err := s.RecordRefund(t.Context(), lateRefund(in, in.PaymentRef, "requested")); err != nil {
		t.Fatalf("record the refund: %v", err)
	}
	if _, _, err := s.ConfirmOrder(t.Context(), in); !errors.Is(err, store.ErrPaymentRefunded) {
		t.Fatalf("confirm with the refunded payment: %v, want %v", err, store.ErrPaymentRefunded)
	}
	var orders, onHand int64
	var status string
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM orders WHERE checkout_id = $1),
		(SELECT status FROM checkouts WHERE checkout_id = $1), (SELECT on_hand FROM skus WHERE sku = $2)`,
		rec.CheckoutID, skuA).Scan(&orders, &status, &onHand); err != nil {
		t.Fatal(err)
	}
	if orders != 0 || status == string(shop.StatusConfirmed) || onHand != 10 {
		t.Errorf("after the refused confirm: %d orders, status %s, %d on hand; want none, not confirmed, 10", orders, status, onHand)
	}
	other := in
	other.PaymentRef = "pay-2"
	verify(t, s, other)
	if _, created, err := s.ConfirmOrder(t.Context(), other); err != nil || !created {
		t.Fatalf("confirm with another payment: created %v, %v", created, err)
	}
}

// Only verified money pays, whoever asks the store: a payment no verified event recorded,
// or one recorded for another checkout, amount, currency, provider or outcome, confirms
// nothing, even a retry of a confirmed checkout; the payment once recorded confirms.
func TestConfirmOrderConfirmsOnlyAVerifiedPayment(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	skuA, _, rec := recordCart(t, pool, 10, 10, 1, 1)
	in := confirmInput(rec)
	near := map[string]func(*shop.PaymentEvent){
		"another checkout": func(ev *shop.PaymentEvent) { ev.CheckoutID = "c-someone-else" },
		"a lower amount":   func(ev *shop.PaymentEvent) { ev.AmountCents-- },
		"a higher amount":  func(ev *shop.PaymentEvent) { ev.AmountCents++ },
		"another currency": func(ev *shop.PaymentEvent) { ev.Currency = "eur" },
		"another provider": func(ev *shop.PaymentEvent) { ev.Provider = "acme" },
		"a failed payment": func(ev *shop.PaymentEvent) { ev.Outcome = string(shop.PaymentFailed) },
	}
	for name, change := range near {
		ev := verifiedEvent(in)
		ev.EventID += "-" + name
		change(&ev)
		if _, err := s.RecordPaymentEvent(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.ConfirmOrder(t.Context(), in); !errors.Is(err, store.ErrUnverifiedPayment) {
		t.Fatalf("confirm with %d events near the payment but none of it: %v, want ErrUnverifiedPayment", len(near), err)
	}
	if got := testenv.ReadSKU(t, pool, skuA); got.Sold != 0 || got.LedgerRows != 1 {
		t.Errorf("%s after an unverified confirm: %+v, want nothing sold", skuA, got)
	}
	if c, err := s.Checkout(t.Context(), rec.CheckoutID); err != nil || c.Status == "confirmed" {
		t.Errorf("checkout after an unverified confirm: %+v %v, want it open", c, err)
	}

	mustConfirm(t, s, rec) // records the payment, then confirms
	forged := in
	forged.PaymentRef = "pay-forged"
	if _, _, err := s.ConfirmOrder(t.Context(), forged); !errors.Is(err, store.ErrUnverifiedPayment) {
		t.Errorf("confirm of the confirmed checkout with an unrecorded payment: %v, want ErrUnverifiedPayment", err)
	}
	if got := testenv.ReadSKU(t, pool, skuA); got.Sold != 1 {
		t.Errorf("%s: %+v, want the one unit sold", skuA, got)
	}
}

func TestConfirmOrderRollsBackWhenOneLineIsShort(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	// A is processed first and has plenty; B has 1 on hand for a line of 2.
	skuA, skuB, rec := recordCart(t, pool, 10, 1, 2, 2)
	beforeA, beforeB := testenv.ReadSKU(t, pool, skuA), testenv.ReadSKU(t, pool, skuB)

	verify(t, s, confirmInput(rec))
	_, created, err := s.ConfirmOrder(t.Context(), confirmInput(rec))
	if !errors.Is(err, store.ErrInsufficientOnHand) {
		t.Fatalf("confirm with a short line: err = %v, want store.ErrInsufficientOnHand", err)
	}
	if created {
		t.Errorf("confirm that failed says created")
	}
	if got := testenv.ReadSKU(t, pool, skuA); got != beforeA {
		t.Errorf("%s after rolled-back confirm: %+v, want unchanged %+v", skuA, got, beforeA)
	}
	if got := testenv.ReadSKU(t, pool, skuB); got != beforeB {
		t.Errorf("%s after rolled-back confirm: %+v, want unchanged %+v", skuB, got, beforeB)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM orders`); n != 0 {
		t.Errorf("%d orders after rolled-back confirm, want 0", n)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM order_lines`); n != 0 {
		t.Errorf("%d order lines after rolled-back confirm, want 0", n)
	}
	if n := testenv.Count(t, pool, `SELECT count(*) FROM inventory_ledger WHERE checkout_id = $1`, rec.CheckoutID); n != 0 {
		t.Errorf("%d ledger rows for the checkout after rolled-back confirm, want 0", n)
	}
	if c, err := s.Checkout(t.Context(), rec.CheckoutID); err != nil || c.Status != shop.RecordOpen || c.EndedAt != nil {
		t.Errorf("checkout after rolled-back confirm: %+v, %v; want still open", c, err)
	}
}

func TestRecordOutcomeKeepsTheFirstEnd(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	_, _, rec := recordCart(t, pool, 10, 10, 1, 1)

	if err := s.RecordOutcome(t.Context(), store.Outcome{CheckoutID: rec.CheckoutID, Status: "expired", Reason: "payment timed out"}); err != nil {
		t.Fatalf("record expired: %v", err)
	}
	expired, err := s.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if expired.Status != "expired" || expired.Reason != "payment timed out" || expired.EndedAt == nil {
		t.Fatalf("after expiry: status %q, reason %q, ended_at %v", expired.Status, expired.Reason, expired.EndedAt)
	}
	for _, late := range []store.Outcome{
		{CheckoutID: rec.CheckoutID, Status: "expired", Reason: "payment timed out"},
		{CheckoutID: rec.CheckoutID, Status: "cancelled", Reason: "customer cancelled"},
	} {
		if err := s.RecordOutcome(t.Context(), late); err != nil {
			t.Fatalf("record %s: %v", late.Status, err)
		}
		got, err := s.Checkout(t.Context(), rec.CheckoutID)
		if err != nil {
			t.Fatalf("read checkout: %v", err)
		}
		if got.Status != "expired" || got.Reason != "payment timed out" || !got.EndedAt.Equal(*expired.EndedAt) {
			t.Errorf("after a late %s: status %q, reason %q, ended_at %v; want the first end kept (expired at %v)",
				late.Status, got.Status, got.Reason, got.EndedAt, expired.EndedAt)
		}
	}
}

func TestRecordOutcomeLeavesConfirmedCheckout(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	_, _, rec := recordCart(t, pool, 10, 10, 1, 1)
	orderID, _ := mustConfirm(t, s, rec)
	before, err := s.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if err := s.RecordOutcome(t.Context(), store.Outcome{CheckoutID: rec.CheckoutID, Status: "cancelled", Reason: "late cancel"}); err != nil {
		t.Fatalf("record cancelled: %v", err)
	}
	got, err := s.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if got.Status != "confirmed" || got.OrderID != orderID || got.Reason != "" || !got.EndedAt.Equal(*before.EndedAt) {
		t.Errorf("confirmed checkout after a late cancel: status %q, order %q, reason %q, ended_at %v; want it untouched",
			got.Status, got.OrderID, got.Reason, got.EndedAt)
	}
}

// A confirm races its own retries, a confirm for another payment and the checkout's end
// (support ending a checkout whose saga is gone as a retried confirm arrives), in many
// schedules. Whatever the order, the checkout ends once: either confirmed, with one order
// for one of the two payments, its units sold once and every call for that payment answered
// with the order, or ended by the end that says so, with nothing written and every confirm
// refused as ErrCheckoutEnded.
func TestAConfirmRacingItsRetriesAnotherPaymentAndTheEndEndsOnce(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	for round := range 40 {
		skuA, skuB, rec := recordCart(t, pool, 10, 10, 2, 1)
		first, second := confirmInput(rec), confirmInput(rec)
		second.PaymentRef = "pay-2"
		verify(t, s, first)
		verify(t, s, second)
		calls := []store.Order{first, first, first, second}
		type answer struct {
			orderID string
			created bool
			err     error
		}
		answers := make([]answer, len(calls))
		var wg sync.WaitGroup
		for i, in := range calls {
			wg.Go(func() {
				orderID, created, err := s.ConfirmOrder(t.Context(), in)
				answers[i] = answer{orderID, created, err}
			})
		}
		var ended bool
		wg.Go(func() {
			var err error
			if ended, _, err = s.EndAbandoned(t.Context(), rec.CheckoutID, "its saga is gone"); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()

		got, err := s.Checkout(t.Context(), rec.CheckoutID)
		if err != nil {
			t.Fatal(err)
		}
		a, b := testenv.ReadSKU(t, pool, skuA), testenv.ReadSKU(t, pool, skuB)
		orders := testenv.Count(t, pool, `SELECT count(*) FROM orders WHERE checkout_id = $1`, rec.CheckoutID)
		lines := testenv.Count(t, pool, `SELECT count(*) FROM order_lines WHERE order_id = $1`, shop.OrderID(rec.CheckoutID))
		if ended != (got.Status == "failed") {
			t.Errorf("round %d: the end reported it ended the checkout: %v; the checkout is %s", round, ended, got.Status)
		}
		switch got.Status {
		case "confirmed":
			won := got.PaymentRef
			createdOnce := 0
			for i, ans := range answers {
				switch {
				case calls[i].PaymentRef == won && (ans.err != nil || ans.orderID != got.OrderID):
					t.Errorf("round %d: a confirm for the paying %s answered (%q, %v), want the order %s", round, won, ans.orderID, ans.err, got.OrderID)
				case calls[i].PaymentRef != won && !errors.Is(ans.err, store.ErrPaidOtherwise):
					t.Errorf("round %d: a confirm for %s, not the one that paid, answered (%q, %v), want ErrPaidOtherwise", round, calls[i].PaymentRef, ans.orderID, ans.err)
				}
				if ans.created {
					createdOnce++
				}
			}
			if createdOnce != 1 || orders != 1 || lines != 2 || a.Sold != 2 || b.Sold != 1 || a.LedgerRows != 2 || b.LedgerRows != 2 {
				t.Errorf("round %d: confirmed with %d calls creating the order, %d orders, %d lines, %s %+v, %s %+v; want 1, 1, 2, 2 and 1 sold, one ledger row each",
					round, createdOnce, orders, lines, skuA, a, skuB, b)
			}
		case "failed":
			for i, ans := range answers {
				if !errors.Is(ans.err, store.ErrCheckoutEnded) {
					t.Errorf("round %d: a confirm for %s of an ended checkout answered (%q, %v), want ErrCheckoutEnded", round, calls[i].PaymentRef, ans.orderID, ans.err)
				}
			}
			if orders != 0 || lines != 0 || a.Sold != 0 || b.Sold != 0 || a.LedgerRows != 1 || b.LedgerRows != 1 {
				t.Errorf("round %d: ended with %d orders, %d lines, %s %+v, %s %+v; want nothing written", round, orders, lines, skuA, a, skuB, b)
			}
		default:
			t.Errorf("round %d: the checkout ended %q, want confirmed or failed", round, got.Status)
		}
	}
}

// A run that ends a checkout Postgres already holds as confirmed learns that end, with its
// order; the end it recorded itself is answered as nil.
func TestRecordOutcomeOrEarlierAnswersTheEndThatStands(t *testing.T) {
	t.Parallel()
	pool, s := newStore(t)
	_, _, rec := recordCart(t, pool, 10, 10, 1, 1)
	orderID, _ := mustConfirm(t, s, rec)
	earlier, err := s.RecordOutcomeOrEarlier(t.Context(), store.Outcome{CheckoutID: rec.CheckoutID, Status: "payment_failed", Reason: "reset run"})
	if err != nil || earlier == nil || earlier.Status != string(shop.StatusConfirmed) || earlier.OrderID != orderID {
		t.Fatalf("record payment_failed of a confirmed checkout: %+v, %v; want the confirmed end with order %s", earlier, err, orderID)
	}
	_, _, open := recordCart(t, pool, 10, 10, 1, 1)
	if earlier, err := s.RecordOutcomeOrEarlier(t.Context(), store.Outcome{CheckoutID: open.CheckoutID, Status: "expired"}); err != nil || earlier != nil {
		t.Errorf("record expired of an open checkout: %+v, %v; want nil (recorded)", earlier, err)
	}
	if earlier, err := s.RecordOutcomeOrEarlier(t.Context(), store.Outcome{CheckoutID: "c-never-recorded", Status: "failed"}); err != nil || earlier != nil {
		t.Errorf("record failed of an unknown checkout: %+v, %v; want nil", earlier, err)
	}
}
