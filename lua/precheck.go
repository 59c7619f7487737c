package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Precheck reads, in one pipelined round trip, whether each SKU could be held now. It only
// reads: the reserve script stays the judge, and a Precheck that says "available" may
// still lose the race. It lets the API turn most of a sold-out crowd away at the cost of one
// Redis round trip instead of a saga each, and lets buyers in again as soon as holds are
// released. It answers in the vocabulary's terms (shop.Precheck), as the API's Gate
// interface declares them, so the API needs no adapter and never imports lua.
func (s *Stock) Precheck(ctx context.Context, checkoutID string, items map[string]int64) (shop.Precheck, error) {
	type reads struct {
		available *redis.SliceCmd
		holds     *redis.BoolCmd
		ended     *redis.BoolCmd
	}
	pipe := s.rdb.Pipeline()
	started := pipe.Exists(ctx, StartedKey(checkoutID))
	cmds := make(map[string]reads, len(items))
	for sku := range items {
		cmds[sku] = reads{
			available: pipe.HMGet(ctx, StockKey(sku), "available"),
			holds:     pipe.HExists(ctx, HoldsKey(sku), checkoutID),
			ended:     pipe.HExists(ctx, HoldEndsKey(sku), checkoutID),
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return shop.Precheck{}, fmt.Errorf("precheck checkout %s: %w", checkoutID, err)
	}
	p := shop.Precheck{Known: true, Seen: started.Val() > 0, Available: make(map[string]int64, len(items))}
	for sku, q := range items {
		r := cmds[sku]
		if r.holds.Val() || r.ended.Val() {
			p.Seen = true
		}
		vals := r.available.Val()
		if len(vals) != 1 || vals[0] == nil {
			p.Known = false
			continue
		}
		str, _ := vals[0].(string)
		available, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			p.Known = false
			continue
		}
		p.Available[sku] = available
		if available < q {
			p.Shortages = append(p.Shortages, shop.Shortage{SKU: sku, Requested: q, Available: available})
		}
	}
	return p, nil
}

// startedTTL outlives any retry of a checkout request (the longest payment window plus a day).
const startedTTL = 48 * time.Hour

// MarkStarted records that a saga is being started for the checkout, so that the gate lets
// a retry of the request through even before the saga holds anything (the first attempt
// may have timed out while its saga goes on).
func (s *Stock) MarkStarted(ctx context.Context, checkoutID string) error {
	if err := s.rdb.Set(ctx, StartedKey(checkoutID), 1, startedTTL).Err(); err != nil {
		return fmt.Errorf("mark checkout %s started: %w", checkoutID, err)
	}
	return nil
}
