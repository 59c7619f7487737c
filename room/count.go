package room

import (
	"context"
	"sync"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// count follows the room's count of carts ever taken from its line (Line.Served),
// which every replica shares. It gives the rate carts leave the room at, for each cart's
// estimated wait, and wakes the GETs that wait on this replica for their cart to leave the
// line. One reader per replica asks Redis for the count, every poll while a GET waits
// here and once a second otherwise, so a crowd of waiting GETs costs Redis what one does;
// each GET looks its cart up (five reads) only when the cart may have moved. Looking every
// 50 ms instead, 70,000 waiting buyers would ask Redis for 1.4 million lookups a second.
type count struct {
	mu     sync.Mutex
	served int64 // the count last read
	// bells are the GETs waiting on this replica for a cart in line, each with the count
	// that wakes it: only the GETs whose count was reached are woken, not the whole crowd.
	bells   map[chan struct{}]int64
	perSec  float64       // carts taken a second, weighted over about ten seconds
	rateAt  int64         // served at the rate's last sample
	sampled bool          // the rate has its first sample
	maxWait time.Duration // pollMax (tests lengthen it)
}

const (
	// poll is how often the count is read while a GET waits on this replica, and how
	// often a GET looks again at a cart whose saga is being started.
	poll = 50 * time.Millisecond
	// pollMax is the longest a waiting GET goes without looking its cart up: a cancel
	// ahead moves a cart without a take.
	pollMax = time.Second
)

func newCount() *count { return &count{bells: map[chan struct{}]int64{}, maxWait: pollMax} }

// follow reads the count until ctx ends.
func (r *count) follow(ctx context.Context, served func(context.Context) (int64, error)) {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	sampledAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		elapsed := time.Since(sampledAt)
		sample := elapsed >= time.Second
		if !sample && !r.anyWaiting() {
			continue
		}
		n, err := served(ctx)
		if err != nil {
			continue
		}
		r.set(n, sample, elapsed)
		if sample {
			sampledAt = time.Now()
		}
	}
}

func (r *count) anyWaiting() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bells) > 0
}

// set records the count read, and, when sample, the rate over the elapsed time.
func (r *count) set(n int64, sample bool, elapsed time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.served = n
	for bell, at := range r.bells {
		if n >= at {
			close(bell)
			delete(r.bells, bell)
		}
	}
	if sample {
		if r.sampled {
			r.perSec = 0.8*r.perSec + 0.2*float64(n-r.rateAt)/elapsed.Seconds()
		}
		r.rateAt, r.sampled = n, true
	}
}

// rate is the carts taken from the room a second, 0 before it is measured.
func (r *count) rate() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.perSec
}

// untilMoved waits until the cart may have moved, at most until deadline, and reports false
// if ctx ended first. A cart being started (not in line) may have moved after poll. A
// cart in line may have once half the carts ahead of it were taken: the next lookup halves
// the rest again, so a cart at place p is looked up about log2(p) times on its way to the
// head, and at least every pollMax.
func (r *count) untilMoved(ctx context.Context, place shop.RoomPlace, deadline time.Time) bool {
	wait := min(time.Until(deadline), r.maxWait)
	var bell chan struct{} // nil, which never rings, for a cart being started
	if place.State == shop.PlaceQueued {
		bell = make(chan struct{})
		r.mu.Lock()
		r.bells[bell] = r.served + (place.Position+1)/2
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			delete(r.bells, bell)
			r.mu.Unlock()
		}()
	} else {
		wait = min(wait, poll)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	case <-bell:
		return true
	}
}
