package shop

import (
	"fmt"
	"time"
)

// RateLimit is a GCRA limit: Rate requests per Period, in bursts of at most Burst. The zero
// limit is off.
type RateLimit struct {
	Rate   int
	Burst  int
	Period time.Duration
}

// IsZero reports whether the limit is off.
func (l RateLimit) IsZero() bool { return l == RateLimit{} }

// String reads "10 req/m (burst 10)".
func (l RateLimit) String() string {
	period := l.Period.String()
	switch l.Period {
	case time.Second:
		period = "s"
	case time.Minute:
		period = "m"
	case time.Hour:
		period = "h"
	}
	return fmt.Sprintf("%d req/%s (burst %d)", l.Rate, period, l.Burst)
}

// RateAnswer is a limiter's answer to one request: allowed, or when to try again.
type RateAnswer struct {
	Allowed    bool
	RetryAfter time.Duration
}
