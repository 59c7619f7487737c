package room

import (
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
		release := l.TryAcquire()
		if release == nil {
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

func TestAdmissionStartsAt32AndTakesNonePastIt(t *testing.T) {
	l, _ := testLimiter(DefaultMaxStarting)
	fill(t, l, initialAdmissionLimit)
	if release := l.TryAcquire(); release != nil {
		t.Fatal("a place past the bound")
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

// A request that starts no saga takes a place past the bound, counted (so the carts in line
// wait for it) and measured, and waits for none.
func TestATakenPlaceIsCountedPastTheBound(t *testing.T) {
	l, _ := testLimiter(4)
	inFlight := fill(t, l, 4)
	taken := l.Take()
	if _, n := l.Current(); n != 5 {
		t.Fatalf("%d in flight, want 5", n)
	}
	inFlight[0]()
	if release := l.TryAcquire(); release != nil {
		t.Fatal("a place freed while one was taken past the bound went to a new request")
	}
	taken()
	taken() // a second call of the same release gives nothing back twice
	if release := l.TryAcquire(); release == nil {
		t.Fatal("no place once the taken one was given back")
	}
}

// The runner waits for a place on Freed: a place given back wakes it.
func TestAGivenBackPlaceWakesTheWaitForOne(t *testing.T) {
	l, _ := testLimiter(4)
	inFlight := fill(t, l, 4)
	freed := l.Freed()
	select {
	case <-freed:
		t.Fatal("freed before a place was given back")
	default:
	}
	inFlight[0]()
	select {
	case <-freed:
	case <-time.After(10 * time.Second):
		t.Fatal("a place was given back and the wait for one did not end")
	}
	if release := l.TryAcquire(); release == nil {
		t.Fatal("no place after one was given back")
	}
}
