package api_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.temporal.io/sdk/mocks"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// 2,000 waits at once on one checkout from 5 addresses, on a real HTTP server behind a
// trusted balancer, with the default bounds: the process holds at most 5 x
// MAX_WAITS_PER_ADDRESS waits, sharing one long poll, and every other wait is answered at
// once with the current state. The figures (goroutines
// while they wait, a new buyer's GET and POST beside them) go to the test log, for
// docs and reviews; nothing here is timed.
func TestTwoThousandWaitsHoldABoundedNumberOfPolls(t *testing.T) {
	const waiters, addresses = 2000, 5
	tc := mocks.NewClient(t)
	_, lb, _ := net.ParseCIDR("127.0.0.1/32")
	h := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		cfg.TrustedProxies = []*net.IPNet{lb}
		d.Temporal = tc
	})
	cart := testenv.RandomID("w-")
	var polls, maxPolls atomic.Int64
	release := make(chan struct{})
	longPolls(t, tc, cart, func(ctx context.Context) {
		n := polls.Add(1)
		for m := maxPolls.Load(); n > m && !maxPolls.CompareAndSwap(m, n); m = maxPolls.Load() {
		}
		defer polls.Add(-1)
		holdUntil(ctx, release)
	})
	awaitingPayment(t, tc, cart)
	srv := httptest.NewServer(h.e)
	defer srv.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: waiters, MaxConnsPerHost: 0}}
	defer hc.CloseIdleConnections()

	get := func(buyer, query string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/checkouts/"+cart+query, nil)
		req.Header.Set(api.CheckoutSecretHeader, api.CheckoutSecret(api.DevCheckoutSecretKey, cart))
		req.Header.Set(echo.HeaderXForwardedFor, buyer)
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("GET: %v", err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The waits held are the handlers in a shared poll's await; those refused a place never
	// get there. Sample their number while the crowd comes and goes: a slow machine answers
	// the refused ones over more than a held wait's 10 s, so no single moment need hold them all.
	before := runtime.NumGoroutine()
	var mostHeld, during atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(goroutinesIn("(*endWatches).await")); n > mostHeld.Load() {
				mostHeld.Store(n)
				during.Store(int64(runtime.NumGoroutine()))
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var answered atomic.Int64
	var all sync.WaitGroup
	for i := range waiters {
		all.Go(func() {
			if code := get(fmt.Sprintf("2001:db8:%d::%x", i%addresses+1, i+1), "?wait=10"); code != http.StatusOK {
				t.Errorf("wait %d: %d", i, code)
			}
			answered.Add(1)
		})
	}
	held := addresses * api.DefaultMaxWaitsPerAddress
	for deadline := time.Now().Add(time.Minute); mostHeld.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: no wait held yet (%d answered)", answered.Load())
		}
	}
	// A new buyer beside the crowd (figures for the log, nothing timed).
	latency := func(send func() int) time.Duration {
		var took []time.Duration
		for range 21 {
			start := time.Now()
			send()
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	getTook := latency(func() int { return get("198.51.100.200", "") })
	postTook := latency(func() int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/checkouts",
			strings.NewReader(`{"cart_id":"`+testenv.RandomID("c-")+`","customer_id":"u-new","items":[{"sku":"NOPE","quantity":1}]}`))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		req.Header.Set(echo.HeaderXForwardedFor, "198.51.100.201")
		resp, err := hc.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	})
	// Every wait past the bound is answered at once; the held ones at their 10 s.
	for deadline := time.Now().Add(2 * time.Minute); answered.Load() < waiters; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after two minutes: %d of %d waits answered", answered.Load(), waiters)
		}
	}
	close(stop)
	<-sampled
	t.Logf("%d waits on one checkout from %d addresses: at most %d held at once (bound %d), sharing at most %d long poll(s) at once; goroutines %d before, %d while most were held (client side included); a new buyer's GET %v, POST (422, catalog) %v (medians of 21)",
		waiters, addresses, mostHeld.Load(), held, maxPolls.Load(), before, during.Load(), getTook, postTook)
	if got := mostHeld.Load(); got > int64(held) {
		t.Errorf("%d waits held at once, want at most %d (%d addresses x %d)", got, held, addresses, api.DefaultMaxWaitsPerAddress)
	}
	if got := maxPolls.Load(); got > 1 {
		t.Errorf("%d long polls of one checkout at once, want 1 shared by its waiters", got)
	}
	close(release)
	all.Wait()
}

// goroutinesIn counts the goroutines whose stack names fn. It reads the goroutine profile
// grouped by stack (debug 1: "N @ ..." and the stack's frames), which Go collects without
// stopping the world for the whole walk; the full dump (debug 2) stops it for every one of
// the 10,000 goroutines, and sampled every few milliseconds it froze the server under test
// until its GETs ran into their request timeout.
func goroutinesIn(fn string) int {
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		var count int
		if _, err := fmt.Sscanf(g, "%d @", &count); err == nil && strings.Contains(g, fn) {
			n += count
		}
	}
	return n
}
