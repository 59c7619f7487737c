// Package batch sends the items of concurrent callers together, one batch at a time.
package batch

import (
	"context"
	"slices"
	"sync"
)

// Runner sends items in batches. Do queues an item and returns once the batch carrying it
// has been sent. One batch is in flight at a time; the items queued while it is in flight
// go together in the next one, at most Max of them, first come first (a larger crowd takes
// more batches, one after the other). A lone item leaves at once: no timer waits for
// company.
//
// A caller whose ctx ends gets its error at once. If its item has not left yet, it is left
// out of the batch. If it is in flight, the batch goes on for the others; once every caller
// of a batch has given up, the batch's ctx is cancelled, unless FinishAbandoned is set.
//
// Set the exported fields before the first Do; the zero Runner is not ready.
type Runner[T any] struct {
	// Send sends one batch, items in order of arrival. Its ctx belongs to no one caller: it
	// carries the values of the first item's ctx (a trace), not its deadline. Send reports
	// each item's outcome in the item itself (a pointer, a closure); a caller reads it once
	// Do returned nil. It runs on a goroutine of its own.
	Send func(ctx context.Context, items []T)
	// Max bounds the items of one batch; 0 is no bound.
	Max int
	// FinishAbandoned lets a batch run to its end even when every caller has given up:
	// for a client that pays for a cancelled request (a connection closed mid-answer).
	FinishAbandoned bool

	mu      sync.Mutex
	waiting []*entry[T] // for the next batch, in order of arrival
	running bool        // a batch is in flight, or about to be
}

// entry is one Do's item; done is closed once its batch was sent.
type entry[T any] struct {
	item T
	ctx  context.Context
	done chan struct{}
	// Under Runner.mu: gone once its caller stopped waiting; flight is the batch that
	// carries it, nil while it waits for one.
	gone   bool
	flight *flight
}

// flight is a batch in flight: cancel ends it once waiting (its callers still waiting,
// under Runner.mu) falls to zero.
type flight struct {
	cancel  context.CancelFunc
	waiting int
}

// Do queues item and returns once its batch has been sent: nil, and item then carries what
// Send left in it. If ctx ends first, Do returns its error at once, and item must not be
// read: a batch that already left may still be filling it.
func (r *Runner[T]) Do(ctx context.Context, item T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	e := &entry[T]{item: item, ctx: ctx, done: make(chan struct{})}
	r.mu.Lock()
	r.waiting = append(r.waiting, e)
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e.gone = true
	if f := e.flight; f != nil {
		if f.waiting--; f.waiting == 0 && !r.FinishAbandoned {
			f.cancel()
		}
	}
	return ctx.Err()
}

// Waiting is how many items wait for the next batch (the one in flight not counted).
func (r *Runner[T]) Waiting() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}

// run sends batches, one at a time, until no item waits.
func (r *Runner[T]) run() {
	for {
		entries, ctx, cancel := r.next()
		if entries == nil {
			return
		}
		items := make([]T, len(entries))
		for i, e := range entries {
			items[i] = e.item
		}
		r.Send(ctx, items)
		cancel()
		for _, e := range entries {
			close(e.done)
		}
	}
}

// next takes the items still waiting (at most Max, first come first) for the next batch,
// with its ctx; none when no item waits, and then run ends.
func (r *Runner[T]) next() ([]*entry[T], context.Context, context.CancelFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var entries []*entry[T]
	n := 0
	for _, e := range r.waiting {
		if e.gone {
			n++
			continue
		}
		if r.Max > 0 && len(entries) == r.Max {
			break
		}
		entries = append(entries, e)
		n++
	}
	r.waiting = slices.Delete(r.waiting, 0, n)
	if len(entries) == 0 {
		r.running = false
		return nil, nil, nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(entries[0].ctx))
	f := &flight{cancel: cancel, waiting: len(entries)}
	for _, e := range entries {
		e.flight = f
	}
	return entries, ctx, cancel
}
