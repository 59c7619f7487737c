package api

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// recordedCart records a checkout in Postgres, as the saga's first step does, and returns its id.
func recordedCart(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	sku, id := testenv.RandomID("REC-"), testenv.RandomID("c-")
	testenv.PutSKU(t, pool, sku, 10, 1_999, "usd")
	if _, err := store.New(pool).InsertCheckout(t.Context(), shop.CheckoutRecord{CheckoutID: id, CustomerID: "u-" + id,
		Currency: "usd", AmountCents: 1_999, Items: []shop.Item{{SKU: sku, Quantity: 1, UnitPriceCents: 1_999}}}, nil); err != nil {
		t.Fatalf("record checkout %s: %v", id, err)
	}
	return id
}

// heldLookup is Postgres's lookup behind a door: each query waits for the test to let it
// through (a send on door lets one, closing it lets all) or for its context to end, so the
// test decides which asks meet in one batch.
type heldLookup struct {
	lookup  recordedLookup
	door    chan struct{}
	entered chan []string // each query's ids, as it starts
	ended   chan struct{} // one for each query cancelled before the door let it through
	queries atomic.Int64
}

func newHeldLookup(s *store.Store) *heldLookup {
	return &heldLookup{lookup: s.RecordedCheckouts, door: make(chan struct{}), entered: make(chan []string, 100), ended: make(chan struct{}, 100)}
}

func (h *heldLookup) run(ctx context.Context, ids, customers, skus []string) (shop.Recorded, error) {
	h.queries.Add(1)
	h.entered <- ids
	select {
	case <-h.door:
	case <-ctx.Done():
		h.ended <- struct{}{}
		return shop.Recorded{}, ctx.Err()
	}
	return h.lookup(ctx, ids, customers, skus)
}

type recordedAnswer struct {
	recorded bool
	err      error
}

// ask asks in the background and returns where the answer will arrive.
func ask(ctx context.Context, r *recordedCheck, id string) <-chan recordedAnswer {
	return testenv.Go(func() recordedAnswer {
		a, err := r.recordedAndStanding(ctx, id, "", nil)
		return recordedAnswer{a != nil && a.recorded, err}
	})
}

func waitAnswer(t *testing.T, ch <-chan recordedAnswer) recordedAnswer {
	t.Helper()
	return testenv.Receive(t, "an answer", ch)
}

// entered is the ids of the next query, once it waits at the door.
func entered(t *testing.T, h *heldLookup) []string {
	t.Helper()
	return testenv.Receive(t, "a query", h.entered)
}

// The carts refused while a query runs are asked about together in the next one: a crowd
// costs Postgres one query per round trip, not one per cart. A recorded cart among them is
// told so, the others are not.
func TestRecordedCheckAsksPostgresOnceForTheCartsThatWaited(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	held := newHeldLookup(store.New(pool))
	r := newRecordedCheck(held.run)
	ctx := t.Context()

	recorded := recordedCart(t, pool)
	first := ask(ctx, r, testenv.RandomID("c-"))
	entered(t, held) // the first query runs (held), alone
	const crowd = 50
	answers := make([]<-chan recordedAnswer, crowd)
	ids := make([]string, crowd)
	for i := range crowd {
		ids[i] = testenv.RandomID("c-")
		if i == crowd/2 {
			ids[i] = recorded
		}
		answers[i] = ask(ctx, r, ids[i])
	}
	testenv.Eventually(t, "the crowd waits for the next query", func() bool { return r.asks.Waiting() == crowd })
	close(held.door)
	if a := waitAnswer(t, first); a.err != nil || a.recorded {
		t.Errorf("first cart: recorded %v, err %v; want not recorded", a.recorded, a.err)
	}
	for i, ch := range answers {
		a := waitAnswer(t, ch)
		if a.err != nil || a.recorded != (ids[i] == recorded) {
			t.Errorf("cart %s: recorded %v, err %v; want recorded %v", ids[i], a.recorded, a.err, ids[i] == recorded)
		}
	}
	if second := entered(t, held); len(second) != crowd {
		t.Errorf("the second query asked about %d carts, want %d", len(second), crowd)
	}
	if n := held.queries.Load(); n != 2 {
		t.Errorf("%d queries for 1 + %d carts, want 2 (the first, then the crowd's)", n, crowd)
	}
}

// When Postgres cannot answer, no cart is told it is recorded: the caller gets the error.
func TestRecordedCheckWithPostgresDownAnswersAnError(t *testing.T) {
	t.Parallel()
	// A pool on a port where nothing listens: every query fails to connect.
	down, err := pgxpool.New(t.Context(), "postgres://postgres@127.0.0.1:1/checkout?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	r := newRecordedCheck(store.New(down).RecordedCheckouts)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			a, err := r.recordedAndStanding(t.Context(), fmt.Sprintf("c-down-%d", i), "", nil)
			if err == nil || (a != nil && a.recorded) {
				t.Errorf("with Postgres down: %+v, err %v; want an error", a, err)
			}
		})
	}
	wg.Wait()
}

// A query nobody waits for any more is cancelled: Postgres does not go on working for
// requests that have ended.
func TestRecordedCheckCancelsAQueryNobodyWaitsFor(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	held := newHeldLookup(store.New(pool))
	r := newRecordedCheck(held.run)
	leaving, leave := context.WithCancel(t.Context())
	gone := ask(leaving, r, testenv.RandomID("c-"))
	entered(t, held)
	leave()
	if a := waitAnswer(t, gone); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while its query runs: err %v, want context.Canceled", a.err)
	}
	testenv.Receive(t, "the query nobody waits for is cancelled", held.ended)
}
