package api

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// waitersOn is how many wait on the checkout's poll now.
func (w *endWatches) waitersOn(checkoutID string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if watch, ok := w.watching[checkoutID]; ok {
		return watch.waiters
	}
	return 0
}

// untilTrue waits for cond, failing the test after a minute.
func untilTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s not yet", what)
		}
	}
}

// Fifty waits on one checkout are one long poll, and each gets the end it answers.
func TestWaitsOnOneCheckoutShareOnePoll(t *testing.T) {
	var polls atomic.Int32
	end := make(chan struct{})
	w := newEndWatches(func(ctx context.Context, id string) (shop.View, error) {
		polls.Add(1)
		select {
		case <-end:
			return shop.View{CheckoutID: id, Status: shop.StatusConfirmed}, nil
		case <-ctx.Done():
			return shop.View{}, ctx.Err()
		}
	})
	var all sync.WaitGroup
	var ended atomic.Int32
	for range 50 {
		all.Go(func() {
			if v, ok := w.await(t.Context(), "c-1", time.Now().Add(time.Minute)); ok && v.Status == shop.StatusConfirmed {
				ended.Add(1)
			}
		})
	}
	untilTrue(t, "50 waiters on c-1", func() bool { return w.waitersOn("c-1") == 50 })
	close(end)
	all.Wait()
	if polls.Load() != 1 || ended.Load() != 50 {
		t.Errorf("50 waits on one checkout: %d polls, %d told its end; want 1 poll and 50", polls.Load(), ended.Load())
	}
}

// The poll lives as long as someone waits: when the last waiter gives up, it is cancelled,
// and a wait that outlives a shorter wait's poll goes on with a poll of its own.
func TestAPollEndsWithItsLastWaiter(t *testing.T) {
	cancelled := make(chan struct{}, 2)
	var polls atomic.Int32
	w := newEndWatches(func(ctx context.Context, id string) (shop.View, error) {
		polls.Add(1)
		<-ctx.Done()
		if ctx.Err() == context.Canceled {
			cancelled <- struct{}{}
		}
		return shop.View{}, ctx.Err()
	})
	ctx, giveUp := context.WithCancel(t.Context())
	done := make(chan bool)
	go func() { _, ok := w.await(ctx, "c-2", time.Now().Add(time.Minute)); done <- ok }()
	untilTrue(t, "a waiter on c-2", func() bool { return w.waitersOn("c-2") == 1 })
	giveUp()
	if <-done {
		t.Errorf("a wait given up reported an end")
	}
	<-cancelled // the poll saw its cancellation

	// A short wait starts the poll; a long one joins it, and outlives it.
	short := time.Now().Add(50 * time.Millisecond)
	go func() { _, ok := w.await(t.Context(), "c-3", short); done <- ok }()
	untilTrue(t, "the short waiter on c-3", func() bool { return w.waitersOn("c-3") == 1 })
	long := make(chan bool)
	ctx, giveUp = context.WithCancel(t.Context())
	defer giveUp()
	go func() { _, ok := w.await(ctx, "c-3", time.Now().Add(time.Minute)); long <- ok }()
	<-done
	untilTrue(t, "a poll of the long wait's own", func() bool { return polls.Load() == 3 })
	giveUp()
	<-long
}

// A poll its last waiter left is cancelled, and may take a moment to end: a new wait on the
// checkout then waits for it to end before it starts the next, so that one checkout never has
// two polls at once.
func TestACancelledPollEndsBeforeTheNextStarts(t *testing.T) {
	var polls, most atomic.Int32
	ending := make(chan struct{})
	w := newEndWatches(func(ctx context.Context, id string) (shop.View, error) {
		n := polls.Add(1)
		defer polls.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-ctx.Done()
		if ctx.Err() == context.Canceled {
			<-ending // the cancelled poll is slow to end
		}
		return shop.View{}, ctx.Err()
	})
	ctx, giveUp := context.WithCancel(t.Context())
	done := make(chan bool)
	go func() { _, ok := w.await(ctx, "c-4", time.Now().Add(time.Minute)); done <- ok }()
	untilTrue(t, "a waiter on c-4", func() bool { return w.waitersOn("c-4") == 1 })
	giveUp()
	<-done
	next := make(chan bool)
	go func() { _, ok := w.await(t.Context(), "c-4", time.Now().Add(50*time.Millisecond)); next <- ok }()
	time.Sleep(20 * time.Millisecond) // room for a second poll to start, if it would
	close(ending)
	<-next
	if got := most.Load(); got != 1 {
		t.Errorf("%d polls of c-4 at once, want 1", got)
	}
}
