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
)

// heldRedis is a client whose pipelines wait, once their commands are queued, for the test
// to let them through (a send on door lets one, closing it lets all), so the test decides
// which calls meet in one pipeline. Each pipeline's length is sent on sent as it waits.
type heldRedis struct {
	rdb   *redis.Client
	door  chan struct{}
	sent  chan int
	execs atomic.Int64
}

func newHeldRedis(rdb *redis.Client) *heldRedis {
	return &heldRedis{rdb: rdb, door: make(chan struct{}), sent: make(chan int, 100)}
}

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

func (h *heldRedis) nextPipeline(t *testing.T) int {
	t.Helper()
	select {
	case n := <-h.sent:
		return n
	case <-time.After(5 * time.Second):
		t.Fatal("no pipeline within 5 s")
		return 0
	}
}

// waiting is how many calls wait for the next pipeline.
func (c *Coalescer) waitingCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}

func (c *Coalescer) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
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
	out := make(chan incrAnswer, 1)
	go func() {
		n, got, err := incr(ctx, c, key)
		out <- incrAnswer{n, got, err}
	}()
	return out
}

func answered(t *testing.T, ch <-chan incrAnswer) incrAnswer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer within 10 s")
		return incrAnswer{}
	}
}

// The calls that come while a pipeline is in flight go together in the next one, each with
// its own results, its commands together and in order: the second of a call's commands sees
// its first.
func TestCoalescerSendsTheCallsThatWaitedInOnePipeline(t *testing.T) {
	t.Parallel()
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	held := newHeldRedis(rdb)
	c := NewCoalescer(held)
	ctx := t.Context()

	first := goIncr(ctx, c, "coalesce:{"+sku+"}:first")
	if n := held.nextPipeline(t); n != 2 {
		t.Errorf("the first pipeline carries %d commands, want its call's 2", n)
	}
	const crowd = 50
	shared := "coalesce:{" + sku + "}:shared"
	var answers []<-chan incrAnswer
	for range crowd {
		answers = append(answers, goIncr(ctx, c, shared))
	}
	waitFor(t, "the crowd waits", func() bool { return c.waitingCount() == crowd })
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

// No pipeline carries more than maxCoalescedCalls calls.
func TestCoalescerSplitsALargeCrowd(t *testing.T) {
	t.Parallel()
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	held := newHeldRedis(rdb)
	c := NewCoalescer(held)
	ctx := t.Context()
	first := goIncr(ctx, c, "coalesce:{"+sku+"}:first")
	held.nextPipeline(t)
	crowd := maxCoalescedCalls + 7
	var answers []<-chan incrAnswer
	for range crowd {
		answers = append(answers, goIncr(ctx, c, "coalesce:{"+sku+"}:crowd"))
	}
	waitFor(t, "the crowd waits", func() bool { return c.waitingCount() == crowd })
	close(held.door)
	answered(t, first)
	for _, ch := range answers {
		if a := answered(t, ch); a.err != nil {
			t.Fatalf("a call of the crowd: %v", a.err)
		}
	}
	if a, b := held.nextPipeline(t), held.nextPipeline(t); a != 2*maxCoalescedCalls || b != 2*7 {
		t.Errorf("the crowd's pipelines carry %d and %d commands, want %d and %d", a, b, 2*maxCoalescedCalls, 2*7)
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

// A call whose context has ended sends nothing; one that ends while it waits returns at
// once and is left out of the next pipeline; one that ends while its pipeline is in flight
// returns at once, and the other calls of that pipeline get their answers.
func TestCoalescerAnswersACancelledCallAtOnce(t *testing.T) {
	t.Parallel()
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	held := newHeldRedis(rdb)
	c := NewCoalescer(held)
	ctx := t.Context()
	key := func(s string) string { return "coalesce:{" + sku + "}:" + s }

	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := incr(done, c, key("never")); !errors.Is(err, context.Canceled) {
		t.Errorf("a call cancelled before: %v, want context.Canceled", err)
	}
	if c.isRunning() || held.execs.Load() != 0 {
		t.Error("a cancelled call sent a pipeline")
	}

	blocker := goIncr(ctx, c, key("blocker"))
	held.nextPipeline(t)
	leaving, leave := context.WithCancel(ctx)
	quitter, quit := context.WithCancel(ctx)
	gone := goIncr(leaving, c, key("gone"))
	stays := goIncr(ctx, c, key("stays"))
	waitFor(t, "two calls wait", func() bool { return c.waitingCount() == 2 })
	quitted := goIncr(quitter, c, key("quit"))
	waitFor(t, "three calls wait", func() bool { return c.waitingCount() == 3 })
	quit()
	if a := answered(t, quitted); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while waiting: %v, want context.Canceled", a.err)
	}
	held.door <- struct{}{} // the blocker's pipeline
	answered(t, blocker)
	if n := held.nextPipeline(t); n != 4 {
		t.Errorf("the next pipeline carries %d commands, want 4 (two calls, not the one that gave up)", n)
	}
	leave()
	if a := answered(t, gone); !errors.Is(a.err, context.Canceled) {
		t.Errorf("cancelled while its pipeline is in flight: %v, want context.Canceled", a.err)
	}
	held.door <- struct{}{}
	if a := answered(t, stays); a.err != nil || a.n != 1 {
		t.Errorf("the call beside a cancelled one: %+v, want 1", a)
	}
	if n, err := rdb.Exists(ctx, key("quit")).Result(); err != nil || n != 0 {
		t.Errorf("the call that gave up before its pipeline left ran anyway (%d, %v)", n, err)
	}
}
