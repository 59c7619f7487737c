package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	lookup  func(context.Context, []string) (map[string]bool, error)
	door    chan struct{}
	entered chan []string // each query's ids, as it starts
	queries atomic.Int64
}

func newHeldLookup(s *store.Store) *heldLookup {
	return &heldLookup{lookup: s.RecordedCheckouts, door: make(chan struct{}), entered: make(chan []string, 100)}
}

func (h *heldLookup) run(ctx context.Context, ids []string) (map[string]bool, error) {
	h.queries.Add(1)
	h.entered <- ids
	select {
	case <-h.door:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.lookup(ctx, ids)
}

type recordedAnswer struct {
	recorded bool
	err      error
}

// ask asks in the background and returns where the answer will arrive.
func ask(ctx context.Context, r *recordedCheck, id string) <-chan recordedAnswer {
	out := make(chan recordedAnswer, 1)
	go func() {
		rec, err := r.recorded(ctx, id)
		out <- recordedAnswer{rec, err}
	}()
	return out
}

func waitAnswer(t *testing.T, ch <-chan recordedAnswer) recordedAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
		return recordedAnswer{}
	}
}

// waitingCount is how many asks wait for the next query.
func (r *recordedCheck) waitingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}

// isRunning reports whether a query is running or about to.
func (r *recordedCheck) isRunning() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running
}

// eventually waits up to 5 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func entered(t *testing.T, h *heldLookup) []string {
	t.Helper()
	select {
	case ids := <-h.entered:
		return ids
	case <-time.After(5 * time.Second):
		t.Fatal("no query within 5 s")
		return nil
	}
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
	eventually(t, "the crowd waits for the next query", func() bool { return r.waitingCount() == crowd })
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

// No query asks about more than maxRecordedBatch carts: a larger crowd takes more queries.
func TestRecordedCheckSplitsALargeCrowd(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	held := newHeldLookup(store.New(pool))
	r := newRecordedCheck(held.run)
	ctx := t.Context()

	first := ask(ctx, r, testenv.RandomID("c-"))
	entered(t, held)
	crowd := maxRecordedBatch + 10
	var answers []<-chan recordedAnswer
	for range crowd {
		answers = append(answers, ask(ctx, r, testenv.RandomID("c-")))
	}
	eventually(t, "the crowd waits for the next query", func() bool { return r.waitingCount() == crowd })
	close(held.door)
	waitAnswer(t, first)
	for _, ch := range answers {
		if a := waitAnswer(t, ch); a.err != nil || a.recorded {
			t.Fatalf("a cart of the crowd: recorded %v, err %v", a.recorded, a.err)
		}
	}
	if n, sizes := held.queries.Load(), []int{len(entered(t, held)), len(entered(t, held))}; n != 3 || sizes[0] != maxRecordedBatch || sizes[1] != 10 {
		t.Errorf("%d queries, the crowd's of %v carts; want 3, of %d and 10", n, sizes, maxRecordedBatch)
	}
}

// When Postgres cannot answer, no cart is told it is recorded: the gate's refusal stands.
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
			rec, err := r.recorded(t.Context(), fmt.Sprintf("c-down-%d", i))
			if err == nil || rec {
				t.Errorf("with Postgres down: recorded %v, err %v; want an error", rec, err)
			}
		})
	}
	wg.Wait()
}

// A cart whose request has ended is not asked about; one whose request ends while it waits
// stops waiting at once, whether its query runs or is not sent yet, and is left out of the
// next one; the others of its query still get their answer; a query nobody waits for any
// more is cancelled.
func TestRecordedCheckAnswersACancelledCartAtOnce(t *testing.T) {
	t.Parallel()
	_, pool := testenv.Postgres(t)
	held := newHeldLookup(store.New(pool))
	r := newRecordedCheck(held.run)
	ctx := t.Context()

	done, cancel := context.WithCancel(ctx)
	cancel()
	if rec, err := r.recorded(done, testenv.RandomID("c-")); !errors.Is(err, context.Canceled) || rec {
		t.Errorf("cancelled before asking: recorded %v, err %v; want context.Canceled", rec, err)
	}
	if n := held.queries.Load(); n != 0 {
		t.Errorf("%d queries for a cart whose request had ended, want 0", n)
	}

	// Alone in its query: the query is cancelled with it.
	alone, leaveAlone := context.WithCancel(ctx)
	gone := ask(alone, r, testenv.RandomID("c-"))
	entered(t, held)
	leaveAlone()
	if a := waitAnswer(t, gone); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while its query runs: err %v, want context.Canceled", a.err)
	}
	eventually(t, "the query nobody waits for is cancelled", func() bool { return !r.isRunning() })

	// A blocker's query runs; two carts wait for the next, and a third that gives up while
	// waiting is left out of it.
	blocker := ask(ctx, r, testenv.RandomID("c-"))
	entered(t, held)
	recorded := recordedCart(t, pool)
	leaving, leave := context.WithCancel(ctx)
	quitter, quit := context.WithCancel(ctx)
	goneID := testenv.RandomID("c-gone-")
	gone = ask(leaving, r, goneID)
	stays := ask(ctx, r, recorded)
	eventually(t, "two carts wait", func() bool { return r.waitingCount() == 2 })
	quitted := ask(quitter, r, testenv.RandomID("c-quit-"))
	eventually(t, "three carts wait", func() bool { return r.waitingCount() == 3 })
	quit()
	if a := waitAnswer(t, quitted); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while waiting for its query: err %v, want context.Canceled", a.err)
	}
	held.door <- struct{}{} // the blocker's query
	waitAnswer(t, blocker)
	if ids := entered(t, held); len(ids) != 2 || !slices.Contains(ids, goneID) || !slices.Contains(ids, recorded) {
		t.Errorf("the next query asked about %v, want %s and %s (not the cart that gave up)", ids, goneID, recorded)
	}
	// One of the two gives up while the query runs; the other still gets its answer.
	leave()
	if a := waitAnswer(t, gone); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while its query runs: err %v, want context.Canceled", a.err)
	}
	held.door <- struct{}{}
	if a := waitAnswer(t, stays); a.err != nil || !a.recorded {
		t.Errorf("the recorded cart beside a cancelled one: recorded %v, err %v; want recorded", a.recorded, a.err)
	}
}
