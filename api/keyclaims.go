// The Idempotency-Key claims of many POSTs, made in one round trip.

package api

import (
	"context"
	"time"

	"github.com/checkout-saga/checkout-saga/batch"
	"github.com/checkout-saga/checkout-saga/shop"
)

// maxKeyClaims bounds the claims one round trip makes.
const maxKeyClaims = 500

// keyClaims claims the Idempotency-Keys of many POSTs at once, as recordedCheck reads their
// records: one claim round trip at a time, and the POSTs that come while it runs go together
// in the next (IdempotencyKeys.ClaimIdempotencyKeys, one commit). A flash sale's opening
// second is hundreds of new carts, each claiming its key: one write each queued for the
// pool's connections and took 150 to 200 ms of the POSTs' p99 (docs/performance.md).
type keyClaims struct {
	asks *batch.Runner[*keyClaim]
}

// keyClaim is one POST's claim, and the binding that holds once its round trip ended.
type keyClaim struct {
	claim shop.IdempotencyClaim
	held  shop.IdempotencyClaim
	err   error
}

func newKeyClaims(keys IdempotencyKeys, retention time.Duration) *keyClaims {
	return &keyClaims{asks: &batch.Runner[*keyClaim]{
		Max: maxKeyClaims,
		Send: func(ctx context.Context, asks []*keyClaim) {
			claims := make([]shop.IdempotencyClaim, len(asks))
			for i, a := range asks {
				claims[i] = a.claim
			}
			held, err := keys.ClaimIdempotencyKeys(ctx, claims, retention)
			for i, a := range asks {
				a.err = err
				if err == nil {
					a.held = held[i]
				}
			}
		},
	}}
}

// claim binds c's key to c's body unless it is bound already, and returns the binding that
// holds; an error when Postgres could not answer or ctx ended first.
func (k *keyClaims) claim(ctx context.Context, c shop.IdempotencyClaim) (shop.IdempotencyClaim, error) {
	a := &keyClaim{claim: c}
	if err := k.asks.Do(ctx, a); err != nil {
		return shop.IdempotencyClaim{}, err
	}
	return a.held, a.err
}
