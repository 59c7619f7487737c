package room

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Start starts the saga of a cart taken from the line and returns the answer the GET that
// waits for the cart may give at once (JSON, or nil), or an error when its saga could not
// start now: the cart goes back to its place. Every cart taken starts its saga, which
// answers it: a hold, out of stock from the reserve script, or the end Postgres recorded
// for it. ctx does not end with the runner's: a start under way finishes.
type Start func(ctx context.Context, e shop.RoomEntry) (answer []byte, err error)

// Runner takes carts from the head of the line, each time this replica's bound has a place
// free, and starts their sagas. Every replica runs one; the line's lease brings back at its
// place a cart whose replica died while starting it. It also follows the line's count of
// carts taken, for each cart's estimated wait and the GETs waiting for a cart to move.
type Runner struct {
	line  Line
	bound *Bound
	start Start
	log   *slog.Logger
	bell  chan struct{} // rung when a cart enters the line through this replica
	count *count
}

// NewRunner is the runner of line, taking places of bound and starting sagas with start.
func NewRunner(line Line, bound *Bound, start Start, log *slog.Logger) *Runner {
	return &Runner{line: line, bound: bound, start: start, log: log, bell: make(chan struct{}, 1), count: newCount()}
}

// Ring tells the runner a cart entered the line (or the line was resumed): it looks at
// once instead of after its idle wait.
func (r *Runner) Ring() {
	select {
	case r.bell <- struct{}{}:
	default:
	}
}

// idle is how long a replica with a free place waits before it looks at an empty line
// again, when no cart entered through it; each look that finds the line empty doubles the
// wait, up to idleMax. A cart that enters through a replica rings it at once; one that
// entered through another replica, whose places are all taken, waits at most idleMax for
// this one. Looking every 20 ms, each idle replica ran 50 take scripts a second in the
// room's one Redis slot.
const (
	idle    = 20 * time.Millisecond
	idleMax = 320 * time.Millisecond
)

// Run starts the sagas of the carts in the line, from its head, until ctx ends; it waits
// for the starts under way before it returns.
func (r *Runner) Run(ctx context.Context) {
	go r.count.follow(ctx, r.line.Served)
	var starts sync.WaitGroup
	defer starts.Wait()
	wait := idle
	for ctx.Err() == nil {
		release := r.place(ctx)
		if release == nil {
			continue
		}
		e, ok, err := r.line.Pop(ctx)
		if err != nil || !ok {
			release()
			if err != nil && ctx.Err() == nil {
				r.log.Warn("waiting room: take", "error", err)
			}
			wait = r.idleWait(ctx, wait)
			continue
		}
		wait = idle
		starts.Add(1)
		go func() {
			defer starts.Done()
			defer release()
			if !r.startOne(ctx, e) {
				sleep(ctx, time.Second) // no worker, or Temporal down: do not spin on the head
			}
		}()
	}
}

// place takes a place of the bound, or waits until one is given back (at most a second)
// and returns nil.
func (r *Runner) place(ctx context.Context) (release func()) {
	freed := r.bound.Freed() // before the try: a place given back after it ends the wait
	if release = r.bound.TryAcquire(); release != nil {
		return release
	}
	select {
	case <-ctx.Done():
	case <-freed:
	case <-time.After(time.Second):
	}
	return nil
}

// idleWait waits while the line has nothing to take: until a cart enters through this
// replica (its bell), or wait passes. It returns the next wait: back to idle after the
// bell, twice as long (up to idleMax) after a wait that found nothing.
func (r *Runner) idleWait(ctx context.Context, wait time.Duration) time.Duration {
	select {
	case <-ctx.Done():
	case <-r.bell:
		return idle
	case <-time.After(wait):
	}
	return min(2*wait, idleMax)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// lineCallTimeout bounds the runner's word to the line after a start (its leave, or its
// put-back); a cart whose word is lost comes back with its lease, and a second start is
// harmless (it attaches to its saga).
const lineCallTimeout = 5 * time.Second

// startOne starts the saga of a cart taken from the line; it reports false when the cart
// went back in line because its saga could not start now.
func (r *Runner) startOne(base context.Context, e shop.RoomEntry) bool {
	answer, err := r.start(context.WithoutCancel(base), e)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(base), lineCallTimeout)
	defer cancel()
	log := r.log.With("checkout_id", e.CartID)
	if err != nil {
		log.Warn("waiting room: cart back in line", "error", err)
		if err := r.line.Retry(ctx, e.CartID); err != nil {
			log.Warn("waiting room: put back", "error", err) // its lease brings it back
		}
		return false
	}
	if err := r.line.Leave(ctx, e.CartID, answer); err != nil {
		log.Warn("waiting room: leave", "error", err) // its lease brings it back
	}
	return true
}

// EstimateWait is how long, in milliseconds, a cart at position should wait: its place over
// the rate carts leave the line. Before any rate is measured (the first second of a sale) it
// is the bound's own pace: its places, each freed in about the target latency.
func (r *Runner) EstimateWait(position int64) int64 {
	if position <= 0 {
		return 0
	}
	rate := r.count.rate()
	if rate < 1 {
		limit, _ := r.bound.Current()
		rate = float64(max(limit, 1)) / r.bound.target.Seconds()
	}
	return int64(math.Ceil(float64(position) / rate * 1000))
}

// UntilMoved waits until the cart at place may have moved in the line, at most until
// deadline, and reports false if ctx ended first (see count.untilMoved).
func (r *Runner) UntilMoved(ctx context.Context, place shop.RoomPlace, deadline time.Time) bool {
	return r.count.untilMoved(ctx, place, deadline)
}
