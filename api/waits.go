package api

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
)

// DefaultMaxWaitsPerAddress and DefaultMaxWaits bound the GETs that wait at once. A buyer's
// page holds one wait per checkout, a household a few: 20 per address leaves room for an
// office. Each wait holds a request goroutine, a connection and, unless it shares one, a
// long poll at Temporal, whose frontend allows 1,200 long polls per namespace and per API
// method (frontend.namespaceCount); 1,000 per process keeps one API replica below that.
const (
	DefaultMaxWaitsPerAddress = 20
	DefaultMaxWaits           = 1000
)

// waitPlaces are the places of the GETs that wait (?wait=N): at most perAddress per client
// address and total in the process. A GET that finds none answers at once.
type waitPlaces struct {
	perAddress, total int
	mu                sync.Mutex
	n                 int
	byAddress         map[string]int
}

func newWaitPlaces(perAddress, total int) *waitPlaces {
	return &waitPlaces{perAddress: perAddress, total: total, byAddress: map[string]int{}}
}

// take takes a place for address ("": none to count, only the process's bound), and reports
// false when either bound is reached. release gives a taken place back.
func (w *waitPlaces) take(address string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n >= w.total || address != "" && w.byAddress[address] >= w.perAddress {
		return false
	}
	w.n++
	if address != "" {
		w.byAddress[address]++
	}
	return true
}

func (w *waitPlaces) release(address string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n--
	if address == "" {
		return
	}
	if w.byAddress[address]--; w.byAddress[address] <= 0 {
		delete(w.byAddress, address)
	}
}

// admitWait is the wait a GET may hold: wait itself with a place taken (release gives it
// back), or 0, no wait, when the caller's address or the process holds as many as it may.
// The address is the one the rate limits count (limitedAddress): a shop backend's waits
// count only against the process, or against the buyer's address it forwards.
func (s *Server) admitWait(c echo.Context, wait time.Duration) (time.Duration, func()) {
	if wait <= 0 {
		return 0, func() {}
	}
	address, _ := s.limitedAddress(c)
	if !s.waits.take(address) {
		return 0, func() {}
	}
	return wait, func() { s.waits.release(address) }
}

// endWatches share one long poll per checkout among the GETs that wait for its end: a
// thousand waits on one checkout are one poll at Temporal, not a thousand. A poll lives as
// long as someone waits on it: the last waiter to leave cancels it.
type endWatches struct {
	poll     func(ctx context.Context, checkoutID string) (shop.View, error)
	mu       sync.Mutex
	watching map[string]*endWatch
}

// endWatch is one poll of a checkout's end, until deadline (its first waiter's).
type endWatch struct {
	deadline time.Time
	cancel   context.CancelFunc
	waiters  int
	left     bool          // its last waiter left and cancelled it; it is ending
	done     chan struct{} // closed once the poll answered; then:
	view     shop.View
	ended    bool // the saga closed with a view
	expired  bool // the poll ran to its deadline without an end
}

func newEndWatches(poll func(ctx context.Context, checkoutID string) (shop.View, error)) *endWatches {
	return &endWatches{poll: poll, watching: map[string]*endWatch{}}
}

// await waits until deadline for the checkout's saga to close and returns its view, sharing
// the poll of whoever waits on it already. It reports false when the saga still runs at
// deadline, or its result cannot answer (no saga, a terminated one, an error).
func (w *endWatches) await(ctx context.Context, checkoutID string, deadline time.Time) (shop.View, bool) {
	waiting, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for {
		watch := w.join(ctx, checkoutID, deadline)
		select {
		case <-watch.done:
			w.leave(checkoutID, watch)
			if watch.ended {
				return watch.view, true
			}
			// A poll that ran out before this wait's own deadline (another waiter's, shorter)
			// is followed by one of its own; any other answer is final.
			if !watch.expired || !deadline.After(watch.deadline) {
				return shop.View{}, false
			}
		case <-waiting.Done():
			w.leave(checkoutID, watch)
			return shop.View{}, false
		}
	}
}

// join counts a waiter on the checkout's poll, starting one until deadline if none runs.
// A poll started carries the values of its first waiter's request (its trace), not its
// cancellation: the poll ends with its last waiter (leave), whoever that is.
func (w *endWatches) join(ctx context.Context, checkoutID string, deadline time.Time) *endWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		watch, ok := w.watching[checkoutID]
		if !ok {
			break
		}
		if !watch.left {
			watch.waiters++
			return watch
		}
		// A poll whose waiters all left is ending (cancelled): let it end before the next
		// one starts, so that a checkout never has two polls at once.
		w.mu.Unlock()
		<-watch.done
		w.mu.Lock()
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	watch := &endWatch{deadline: deadline, cancel: cancel, waiters: 1, done: make(chan struct{})}
	w.watching[checkoutID] = watch
	go func() {
		defer cancel()
		v, err := w.poll(ctx, checkoutID)
		w.mu.Lock()
		if w.watching[checkoutID] == watch {
			delete(w.watching, checkoutID)
		}
		w.mu.Unlock()
		watch.view, watch.ended = v, err == nil && v.CheckoutID != ""
		watch.expired = !watch.ended && errors.Is(ctx.Err(), context.DeadlineExceeded)
		close(watch.done)
	}()
	return watch
}

// leave uncounts a waiter; the last one to leave a poll that still runs cancels it.
func (w *endWatches) leave(checkoutID string, watch *endWatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if watch.waiters--; watch.waiters > 0 {
		return
	}
	watch.left = true // the poll removes itself from watching when it has ended
	watch.cancel()
}
