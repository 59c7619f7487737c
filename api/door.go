// The door: what a POST of a cart meets before any saga, and the one decision it makes.

package api

import (
	"context"
	"maps"
	"slices"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// doorFacts is what the door knows of a cart when its POST arrives, each from its owner:
// Postgres for a cart it recorded, the room for a cart in line, Redis's stock for a new cart.
type doorFacts struct {
	recorded bool             // Postgres recorded the cart: a saga's, or an end in the room
	creator  shop.Fingerprint // the request that created it: the record's, or the line's
	// ended: Postgres recorded the end of the cart's checkout (its saga's view of a run reset
	// to before that end is not the answer: withRecordedEnd).
	ended bool
	// secretVersion is the version of the cart's secret, read with its record: the answer
	// that hands the secret out signs it with it.
	secretVersion int64
	// place is the room's word, asked only for a cart Postgres has not recorded.
	place shop.RoomPlace
	// seen: Redis saw the cart's saga start or hold (it may not be recorded yet).
	seen bool
	// shortages is the sold-out gate's refusal of a new cart, if any.
	shortages []shop.Shortage
	// available is each SKU's available units as the gate read them (the room counts with
	// them).
	available map[string]int64
	// standing is the customer's open checkouts and units, as Postgres recorded them (the
	// room counts the customer's carts in line on top of them).
	standing shop.Standing
	// beforeSale: the cart's sale has not started. It waits for the start, whatever the
	// stock says now: it is judged at the start, in its drawn place.
	beforeSale bool
}

// doorDecision is what the door does with a POST.
type doorDecision int

const (
	doorEnter        doorDecision = iota // a new cart: it passes or queues (enterRoom)
	doorToSaga                           // the cart has, or may have, a saga: it answers
	doorInLine                           // the creator's retry of a cart in line: 202, its place
	doorSoldOut                          // a new cart the stock cannot serve: 409
	doorKeyReused                        // the creator's key with another body: 422
	doorOtherRequest                     // another caller's cart, or another body and key: 409
)

// decideDoor is the door's one decision. A cart Postgres recorded, or one in line, is first
// judged against the request that created it: nothing of it is answered to another request.
// A recorded cart then goes to its saga, whatever the room or the stock say; so does a cart
// Redis saw start, or the room saw leave for its saga (in a Cluster, the mark of its start
// and the room live on different nodes, and either can lose its last writes).
// Only a new cart meets the sold-out gate and the room.
func decideDoor(f doorFacts, req shop.Fingerprint) doorDecision {
	if f.recorded || f.place.InLine() {
		switch f.creator.Judge(req) {
		case shop.KeyReused:
			return doorKeyReused
		case shop.OtherRequest:
			return doorOtherRequest
		}
		if f.recorded {
			return doorToSaga
		}
		return doorInLine
	}
	switch {
	case f.seen || f.place.State == shop.PlaceLeft:
		return doorToSaga
	case len(f.shortages) > 0 && !f.beforeSale:
		return doorSoldOut
	}
	return doorEnter
}

// doorFacts asks the three owners at once, so a POST waits for the slowest of them, not for
// their sum: Postgres (one batched query for the POSTs of the moment, which also reads the
// customer's standing for the room), the room, and the sold-out gate. It heeds the first
// that knows the cart, in that order: a cart Postgres recorded is answered without waiting
// for Redis at all, and the gate's word counts only for a cart the room does not know.
// Postgres or the room unable to answer is a 503: the door never guesses, so no cart
// overtakes the line or is answered for another's.
func (s *Server) doorFacts(ctx context.Context, in workflows.Input, rules saleRules) (doorFacts, error) {
	f := doorFacts{beforeSale: rules.beforeSale()}
	type lookup struct {
		place shop.RoomPlace
		err   error
	}
	room, gate := make(chan lookup, 1), make(chan shop.Precheck, 1)
	if s.Room != nil {
		go func() {
			place, err := s.Room.Lookup(ctx, in.CheckoutID)
			room <- lookup{place, err}
		}()
	} else {
		room <- lookup{}
	}
	if !f.beforeSale {
		go func() { gate <- s.soldOut(ctx, in.CheckoutID, in.Items) }()
	} else {
		gate <- shop.Precheck{}
	}
	if s.recorded != nil {
		a, err := s.recorded.recordedAndStanding(ctx, in.CheckoutID, s.standingAsked(in, rules), slices.Collect(maps.Keys(rules.maxPerCustomer)))
		if err != nil {
			return f, unavailable("postgres", err)
		}
		f.secretVersion = a.secretVersion
		if a.recorded {
			f.recorded, f.creator, f.ended = true, a.creator, a.ended
			return f, nil
		}
		f.standing = a.standing
	}
	l := <-room
	if l.err != nil {
		return f, unavailable("redis", l.err)
	}
	f.place = l.place
	switch {
	case f.place.InLine():
		f.creator = f.place.Entry.Creator()
		return f, nil
	case f.place.State == shop.PlaceLeft:
		return f, nil // its saga answers
	}
	pre := <-gate
	f.shortages, f.seen, f.available = pre.Shortages, pre.Seen, pre.Available
	return f, nil
}

// standingAsked is the customer whose standing the door reads with the cart's record: ""
// when the room does not count it (no room, or no limit to count against).
func (s *Server) standingAsked(in workflows.Input, rules saleRules) string {
	if s.Room == nil || (s.cfg.Room.PerCustomer <= 0 && len(rules.maxPerCustomer) == 0) {
		return ""
	}
	return in.CustomerID
}
