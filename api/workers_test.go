package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/worker"
)

// noWorkerWithin is the contract's bound on answering 503 while no worker polls.
const noWorkerWithin = 5 * time.Second

// TestNoWorkerNoSaga: while no worker polls, POST /v1/checkouts answers 503 with Retry-After
// within 5 s and starts no saga, and /readyz is 503 naming the task queue; with a worker it
// is 201. Then the worker's heartbeat stops twice: cleanly (its key is removed), and by
// going silent as a killed or cut-off worker does (its key expires).
func TestNoWorkerNoSaga(t *testing.T) {
	rdb := testenv.Redis(t)
	// The heartbeats of this test live under their own name in the shared test Redis.
	presence := worker.Presence{RDB: rdb, TaskQueue: testenv.RandomID("checkout-test-")}
	l := newLive(t, nil, func(_ *api.Config, d *api.Deps) {
		d.Workers = presence
		d.Gate = lua.New(rdb)
		d.Ready = map[string]func(context.Context) error{"redis": func(ctx context.Context) error { return rdb.Ping(ctx).Err() }}
	})
	// Plenty of units: the probes that wait for a state change may hold some.
	phone := l.stockSKU(t, "PHONE-", 1000, 99900, 2, "usd")

	// No worker at all.
	noWorker := func(t *testing.T, why string) {
		t.Helper()
		id := testenv.RandomID("c-")
		start := time.Now()
		rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: strings.NewReader(cart(id, "u-1", phone, 1))})
		took := time.Since(start)
		problemOf(t, rec, http.StatusServiceUnavailable, "no_worker")
		if rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s: 503 without Retry-After", why)
		}
		if took > noWorkerWithin {
			t.Errorf("%s: 503 after %s, want within %s", why, took, noWorkerWithin)
		}
		t.Logf("%s: POST answered %d in %s", why, rec.Code, took.Round(time.Millisecond))
		if l.sagaExists(t, id) {
			t.Errorf("%s: a saga was started for cart %s", why, id)
		}
		rec = l.do(t, request{method: http.MethodGet, path: "/readyz"})
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "task queue checkout") {
			t.Errorf("%s: readyz = %d %s, want 503 naming task queue checkout", why, rec.Code, rec.Body)
		}
	}
	noWorker(t, "no worker ever")
	l.assertHeld(t, phone, 0)

	// A worker with its heartbeat: 201 once its first beat is seen.
	l.startWorker(t)
	var healthy atomic.Bool
	healthy.Store(true)
	hb := worker.NewHeartbeat(rdb, presence.TaskQueue, func(context.Context) error {
		if !healthy.Load() {
			return errors.New("temporal unreachable")
		}
		return nil
	}, nil)
	ctx, stopBeating := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { hb.Run(ctx); close(done) }()
	t.Cleanup(func() { stopBeating(); <-done })
	waitForCheckout(t, l, phone, http.StatusCreated)
	// /readyz answers from its checks of up to a second ago, which may predate the worker.
	waitFor(t, "readyz with a worker to answer 200", func() bool {
		return l.do(t, request{method: http.MethodGet, path: "/readyz"}).Code == http.StatusOK
	})

	// The heartbeat goes silent (the worker lost Temporal, or was killed): its key expires.
	healthy.Store(false)
	silentAt := time.Now()
	waitFor(t, "the silent worker to be noticed", func() bool {
		got, err := presence.Polling(t.Context())
		return err == nil && len(got) == 0
	})
	t.Logf("a silent worker was gone from Redis %s after its last beat could have been written", time.Since(silentAt).Round(time.Millisecond))
	if since := time.Since(silentAt); since > worker.HeartbeatTTL+2*worker.HeartbeatEvery {
		t.Errorf("a silent worker was noticed after %s, want within its TTL %s", since, worker.HeartbeatTTL)
	}
	waitForProblem(t, l, phone, "no_worker")
	noWorker(t, "silent worker")

	// Back, then stopped cleanly: its key goes at once, not after the TTL.
	healthy.Store(true)
	waitForCheckout(t, l, phone, http.StatusCreated)
	stopBeating()
	<-done
	if got, err := presence.Polling(t.Context()); err != nil || len(got) != 0 {
		t.Errorf("after a clean stop Polling = %v, %v; want none at once", got, err)
	}
	waitForProblem(t, l, phone, "no_worker")
	noWorker(t, "worker stopped")
}

// waitForCheckout posts new carts until one gets status (the API caches the workers' state
// for a second, so the first attempts may still see the previous state).
func waitForCheckout(t *testing.T, l *live, sku string, status int) {
	t.Helper()
	waitFor(t, "a checkout answered "+http.StatusText(status), func() bool {
		code, _ := l.post(t, cart(testenv.RandomID("c-"), "u-1", sku, 1), nil)
		return code == status
	})
}

// waitForProblem waits until a POST of sku answers the problem code; the carts it sends
// before that must not matter to the test (they may start sagas).
func waitForProblem(t *testing.T, l *live, sku, code string) {
	t.Helper()
	waitFor(t, "a POST answered "+code, func() bool {
		_, body := l.post(t, `{"cart_id":"`+testenv.RandomID("probe-")+`","customer_id":"u-1","items":[{"sku":"`+sku+`","quantity":1}]}`, nil)
		return strings.Contains(body, `"`+code+`"`)
	})
}

// waitFor polls cond every 50 ms until it holds, failing the test after a generous deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
