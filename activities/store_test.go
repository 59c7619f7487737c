package activities

// These tests run the store's SQL against a real Postgres (a fresh, migrated database per
// test) and Inventory against a real Redis. They are an internal test so they can reach
// confirmOrder, recordOutcome and setProduct directly.
//
// They cannot use internal/testenv: testenv imports workflows, which imports activities,
// and Go refuses that cycle in an internal test. testDB and testRedis below mirror
// testenv.Postgres and testenv.Redis, with the same environment variables and defaults.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
)

// The activities' tests use the same real services as every other package (internal/testenv).
func randomID(prefix string) string { return testenv.RandomID(prefix) }

func testDB(t *testing.T) *pgxpool.Pool {
	_, pool := testenv.Postgres(t)
	return pool
}

func testRedis(t *testing.T) *redis.Client { return testenv.Redis(t) }

// stock writes a SKU to Postgres only, with the ledger row an operator's change writes, so
// sum(delta_on_hand) == on_hand holds from the start.
func stock(t *testing.T, pool *pgxpool.Pool, sku string, onHand, priceCents int64, currency string) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var old int64
		_ = tx.QueryRow(t.Context(), `SELECT on_hand FROM skus WHERE sku = $1`, sku).Scan(&old)
		if _, err := tx.Exec(t.Context(), `
			INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order) VALUES ($1, $2, $3, $4, 5)
			ON CONFLICT (sku) DO UPDATE SET on_hand = $2, price_cents = $3, currency = $4`,
			sku, onHand, priceCents, currency); err != nil {
			return err
		}
		if onHand == old {
			return nil
		}
		_, err := tx.Exec(t.Context(), `INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) VALUES ($1, $2, 0, 'stock set by operator')`, sku, onHand-old)
		return err
	})
	if err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
}

type skuState struct {
	OnHand, Sold             int64
	LedgerRows               int64
	LedgerOnHand, LedgerSold int64
}

func readSKU(t *testing.T, pool *pgxpool.Pool, sku string) skuState {
	t.Helper()
	var s skuState
	err := pool.QueryRow(t.Context(), `
		SELECT s.on_hand, s.sold,
			(SELECT count(*) FROM inventory_ledger l WHERE l.sku = s.sku),
			(SELECT coalesce(sum(delta_on_hand), 0) FROM inventory_ledger l WHERE l.sku = s.sku),
			(SELECT coalesce(sum(delta_sold), 0) FROM inventory_ledger l WHERE l.sku = s.sku)
		FROM skus s WHERE s.sku = $1`, sku).
		Scan(&s.OnHand, &s.Sold, &s.LedgerRows, &s.LedgerOnHand, &s.LedgerSold)
	if err != nil {
		t.Fatalf("read sku %s: %v", sku, err)
	}
	return s
}

func count(t *testing.T, pool *pgxpool.Pool, query string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(t.Context(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func requireAppError(t *testing.T, err error, wantType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("error = %v (%T), want a temporal ApplicationError of type %s", err, err, wantType)
	}
	if appErr.Type() != wantType {
		t.Errorf("error type = %q, want %q (error: %v)", appErr.Type(), wantType, err)
	}
	if !appErr.NonRetryable() {
		t.Errorf("error %v is retryable, want non-retryable", err)
	}
}

func TestRecordCheckoutPricesFromCatalogOnce(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	a := &Activities{Store: store}
	skuA, skuB := randomID("A-"), randomID("B-")
	stock(t, pool, skuA, 10, 250, "usd")
	stock(t, pool, skuB, 10, 1000, "usd")

	in := RecordCheckoutInput{
		CheckoutID: randomID("c-"),
		CustomerID: "u-1",
		// The client's prices are ignored: the catalog prices the cart.
		Items: []Item{{SKU: skuA, Quantity: 3, UnitPriceCents: 1}, {SKU: skuB, Quantity: 1, UnitPriceCents: 1}},
	}
	first, err := a.RecordCheckout(t.Context(), in)
	if err != nil {
		t.Fatalf("record checkout: %v", err)
	}
	if first.CheckoutID != in.CheckoutID || first.CustomerID != "u-1" || first.Status != StatusOpen ||
		first.Currency != "usd" || first.AmountCents != 3*250+1000 {
		t.Errorf("recorded %+v; want checkout %s of u-1, status open, usd, 1750 cents", first, in.CheckoutID)
	}
	wantItems := map[string]Item{
		skuA: {SKU: skuA, Quantity: 3, UnitPriceCents: 250},
		skuB: {SKU: skuB, Quantity: 1, UnitPriceCents: 1000},
	}
	if len(first.Items) != len(wantItems) {
		t.Fatalf("recorded items %+v, want %+v", first.Items, wantItems)
	}
	for _, it := range first.Items {
		if it != wantItems[it.SKU] {
			t.Errorf("recorded item %+v, want %+v", it, wantItems[it.SKU])
		}
	}
	if first.EndedAt != nil || first.OrderID != "" || first.CreatedAt.IsZero() {
		t.Errorf("new checkout has ended_at %v, order %q, created_at %v", first.EndedAt, first.OrderID, first.CreatedAt)
	}

	// A retry after the price changed still sees the cart as first recorded.
	stock(t, pool, skuA, 10, 999, "usd")
	again, err := a.RecordCheckout(t.Context(), in)
	if err != nil {
		t.Fatalf("record checkout again: %v", err)
	}
	if again.AmountCents != first.AmountCents || !again.CreatedAt.Equal(first.CreatedAt) ||
		fmt.Sprint(again.Items) != fmt.Sprint(first.Items) {
		t.Errorf("second record = %+v, want the first %+v", again, first)
	}
	if n := count(t, pool, `SELECT count(*) FROM checkouts WHERE checkout_id = $1`, in.CheckoutID); n != 1 {
		t.Errorf("%d checkout rows, want 1", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM checkout_items WHERE checkout_id = $1`, in.CheckoutID); n != 2 {
		t.Errorf("%d checkout item rows, want 2", n)
	}
}

func TestRecordCheckoutRefusesUnknownSKUAndMixedCurrency(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	a := &Activities{Store: store}
	usd, eur := randomID("USD-"), randomID("EUR-")
	stock(t, pool, usd, 10, 100, "usd")
	stock(t, pool, eur, 10, 100, "eur")

	tests := []struct {
		name     string
		items    []Item
		wantType string
	}{
		{"unknown sku", []Item{{SKU: usd, Quantity: 1}, {SKU: randomID("NOPE-"), Quantity: 1}}, ErrTypeUnknownSKU},
		{"mixed currency", []Item{{SKU: usd, Quantity: 1}, {SKU: eur, Quantity: 1}}, ErrTypeMixedCurrency},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := randomID("c-")
			_, err := a.RecordCheckout(t.Context(), RecordCheckoutInput{CheckoutID: id, CustomerID: "u-1", Items: tt.items})
			requireAppError(t, err, tt.wantType)
			if _, err := store.Checkout(t.Context(), id); !errors.Is(err, ErrNotFound) {
				t.Errorf("refused checkout was recorded: read it back with err %v, want ErrNotFound", err)
			}
		})
	}
}

// recordCart stocks two SKUs and records a checkout for qa x A and qb x B.
func recordCart(t *testing.T, pool *pgxpool.Pool, onHandA, onHandB, qa, qb int64) (skuA, skuB string, rec CheckoutRecord) {
	t.Helper()
	skuA, skuB = randomID("A-"), randomID("B-")
	stock(t, pool, skuA, onHandA, 300, "usd")
	stock(t, pool, skuB, onHandB, 700, "usd")
	rec, err := (&Activities{Store: NewStore(pool)}).RecordCheckout(t.Context(), RecordCheckoutInput{
		CheckoutID: randomID("c-"), CustomerID: "u-2",
		Items: []Item{{SKU: skuA, Quantity: qa}, {SKU: skuB, Quantity: qb}},
	})
	if err != nil {
		t.Fatalf("record checkout: %v", err)
	}
	return skuA, skuB, rec
}

func confirmInput(rec CheckoutRecord) ConfirmOrderInput {
	return ConfirmOrderInput{
		CheckoutID: rec.CheckoutID, CustomerID: rec.CustomerID, Items: rec.Items,
		AmountCents: rec.AmountCents, Currency: rec.Currency, PaymentProvider: "fakepay", PaymentRef: "pay-1",
	}
}

func TestConfirmOrderWritesEverythingOnce(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	skuA, skuB, rec := recordCart(t, pool, 10, 4, 3, 4)

	orderID, created, err := store.confirmOrder(t.Context(), confirmInput(rec))
	if err != nil {
		t.Fatalf("confirm order: %v", err)
	}
	if orderID != OrderID(rec.CheckoutID) || !created {
		t.Errorf("confirm = (%q, created %v), want (%q, true)", orderID, created, OrderID(rec.CheckoutID))
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
	wantA := skuState{OnHand: 7, Sold: 3, LedgerRows: 2, LedgerOnHand: 7, LedgerSold: 3}
	wantB := skuState{OnHand: 0, Sold: 4, LedgerRows: 2, LedgerOnHand: 0, LedgerSold: 4}
	if got := readSKU(t, pool, skuA); got != wantA {
		t.Errorf("%s after confirm: %+v, want %+v", skuA, got, wantA)
	}
	if got := readSKU(t, pool, skuB); got != wantB {
		t.Errorf("%s after confirm (sells its last unit): %+v, want %+v", skuB, got, wantB)
	}
	confirmed, err := store.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if confirmed.Status != "confirmed" || confirmed.OrderID != orderID || confirmed.EndedAt == nil {
		t.Errorf("checkout after confirm: status %q, order %q, ended_at %v; want confirmed, %s, set",
			confirmed.Status, confirmed.OrderID, confirmed.EndedAt, orderID)
	}

	// A retry finds the order and changes nothing.
	again, created, err := store.confirmOrder(t.Context(), confirmInput(rec))
	if err != nil {
		t.Fatalf("confirm order again: %v", err)
	}
	if again != orderID || created {
		t.Errorf("second confirm = (%q, created %v), want (%q, false)", again, created, orderID)
	}
	if got := readSKU(t, pool, skuA); got != wantA {
		t.Errorf("%s after second confirm: %+v, want unchanged %+v", skuA, got, wantA)
	}
	if got := readSKU(t, pool, skuB); got != wantB {
		t.Errorf("%s after second confirm: %+v, want unchanged %+v", skuB, got, wantB)
	}
	if n := count(t, pool, `SELECT count(*) FROM order_lines WHERE order_id = $1`, orderID); n != 2 {
		t.Errorf("%d order lines after second confirm, want 2", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM orders`); n != 1 {
		t.Errorf("%d orders after second confirm, want 1", n)
	}
	after, err := store.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if !after.EndedAt.Equal(*confirmed.EndedAt) {
		t.Errorf("second confirm moved ended_at from %v to %v", confirmed.EndedAt, after.EndedAt)
	}
}

// A confirm for another payment of a checkout whose order exists is refused, so that payment
// is refunded instead of being matched to the old order and kept (issue 9, defect 2: a
// second saga after retention). Before the fix it answered the old order as a success.
func TestConfirmOrderRefusesAnotherPaymentOfAConfirmedCheckout(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	skuA, _, rec := recordCart(t, pool, 10, 4, 3, 4)
	if _, _, err := store.confirmOrder(t.Context(), confirmInput(rec)); err != nil {
		t.Fatalf("confirm order: %v", err)
	}
	other := confirmInput(rec)
	other.PaymentRef = "pay-2"
	if _, _, err := store.confirmOrder(t.Context(), other); !errors.Is(err, errPaidOtherwise) {
		t.Errorf("confirm with a second payment: %v, want %v", err, errPaidOtherwise)
	}
	if got := readSKU(t, pool, skuA); got.Sold != 3 {
		t.Errorf("%s: %+v, want the 3 units of the first order sold, nothing more", skuA, got)
	}
}

func TestConfirmOrderRollsBackWhenOneLineIsShort(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	// A is processed first and has plenty; B has 1 on hand for a line of 2.
	skuA, skuB, rec := recordCart(t, pool, 10, 1, 2, 2)
	beforeA, beforeB := readSKU(t, pool, skuA), readSKU(t, pool, skuB)

	_, created, err := store.confirmOrder(t.Context(), confirmInput(rec))
	if !errors.Is(err, errInsufficientOnHand) {
		t.Fatalf("confirm with a short line: err = %v, want errInsufficientOnHand", err)
	}
	if created {
		t.Errorf("confirm that failed says created")
	}
	if got := readSKU(t, pool, skuA); got != beforeA {
		t.Errorf("%s after rolled-back confirm: %+v, want unchanged %+v", skuA, got, beforeA)
	}
	if got := readSKU(t, pool, skuB); got != beforeB {
		t.Errorf("%s after rolled-back confirm: %+v, want unchanged %+v", skuB, got, beforeB)
	}
	if n := count(t, pool, `SELECT count(*) FROM orders`); n != 0 {
		t.Errorf("%d orders after rolled-back confirm, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM order_lines`); n != 0 {
		t.Errorf("%d order lines after rolled-back confirm, want 0", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM inventory_ledger WHERE checkout_id = $1`, rec.CheckoutID); n != 0 {
		t.Errorf("%d ledger rows for the checkout after rolled-back confirm, want 0", n)
	}
	if c, err := store.Checkout(t.Context(), rec.CheckoutID); err != nil || c.Status != StatusOpen || c.EndedAt != nil {
		t.Errorf("checkout after rolled-back confirm: %+v, %v; want still open", c, err)
	}

	// The activity turns the mismatch into a "no" the workflow can branch on. It returns
	// before activity.GetLogger on this path, so it runs outside a worker.
	_, err = (&Activities{Store: store}).ConfirmOrder(t.Context(), confirmInput(rec))
	requireAppError(t, err, ErrTypeStockMismatch)
}

func TestRecordOutcomeKeepsTheFirstEnd(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	_, _, rec := recordCart(t, pool, 10, 10, 1, 1)

	if err := store.recordOutcome(t.Context(), RecordOutcomeInput{CheckoutID: rec.CheckoutID, Status: "expired", Reason: "payment timed out"}); err != nil {
		t.Fatalf("record expired: %v", err)
	}
	expired, err := store.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if expired.Status != "expired" || expired.Reason != "payment timed out" || expired.EndedAt == nil {
		t.Fatalf("after expiry: status %q, reason %q, ended_at %v", expired.Status, expired.Reason, expired.EndedAt)
	}
	for _, late := range []RecordOutcomeInput{
		{CheckoutID: rec.CheckoutID, Status: "expired", Reason: "payment timed out"},
		{CheckoutID: rec.CheckoutID, Status: "cancelled", Reason: "customer cancelled"},
	} {
		if err := store.recordOutcome(t.Context(), late); err != nil {
			t.Fatalf("record %s: %v", late.Status, err)
		}
		got, err := store.Checkout(t.Context(), rec.CheckoutID)
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
	pool := testDB(t)
	store := NewStore(pool)
	_, _, rec := recordCart(t, pool, 10, 10, 1, 1)
	orderID, _, err := store.confirmOrder(t.Context(), confirmInput(rec))
	if err != nil {
		t.Fatalf("confirm order: %v", err)
	}
	before, err := store.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if err := store.recordOutcome(t.Context(), RecordOutcomeInput{CheckoutID: rec.CheckoutID, Status: "cancelled", Reason: "late cancel"}); err != nil {
		t.Fatalf("record cancelled: %v", err)
	}
	got, err := store.Checkout(t.Context(), rec.CheckoutID)
	if err != nil {
		t.Fatalf("read checkout: %v", err)
	}
	if got.Status != "confirmed" || got.OrderID != orderID || got.Reason != "" || !got.EndedAt.Equal(*before.EndedAt) {
		t.Errorf("confirmed checkout after a late cancel: status %q, order %q, reason %q, ended_at %v; want it untouched",
			got.Status, got.OrderID, got.Reason, got.EndedAt)
	}
}

func TestLedgerIsAppendOnly(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	sku := randomID("L-")
	stock(t, pool, sku, 5, 100, "usd")
	var id int64
	if err := pool.QueryRow(t.Context(), `SELECT id FROM inventory_ledger WHERE sku = $1`, sku).Scan(&id); err != nil {
		t.Fatalf("read ledger row: %v", err)
	}

	for _, tt := range []struct{ op, sql string }{
		{"UPDATE", `UPDATE inventory_ledger SET delta_on_hand = 500 WHERE id = $1`},
		{"DELETE", `DELETE FROM inventory_ledger WHERE id = $1`},
	} {
		_, err := pool.Exec(t.Context(), tt.sql, id)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Fatalf("%s on the ledger: err = %v, want a Postgres error", tt.op, err)
		}
		if want := "inventory_ledger is append-only: " + tt.op + " refused"; pgErr.Message != want {
			t.Errorf("%s on the ledger: %q, want %q", tt.op, pgErr.Message, want)
		}
	}
	if got := readSKU(t, pool, sku); got.LedgerRows != 1 || got.LedgerOnHand != 5 {
		t.Errorf("ledger after refused UPDATE and DELETE: %+v, want the one row with delta 5", got)
	}
}

func TestRecordPaymentEventOnceAndDeliveredOnce(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	ev := PaymentEvent{
		Provider: "fakepay", EventID: randomID("evt-"), Type: "payment.succeeded",
		CheckoutID: "c-1", PaymentRef: "pay-1", AmountCents: 1750, Currency: "usd",
		Payload: []byte(`{"id":"evt"}`),
	}
	check := func(step string, want RecordedEvent) {
		t.Helper()
		got, err := store.RecordPaymentEvent(t.Context(), ev)
		if err != nil {
			t.Fatalf("%s: record event: %v", step, err)
		}
		if got != want {
			t.Errorf("%s: recorded %+v, want %+v", step, got, want)
		}
	}
	disposition := func() (string, *time.Time) {
		t.Helper()
		var d string
		var at *time.Time
		if err := pool.QueryRow(t.Context(), `SELECT disposition, delivered_at FROM payment_events WHERE provider = $1 AND event_id = $2`,
			ev.Provider, ev.EventID).Scan(&d, &at); err != nil {
			t.Fatalf("read event: %v", err)
		}
		return d, at
	}

	check("first", RecordedEvent{New: true})
	check("redelivered before delivery", RecordedEvent{New: false, Delivered: false})
	if d, at := disposition(); d != "pending" || at != nil {
		t.Errorf("undelivered event: disposition %q, delivered_at %v; want pending, null", d, at)
	}
	if err := store.MarkPaymentEventDelivered(t.Context(), ev.Provider, ev.EventID, DispositionSignalled); err != nil {
		t.Fatalf("mark delivered: %v", err)
	}
	check("redelivered after delivery", RecordedEvent{New: false, Delivered: true})
	d1, at1 := disposition()
	if d1 != DispositionSignalled || at1 == nil {
		t.Fatalf("delivered event: disposition %q, delivered_at %v; want %s, set", d1, at1, DispositionSignalled)
	}
	if err := store.MarkPaymentEventDelivered(t.Context(), ev.Provider, ev.EventID, DispositionLate); err != nil {
		t.Fatalf("mark delivered again: %v", err)
	}
	if d2, at2 := disposition(); d2 != DispositionSignalled || at2 == nil || !at2.Equal(*at1) {
		t.Errorf("after a second mark: disposition %q, delivered_at %v; want the first (%s, %v)", d2, at2, d1, at1)
	}
	if n := count(t, pool, `SELECT count(*) FROM payment_events`); n != 1 {
		t.Errorf("%d payment events, want 1", n)
	}
}

func TestInventorySetPublishesAndRollsBackWhenRedisRefuses(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	rdb := testRedis(t)
	stockRedis := lua.New(rdb)
	inv := &Inventory{Store: NewStore(pool), Stock: stockRedis}
	sku := randomID("INV-")
	holder := randomID("c-")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rdb.Del(ctx, lua.StockKey(sku), lua.HoldsKey(sku), lua.HoldEndsKey(sku)).Err()
	})

	view, err := inv.Set(t.Context(), Product{SKU: sku, OnHand: 10, PriceCents: 500, Currency: "usd", MaxPerOrder: 3})
	if err != nil {
		t.Fatalf("set new sku: %v", err)
	}
	want := InventoryView{SKU: sku, OnHand: 10, Available: 10, Held: 0, Sold: 0, PriceCents: 500, Currency: "usd", MaxPerOrder: 3, ETag: view.ETag}
	if view != want || view.ETag == "" {
		t.Errorf("set new sku = %+v, want %+v", view, want)
	}
	got, err := inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got != want {
		t.Errorf("get after set = %+v, want %+v", got, want)
	}
	if s := readSKU(t, pool, sku); s.LedgerRows != 1 || s.LedgerOnHand != 10 {
		t.Errorf("ledger after first set: %+v, want one row of +10", s)
	}

	if _, err := inv.Set(t.Context(), Product{SKU: sku, OnHand: 15, PriceCents: 500, Currency: "usd", MaxPerOrder: 3}); err != nil {
		t.Fatalf("raise on_hand: %v", err)
	}
	var lastDelta int64
	if err := pool.QueryRow(t.Context(), `SELECT delta_on_hand FROM inventory_ledger WHERE sku = $1 ORDER BY id DESC LIMIT 1`, sku).
		Scan(&lastDelta); err != nil {
		t.Fatalf("read last ledger row: %v", err)
	}
	if s := readSKU(t, pool, sku); lastDelta != 5 || s.LedgerRows != 2 || s.LedgerOnHand != 15 || s.OnHand != 15 {
		t.Errorf("after raising on_hand to 15: last ledger delta %d, sku %+v; want +5, two rows summing to 15", lastDelta, s)
	}

	if _, err := stockRedis.Reserve(t.Context(), sku, holder, 3); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	got, err = inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.OnHand != 15 || got.Held != 3 || got.Available != 12 || got.Available+got.Held != got.OnHand {
		t.Errorf("get with 3 held = %+v, want on_hand 15 == available 12 + held 3", got)
	}

	// Below what is held: Redis refuses, so Postgres (stock, price and ledger) is not changed.
	before := readSKU(t, pool, sku)
	_, err = inv.Set(t.Context(), Product{SKU: sku, OnHand: 2, PriceCents: 1, Currency: "usd", MaxPerOrder: 3})
	if !errors.Is(err, ErrOnHandBelowHeld) {
		t.Fatalf("set on_hand 2 with 3 held: err = %v, want ErrOnHandBelowHeld", err)
	}
	if s := readSKU(t, pool, sku); s != before {
		t.Errorf("postgres after refused set: %+v, want unchanged %+v", s, before)
	}
	got, err = inv.Get(t.Context(), sku)
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.PriceCents != 500 || got.OnHand != 15 || got.Available != 12 || got.Held != 3 {
		t.Errorf("after refused set: %+v, want price 500, on_hand 15, available 12, held 3", got)
	}
}

func TestNotFound(t *testing.T) {
	t.Parallel()
	pool := testDB(t)
	store := NewStore(pool)
	inv := &Inventory{Store: store, Stock: lua.New(testRedis(t))}

	if _, err := inv.Get(t.Context(), randomID("NOPE-")); !IsNotFound(err) {
		t.Errorf("inventory get of an unknown sku: err = %v, want not found", err)
	}
	if _, err := store.Checkout(t.Context(), randomID("c-")); !errors.Is(err, ErrNotFound) {
		t.Errorf("checkout of an unknown id: err = %v, want ErrNotFound", err)
	}
}
