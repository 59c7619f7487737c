package lua

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// heldRedis is a client whose pipelines wait, once their commands are queued, for the test
// to let them through (a send on door lets one, closing it lets all), so the test decides
// which calls meet in one pipeline. Each pipeline's length is sent on sent as it waits.
// Its keys (key) are the test's own.
type heldRedis struct {
	rdb   *redis.Client
	sku   string
	door  chan struct{}
	sent  chan int
	execs atomic.Int64
}

// newHeldCoalescer returns a Coalescer on a heldRedis of its own.
func newHeldCoalescer(t *testing.T) (*Coalescer, *heldRedis) {
	rdb := testClient(t)
	h := &heldRedis{rdb: rdb, sku: testSKU(t, rdb), door: make(chan struct{}), sent: make(chan int, 100)}
	return NewCoalescer(h), h
}

func (h *heldRedis) key(name string) string { return "coalesce:{" + h.sku + "}:" + name }

func (h *heldRedis) Pipeline() redis.Pipeliner { return heldPipe{h.rdb.Pipeline(), h} }

type heldPipe struct {
	redis.Pipeliner
	h *heldRedis
}

func (p heldPipe) Exec(ctx context.Context) ([]redis.Cmder, error) {
	p.h.execs.Add(1)
	p.h.sent <- p.Len()
	<-p.h.door
	return p.Pipeliner.Exec(ctx)
}

// nextPipeline is the length of the next pipeline, once it waits at the door.
func (h *heldRedis) nextPipeline(t *testing.T) int {
	t.Helper()
	return testenv.Receive(t, "a pipeline", h.sent)
}

// incr is a call of two commands on key: INCR, then GET.
func incr(ctx context.Context, c *Coalescer, key string) (int64, string, error) {
	var n *redis.IntCmd
	var get *redis.StringCmd
	if err := c.Do(ctx, func(p redis.Pipeliner) {
		n = p.Incr(ctx, key)
		get = p.Get(ctx, key)
	}); err != nil {
		return 0, "", err
	}
	if err := n.Err(); err != nil {
		return 0, "", err
	}
	return n.Val(), get.Val(), get.Err()
}

type incrAnswer struct {
	n   int64
	got string
	err error
}

func goIncr(ctx context.Context, c *Coalescer, key string) <-chan incrAnswer {
	return testenv.Go(func() incrAnswer {
		n, got, err := incr(ctx, c, key)
		return incrAnswer{n, got, err}
	})
}

func answered(t *testing.T, ch <-chan incrAnswer) incrAnswer {
	t.Helper()
	return testenv.Receive(t, "an answer", ch)
}

// The calls that come while a pipeline is in flight go together in the next one, each with
// its own results, its commands together and in order: the second of a call's commands sees
// its first.
func TestCoalescerSendsTheCallsThatWaitedInOnePipeline(t *testing.T) {
	t.Parallel()
	c, held := newHeldCoalescer(t)
	ctx := t.Context()

	first := goIncr(ctx, c, held.key("first"))
	if n := held.nextPipeline(t); n != 2 {
		t.Errorf("the first pipeline carries %d commands, want its call's 2", n)
	}
	const crowd = 50
	shared := held.key("shared")
	var answers []<-chan incrAnswer
	for range crowd {
		answers = append(answers, goIncr(ctx, c, shared))
	}
	testenv.Eventually(t, "the crowd waits", func() bool { return c.calls.Waiting() == crowd })
	close(held.door)
	if a := answered(t, first); a.err != nil || a.n != 1 || a.got != "1" {
		t.Errorf("first call: %+v, want 1 and \"1\"", a)
	}
	seen := map[int64]bool{}
	for _, ch := range answers {
		a := answered(t, ch)
		if a.err != nil || a.got != fmt.Sprint(a.n) || seen[a.n] || a.n < 1 || a.n > crowd {
			t.Errorf("a call of the crowd: %+v (seen before: %v), want its own count from 1 to %d read back", a, seen[a.n], crowd)
		}
		seen[a.n] = true
	}
	if n := held.nextPipeline(t); n != 2*crowd {
		t.Errorf("the second pipeline carries %d commands, want %d", n, 2*crowd)
	}
	if n := held.execs.Load(); n != 2 {
		t.Errorf("%d pipelines for 1 + %d calls, want 2", n, crowd)
	}
}

// With Redis down every call's commands carry the error.
func TestCoalescerWithRedisDownGivesEachCommandTheError(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = down.Close() })
	c := NewCoalescer(down)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			if _, _, err := incr(t.Context(), c, fmt.Sprintf("coalesce:down:%d", i)); err == nil {
				t.Error("a call with Redis down answered no error")
			}
		})
	}
	wg.Wait()
	room := NewRoom(down, "coalesce-down")
	if _, err := room.Lookup(t.Context(), "c-1"); err == nil {
		t.Error("a room lookup with Redis down answered no error")
	}
}

// A pipeline runs to its end even when its callers have left: cancelling it mid-answer
// would cost its connection.
func TestCoalescerFinishesAPipelineItsCallersLeft(t *testing.T) {
	t.Parallel()
	c, held := newHeldCoalescer(t)
	key := held.key("left")
	leaving, leave := context.WithCancel(t.Context())
	gone := goIncr(leaving, c, key)
	held.nextPipeline(t)
	leave()
	if a := answered(t, gone); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while its pipeline is in flight: %v, want context.Canceled", a.err)
	}
	close(held.door)
	testenv.Eventually(t, "the left pipeline's INCR ran", func() bool {
		n, err := held.rdb.Exists(t.Context(), key).Result()
		return err == nil && n == 1
	})
}
