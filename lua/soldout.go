package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// DefaultSoldOutBound is how long SoldOutFlag trusts what it read of a sold-out SKU.
const DefaultSoldOutBound = 100 * time.Millisecond

// SoldOutFlag is the sold-out gate with an in-process flag per SKU (the "local flag"): once
// Redis showed a SKU short, the losers that follow are answered from memory, without a Redis
// round trip, for at most the bound. It implements the API's gate (Precheck, MarkStarted)
// around a Stock.
//
//   - A wrong 201 is impossible: the flag only ever refuses; everything else goes to Redis
//     (Stock.Precheck) and the reserve script still judges.
//   - A wrong 409 is possible only within the bound after stock comes back: the flag is at
//     most bound old, and then the next request reads Redis again.
//   - A retry of a checkout that holds or held the SKU is never answered from memory: with
//     the flag, the flag keeps who held the SKU (holds:{sku}) and whose hold ended
//     (hold-ends:{sku}), read after the level, and the checkouts started through this
//     process. While the SKU stays short nobody new can hold it, so that set covers every
//     holder; a checkout that got a hold on another API replica after stock came back and
//     retries here within the bound is the one retry the flag can refuse.
type SoldOutFlag struct {
	stock *Stock
	bound time.Duration
	now   func() time.Time // tests set a clock

	mu       sync.Mutex
	skus     map[string]*flagged
	flagging map[string]bool      // SKUs being read, so a crowd of losers reads each once
	started  map[string]time.Time // checkouts started through this process
}

// flagged is what the flag knows of one short SKU.
type flagged struct {
	at        time.Time // when the read began
	available int64
	seen      map[string]bool // holders and ended holders, at or after at
}

// NewSoldOutFlag returns the gate on s; bound <= 0 means DefaultSoldOutBound.
func NewSoldOutFlag(s *Stock, bound time.Duration) *SoldOutFlag {
	if bound <= 0 {
		bound = DefaultSoldOutBound
	}
	return &SoldOutFlag{stock: s, bound: bound, now: time.Now, skus: map[string]*flagged{},
		flagging: map[string]bool{}, started: map[string]time.Time{}}
}

// Precheck answers from memory when every SKU of the cart is flagged short for its quantity
// and the checkout never held any of them; otherwise it is Stock.Precheck, and a sold-out
// answer from Redis (re)flags its short SKUs.
func (f *SoldOutFlag) Precheck(ctx context.Context, checkoutID string, items map[string]int64) (shop.Precheck, error) {
	if p, ok := f.fromMemory(checkoutID, items); ok {
		return p, nil
	}
	p, err := f.stock.Precheck(ctx, checkoutID, items)
	if err != nil || !p.SoldOut() {
		return p, err
	}
	for _, sh := range p.Shortages {
		if err := f.flag(ctx, sh.SKU); err != nil {
			// No flag: the next loser asks Redis again.
			return p, nil
		}
	}
	return p, nil
}

// MarkStarted is Stock.MarkStarted; the flag also remembers the checkout, so its retries
// through this process never meet the flag.
func (f *SoldOutFlag) MarkStarted(ctx context.Context, checkoutID string) error {
	f.mu.Lock()
	if len(f.started) >= maxRemembered {
		clear(f.started)
	}
	f.started[checkoutID] = f.now()
	f.mu.Unlock()
	return f.stock.MarkStarted(ctx, checkoutID)
}

// maxRemembered bounds the checkouts started through this process that the flag remembers;
// past it they are forgotten at once (their holds are in the flag's read of Redis).
const maxRemembered = 100_000

func (f *SoldOutFlag) fromMemory(checkoutID string, items map[string]int64) (shop.Precheck, bool) {
	if len(items) == 0 {
		return shop.Precheck{}, false
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.started[checkoutID]; ok {
		return shop.Precheck{}, false
	}
	p := shop.Precheck{Known: true, Shortages: make([]shop.Shortage, 0, len(items))}
	for sku, q := range items {
		fl := f.skus[sku]
		if fl == nil || now.Sub(fl.at) >= f.bound || fl.available >= q || fl.seen[checkoutID] {
			return shop.Precheck{}, false
		}
		p.Shortages = append(p.Shortages, shop.Shortage{SKU: sku, Requested: q, Available: fl.available})
	}
	return p, true
}

// flag reads sku's available units, then its holders and ended holders, in one pipeline on
// its slot, and keeps them for the bound.
func (f *SoldOutFlag) flag(ctx context.Context, sku string) error {
	at := f.now()
	f.mu.Lock()
	if fl := f.skus[sku]; f.flagging[sku] || fl != nil && at.Sub(fl.at) < f.bound {
		f.mu.Unlock()
		return nil
	}
	f.flagging[sku] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.flagging, sku)
		f.mu.Unlock()
	}()
	pipe := f.stock.rdb.Pipeline()
	level := pipe.HMGet(ctx, StockKey(sku), "available")
	holders := pipe.HKeys(ctx, HoldsKey(sku))
	ended := pipe.HKeys(ctx, HoldEndsKey(sku))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("flag %s sold out: %w", sku, err)
	}
	vals := level.Val()
	if len(vals) != 1 || vals[0] == nil {
		return fmt.Errorf("flag %s sold out: not stocked", sku)
	}
	str, _ := vals[0].(string)
	available, err := strconv.ParseInt(str, 10, 64)
	if err != nil {
		return fmt.Errorf("flag %s sold out: available %q: %w", sku, str, err)
	}
	fl := &flagged{at: at, available: available, seen: make(map[string]bool, len(holders.Val())+len(ended.Val()))}
	for _, id := range holders.Val() {
		fl.seen[id] = true
	}
	for _, id := range ended.Val() {
		fl.seen[id] = true
	}
	f.mu.Lock()
	f.skus[sku] = fl
	f.mu.Unlock()
	return nil
}
