package room

import (
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
// It is a bound, not a line: nothing waits in it. A new cart past it waits in the room's one
// line (Line, shared by every replica), which the runner takes from as places free up
// (Freed); a request for a cart that has a saga takes a place even past the bound (Take),
// counted and measured: it starts nothing, and must not wait behind the carts in line.

// Admission defaults. The bound starts at 32 (what a dev server on two cores took with no
// request timing out, when the bound was fixed) and moves between 8 and 256. The target is
// well under the flash sale's 1 s goal for a winner's answer.
const (
	DefaultMaxStarting    = 256
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
	admitted uint64        // requests admitted so far; each one's number is its place in line
	cutAt    uint64        // the number of the last request admitted before the last decrease
	freed    chan struct{} // closed, and replaced, when a place is given back
}

// NewBound is a bound that starts at 32 places (fewer if max is lower) and moves up to max,
// aiming each request's latency under target.
func NewBound(max int, target time.Duration) *Bound {
	limit := min(float64(initialAdmissionLimit), float64(max))
	return &Bound{
		target: target, min: min(minAdmissionLimit, float64(max)), max: float64(max),
		now: time.Now, limit: limit, freed: make(chan struct{}),
	}
}

// TryAcquire takes a place if one is free now, and returns the function that gives it back;
// nil when the bound is full.
func (l *Bound) TryAcquire() (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inFlight >= int(l.limit) {
		return nil
	}
	return l.releaser(l.admit())
}

// Take takes a place even when the bound is full: for a request that starts no saga (its
// cart has one), which is measured with the others but waits for none.
func (l *Bound) Take() (release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.releaser(l.admit())
}

// Freed is closed when a place is next given back.
func (l *Bound) Freed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.freed
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

// release gives a place back and adjusts the bound by the request's latency.
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
	close(l.freed)
	l.freed = make(chan struct{})
}

// Current returns the bound and the requests admitted now.
func (l *Bound) Current() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int(l.limit), l.inFlight
}
