package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// A checkout id Postgres never recorded reads as shop.ErrNotFound.
func TestUnknownCheckoutIsNotFound(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	if _, err := store.New(pool).Checkout(t.Context(), testenv.RandomID("c-")); !errors.Is(err, shop.ErrNotFound) {
		t.Errorf("checkout of an unknown id: err = %v, want shop.ErrNotFound", err)
	}
}

// The end of a cart that ended in the waiting room is recorded once: a later end (the cart
// put back in line by a Redis that went back in time, and refused again) finds the first, and
// a cart a saga recorded stays the saga's.
func TestARoomEndIsRecordedOnceAndNeverOverASaga(t *testing.T) {
	s, _, sku := storeWithSKU(t)
	ctx := t.Context()
	end := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: "u-1", Status: string(shop.StatusCancelled),
		Currency: "usd", AmountCents: 1000, Reason: "cancelled while waiting",
		Items: []shop.Item{{SKU: sku, Quantity: 2, UnitPriceCents: 500}}}
	if got, err := s.RecordEnd(ctx, end); err != nil || got != string(shop.StatusCancelled) {
		t.Fatalf("first end: %q %v", got, err)
	}
	again := end
	again.Status = string(shop.StatusOutOfStock)
	if got, err := s.RecordEnd(ctx, again); err != nil || got != string(shop.StatusCancelled) {
		t.Fatalf("second end: %q %v, want the first (cancelled)", got, err)
	}
	rec, err := s.Checkout(ctx, end.CheckoutID)
	if err != nil || rec.Status != string(shop.StatusCancelled) || rec.EndedAt == nil || len(rec.Items) != 1 || rec.AmountCents != 1000 {
		t.Fatalf("recorded %+v %v", rec, err)
	}

	open := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: "u-2", Currency: "usd", AmountCents: 500,
		Items: []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 500}}}
	if _, err := s.InsertCheckout(ctx, open, nil); err != nil {
		t.Fatal(err)
	}
	open.Status = string(shop.StatusOutOfStock)
	if got, err := s.RecordEnd(ctx, open); err != nil || got != shop.RecordOpen {
		t.Fatalf("end over a saga's record: %q %v, want %q", got, err, shop.RecordOpen)
	}
}

// RecordedCheckouts names the recorded checkouts among the ids it is asked about, and only
// those; an empty question is an empty answer.
func TestRecordedCheckoutsNamesOnlyRecordedOnes(t *testing.T) {
	t.Parallel()
	s, bundle := setupRecorded(t, 10)
	ctx, rec := t.Context(), bundle.rec
	recorded := rec.CheckoutID
	unknown := testenv.RandomID("c-")
	got, err := s.RecordedCheckouts(ctx, []string{unknown, recorded, recorded}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Creators[recorded]; len(got.Creators) != 1 || !ok {
		t.Errorf("RecordedCheckouts(%s, %s) = %v, want only %s", unknown, recorded, got.Creators, recorded)
	}
	if got, err := s.RecordedCheckouts(ctx, nil, nil, nil); err != nil || len(got.Creators)+len(got.SecretVersions) != 0 {
		t.Errorf("RecordedCheckouts(nil) = %+v, %v; want nothing", got, err)
	}
}

// A customer's standing counts their open checkouts, and the units of the SKUs asked about
// that their open and confirmed checkouts hold or bought: an ended checkout counts for
// neither, another customer's checkouts do not count, a SKU not asked about is absent.
func TestRecordedCheckoutsReadsEachCustomersStanding(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	s := store.New(pool)
	ctx := t.Context()
	alice, bob := testenv.RandomID("alice-"), testenv.RandomID("bob-")
	limited, other := testenv.RandomID("A-"), testenv.RandomID("B-")
	testenv.PutSKU(t, pool, limited, 100, 300, "usd")
	testenv.PutSKU(t, pool, other, 100, 300, "usd")
	record := func(customer string, qty int64) shop.CheckoutRecord {
		t.Helper()
		rec, err := s.InsertCheckout(ctx, shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: customer, Currency: "usd",
			AmountCents: 300*qty + 300, Items: []shop.Item{{SKU: limited, Quantity: qty, UnitPriceCents: 300}, {SKU: other, Quantity: 1, UnitPriceCents: 300}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	record(alice, 2)                    // open
	mustConfirm(t, s, record(alice, 1)) // confirmed: bought
	ended := record(alice, 4)
	if err := s.RecordOutcome(ctx, store.Outcome{CheckoutID: ended.CheckoutID, Status: string(shop.StatusCancelled), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	record(bob, 5)

	got, err := s.RecordedCheckouts(ctx, nil, []string{alice, testenv.RandomID("nobody-")}, []string{limited})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]shop.Standing{alice: {Open: 1, Units: map[string]int64{limited: 3}}}
	if !reflect.DeepEqual(got.Standings, want) {
		t.Errorf("standings = %+v, want %+v", got.Standings, want)
	}
}

// A room end that races the saga's record of the same cart (a cancel while the cart is
// being started from the line) answers the saga's record: the insert waits for the saga's
// uncommitted row, does nothing once it commits, and the status read after it sees that row.
func TestARoomEndRacingTheSagasRecordAnswersTheSagas(t *testing.T) {
	t.Parallel()
	s, pool, sku := storeWithSKU(t)
	ctx := t.Context()
	cart := testenv.RandomID("c-")
	tx, err := pool.Begin(ctx) // the saga's record, inserted and not yet committed
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents) VALUES ($1, 'u-1', $2, 'usd', 500)`,
		cart, shop.RecordOpen); err != nil {
		t.Fatal(err)
	}
	type result struct {
		status string
		err    error
	}
	done := testenv.Go(func() result {
		st, err := s.RecordEnd(context.WithoutCancel(ctx), shop.CheckoutRecord{CheckoutID: cart, CustomerID: "u-1",
			Status: string(shop.StatusCancelled), Reason: "cancelled while waiting", Currency: "usd", AmountCents: 500,
			Items: []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 500}}})
		return result{st, err}
	})
	testenv.Eventually(t, "the room end waits on the saga's row", func() bool {
		var waiting int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting > 0
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := testenv.Receive(t, "the room end", done); r.err != nil || r.status != shop.RecordOpen {
		t.Fatalf("RecordEnd = %q, %v; want %q (the saga recorded the cart)", r.status, r.err, shop.RecordOpen)
	}
}

// Postgres keeps the fingerprint of the request that created a checkout, whether a saga
// recorded it or it ended in the waiting room, and answers it with the record and with
// RecordedCheckouts; a second record of the cart (another request) changes nothing.
func TestACheckoutKeepsTheFingerprintOfItsCreator(t *testing.T) {
	t.Parallel()
	s, _, sku := storeWithSKU(t)
	ctx := t.Context()
	creator := shop.Fingerprint{RequestHash: "h-1", IdempotencyKey: "k-1", Caller: "customer/alice"}
	other := shop.Fingerprint{RequestHash: "h-2", IdempotencyKey: "k-2", Caller: "customer/bob"}
	items := []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 500}}

	saga := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: "alice", Currency: "usd", AmountCents: 500, Items: items, Fingerprint: creator}
	if _, err := s.InsertCheckout(ctx, saga, nil); err != nil {
		t.Fatal(err)
	}
	again := saga
	again.Fingerprint = other
	if rec, err := s.InsertCheckout(ctx, again, nil); err != nil || rec.Fingerprint != creator {
		t.Fatalf("second record of a saga's cart: fingerprint %+v, %v; want the creator's %+v", rec.Fingerprint, err, creator)
	}
	room := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: "alice", Status: string(shop.StatusCancelled),
		Currency: "usd", AmountCents: 500, Items: items, Fingerprint: creator}
	if _, err := s.RecordEnd(ctx, room); err != nil {
		t.Fatal(err)
	}
	room.Fingerprint = other
	if _, err := s.RecordEnd(ctx, room); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{saga.CheckoutID, room.CheckoutID} {
		if rec, err := s.Checkout(ctx, id); err != nil || rec.Fingerprint != creator {
			t.Errorf("checkout %s: fingerprint %+v, %v; want the creator's %+v", id, rec.Fingerprint, err, creator)
		}
	}
	got, err := s.RecordedCheckouts(ctx, []string{saga.CheckoutID, room.CheckoutID}, nil, nil)
	if err != nil || got.Creators[saga.CheckoutID] != creator || got.Creators[room.CheckoutID] != creator {
		t.Errorf("RecordedCheckouts = %+v, %v; want the creator's fingerprint for both", got.Creators, err)
	}
	// Which ended: the cart cancelled in the room did, the saga's is open.
	if got.Ended[saga.CheckoutID] || !got.Ended[room.CheckoutID] {
		t.Errorf("RecordedCheckouts' ends = %v; want the room's cart's end only", got.Ended)
	}
}

// Ending a checkout whose saga is closed routes, in the same transaction, each of its
// successful payments that no order took and no refund has to a refund, and returns them
// for their Refund workflows to start at once; a failed payment, or one a refund already
// has, is left alone. Ending it again ends and routes nothing.
func TestEndAbandonedRoutesItsSuccessfulPaymentsToRefunds(t *testing.T) {
	t.Parallel()
	s, bundle := setupRecorded(t, 5)
	ctx, rec := t.Context(), bundle.rec
	event := func(id, outcome, ref string) shop.PaymentEvent {
		return shop.PaymentEvent{Provider: "fakepay", EventID: id, Type: "payment." + outcome, CheckoutID: rec.CheckoutID,
			PaymentRef: ref, AmountCents: 300, Currency: "usd", Outcome: outcome, Payload: []byte("{}")}
	}
	for _, ev := range []shop.PaymentEvent{
		event("evt-paid", "succeeded", "pay-1"),      // recorded by a webhook, never delivered
		event("evt-declined", "failed", "pay-2"),     // a declined card: no money
		event("evt-refunded", "succeeded", "pay-3"),  // its refund is recorded already
		event("evt-delivered", "succeeded", "pay-4"), // signalled to the saga before it stopped
	} {
		if _, err := s.RecordPaymentEvent(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkPaymentEventDelivered(ctx, "fakepay", "evt-delivered", shop.DispositionSignalled); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.pool.Exec(ctx, `INSERT INTO refunds (refund_key, provider, payment_ref, checkout_id, amount_cents, currency, reason, status)
		VALUES ('fakepay:pay-3', 'fakepay', 'pay-3', $1, 300, 'usd', 'test', 'refunded')`, rec.CheckoutID); err != nil {
		t.Fatal(err)
	}

	ended, refunds, err := s.EndAbandoned(ctx, rec.CheckoutID, "its saga is terminated")
	if err != nil || !ended {
		t.Fatalf("EndAbandoned = %v, %v; want the open checkout ended", ended, err)
	}
	var refs []string
	for _, r := range refunds {
		refs = append(refs, r.PaymentRef)
		if r.CheckoutID != rec.CheckoutID || r.AmountCents != 300 || r.Currency != "usd" || r.Provider != "fakepay" {
			t.Errorf("routed to a refund: %+v, want the payment of checkout %s", r, rec.CheckoutID)
		}
	}
	slices.Sort(refs)
	if !slices.Equal(refs, []string{"pay-1", "pay-4"}) {
		t.Errorf("routed to refunds %v, want [pay-1 pay-4]", refs)
	}
	fates, err := s.PaymentFates(ctx, "fakepay", rec.CheckoutID, []string{"pay-1", "pay-4"})
	if err != nil || !slices.Equal(fates.Refunding, []string{"pay-1", "pay-4"}) {
		t.Errorf("fates after the end: %+v %v, want both refunding", fates, err)
	}
	if got, err := s.Checkout(ctx, rec.CheckoutID); err != nil || got.Status != string(shop.StatusFailed) || got.EndedAt == nil {
		t.Errorf("checkout after the end: %+v %v, want failed and ended", got, err)
	}
	if ended, refunds, err := s.EndAbandoned(ctx, rec.CheckoutID, "its saga is terminated"); err != nil || ended || len(refunds) != 0 {
		t.Errorf("EndAbandoned again = %v, %v, %v; want nothing ended or routed", ended, refunds, err)
	}
}

// storeWithSKU is a store on a fresh database with one SKU (5 on hand at 500 usd), for the
// tests of records that need a SKU to name.
func storeWithSKU(t *testing.T) (*store.Store, *pgxpool.Pool, string) {
	t.Helper()
	_, pool := testenv.Postgres(t)
	s := store.New(pool)
	sku := testenv.RandomID("SKU-")
	if err := s.CreateProduct(t.Context(), shop.Product{SKU: sku, OnHand: 5, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 5}}); err != nil {
		t.Fatal(err)
	}
	return s, pool, sku
}

// recordedBundle is what a test of one recorded checkout starts from (setupRecorded).
type recordedBundle struct {
	pool *pgxpool.Pool
	rec  shop.CheckoutRecord // one unit each of two SKUs, recorded open
}

// setupRecorded is a store on a fresh database holding one open checkout of one unit each of
// two SKUs, onHand units of each on hand.
func setupRecorded(t *testing.T, onHand int64) (*store.Store, *recordedBundle) {
	t.Helper()
	_, pool := testenv.Postgres(t)
	_, _, rec := recordCart(t, pool, onHand, onHand, 1, 1)
	return store.New(pool), &recordedBundle{pool: pool, rec: rec}
}

// The door counts a customer's open checkouts on every POST that reaches the room, and every
// checkout's record counts them against the cap. A loyal customer's history must not cost
// those counts: with 20,000 ended checkouts and one open, the count reads a few pages
// (checkouts_open_customer_idx), where through checkouts_customer_idx it read 300 or more.
func TestACustomersOpenCheckoutsAreCountedWithoutTheirHistory(t *testing.T) {
	t.Parallel()
	pool, _ := newStore(t)
	ctx := t.Context()
	customer := testenv.RandomID("u-loyal-")
	if _, err := pool.Exec(ctx, `
		INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents, ended_at)
		SELECT $1 || '-' || i, $1, CASE WHEN i = 1 THEN 'awaiting_payment' ELSE 'confirmed' END, 'usd', 100,
			CASE WHEN i = 1 THEN NULL ELSE now() END
		FROM generate_series(1, 20000) AS i`, customer); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE checkouts`); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.OpenCheckoutsSQL, []string{customer}).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var nodes []struct {
		Plan struct {
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
	}
	if err := json.Unmarshal([]byte(plan), &nodes); err != nil || len(nodes) != 1 {
		t.Fatalf("read the plan: %v\n%s", err, plan)
	}
	if pages := nodes[0].Plan.Hit + nodes[0].Plan.Read; pages > 50 {
		t.Errorf("counting one open checkout read %d pages, want a few:\n%s", pages, plan)
	}
}
