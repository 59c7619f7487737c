package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/go-redis/redis_rate/v10"
	"github.com/labstack/echo/v4"
)

// RateLimits are the limits a script meets before it costs anything: requests per client
// address on the buyer's routes (create, read, cancel), and checkouts per customer. They
// are counted in Redis (GCRA, go-redis/redis_rate), so every API replica shares them. A zero
// Limit is off.
type RateLimits struct {
	Limiter *redis_rate.Limiter
	// PerAddress: every buyer request (create, read, cancel) of one client address.
	PerAddress redis_rate.Limit
	// CheckoutsPerAddress: checkouts one client address starts, whatever customer ids it
	// sends: what bounds a script that invents customers.
	CheckoutsPerAddress redis_rate.Limit
	// PerCustomer: checkouts one customer starts, from whatever addresses.
	PerCustomer redis_rate.Limit
}

// limitAddress answers 429 with Retry-After once the caller's address has used its share of
// requests, before the body is read or any store is asked. The address is the connection's
// peer unless Config.TrustedProxies names the proxies whose X-Forwarded-For is believed (see
// NewServer), so a client cannot pick a fresh address per request.
func (s *Server) limitAddress(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.RateLimits == nil {
			return next(c)
		}
		if err := s.allow(c, "addr:"+c.RealIP(), s.RateLimits.PerAddress, "requests from your address"); err != nil {
			return err
		}
		return next(c)
	}
}

// limitCheckouts answers 429 once the caller's address, or the customer, has started its
// share of checkouts: one script inventing customer ids is bounded by its address, one
// customer spread over many addresses by its id.
func (s *Server) limitCheckouts(c echo.Context, customerID string) error {
	if s.RateLimits == nil {
		return nil
	}
	if err := s.allow(c, "checkouts-addr:"+c.RealIP(), s.RateLimits.CheckoutsPerAddress, "checkouts from your address"); err != nil {
		return err
	}
	return s.allow(c, "checkouts-customer:"+customerID, s.RateLimits.PerCustomer, "checkouts for this customer")
}

func (s *Server) allow(c echo.Context, key string, limit redis_rate.Limit, what string) error {
	if s.RateLimits.Limiter == nil || limit.IsZero() {
		return nil
	}
	res, err := s.RateLimits.Limiter.Allow(c.Request().Context(), key, limit)
	if err != nil {
		// A limiter that cannot count lets the request through: Redis down is answered by
		// the steps that need it, and the limits are a guard, not the judge of stock.
		s.Logger.Warn("rate limit not checked", "key", key, "error", err)
		return nil
	}
	if res.Allowed > 0 {
		return nil
	}
	retry := int(math.Ceil(res.RetryAfter.Seconds()))
	c.Response().Header().Set("Retry-After", strconv.Itoa(max(retry, 1)))
	return problem(http.StatusTooManyRequests, "rate_limited", fmt.Sprintf("too many %s: at most %s; try again in %d s", what, limit, max(retry, 1)))
}
