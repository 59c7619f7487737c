package main

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// latencies is a sorted sample of durations.
type latencies []time.Duration

func newLatencies(d []time.Duration) latencies {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// pct is the p-th percentile (nearest rank); 0 for an empty sample.
func (l latencies) pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(float64(len(l))*p/100+0.5) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// recorder collects durations from many goroutines.
type recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

func (r *recorder) sorted() latencies {
	r.mu.Lock()
	defer r.mu.Unlock()
	return newLatencies(r.d)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
