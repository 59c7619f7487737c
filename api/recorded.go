// Whether Postgres recorded a cart, and by whose request, asked for many carts in one query.

package api

import (
	"context"
	"slices"

	"github.com/checkout-saga/checkout-saga/batch"
	"github.com/checkout-saga/checkout-saga/shop"
)

// maxRecordedBatch bounds the carts one query asks about: a larger crowd takes more queries,
// one after the other.
const maxRecordedBatch = 500

// recordedCheck answers "has Postgres recorded this cart, from which request, has it ended,
// and what is its secret's version?" for every POST, every request that carries a
// Checkout-Secret, and the GETs the waiting room would answer (a crowd). One query runs at a
// time: the carts asked about while it runs wait for the next, which asks about all of them
// at once (CheckoutRecords.RecordedCheckouts, WHERE checkout_id = ANY($1)). So a crowd costs
// Postgres one query per round trip, not one per cart, and a lone cart waits for no timer. A
// request never joins a query already running: a write committed before it arrived (a
// revocation of its secret) is in its answer.
//
// A query belongs to no one request: it runs until it answers, or until every cart it asks
// about has stopped waiting (their requests ended), and then it is cancelled. A cart whose
// request ends gets its context's error at once.
type recordedCheck struct {
	asks *batch.Runner[*recordedAsk]
}

// recordedAsk is one cart's question, and its answer once the query that carried it ended:
// whether it is recorded, and by whose request, and its secret's version (the door's 202
// signs with it, reading it no second time). A new cart's POST also asks for its customer's
// standing (the door counts it), and names the SKUs whose units it needs (those with a
// max_per_customer).
type recordedAsk struct {
	id            string
	customer      string   // "": no standing asked
	skus          []string // the SKUs of the customer's standing
	recorded      bool
	creator       shop.Fingerprint
	ended         bool // Postgres recorded its end
	secretVersion int64
	standing      shop.Standing
	err           error
}

// version is the secret's version the read found; 0 for no read (nil: no Postgres).
func (a *recordedAsk) version() int64 {
	if a == nil {
		return 0
	}
	return a.secretVersion
}

// recordedLookup is CheckoutRecords.RecordedCheckouts.
type recordedLookup func(ctx context.Context, ids, customers, skus []string) (shop.Recorded, error)

func newRecordedCheck(lookup recordedLookup) *recordedCheck {
	return &recordedCheck{asks: &batch.Runner[*recordedAsk]{
		Max: maxRecordedBatch,
		Send: func(ctx context.Context, asks []*recordedAsk) {
			var ids, customers, skus []string
			for _, a := range asks {
				ids = append(ids, a.id)
				if a.customer != "" {
					customers = append(customers, a.customer)
					skus = append(skus, a.skus...)
				}
			}
			found, err := lookup(ctx, distinct(ids), distinct(customers), distinct(skus))
			for _, a := range asks {
				a.creator, a.recorded = found.Creators[a.id]
				a.ended = found.Ended[a.id]
				a.secretVersion = found.SecretVersions[a.id]
				a.standing = found.Standings[a.customer]
				a.err = err
			}
		},
	}}
}

// distinct is list without its repeats, in its order.
func distinct(list []string) []string {
	seen := make(map[string]bool, len(list))
	return slices.DeleteFunc(list, func(s string) bool {
		repeat := seen[s]
		seen[s] = true
		return repeat
	})
}

// recordedAndStanding asks, in the same query, whether Postgres recorded the cart (as
// recorded), its secret's version, and the standing of its customer, with their units of
// skus.
func (r *recordedCheck) recordedAndStanding(ctx context.Context, cartID, customer string, skus []string) (*recordedAsk, error) {
	a := &recordedAsk{id: cartID, customer: customer, skus: skus}
	if err := r.asks.Do(ctx, a); err != nil {
		return nil, err
	}
	return a, a.err
}
