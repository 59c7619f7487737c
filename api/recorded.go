// Whether Postgres recorded a cart the gate refuses, asked for many carts in one query.

package api

import (
	"context"
	"slices"
	"sync"
)

// maxRecordedBatch bounds the carts one query asks about: a larger crowd takes more queries,
// one after the other.
const maxRecordedBatch = 500

// recordedCheck answers the gate's "has Postgres recorded this cart?" for the carts it refuses
// (a sold-out crowd). One query runs at a time: the carts refused while it runs wait for the
// next, which asks about all of them at once (CheckoutRecords.RecordedCheckouts, WHERE
// checkout_id = ANY($1)). So a crowd costs Postgres one query per round trip, not one per
// cart, and a lone cart waits for no timer.
//
// A query belongs to no one request: it runs until it answers, or until every cart it asks
// about has stopped waiting (their requests ended), and then it is cancelled. A cart whose
// request ends gets its context's error at once; to the gate, any error keeps the refusal.
type recordedCheck struct {
	lookup func(ctx context.Context, ids []string) (map[string]bool, error)

	mu      sync.Mutex
	waiting []*recordedAsk // for the next query, in order of arrival
	running bool           // a query runs, or is about to
}

// recordedAsk is one cart's question, and its answer once done is closed.
type recordedAsk struct {
	id       string
	done     chan struct{}
	recorded bool
	err      error
	// Under recordedCheck.mu: gone once its request stopped waiting; query is the query
	// that asks about it, nil while it waits for one.
	gone  bool
	query *recordedQuery
}

// recordedQuery is a query in flight: cancel ends it, once waiting (its carts still
// waiting, under recordedCheck.mu) falls to zero.
type recordedQuery struct {
	cancel  context.CancelFunc
	waiting int
}

func newRecordedCheck(lookup func(ctx context.Context, ids []string) (map[string]bool, error)) *recordedCheck {
	return &recordedCheck{lookup: lookup}
}

// recorded reports whether Postgres recorded the cart; an error when Postgres could not
// answer or ctx ended first.
func (r *recordedCheck) recorded(ctx context.Context, cartID string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	a := &recordedAsk{id: cartID, done: make(chan struct{})}
	r.mu.Lock()
	r.waiting = append(r.waiting, a)
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	select {
	case <-a.done:
		return a.recorded, a.err
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	a.gone = true
	if q := a.query; q != nil {
		if q.waiting--; q.waiting == 0 {
			q.cancel()
		}
	}
	return false, ctx.Err()
}

// run sends queries, one at a time, until no cart waits.
func (r *recordedCheck) run() {
	for {
		asks, q, ctx := r.next()
		if asks == nil {
			return
		}
		ids := make([]string, 0, len(asks))
		seen := make(map[string]bool, len(asks))
		for _, a := range asks {
			if !seen[a.id] {
				seen[a.id] = true
				ids = append(ids, a.id)
			}
		}
		found, err := r.lookup(ctx, ids)
		q.cancel()
		for _, a := range asks {
			a.recorded, a.err = found[a.id], err
			close(a.done)
		}
	}
}

// next takes the carts still waiting (at most maxRecordedBatch, first come first) for a new
// query; none when no cart waits, and then run ends.
func (r *recordedCheck) next() ([]*recordedAsk, *recordedQuery, context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var asks []*recordedAsk
	n := 0
	for _, a := range r.waiting {
		if a.gone {
			n++
			continue
		}
		if len(asks) == maxRecordedBatch {
			break
		}
		asks = append(asks, a)
		n++
	}
	r.waiting = slices.Delete(r.waiting, 0, n)
	if len(asks) == 0 {
		r.running = false
		return nil, nil, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	q := &recordedQuery{cancel: cancel, waiting: len(asks)}
	for _, a := range asks {
		a.query = q
	}
	return asks, q, ctx
}
