package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkout-saga/checkout-saga/lua"
)

// raceResult is the seed's race: many buyers at once against a few units, with the classic
// non-atomic GET-check-DECR and with the reserve script.
type raceResult struct {
	units, buyers int
	classic       raceSide
	script        raceSide
}

type raceSide struct {
	sold       int64 // buyers told they got a unit
	oversold   int64 // sold beyond the units stocked
	finalStock int64 // the counter at the end (classic: goes negative)
	elapsed    time.Duration
}

// raceGap is the classic code's time between reading the stock and decrementing it.
const raceGap = time.Millisecond

func (e *env) benchRace(ctx context.Context, sz sizes) (raceResult, error) {
	r := raceResult{units: sz.raceUnits, buyers: sz.raceBuyers}

	// Classic: read the counter, check it, then decrement: the gap between the GET and the
	// DECR is where other buyers slip in (the seed's "non-atomic GET + DECRBY").
	key := "race:{" + e.sku("RACE") + "}"
	if err := e.rdb.Set(ctx, key, r.units, 0).Err(); err != nil {
		return r, err
	}
	var sold atomic.Int64
	errs := make(chan error, r.buyers)
	elapsed := burst(r.buyers, func(int) {
		v, err := e.rdb.Get(ctx, key).Int64()
		if err != nil {
			errs <- err
			return
		}
		if v < 1 {
			return
		}
		// The application's work between its check and its write (pricing the cart,
		// writing the order row): without it a quiet machine can finish each buyer's GET
		// and DECR before the next buyer's GET, and the race stays hidden.
		time.Sleep(raceGap)
		if err := e.rdb.Decr(ctx, key).Err(); err != nil {
			errs <- err
			return
		}
		sold.Add(1)
	})
	if err := firstError(errs); err != nil {
		return r, fmt.Errorf("classic GET-check-DECR: %w", err)
	}
	final, err := e.rdb.Get(ctx, key).Int64()
	if err != nil {
		return r, err
	}
	r.classic = raceSide{sold: sold.Load(), oversold: max(0, sold.Load()-int64(r.units)), finalStock: final, elapsed: elapsed}

	// Ours: the reserve script, one distinct checkout per buyer.
	stock := lua.New(e.rdb)
	sku := e.sku("RACE-LUA")
	if _, err := stock.SetStock(ctx, sku, int64(r.units), 1); err != nil {
		return r, err
	}
	sold.Store(0)
	errs = make(chan error, r.buyers)
	elapsed = burst(r.buyers, func(i int) {
		_, err := stock.Reserve(ctx, sku, "race-"+strconv.Itoa(i), 1)
		switch {
		case err == nil:
			sold.Add(1)
		case errors.Is(err, lua.ErrOutOfStock):
		default:
			errs <- err
		}
	})
	if err := firstError(errs); err != nil {
		return r, fmt.Errorf("reserve script: %w", err)
	}
	level, err := stock.Level(ctx, sku)
	if err != nil {
		return r, err
	}
	if level.Held != sold.Load() {
		return r, fmt.Errorf("reserve script: %d buyers told they hold a unit, but redis holds %d", sold.Load(), level.Held)
	}
	r.script = raceSide{sold: sold.Load(), oversold: max(0, sold.Load()-int64(r.units)), finalStock: level.Available, elapsed: elapsed}
	progress("   classic: %d sold of %d (oversold %d, counter ends at %d); script: %d sold (oversold %d)",
		r.classic.sold, r.units, r.classic.oversold, r.classic.finalStock, r.script.sold, r.script.oversold)
	return r, nil
}

// burst runs n calls of f, each in its own goroutine, released together.
func burst(n int, f func(i int)) time.Duration {
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(i)
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	return time.Since(t0)
}

func firstError(errs chan error) error {
	close(errs)
	return <-errs
}
