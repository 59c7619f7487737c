package api

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
)

// heldKeys is Postgres's key index behind a door: each round of claims waits for release,
// and the rounds that reached it are counted.
type heldKeys struct {
	keys    IdempotencyKeys
	rounds  atomic.Int64
	release chan struct{}
}

func (h *heldKeys) ClaimIdempotencyKeys(ctx context.Context, claims []shop.IdempotencyClaim, retention time.Duration) ([]shop.IdempotencyClaim, error) {
	h.rounds.Add(1)
	select {
	case <-h.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return h.keys.ClaimIdempotencyKeys(ctx, claims, retention)
}

// A crowd of new carts (a flash sale's opening second) claims its Idempotency-Keys in one
// round trip at a time, not one each: the first claim leaves alone, and the crowd that came
// while it ran goes together in the next. Each POST is told the binding that holds for its
// key (real Postgres): its own body, or, for a key a POST before it claimed with another
// body, that body.
func TestACrowdsKeyClaimsAreMadeTogether(t *testing.T) {
	_, pool := testenv.Postgres(t)
	keys := &heldKeys{keys: store.New(pool), release: make(chan struct{})}
	claims := newKeyClaims(keys, time.Hour)
	const crowd = 100
	claim := func(i int) shop.IdempotencyClaim {
		// Every tenth POST reuses the first one's key with its own body.
		key := fmt.Sprint("key-", i)
		if i%10 == 0 {
			key = "key-0"
		}
		return shop.IdempotencyClaim{Scope: "customer/u", Key: key, CartID: fmt.Sprint("c-", i), RequestHash: fmt.Sprint("h-", i)}
	}
	first := testenv.Go(func() error {
		_, err := claims.claim(t.Context(), claim(0))
		return err
	})
	for deadline := time.Now().Add(30 * time.Second); keys.rounds.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	told := make([]shop.IdempotencyClaim, crowd)
	var all sync.WaitGroup
	for i := 1; i < crowd; i++ {
		all.Go(func() {
			held, err := claims.claim(t.Context(), claim(i))
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
			told[i] = held
		})
	}
	time.Sleep(100 * time.Millisecond) // let the crowd arrive while the first round is held
	close(keys.release)
	if err := testenv.Receive(t, "the first claim", first); err != nil {
		t.Fatal(err)
	}
	all.Wait()
	for i := 1; i < crowd; i++ {
		want := claim(i)
		if i%10 == 0 {
			want = claim(0)
		}
		if told[i] != want {
			t.Errorf("claim %d was told %+v, want %+v", i, told[i], want)
		}
	}
	if n := keys.rounds.Load(); n > 2 {
		t.Errorf("%d round trips for %d claims at once, want at most 2", n, crowd)
	}
}
