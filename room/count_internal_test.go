package room

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// wakes reports whether untilMoved, waiting in wait, returned within d.
func wakes(wait <-chan bool, d time.Duration) bool {
	select {
	case <-wait:
		return true
	case <-time.After(d):
		return false
	}
}

// waiting returns once a GET waits on r.
func waiting(t *testing.T, r *count) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !r.anyWaiting(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no wait began within 10 s")
		}
	}
}

// A GET waiting for a cart at place 8 sleeps through the first three takes from the line
// and wakes at the fourth: half the carts ahead of it are gone, and only then may a lookup
// find it moved.
func TestAWaitingCartWakesOnceHalfTheCartsAheadWereTaken(t *testing.T) {
	r := newCount()
	r.maxWait = time.Minute // no wake but the takes'
	r.set(100, false, 0)
	wait := testenv.Go(func() bool {
		return r.untilMoved(t.Context(), shop.RoomPlace{State: shop.PlaceQueued, Position: 8}, time.Now().Add(time.Minute))
	})
	waiting(t, r)
	for served := int64(101); served <= 103; served++ {
		r.set(served, false, 0)
		if wakes(wait, 200*time.Millisecond) {
			t.Fatalf("woke after %d of the 7 carts ahead were taken, want after 4", served-100)
		}
	}
	r.set(104, false, 0)
	if !testenv.Receive(t, "the wake after 4 takes", wait) {
		t.Fatal("untilMoved reported its context ended")
	}
}

// A cart being started has no place to watch: its GET looks again after poll. One whose
// request ends stops waiting at once.
func TestACartBeingStartedIsLookedAtAgainSoon(t *testing.T) {
	r := newCount()
	r.maxWait = time.Minute
	start := time.Now()
	if !r.untilMoved(t.Context(), shop.RoomPlace{State: shop.PlaceLeaving}, time.Now().Add(time.Minute)) || time.Since(start) > 5*time.Second {
		t.Fatalf("a cart being started waited %s, want about %s", time.Since(start), poll)
	}
	ctx, cancel := context.WithCancel(t.Context())
	wait := testenv.Go(func() bool {
		return r.untilMoved(ctx, shop.RoomPlace{State: shop.PlaceQueued, Position: 1000}, time.Now().Add(time.Minute))
	})
	cancel()
	if testenv.Receive(t, "the end of a cancelled wait", wait) {
		t.Fatal("a wait whose request ended reported a move")
	}
}

// follow reads the room's count in Redis while a GET waits: a take by any replica (here
// the test's own Pop) wakes the cart behind it.
func TestTheCountFollowsTheRoomsTakes(t *testing.T) {
	rdb := testenv.Redis(t)
	room := lua.NewRoom(rdb, testenv.RandomID("room"))
	t.Cleanup(func() {
		for _, k := range rdb.Keys(context.Background(), fmt.Sprintf("room:{%s}:*", room.Name())).Val() {
			rdb.Del(context.Background(), k)
		}
	})
	for i := range 2 {
		e := shop.RoomEntry{CartID: fmt.Sprintf("c-%d", i), CustomerID: fmt.Sprintf("u-%d", i),
			Items: []shop.CartLine{{SKU: "SKU-" + room.Name(), Quantity: 1}}, TimeoutSeconds: 900, IdempotencyKey: "k", RequestHash: "h"}
		if a, err := room.Enter(t.Context(), e, false, 100, 0); err != nil || a.Outcome != shop.RoomQueued {
			t.Fatalf("cart %d enters the room: %+v %v", i, a, err)
		}
	}
	r := newCount()
	r.maxWait = time.Minute
	go r.follow(t.Context(), room.Served)
	wait := testenv.Go(func() bool {
		return r.untilMoved(t.Context(), shop.RoomPlace{State: shop.PlaceQueued, Position: 2}, time.Now().Add(time.Minute))
	})
	waiting(t, r)
	if _, ok, err := room.Pop(t.Context()); !ok || err != nil {
		t.Fatalf("take the head: %v %v", ok, err)
	}
	if !testenv.Receive(t, "the wake after the head was taken", wait) {
		t.Fatal("untilMoved reported its context ended")
	}
}
