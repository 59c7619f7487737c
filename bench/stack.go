package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
)

const (
	adminToken    = checkouttest.AdminToken
	webhookSecret = checkouttest.WebhookSecret
	// clientToken is the shop backend's in the scale profile, whose `checkout api` replicas
	// run server to server (IDENTITY_MODE=server).
	clientToken = "bench-client-token-0123456789"
)

// newHTTPClient is the one load-generating client every HTTP phase uses: checkouttest's,
// keep-alive with enough idle connections for the widest burst.
func newHTTPClient() *http.Client { return checkouttest.NewClient("").HTTP }

func quietLogger(l *slog.Logger) sdklog.Logger { return sdklog.NewStructuredLogger(l) }

// stack is the product in this process, wired by checkouttest as e2e runs it: the API on a
// loopback listener, the worker, and clients with the product's default pool sizes.
type stack struct {
	*env
	tc    client.Client
	rdb   *redis.Client
	pool  *pgxpool.Pool
	store *store.Store
	stock *lua.Stock
	inv   *inventory.Inventory
	url   string
	http  *http.Client
	// client is sent with every checkout request: the shop backend's token (scale profile)
	client map[string]string
	// product is the in-process product (nil in the scale profile's stacks), which can serve
	// more API replicas
	product *checkouttest.Product

	closers []func()
}

func (e *env) openStack(ctx context.Context, logger, apiLogger *slog.Logger) (_ *stack, err error) {
	s := &stack{env: e}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	// Uncompressed, as cmd/checkout dials by default (TEMPORAL_GRPC_COMPRESSION=none); the
	// empty workflows use this client too, so both sides of a ratio send the same way.
	copts := client.Options{HostPort: e.srv.FrontendHostPort(), Namespace: "default", Logger: quietLogger(logger)}
	if !e.grpcGzip {
		copts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	s.tc, err = client.Dial(copts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal: %w", err)
	}
	s.closers = append(s.closers, s.tc.Close)

	// The product's defaults, as cmd/checkout opens them: redis.ParseURL, and store.NewPool
	// (store.DefaultPoolMaxConns connections; pgxpool.New's own default is 4 on 2 cores).
	opts, err := redis.ParseURL(e.redisURL)
	if err != nil {
		return nil, err
	}
	s.rdb = redis.NewClient(opts)
	s.closers = append(s.closers, func() { _ = s.rdb.Close() })
	s.pool, err = store.NewPool(ctx, e.dbURL, nil)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	s.closers = append(s.closers, s.pool.Close)

	p, err := checkouttest.Open(ctx, checkouttest.Services{Temporal: s.tc, Pool: s.pool, Redis: s.rdb}, checkouttest.Options{Logger: apiLogger,
		MaxOpenPerCustomer: store.DefaultMaxOpenPerCustomer, RateLimits: productLimits(s.rdb), RoomName: "bench-" + s.runID})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, p.Close)
	s.product = p
	s.store, s.stock, s.inv, s.url, s.http = p.Store, p.Stock, p.Inventory, p.URL, p.Client.HTTP
	return s, nil
}

func (s *stack) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

type answer struct {
	code       int
	problem    string // the problem+json code of an error answer
	retryAfter time.Duration
}

// do sends one request (no retry) and decodes a 2xx JSON answer into out (if not nil).
func do(ctx context.Context, hc *http.Client, method, url string, body []byte, header map[string]string, out any) (answer, error) {
	a, err := (&checkouttest.Client{HTTP: hc}).Do(ctx, method, url, body, header, out)
	return answer{code: a.Code, problem: a.Problem, retryAfter: a.RetryAfter}, err
}

func (s *stack) setStock(ctx context.Context, sku string, units int64, maxPerOrder int64) error {
	_, err := s.inv.Set(ctx, shop.Product{SKU: sku, OnHand: units, SaleTerms: shop.SaleTerms{PriceCents: 1_999, Currency: "usd", MaxPerOrder: maxPerOrder}})
	return err
}

// postResult is one checkout POST as a client sees it, after retrying 503s.
type postResult struct {
	code     int
	problem  string        // of the final answer
	attempts []string      // every answer: "201", "409", "503 overloaded", ...
	shed     int           // 503 answers retried
	latency  time.Duration // of the POST attempt that was answered (201, 202, 409, ...)
	sent     time.Time     // when the first POST left: the buyer pressed "buy"
	answered time.Time     // when the final answer arrived (after the waiting room, if any)
	queued   bool          // answered 202: the cart waited in the waiting room
	view     api.CheckoutView
	err      error
}

// held reports whether the cart holds its units: a 201, or a 200 once it left the waiting
// room holding.
func (p postResult) held() bool {
	return p.err == nil && (p.code == http.StatusCreated || p.queued && p.code == http.StatusOK && p.view.Status == shop.StatusAwaitingPayment)
}

// holdLatency is how long the buyer waited for the hold: the 201's attempt, or from the
// first POST to the answer that the cart left the waiting room holding.
func (p postResult) holdLatency() time.Duration {
	if p.queued {
		return p.answered.Sub(p.sent)
	}
	return p.latency
}

// postCheckout posts a cart and, like a well-behaved client, retries a 503 after its
// Retry-After (at most maxRetries times; the same cart id makes a retry safe), and follows a
// 202 through the waiting room.
func (s *stack) postCheckout(ctx context.Context, cartID, customerID, sku string, maxRetries int) postResult {
	c := checkouttest.Client{BaseURL: s.url, HTTP: s.http, MaxRetries: maxRetries, Header: s.client}
	r := postResult{sent: time.Now()}
	// A 202 (the waiting room) is followed with GET ?wait=10 until the cart left the room.
	a, err := c.Checkout(ctx, api.CheckoutRequest{CartID: cartID, CustomerID: customerID,
		Items: []api.RequestItem{{SKU: sku, Quantity: 1}}, PaymentTimeoutSeconds: ptr[int64](600)}, nil, &r.view)
	r.code, r.problem, r.attempts, r.shed, r.latency, r.answered, r.queued, r.err = a.Code, a.Problem, a.Attempts, a.Retried, a.PostLatency, a.Answered, a.Queued, err
	return r
}

// pay sends a correctly signed payment_intent.succeeded for the checkout.
func (s *stack) pay(ctx context.Context, checkoutID string, amount int64) error {
	return (&checkouttest.Client{BaseURL: s.url, HTTP: s.http}).Pay(ctx, checkoutID, amount, webhookSecret)
}

func ptr[T any](v T) *T { return &v }

// emptyResult is the bare rate of a baseline workflow on the same dev server, and the server's
// own latency for its start under the same client concurrency as the checkouts.
type emptyResult struct {
	workflows, concurrency int
	elapsed                time.Duration
	start                  latencies   // the start call (the floor's: update-with-start until its update answered)
	result                 latencies   // start to result, at the phase's concurrency
	alone                  latencies   // start to result, one workflow at a time
	cpu                    cpuSnapshot // over the concurrent phase
}

func (r emptyResult) rate() float64 { return float64(r.workflows) / r.elapsed.Seconds() }

// A baseline is a workflow the checkout is measured against, on a task queue and worker of its
// own in this process: run starts one with the given id, calls started once its start call
// returned, and waits for its result.
type baseline struct {
	name, queue string
	workflow    any
	register    func(sdkworker.Worker) // the activities it needs, if any
	run         func(ctx context.Context, tc client.Client, id string, started func()) error
}

// The baselines' workflow types and task queues, and the floor's update and signal.
const (
	emptyType, emptyQueue = "BenchEmpty", "bench-empty"
	floorType, floorQueue = "BenchFloor", "bench-floor"
	floorUpdate           = "answer"
	floorSignal           = "paid"
)

// emptyBaseline returns at once: the least any workflow costs.
var emptyBaseline = baseline{name: emptyType, queue: emptyQueue,
	workflow: func(workflow.Context) error { return nil },
	run: func(ctx context.Context, tc client.Client, id string, started func()) error {
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: emptyQueue,
			WorkflowExecutionErrorWhenAlreadyStarted: true}, emptyType)
		if err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		started()
		return run.Get(ctx, nil)
	}}

// The floor baseline is the checkout's shape on Temporal with nothing in it: started by
// update-with-start whose update it answers at once, then a durable timer and one signal,
// then the end. No activity, no search-attribute upsert, no HTTP, Postgres or Redis. What a
// checkout costs above it is the product's; what it costs above the empty workflow is the
// price of answering the buyer before the payment and of learning of the payment by a signal.
func floorWorkflow(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, floorUpdate, func(workflow.Context) error { return nil }); err != nil {
		return err
	}
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, floorSignal), func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	sel.AddFuture(workflow.NewTimer(ctx, 10*time.Minute), func(workflow.Future) {})
	sel.Select(ctx)
	return nil
}

var floorBaseline = baseline{name: floorType, queue: floorQueue, workflow: floorWorkflow,
	run: func(ctx context.Context, tc client.Client, id string, started func()) error {
		start := tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{ID: id, TaskQueue: floorQueue,
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING}, floorType)
		h, err := tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start,
			UpdateOptions: client.UpdateWorkflowOptions{UpdateName: floorUpdate, WaitForStage: client.WorkflowUpdateStageCompleted}})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			return fmt.Errorf("update-with-start %s: %w", id, err)
		}
		started()
		if err := tc.SignalWorkflow(ctx, id, "", floorSignal, nil); err != nil {
			return fmt.Errorf("signal %s: %w", id, err)
		}
		return tc.GetWorkflow(ctx, id, "").Get(ctx, nil)
	}}

// e2eRound is one round of phase 3: the empty workflows, the floor, then the checkouts.
type e2eRound struct {
	empty, floor emptyResult
	saga         emptyResult // the checkout saga with nothing behind its activities
	e2e          e2eResult
}

// benchEnd2End runs phase 3 sz.e2eRounds times in turn. One round's ratios move by 10-30 %
// with the machine's other load; the targets take each ratio's median round.
func (s *stack) benchEnd2End(ctx context.Context, sz sizes) ([]e2eRound, error) {
	rounds := make([]e2eRound, sz.e2eRounds)
	for k := range rounds {
		if sz.e2eRounds > 1 {
			progress("   round %d of %d", k+1, sz.e2eRounds)
		}
		var err error
		if rounds[k].empty, err = s.benchBaseline(ctx, sz, k, emptyBaseline); err != nil {
			return nil, fmt.Errorf("empty workflows: %w", err)
		}
		if err := s.settle(ctx); err != nil {
			return nil, err
		}
		if rounds[k].floor, err = s.benchBaseline(ctx, sz, k, floorBaseline); err != nil {
			return nil, fmt.Errorf("floor workflows: %w", err)
		}
		if err := s.settle(ctx); err != nil {
			return nil, err
		}
		if rounds[k].saga, err = s.benchBaseline(ctx, sz, k, sagaBaseline); err != nil {
			return nil, fmt.Errorf("saga baseline: %w", err)
		}
		if err := s.settle(ctx); err != nil {
			return nil, err
		}
		if rounds[k].e2e, err = s.benchCheckouts(ctx, sz, k); err != nil {
			return nil, fmt.Errorf("end-to-end checkouts: %w", err)
		}
		if err := s.settle(ctx); err != nil {
			return nil, err
		}
	}
	return rounds, nil
}

// settleTimers is how long after a phase its workflow tasks' timers are still due: each
// workflow task leaves a start-to-close timeout timer (the SDK's default workflow task
// timeout, 10 s) and a sticky schedule-to-start one (5 s), which fire after the workflow
// has closed. Each is a no-op then, but a task the server still loads and runs.
const settleTimers = 10*time.Second + time.Second

// settle waits after a phase until what it left behind in the dev server has run, so the next
// phase is not charged for it (without it, rounds drifted upward: 1.49, 1.76, 1.44 x): first
// until its workflow tasks' timers are due, then until the dev server has used less than 5 %
// of a core over half a second, twice in a row (at most 15 s more).
func (s *stack) settle(ctx context.Context) error {
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleTimers):
	}
	const window, quiet = 500 * time.Millisecond, 25 * time.Millisecond
	deadline := time.Now().Add(15 * time.Second)
	last, calm := s.cpu(ctx).devServer, 0
	for calm < 2 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		now := s.cpu(ctx).devServer
		if now-last < quiet {
			calm++
		} else {
			calm = 0
		}
		last = now
		if time.Now().After(deadline) {
			progress("   settle: the dev server was still busy %s after the phase; going on", time.Since(t0).Round(time.Second))
			break
		}
	}
	return nil
}

func (s *stack) benchBaseline(ctx context.Context, sz sizes, round int, b baseline) (emptyResult, error) {
	tag := fmt.Sprintf("%s-%s-r%d", b.queue, s.runID, round)
	r := emptyResult{workflows: sz.emptyWorkflows, concurrency: sz.e2eConcurrency}
	// The checkout worker's settings (autoscaled pollers, ...), so the baselines' workflow
	// tasks are polled the way the checkouts' are.
	w := sdkworker.New(s.tc, b.queue, worker.Options(store.DefaultPoolMaxConns))
	w.RegisterWorkflowWithOptions(b.workflow, workflow.RegisterOptions{Name: b.name})
	if b.register != nil {
		b.register(w)
	}
	if err := w.Start(); err != nil {
		return r, fmt.Errorf("start %s worker: %w", b.name, err)
	}
	defer w.Stop()

	// Warm-up: the first workflows pay for task-queue creation and connections. The next
	// ones, one at a time, give the server's floor: start to result with nothing else running.
	for i := range 5 {
		if err := b.run(ctx, s.tc, fmt.Sprintf("%s-warm-%d", tag, i), func() {}); err != nil {
			return r, err
		}
	}
	var alone recorder
	for i := range 10 {
		t := time.Now()
		if err := b.run(ctx, s.tc, fmt.Sprintf("%s-alone-%d", tag, i), func() {}); err != nil {
			return r, err
		}
		alone.add(time.Since(t))
	}
	r.alone = alone.sorted()
	var rec, result recorder
	before := s.cpu(ctx)
	elapsed, err := pool(ctx, r.workflows, r.concurrency, func(i int) error {
		t := time.Now()
		err := b.run(ctx, s.tc, fmt.Sprintf("%s-%d", tag, i), func() { rec.add(time.Since(t)) })
		result.add(time.Since(t))
		return err
	})
	if err != nil {
		return r, err
	}
	r.cpu = s.cpu(ctx).sub(before)
	r.elapsed, r.start, r.result = elapsed, rec.sorted(), result.sorted()
	progress("   %s: %d in %s = %.1f/s at concurrency %d; start p50 %s p99 %s; start to result p99 %s; CPU per workflow %s",
		b.name, r.workflows, elapsed.Round(time.Millisecond), r.rate(), r.concurrency, fmtDur(r.start.pct(50)), fmtDur(r.start.pct(99)),
		fmtDur(r.result.pct(99)), fmtDur(r.cpuPer()))
	return r, nil
}

// pool runs n jobs on conc goroutines and returns how long they took; the first error stops
// handing out jobs and is returned.
func pool(ctx context.Context, n, conc int, job func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	t0 := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil || ctx.Err() != nil {
					return
				}
				if err := job(i); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return 0, *p
	}
	return time.Since(t0), ctx.Err()
}

// e2eResult is checkouts end to end over HTTP: POST, signed webhook, poll until confirmed.
type e2eResult struct {
	checkouts, concurrency int
	elapsed                time.Duration // first POST to last confirmation seen
	post, payToConfirmed   latencies
	shed                   int
	pollInterval           time.Duration // 0: the client waits with GET ?wait instead of polling
	historyEvents          int           // of one confirmed checkout
	cpu                    cpuSnapshot   // over the measured checkouts
}

// howAsked says how the client learnt that a checkout was confirmed.
func (r e2eResult) howAsked() string {
	if r.pollInterval == 0 {
		return fmt.Sprintf("one `GET /v1/checkouts/{id}?wait=%d`, answered when the saga ends", api.MaxWaitSeconds)
	}
	return fmt.Sprintf("`GET /v1/checkouts/{id}` polled every %s", r.pollInterval)
}

func (r e2eResult) rate() float64 { return float64(r.checkouts) / r.elapsed.Seconds() }

func (s *stack) benchCheckouts(ctx context.Context, sz sizes, round int) (e2eResult, error) {
	r := e2eResult{checkouts: sz.e2eCheckouts, concurrency: sz.e2eConcurrency, pollInterval: s.poll}
	tag := fmt.Sprintf("%s-r%d", s.runID, round)
	sku := s.sku(fmt.Sprintf("E2E%d", round))
	if err := s.setStock(ctx, sku, int64(sz.e2eCheckouts)*10, 2); err != nil {
		return r, err
	}
	var post, confirm recorder
	var shed atomic.Int64
	checkout := func(cartID string) error {
		// A buyer each, as a crowd is: one customer with 32 carts at once finds the waiting
		// room's share per customer (5) full and waits out 429s, which no buyer meets.
		p := s.postCheckout(ctx, cartID, "u-"+cartID, sku, 30)
		if p.err != nil {
			return fmt.Errorf("POST checkout %s: %w", cartID, p.err)
		}
		shed.Add(int64(p.shed))
		if !p.held() {
			return fmt.Errorf("POST checkout %s answered %d", cartID, p.code)
		}
		post.add(p.holdLatency())
		paid := time.Now()
		if err := s.pay(ctx, cartID, p.view.AmountCents); err != nil {
			return err
		}
		// A buyer's page asks once and the API answers when the checkout ends (GET ?wait),
		// or, with -poll, asks again and again.
		get := s.url + "/v1/checkouts/" + cartID
		if r.pollInterval == 0 {
			get += fmt.Sprintf("?wait=%d", api.MaxWaitSeconds)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			var v api.CheckoutView
			a, err := do(ctx, s.http, http.MethodGet, get, nil, checkouttest.Buyer(p.view.CheckoutSecret), &v)
			if err == nil && a.code == http.StatusOK && v.Status == shop.StatusConfirmed {
				confirm.add(time.Since(paid))
				return nil
			}
			if err == nil && a.code == http.StatusOK && v.Status.Final() {
				return fmt.Errorf("checkout %s ended %s, want confirmed", cartID, v.Status)
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("checkout %s not confirmed within 60 s: %d %q %v", cartID, a.code, v.Status, err)
			}
			time.Sleep(r.pollInterval)
		}
	}
	// Warm-up checkouts, outside the measurement.
	for i := range 5 {
		if err := checkout(fmt.Sprintf("w-%s-%d", tag, i)); err != nil {
			return r, err
		}
	}
	post, confirm = recorder{}, recorder{}
	before := s.cpu(ctx)
	elapsed, err := pool(ctx, r.checkouts, r.concurrency, func(i int) error {
		return checkout(fmt.Sprintf("e-%s-%d", tag, i))
	})
	if err != nil {
		return r, err
	}
	r.cpu = s.cpu(ctx).sub(before)
	r.elapsed, r.post, r.payToConfirmed, r.shed = elapsed, post.sorted(), confirm.sorted(), int(shed.Load())
	r.historyEvents, err = s.historyLength(ctx, shop.WorkflowID(fmt.Sprintf("e-%s-0", tag)))
	if err != nil {
		return r, err
	}
	progress("   checkouts: %d in %s = %.1f/s at concurrency %d; POST p50 %s p99 %s max %s (%d shed and retried); paid->confirmed p50 %s p99 %s max %s; %d history events each",
		r.checkouts, elapsed.Round(time.Millisecond), r.rate(), r.concurrency, fmtDur(r.post.pct(50)), fmtDur(r.post.pct(99)), fmtDur(r.post.pct(100)), r.shed,
		fmtDur(r.payToConfirmed.pct(50)), fmtDur(r.payToConfirmed.pct(99)), fmtDur(r.payToConfirmed.pct(100)), r.historyEvents)
	return r, nil
}

// historyLength counts the events in a workflow's history.
func (s *stack) historyLength(ctx context.Context, workflowID string) (int, error) {
	it := s.tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		if _, err := it.Next(); err != nil {
			return 0, fmt.Errorf("read history of %s: %w", workflowID, err)
		}
		n++
	}
	return n, nil
}
