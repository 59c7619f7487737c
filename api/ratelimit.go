package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
)

// RateLimits are the limits a script meets before it costs anything: requests per client
// address on the buyer's routes, checkouts per address, and checkouts per customer. They are
// counted in Redis (GCRA, lua.RateLimiter), so every API replica shares them; while
// Redis does not answer, each process counts them in memory (localLimits). A zero Limit is
// off.
//
// Each request pays one count per dimension it is limited on: a read or a cancel counts
// against its address's requests, a new checkout against its address's checkouts (before
// its body is read) and its customer's. Every count is a script run in Redis, which a
// sold-out crowd pays on every refused POST.
type RateLimits struct {
	Limiter Limiter
	// PerAddress: the reads and cancels of one client address, and its checkouts too when
	// CheckoutsPerAddress is off.
	PerAddress shop.RateLimit
	// CheckoutsPerAddress: checkouts one client address starts, whatever customer ids it
	// sends: what bounds a script that invents customers.
	CheckoutsPerAddress shop.RateLimit
	// PerCustomer: checkouts one customer starts, from whatever addresses.
	PerCustomer shop.RateLimit
	// CheckoutsPerClient: checkouts one authenticated client (a shop backend, server mode)
	// starts, for all its buyers. It replaces the client's own address's checkouts, which
	// would make every buyer behind one backend host share one address's share.
	CheckoutsPerClient shop.RateLimit

	// local counts the limits in this process while Redis does not answer (NewServer).
	local *localLimits
}

// Limiter counts one request under a key against a limit shared by every API replica
// (lua.RateLimiter: GCRA in Redis).
type Limiter interface {
	Allow(ctx context.Context, key string, limit shop.RateLimit) (shop.RateAnswer, error)
}

// DefaultRatePerAddress is how many buyer reads and cancels a second one client address may
// send (in bursts of twice that): a buyer sends a few, a page polling with ?wait one every few
// seconds. DefaultCheckoutsPerAddress is how many checkouts a minute one address may start,
// whatever customer ids it sends: a household or an office. DefaultRatePerCustomer is how many
// a minute one customer may start: a buyer with a few tabs and retries.
// DefaultCheckoutsPerClient is how many a minute one shop backend may start for all its
// buyers: 100 a second, a sale's crowd, so that admission control and the waiting room are
// what a sale meets, while a runaway backend is still bounded.
const (
	DefaultRatePerAddress      = 20
	DefaultCheckoutsPerAddress = 10
	DefaultRatePerCustomer     = 10
	DefaultCheckoutsPerClient  = 6000
)

// limitAddress answers 429 with Retry-After once the caller's address has used its share of
// reads and cancels, before the checkout secret is checked or any store is asked. The
// address is the connection's peer unless Config.TrustedProxies names the proxies whose
// X-Forwarded-For is believed (see NewServer), so a client cannot pick a fresh address per
// request; an IPv6 address counts by its prefix (addressKey). An authenticated client's
// requests count only against the buyer's address it forwards (limitedAddress).
func (s *Server) limitAddress(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.RateLimits == nil {
			return next(c)
		}
		if addr, ok := s.limitedAddress(c); ok {
			if err := s.allow(c.Request().Context(), "addr:"+addr, s.RateLimits.PerAddress, "requests from your address"); err != nil {
				return err
			}
		}
		return next(c)
	}
}

// limitCheckouts answers 429 once the caller has started its share of checkouts, before the
// body is read: one script inventing customer ids is bounded by its address, and refused
// for the price of one count. A new checkout counts against the address's checkouts, a
// tighter budget than its requests (10 a minute against 20 a second by default), and not
// against both: each count is a script run in Redis. With CheckoutsPerAddress off, a
// checkout counts as one of the address's requests.
//
// An authenticated client (a shop backend, after requireClient) counts against its own
// checkouts instead (CheckoutsPerClient), and its buyer's address only when it forwards one
// (limitedAddress); each customer is still limited by limitCustomer.
func (s *Server) limitCheckouts(next echo.HandlerFunc) echo.HandlerFunc {
	asRequest := s.limitAddress(next)
	return func(c echo.Context) error {
		if s.RateLimits == nil {
			return next(c)
		}
		if client, _ := c.Get(ctxClient).(string); client != "" {
			if err := s.allow(c.Request().Context(), "checkouts-client:"+client, s.RateLimits.CheckoutsPerClient, "checkouts of your client"); err != nil {
				return err
			}
		}
		if s.RateLimits.CheckoutsPerAddress.IsZero() {
			return asRequest(c)
		}
		if addr, ok := s.limitedAddress(c); ok {
			if err := s.allow(c.Request().Context(), "checkouts-addr:"+addr, s.RateLimits.CheckoutsPerAddress, "checkouts from your address"); err != nil {
				return err
			}
		}
		return next(c)
	}
}

// limitCustomer answers 429 once the customer has started its share of checkouts, from
// whatever addresses.
func (s *Server) limitCustomer(ctx context.Context, customerID string) error {
	if s.RateLimits == nil {
		return nil
	}
	return s.allow(ctx, "checkouts-customer:"+customerID, s.RateLimits.PerCustomer, "checkouts for this customer")
}

func (s *Server) allow(ctx context.Context, key string, limit shop.RateLimit, what string) error {
	if s.RateLimits.Limiter == nil || limit.IsZero() {
		return nil
	}
	var allowed bool
	var retryAfter time.Duration
	res, err := s.RateLimits.Limiter.Allow(ctx, key, limit)
	switch {
	case err == nil:
		allowed, retryAfter = res.Allowed, res.RetryAfter
	case s.RateLimits.local == nil: // limits NewServer did not see: nothing counts locally
		s.Logger.Warn("rate limit not checked", "key", key, "error", err)
		return nil
	default:
		// A limiter that cannot count in Redis counts in this process: the limits are what
		// a script meets on the day Redis fails over, not a guard that steps aside then.
		metrics.RateLimitsCountedLocally.Inc()
		s.warnCountedLocally(key, err)
		allowed, retryAfter = s.RateLimits.local.allow(key, limit, time.Now())
	}
	if allowed {
		return nil
	}
	retry := max(int(math.Ceil(retryAfter.Seconds())), 1)
	p := problem(http.StatusTooManyRequests, "rate_limited", fmt.Sprintf("too many %s: at most %s; try again in %d s", what, limit, retry))
	p.retryAfter = retry
	return p
}

// warnCountedLocally logs that the limits are counted in this process, at most once a
// second: a sale's requests during a Redis outage would otherwise be as many log lines.
func (s *Server) warnCountedLocally(key string, err error) {
	now := time.Now().UnixNano()
	warned := &s.RateLimits.local.warned
	last := warned.Load()
	if now-last < int64(time.Second) || !warned.CompareAndSwap(last, now) {
		return
	}
	s.Logger.Warn("rate limits counted in this process: redis did not answer", "key", key, "error", err)
}
