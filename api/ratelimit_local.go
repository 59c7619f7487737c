package api

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// localLimits count the rate limits in this process's memory while the limiter's Redis does
// not answer (a failover, a full Redis answering writes with OOM, a slow one). Each limit is
// the shared one, held per process: with N replicas a client gets at most N shares during
// the outage, instead of no limit at all. The counts are GCRA, as lua.RateLimiter's, so a
// client's share is the same while Redis answers and while it does not.
type localLimits struct {
	mu     sync.Mutex
	tat    map[string]time.Time // key -> theoretical arrival time of its next request
	warned atomic.Int64         // when the fallback was last logged (Unix nanoseconds)
}

// maxLocalKeys bounds the memory a rotating script can make the fallback hold: when it is
// reached the expired keys are dropped, and if none is, all of them (a fresh share each,
// for a moment, rather than an unbounded map).
const maxLocalKeys = 100_000

func newLocalLimits() *localLimits { return &localLimits{tat: map[string]time.Time{}} }

// allow counts one request of key against limit at now, and reports whether it is allowed,
// and if not, when it would be.
func (l *localLimits) allow(key string, limit shop.RateLimit, now time.Time) (bool, time.Duration) {
	interval := limit.Period / time.Duration(limit.Rate)
	tolerance := interval * time.Duration(limit.Burst)
	l.mu.Lock()
	defer l.mu.Unlock()
	tat := l.tat[key]
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(interval)
	if allowAt := next.Add(-tolerance); now.Before(allowAt) {
		return false, allowAt.Sub(now)
	}
	if _, ok := l.tat[key]; !ok && len(l.tat) >= maxLocalKeys {
		l.prune(now)
	}
	l.tat[key] = next
	return true, 0
}

// prune drops the keys whose share is whole again, or every key if none is.
func (l *localLimits) prune(now time.Time) {
	for k, tat := range l.tat {
		if !tat.After(now) {
			delete(l.tat, k)
		}
	}
	if len(l.tat) >= maxLocalKeys {
		clear(l.tat)
	}
}
