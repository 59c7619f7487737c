package store_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// roundTrips counts what the pool sends Postgres and waits for: each query (a transaction's
// begin and commit included) and each batch, which pgx sends as one.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}
func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// count returns how many round trips do took.
func (r *roundTrips) count(t *testing.T, do func() error) int64 {
	t.Helper()
	before := r.n.Load()
	if err := do(); err != nil {
		t.Fatal(err)
	}
	return r.n.Load() - before
}

// A confirmed checkout's writes wait for Postgres once each, on the production's settings (a
// cap on open checkouts and a SKU with max_per_customer): the record of the cart, judged
// against the customer's limits, is one batch, and the order with its lines, the stock
// moved to sold, the ledger and the checkout's end is one statement. Each round trip costs
// both processes a wake-up, and the confirm holds the SKU's row lock, which every confirm
// of a hot SKU waits for, until its commit: over one statement, not seven.
func TestACheckoutsWritesWaitForPostgresOnceEach(t *testing.T) {
	t.Parallel()
	url, admin := testenv.Postgres(t)
	trips := &roundTrips{}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	s := store.New(pool)
	s.MaxOpenPerCustomer = 5
	limited, free := testenv.RandomID("LIM-"), testenv.RandomID("FREE-")
	testenv.PutSKU(t, admin, limited, 10, 300, "usd")
	testenv.PutSKU(t, admin, free, 10, 700, "usd")
	rec := shop.CheckoutRecord{CheckoutID: testenv.RandomID("c-"), CustomerID: testenv.RandomID("u-"), Currency: "usd", AmountCents: 1000,
		Items: []shop.Item{{SKU: limited, Quantity: 1, UnitPriceCents: 300}, {SKU: free, Quantity: 1, UnitPriceCents: 700}}}

	var recorded shop.CheckoutRecord
	if n := trips.count(t, func() (err error) {
		recorded, err = s.InsertCheckout(t.Context(), rec, map[string]int64{limited: 2})
		return err
	}); n != 1 {
		t.Errorf("recording a checkout judged against its customer's limits took %d round trips, want 1", n)
	}
	if recorded.Status != shop.RecordOpen {
		t.Fatalf("recorded %+v, want open", recorded)
	}
	verify(t, s, confirmInput(recorded)) // as the webhook does, before the confirm
	if n := trips.count(t, func() error {
		_, _, err := s.ConfirmOrder(t.Context(), confirmInput(recorded))
		return err
	}); n != 1 {
		t.Errorf("confirming its order took %d round trips, want 1", n)
	}
	if c, err := s.Checkout(t.Context(), rec.CheckoutID); err != nil || c.Status != "confirmed" || c.OrderID != shop.OrderID(rec.CheckoutID) {
		t.Errorf("checkout after its confirm: %+v, %v; want confirmed with its order", c, err)
	}
}
