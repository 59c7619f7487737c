package room

import (
	"context"
	"errors"
	"testing"
	"time"
)

// clock is a test clock: a request's latency is how far the test moved it.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func testLimiter(max int) (*Bound, *clock) {
	c := &clock{t: time.Unix(0, 0)}
	l := NewBound(max, DefaultTarget)
	l.now = c.now
	return l, c
}

// fill takes n places that are admitted at once, failing if one has to wait, and returns
// their release functions.
func fill(t *testing.T, l *Bound, n int) []func() {
	t.Helper()
	var releases []func()
	for i := range n {
		release, err := l.Acquire(context.Background(), 0)
		if err != nil {
			t.Fatalf("place %d of %d was not admitted at once", i+1, n)
		}
		releases = append(releases, release)
	}
	return releases
}

func bound(l *Bound) int {
	limit, _ := l.Current()
	return limit
}

func TestAdmissionStartsAt32AndShedsPastIt(t *testing.T) {
	l, _ := testLimiter(DefaultMaxStarting)
	fill(t, l, initialAdmissionLimit)
	if _, err := l.Acquire(context.Background(), 10*time.Millisecond); !errors.Is(err, ErrWaitedOut) {
		t.Fatalf("a request past the bound, with no round waiting, got %v; want it shed after its wait (%v)", err, ErrWaitedOut)
	}
	if limit, inFlight := l.Current(); limit != initialAdmissionLimit || inFlight != initialAdmissionLimit {
		t.Fatalf("bound %d with %d in flight, want %d and %d", limit, inFlight, initialAdmissionLimit, initialAdmissionLimit)
	}
}

func TestAdmissionGrowsWhileFastAndSaturated(t *testing.T) {
	l, _ := testLimiter(DefaultMaxStarting)
	inFlight := fill(t, l, initialAdmissionLimit)
	// Every answer is fast and its place is taken again at once (and any new one too): the
	// bound is in use, so it grows by about one per bound's worth of answers.
	const answers = 10 * initialAdmissionLimit
	for range answers {
		inFlight[0]()
		inFlight = inFlight[1:]
		for {
			if limit, n := l.Current(); n >= limit {
				break
			}
			inFlight = append(inFlight, fill(t, l, 1)...)
		}
	}
	if got := bound(l); got < initialAdmissionLimit+5 || got > initialAdmissionLimit+10 {
		t.Fatalf("after %d fast answers the bound is %d, want about %d", answers, got, initialAdmissionLimit+9)
	}
}

func TestAdmissionDoesNotGrowWhileIdle(t *testing.T) {
	l, _ := testLimiter(DefaultMaxStarting)
	for range 1000 {
		fill(t, l, 1)[0]()
	}
	if got := bound(l); got != initialAdmissionLimit {
		t.Fatalf("one request at a time moved the bound to %d; an unused bound says nothing about capacity", got)
	}
}

func TestAdmissionSlowBurstCutsOnce(t *testing.T) {
	l, clk := testLimiter(DefaultMaxStarting)
	burst := fill(t, l, initialAdmissionLimit)
	clk.advance(time.Second) // every one of them answers slowly
	for _, release := range burst {
		release()
	}
	if got := bound(l); got != 28 { // 32 x 0.9, once
		t.Fatalf("one slow burst cut the bound to %d, want 28 (a tenth, once)", got)
	}
	// Slow for ever: every new request's answer cuts again, down to the floor, never below.
	for range 100 {
		release := fill(t, l, 1)[0]
		clk.advance(time.Second)
		release()
	}
	if got := bound(l); got != minAdmissionLimit {
		t.Fatalf("always slow: bound %d, want the floor %d", got, minAdmissionLimit)
	}
}

func TestAdmissionNeverAboveTheCap(t *testing.T) {
	l, _ := testLimiter(8)
	inFlight := fill(t, l, 8)
	for range 1000 {
		inFlight[0]()
		inFlight = append(inFlight[1:], fill(t, l, 1)...)
	}
	if got := bound(l); got != 8 {
		t.Fatalf("bound %d, want the cap 8", got)
	}
}

func TestAdmissionHandsFreedPlacesToTheOldestWaiter(t *testing.T) {
	l, _ := testLimiter(4)
	inFlight := fill(t, l, 4)
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			if _, err := l.Acquire(context.Background(), time.Minute); err == nil {
				order <- i
			}
		}()
		// The second waiter queues only after the first one.
		deadline := time.Now().Add(10 * time.Second)
		for {
			l.mu.Lock()
			n := l.waiting.Len()
			l.mu.Unlock()
			if n == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	inFlight[0]()
	if first := <-order; first != 0 {
		t.Fatalf("the freed place went to waiter %d, want the oldest (0)", first)
	}
	inFlight[1]()
	if second := <-order; second != 1 {
		t.Fatalf("the second place went to waiter %d, want 1", second)
	}
	if _, n := l.Current(); n != 4 {
		t.Fatalf("%d in flight after handing over two places, want 4", n)
	}
}

func TestAdmissionShedsAtOnceWhenARoundIsWaiting(t *testing.T) {
	l, _ := testLimiter(4)
	fill(t, l, 4)
	for range 4 {
		go l.Acquire(context.Background(), time.Minute)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		n := l.waiting.Len()
		l.mu.Unlock()
		if n == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 waiters queued", n)
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if _, err := l.Acquire(context.Background(), time.Minute); !errors.Is(err, ErrRoundWaiting) {
		t.Fatalf("a fifth waiter behind a full round got %v, want %v", err, ErrRoundWaiting)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("shed after %s; with a round already waiting it must not wait for the minute", waited)
	}
}

func TestAdmissionShedsWhenTheRequestEnds(t *testing.T) {
	l, _ := testLimiter(4)
	inFlight := fill(t, l, 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Acquire(ctx, time.Minute); err == nil {
		t.Fatal("a request whose context ended was admitted")
	}
	inFlight[0]()
	inFlight[0]() // a second call of the same release gives nothing back twice
	if _, n := l.Current(); n != 3 {
		t.Fatalf("%d in flight, want 3: the place of the request that gave up stays free, and one release frees one place", n)
	}
}
