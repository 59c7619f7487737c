package lua

import (
	"context"
	"slices"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Coalescer sends the Redis commands of concurrent callers together. One pipeline is in
// flight at a time; the calls that come while it runs go in the next one, all in one round
// trip. A lone call leaves at once (no timer waits for company); a crowd costs the client and
// Redis one write and one read per round trip instead of one per call. Each call's commands
// stay together and in order, and Redis runs a pipeline's commands one after the other, so a
// call sees what it would see alone, after the calls before it.
//
// What the API asks of Redis for every request goes through one (the waiting room's lookup,
// and the rate limiter's scripts through CoalescedScripts): a sold-out crowd, answered from
// memory otherwise, paid a round trip each for them.
type Coalescer struct {
	rdb Pipeliner

	mu      sync.Mutex
	waiting []*coalescedCall // for the next pipeline, in order of arrival
	running bool             // a pipeline is in flight, or about to be
}

// Pipeliner is what a Coalescer needs of a Redis client (a *redis.Client or a
// *redis.ClusterClient, whose pipelines go to each slot's node).
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// maxCoalescedCalls bounds the calls one pipeline carries (the room's lookup is five
// commands): a larger crowd takes more round trips, one after the other.
const maxCoalescedCalls = 200

// coalescedCall is one call's commands, queued by queue on the shared pipeline; done is
// closed once that pipeline answered. gone (under Coalescer.mu) marks a call whose caller
// stopped waiting before its pipeline left: it is left out.
type coalescedCall struct {
	ctx   context.Context
	queue func(redis.Pipeliner)
	done  chan struct{}
	gone  bool
}

// NewCoalescer returns a Coalescer on rdb.
func NewCoalescer(rdb Pipeliner) *Coalescer { return &Coalescer{rdb: rdb} }

// Do queues the call's commands (queue adds them to the pipeline it is given, as with
// redis.Pipeliner, and keeps the commands it gets back) and returns once Redis answered
// them: each command then carries its own result or error (a connection error on each).
// queue runs on another goroutine. If ctx ends first, Do returns its error at once, and the
// commands must not be read: a pipeline that already left may still be filling them.
func (c *Coalescer) Do(ctx context.Context, queue func(redis.Pipeliner)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	call := &coalescedCall{ctx: ctx, queue: queue, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, call)
	if !c.running {
		c.running = true
		go c.run()
	}
	c.mu.Unlock()
	select {
	case <-call.done:
		return nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	call.gone = true
	c.mu.Unlock()
	return ctx.Err()
}

// run sends pipelines, one at a time, until no call waits.
func (c *Coalescer) run() {
	for {
		calls := c.next()
		if calls == nil {
			return
		}
		// The pipeline belongs to no one call: it carries the first one's context values
		// (a trace) without its deadline; the client's own timeouts bound it.
		ctx := context.WithoutCancel(calls[0].ctx)
		pipe := c.rdb.Pipeline()
		for _, call := range calls {
			call.queue(pipe)
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for _, call := range calls {
			close(call.done)
		}
	}
}

// next takes the calls still waiting (at most maxCoalescedCalls, first come first) for the
// next pipeline; none when no call waits, and then run ends.
func (c *Coalescer) next() []*coalescedCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	var calls []*coalescedCall
	n := 0
	for _, call := range c.waiting {
		if call.gone {
			n++
			continue
		}
		if len(calls) == maxCoalescedCalls {
			break
		}
		calls = append(calls, call)
		n++
	}
	c.waiting = slices.Delete(c.waiting, 0, n)
	if len(calls) == 0 {
		c.running = false
		return nil
	}
	return calls
}
