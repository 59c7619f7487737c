package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Timeouts of the API's HTTP server. Echo's own Start leaves every one at zero, so a client
// that sends its headers or body slowly holds a connection and a goroutine forever.
const (
	// ReadHeaderTimeout: a real client sends its headers in one packet.
	ReadHeaderTimeout = 5 * time.Second
	// ReadTimeout bounds the whole request read, body included: a 64 KiB cart arrives in far
	// less, and the request itself may take DefaultRequestTimeout.
	ReadTimeout = 20 * time.Second
	// WriteTimeout is longer than a request may take (DefaultRequestTimeout) plus writing its
	// small answer, so it only ever cuts off a client that stopped reading.
	WriteTimeout = DefaultRequestTimeout + 10*time.Second
	// IdleTimeout closes keep-alive connections nobody uses.
	IdleTimeout = 60 * time.Second
	// DrainTimeout is how long shutdown waits for requests in flight: longer than the
	// longest request (DefaultRequestTimeout), so none is cut off by a deploy.
	DrainTimeout = DefaultRequestTimeout + 5*time.Second
)

// DefaultRequestTimeout bounds each /v1 request (Config.RequestTimeout).
const DefaultRequestTimeout = 15 * time.Second

// NewHTTPServer is the http.Server the API is served with (e.StartServer).
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
	}
}

// Readiness is what /readyz reports besides the dependencies: once Drain is called it
// answers 503 "draining", so load balancers stop sending before the listener closes.
type Readiness struct{ draining atomic.Bool }

// Drain turns /readyz to 503 for good.
func (r *Readiness) Drain() { r.draining.Store(true) }

func (r *Readiness) isDraining() bool { return r != nil && r.draining.Load() }

// Serve serves e with srv until ctx ends, then shuts down in order: /readyz answers 503 at
// once, new requests are still served for drainDelay (the time load balancers take to see
// it), then the listener closes and requests in flight get DrainTimeout to finish.
func Serve(ctx context.Context, e *echo.Echo, srv *http.Server, ready *Readiness, drainDelay time.Duration, logger *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- e.StartServer(srv) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve api on %s: %w", srv.Addr, err)
	case <-ctx.Done():
	}
	ready.Drain()
	logger.Info("api draining: /readyz answers 503", "drain_delay", drainDelay.String(), "drain_timeout", DrainTimeout.String())
	time.Sleep(drainDelay) // not a wait for a condition: the load balancers' polling interval
	shutdownCtx, cancel := context.WithTimeout(context.Background(), DrainTimeout)
	defer cancel()
	// srv, not e.Shutdown: Echo's Shutdown stops its own e.Server, not the one StartServer
	// was given, and would return at once while this one kept serving.
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("drain api on %s: %w", srv.Addr, err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve api on %s: %w", srv.Addr, err)
	}
	return nil
}

// NewMetricsServer serves Prometheus metrics (the product's and the Temporal SDK's, one
// registry) on addr, an internal address: never the public listener.
func NewMetricsServer(addr string) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.Handler())
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout}
}
