package api

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/checkout-saga/checkout-saga/workflows"
)

// Workers tells which workers poll the checkout task queue right now, from their heartbeats
// (worker.Presence). Temporal's own poller list remembers dead pollers for minutes.
type Workers interface {
	Polling(ctx context.Context) ([]string, error)
}

// workersCacheFor is how long one answer about the workers is reused: a flash sale's POSTs
// then cost one Redis read a second, and a worker that dies is noticed within its heartbeat
// TTL (3 s) plus this second, inside the contract's 5 s.
const workersCacheFor = time.Second

// noWorkerRetryAfter is the Retry-After of a 503 for want of a worker: a worker restart takes
// seconds, so asking sooner only adds load.
const noWorkerRetryAfter = 5

// errNoWorker is what the check answers while no worker polls the task queue.
var errNoWorker = errors.New("no worker polls task queue " + workflows.TaskQueue)

// workerCheck caches Workers.Polling. One caller refreshes at a time; the others wait for
// its answer rather than all asking Redis.
type workerCheck struct {
	workers Workers
	mu      sync.Mutex
	at      time.Time
	err     error
}

// check returns nil while at least one worker polls, errNoWorker while none does, or the
// error that kept it from knowing.
func (w *workerCheck) check(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.at.IsZero() && time.Since(w.at) < workersCacheFor {
		return w.err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	polling, err := w.workers.Polling(ctx)
	switch {
	case err != nil:
		// Not cached: the next request asks again rather than repeating a stale failure.
		return err
	case len(polling) == 0:
		w.err = errNoWorker
	default:
		w.err = nil
	}
	w.at = time.Now()
	return w.err
}

// requireWorker refuses to start a saga that no worker would run: without this the start
// is durable, the request times out after 15 s, and the saga holds stock later for a buyer
// who was told to retry.
func (s *Server) requireWorker(ctx context.Context) *Problem {
	if s.workers == nil {
		return nil
	}
	switch err := s.workers.check(ctx); {
	case errors.Is(err, errNoWorker):
		p := problem(http.StatusServiceUnavailable, "no_worker",
			"no worker is processing checkouts right now; nothing was held; retry shortly")
		p.retryAfter = noWorkerRetryAfter
		return p
	case err != nil:
		return unavailable("redis", err)
	}
	return nil
}
