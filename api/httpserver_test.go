package api_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// listen serves e on a free loopback port with the API's http.Server, as the binary does,
// and returns its address.
func listen(t *testing.T, e *echo.Echo) string {
	t.Helper()
	addr := "127.0.0.1:" + testenv.FreePort(t)
	srv := api.NewHTTPServer(addr, e)
	go func() { _ = e.StartServer(srv) }()
	t.Cleanup(func() { _ = srv.Close() })
	waitForListener(t, addr)
	return addr
}

// sendRaw serves h on a real TCP listener, connects and writes raw, as a slow or broken client
// would; the connection is closed when the test ends.
func sendRaw(t *testing.T, h *harness, raw string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", listen(t, h.e))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("write %q: %v", raw, err)
	}
	return conn
}

func waitForListener(t *testing.T, addr string) {
	t.Helper()
	waitFor(t, "the API to listen on "+addr, func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
}

// untilClosed reads conn until the server closes it, and returns what it sent and how long
// that took; it fails the test when the server still holds the connection after limit.
func untilClosed(t *testing.T, conn net.Conn, limit time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(limit))
	got, err := io.ReadAll(conn)
	took := time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server still held the connection after %s (sent %q)", took, got)
	}
	return string(got), took
}

// TestSlowHeaderClientIsCutOff: a client that never finishes its headers (slowloris) is
// disconnected after ReadHeaderTimeout, over a real TCP connection.
func TestSlowHeaderClientIsCutOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	conn := sendRaw(t, h, "POST /v1/checkouts HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n") // half a header
	_, took := untilClosed(t, conn, 3*api.ReadHeaderTimeout)
	t.Logf("a client that never finished its headers was cut off after %s", took.Round(time.Millisecond))
	if took < api.ReadHeaderTimeout-time.Second {
		t.Errorf("cut off after %s, before ReadHeaderTimeout %s", took, api.ReadHeaderTimeout)
	}
}

// TestSlowBodyIsCutOffAtTheRequestTimeout: a client that sends its headers and then trickles
// (here: stops) its body gets 408 once the request's own timeout passes; ContextTimeout alone
// cannot stop a handler blocked reading the body.
func TestSlowBodyIsCutOffAtTheRequestTimeout(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(cfg *api.Config, _ *api.Deps) { cfg.RequestTimeout = time.Second })
	conn := sendRaw(t, h, "POST /v1/checkouts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	got, took := untilClosed(t, conn, 10*time.Second)
	t.Logf("a body that stopped arriving was answered after %s: %q", took.Round(time.Millisecond), firstLine(got))
	if !strings.HasPrefix(got, "HTTP/1.1 408") || !strings.Contains(got, `"request_timeout"`) {
		t.Errorf("answer = %q, want 408 request_timeout", got)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// TestShutdownFlipsReadinessThenDrains: when the process is told to stop, /readyz answers 503
// at once, the listener then closes, and a request already in flight still completes.
func TestShutdownFlipsReadinessThenDrains(t *testing.T) {
	t.Parallel()
	ready := &api.Readiness{}
	h := newHarness(t, func(_ *api.Config, d *api.Deps) { d.Readiness = ready })
	started, release := make(chan struct{}), make(chan struct{})
	h.e.GET("/test/slow", func(c echo.Context) error {
		close(started)
		<-release
		return c.String(http.StatusOK, "done")
	})
	addr := "127.0.0.1:" + testenv.FreePort(t)
	ctx, stop := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() {
		served <- api.Serve(ctx, h.e, api.NewHTTPServer(addr, h.e), ready, 100*time.Millisecond, h.logger)
	}()
	waitForListener(t, addr)
	if rec := h.do(t, request{method: http.MethodGet, path: "/readyz"}); rec.Code != http.StatusOK {
		t.Fatalf("readyz before shutdown = %d %s, want 200", rec.Code, rec.Body)
	}

	inFlight := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/test/slow")
		if err != nil {
			inFlight <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		inFlight <- resp.Status + " " + string(b)
	}()
	<-started
	stop()

	waitFor(t, "/readyz to answer 503 draining", func() bool {
		rec := h.do(t, request{method: http.MethodGet, path: "/readyz"})
		return rec.Code == http.StatusServiceUnavailable && strings.Contains(rec.Body.String(), "draining")
	})
	waitFor(t, "the listener to close", func() bool {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if got := <-inFlight; got != "200 OK done" {
		t.Errorf("the request in flight during shutdown got %q, want 200 OK done", got)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve = %v, want nil after a clean drain", err)
	}
}
