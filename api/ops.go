package api

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/sync/singleflight"
)

// readyTimeout bounds each readiness check, so /readyz answers even while a dependency hangs.
const readyTimeout = 2 * time.Second

// readyCacheTTL is how long /readyz answers from its last round of checks. The endpoint is
// public, and a round costs a Postgres, a Redis and a Temporal call (each allowed
// readyTimeout) and a read of the workers' heartbeats: with the cache a flood of probes costs
// one round a second, and a load balancer polling every few seconds sees a state at most a
// second older than it would have.
const readyCacheTTL = time.Second

// readiness is the outcome of one round of checks.
type readiness struct {
	status int
	checks map[string]string
	at     time.Time // when the round ended
}

// readyCache keeps the last round; concurrent probes after it expired share one new round.
type readyCache struct {
	mu     sync.Mutex
	last   readiness
	flight singleflight.Group
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports whether Redis, Postgres and Temporal answer and a worker polls the checkout
// task queue (as of at most readyCacheTTL ago); 503 names what is missing. Draining is
// always current.
func (s *Server) readyz(c echo.Context) error {
	r := s.readiness(c.Request().Context())
	status, checks := r.status, maps.Clone(r.checks)
	if s.Readiness.isDraining() {
		// Shutting down: the dependencies may be fine, but new requests belong elsewhere.
		checks["shutdown"] = "draining"
		status = http.StatusServiceUnavailable
	}
	if status != http.StatusOK {
		c.Response().Header().Set("Retry-After", "1")
	}
	return c.JSON(status, map[string]any{"ready": status == http.StatusOK, "checks": checks})
}

// readiness is the last round of checks while it is fresh, or a new one, which probes arriving
// meanwhile wait for rather than start their own. The round does not end with the request
// that started it: the others are waiting for its answer.
func (s *Server) readiness(ctx context.Context) readiness {
	if last, fresh := s.readyCache.fresh(); fresh {
		return last
	}
	r, _, _ := s.readyCache.flight.Do("ready", func() (any, error) {
		// A probe that found the last round stale may get here just after another round
		// ended: that one answers.
		if last, fresh := s.readyCache.fresh(); fresh {
			return last, nil
		}
		r := s.checkReady(context.WithoutCancel(ctx))
		s.readyCache.mu.Lock()
		s.readyCache.last = r
		s.readyCache.mu.Unlock()
		return r, nil
	})
	return r.(readiness)
}

// fresh returns the last round, and whether it is younger than readyCacheTTL.
func (c *readyCache) fresh() (readiness, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, !c.last.at.IsZero() && time.Since(c.last.at) < readyCacheTTL
}

// checkReady runs one round of checks.
func (s *Server) checkReady(ctx context.Context) readiness {
	names := make([]string, 0, len(s.Ready))
	for name := range s.Ready {
		names = append(names, name)
	}
	sort.Strings(names)
	checks := map[string]string{}
	status := http.StatusOK
	for _, name := range names {
		cctx, cancel := context.WithTimeout(ctx, readyTimeout)
		err := s.Ready[name](cctx)
		cancel()
		if err != nil {
			// The error names hosts, users and addresses: it goes to the log, and the public
			// answer only names the dependency.
			s.Logger.Warn("readiness check failed", "check", name, "error", err)
			checks[name] = "unavailable"
			status = http.StatusServiceUnavailable
			continue
		}
		checks[name] = "ok"
	}
	if s.workers != nil {
		switch err := s.workers.check(ctx); {
		case errors.Is(err, errNoWorker):
			checks["workers"] = "unavailable: " + errNoWorker.Error()
			status = http.StatusServiceUnavailable
		case err != nil:
			s.Logger.Warn("readiness check failed", "check", "workers", "error", err)
			checks["workers"] = "unknown: their heartbeats cannot be read"
			status = http.StatusServiceUnavailable
		default:
			checks["workers"] = "ok"
		}
	}
	return readiness{status: status, checks: checks, at: time.Now()}
}
