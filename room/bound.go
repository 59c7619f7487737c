package room

import (
	"container/list"
	"context"
	"errors"
	"sync"
	"time"
)

// Admission control: how many checkout requests talk to Temporal at once.
//
// A fixed bound is right for one machine at one load only: too high and admitted requests
// queue behind each other inside Temporal (every one of them slow, the winners of a flash
// sale included); too low and a bigger machine idles. So the bound follows measured
// capacity, AIMD on the admitted requests' own latency (admission to answer, which is the
// reservation's round trip through Temporal and the saga's first steps):
//
//   - an answer within the target, while the bound was in use, grows it by one per bound's
//     worth of answers (additive increase);
//   - an answer slower than the target shrinks it by a tenth (multiplicative decrease), once
//     per round: only a request admitted after the last cut cuts again, so the answers of
//     one slow burst cut it once, not to the floor.
//
// Past the bound a request waits, first come first served, up to AdmissionWait, then is shed
// with 503 and Retry-After: a flash-sale crowd gets a quick "try again" instead of a pile of
// slow answers. At most one bound's worth of requests waits: a request that finds that many
// ahead of it would wait more than a round of answers, so it is shed at once, and asked to
// come back in 2 s rather than 1, which spreads a crowd's retries over a longer sale.

// Admission defaults. The bound starts at 32 (what a dev server on two cores took with no
// request timing out, when the bound was fixed) and moves between 8 and 256. The target is
// well under the flash sale's 1 s goal for a winner's answer, leaving room for the wait.
const (
	DefaultMaxStarting    = 256
	DefaultWait           = 2 * time.Second
	DefaultTarget         = 300 * time.Millisecond
	initialAdmissionLimit = 32
	minAdmissionLimit     = 8
	admissionBackoff      = 0.9
)

// Bound is the adaptive bound. The zero value is not usable; see NewBound.
type Bound struct {
	target   time.Duration
	min, max float64
	now      func() time.Time

	mu       sync.Mutex
	limit    float64
	inFlight int
	admitted uint64     // requests admitted so far; each one's number is its place in line
	cutAt    uint64     // the number of the last request admitted before the last decrease
	waiting  *list.List // of *waiter, oldest first
}

type waiter struct {
	admitted chan struct{} // closed when a place is handed to this waiter
	done     bool          // handed a place or gave up; guarded by Bound.mu
	number   uint64        // its admission number, once admitted
}

// NewBound is a bound that starts at 32 places (fewer if max is lower) and moves up to max,
// aiming each request's latency under target.
func NewBound(max int, target time.Duration) *Bound {
	limit := min(float64(initialAdmissionLimit), float64(max))
	return &Bound{
		target: target, min: min(minAdmissionLimit, float64(max)), max: float64(max),
		now: time.Now, limit: limit, waiting: list.New(),
	}
}

// Why a request got no place.
var (
	ErrRoundWaiting = errors.New("a round of requests is already waiting")
	ErrWaitedOut    = errors.New("no place came in time")
)

// Acquire waits up to wait for a place. It returns the function that gives the place back,
// or why none came (ErrRoundWaiting at once, ErrWaitedOut after the wait or when ctx ended).
func (l *Bound) Acquire(ctx context.Context, wait time.Duration) (release func(), err error) {
	l.mu.Lock()
	if l.waiting.Len() == 0 && l.inFlight < int(l.limit) {
		n := l.admit()
		l.mu.Unlock()
		return l.releaser(n), nil
	}
	if l.waiting.Len() >= int(l.limit) {
		l.mu.Unlock()
		return nil, ErrRoundWaiting
	}
	w := &waiter{admitted: make(chan struct{})}
	e := l.waiting.PushBack(w)
	l.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.admitted:
		return l.releaser(w.number), nil
	case <-timer.C:
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.done { // handed a place just as the wait ended: take it
		return l.releaser(w.number), nil
	}
	w.done = true
	l.waiting.Remove(e)
	return nil, ErrWaitedOut
}

// TryAcquire takes a place only if one is free now and nobody here waits for one; nil
// otherwise.
func (l *Bound) TryAcquire() (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.waiting.Len() > 0 || l.inFlight >= int(l.limit) {
		return nil
	}
	return l.releaser(l.admit())
}

// admit takes a place; l.mu is held.
func (l *Bound) admit() uint64 {
	l.inFlight++
	l.admitted++
	return l.admitted
}

// releaser returns the function that ends admitted request number n, measuring it.
func (l *Bound) releaser(n uint64) func() {
	start := l.now()
	var once sync.Once
	return func() { once.Do(func() { l.release(n, l.now().Sub(start)) }) }
}

// release gives a place back, adjusts the bound by the request's latency and hands free
// places to the oldest waiters.
func (l *Bound) release(n uint64, latency time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	saturated := l.inFlight >= int(l.limit)
	l.inFlight--
	switch {
	case latency > l.target:
		if n > l.cutAt {
			l.limit = max(l.min, l.limit*admissionBackoff)
			l.cutAt = l.admitted
		}
	case saturated:
		l.limit = min(l.max, l.limit+1/l.limit)
	}
	for l.waiting.Len() > 0 && l.inFlight < int(l.limit) {
		w := l.waiting.Remove(l.waiting.Front()).(*waiter)
		w.done = true
		w.number = l.admit()
		close(w.admitted)
	}
}

// Current returns the bound and the requests admitted now.
func (l *Bound) Current() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit), l.inFlight
}
