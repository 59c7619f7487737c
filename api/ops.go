package api

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/labstack/echo/v4"
)

// readyTimeout bounds each readiness check, so /readyz answers even while a dependency hangs.
const readyTimeout = 2 * time.Second

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports whether Redis, Postgres and Temporal answer and a worker polls the checkout
// task queue; 503 names what is missing.
func (s *Server) readyz(c echo.Context) error {
	names := make([]string, 0, len(s.Ready))
	for name := range s.Ready {
		names = append(names, name)
	}
	sort.Strings(names)
	checks := map[string]string{}
	status := http.StatusOK
	for _, name := range names {
		ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
		err := s.Ready[name](ctx)
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
		switch err := s.workers.check(c.Request().Context()); {
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
