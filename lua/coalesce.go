package lua

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/batch"
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
	calls *batch.Runner[func(redis.Pipeliner)]
}

// Pipeliner is what a Coalescer needs of a Redis client (a *redis.Client or a
// *redis.ClusterClient, whose pipelines go to each slot's node).
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// maxCoalescedCalls bounds the calls one pipeline carries (the room's lookup is five
// commands): a larger crowd takes more round trips, one after the other.
const maxCoalescedCalls = 200

// NewCoalescer returns a Coalescer on rdb.
func NewCoalescer(rdb Pipeliner) *Coalescer {
	return &Coalescer{calls: &batch.Runner[func(redis.Pipeliner)]{
		Max: maxCoalescedCalls,
		Send: func(ctx context.Context, queues []func(redis.Pipeliner)) {
			pipe := rdb.Pipeline()
			for _, queue := range queues {
				queue(pipe)
			}
			_, _ = pipe.Exec(ctx) // each command carries its own error
		},
		// A pipeline cancelled mid-answer costs its connection, and the client's own
		// timeouts bound it: it runs to its end even when all its callers have left.
		FinishAbandoned: true,
	}}
}

// Do queues the call's commands (queue adds them to the pipeline it is given, as with
// redis.Pipeliner, and keeps the commands it gets back) and returns once Redis answered
// them: each command then carries its own result or error (a connection error on each).
// queue runs on another goroutine. If ctx ends first, Do returns its error at once, and the
// commands must not be read: a pipeline that already left may still be filling them.
func (c *Coalescer) Do(ctx context.Context, queue func(redis.Pipeliner)) error {
	return c.calls.Do(ctx, queue)
}
