// Whether Postgres recorded a cart, and by whose request, asked for many carts in one query.

package api

import (
	"context"

	"github.com/checkout-saga/checkout-saga/batch"
	"github.com/checkout-saga/checkout-saga/shop"
)

// maxRecordedBatch bounds the carts one query asks about: a larger crowd takes more queries,
// one after the other.
const maxRecordedBatch = 500

// recordedCheck answers "has Postgres recorded this cart, and from which request?" for every
// POST, and for the GETs and cancels the waiting room would answer (a crowd). One query runs at
// a time: the carts refused while it runs wait for the
// next, which asks about all of them at once (CheckoutRecords.RecordedCheckouts, WHERE
// checkout_id = ANY($1)). So a crowd costs Postgres one query per round trip, not one per
// cart, and a lone cart waits for no timer.
//
// A query belongs to no one request: it runs until it answers, or until every cart it asks
// about has stopped waiting (their requests ended), and then it is cancelled. A cart whose
// request ends gets its context's error at once.
type recordedCheck struct {
	asks *batch.Runner[*recordedAsk]
}

// recordedAsk is one cart's question, and its answer once the query that carried it ended.
type recordedAsk struct {
	id       string
	recorded bool
	creator  shop.Fingerprint
	err      error
}

func newRecordedCheck(lookup func(ctx context.Context, ids []string) (map[string]shop.Fingerprint, error)) *recordedCheck {
	return &recordedCheck{asks: &batch.Runner[*recordedAsk]{
		Max: maxRecordedBatch,
		Send: func(ctx context.Context, asks []*recordedAsk) {
			ids := make([]string, 0, len(asks))
			seen := make(map[string]bool, len(asks))
			for _, a := range asks {
				if !seen[a.id] {
					seen[a.id] = true
					ids = append(ids, a.id)
				}
			}
			found, err := lookup(ctx, ids)
			for _, a := range asks {
				a.creator, a.recorded = found[a.id]
				a.err = err
			}
		},
	}}
}

// recorded reports whether Postgres recorded the cart, with the fingerprint of the request
// that created it; an error when Postgres could not answer or ctx ended first.
func (r *recordedCheck) recorded(ctx context.Context, cartID string) (creator shop.Fingerprint, recorded bool, err error) {
	a := &recordedAsk{id: cartID}
	if err := r.asks.Do(ctx, a); err != nil {
		return shop.Fingerprint{}, false, err
	}
	return a.creator, a.recorded, a.err
}
