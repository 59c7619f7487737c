package workflows_test

// The saga interleaving explorer. Each seed generates a schedule (see
// explore_schedule_test.go): a cart, stock, payments and repeats of them at random moments
// (exactly at expires_at, in the same workflow task as the payment timer, while the saga
// prices, reserves, releases, records or confirms), support updates, a workflow cancellation,
// and faults in every activity. The saga runs it on the SDK's time-skipping environment
// against in-memory fakes of its activities (explore_world_test.go), and the contract's
// promises are checked afterwards (explore_check_test.go).
//
//	go test -count=1 ./workflows/ -run Explore                         # 10,000 seeds
//	go test -count=1 ./workflows/ -run Explore -explore.seeds=100000  # more (or EXPLORE_SEEDS)
//	go test -count=1 ./workflows/ -run Explore -explore.seed=1234 -v  # replay one, with its trace
//
// The flags exist only in this package; with ./... use EXPLORE_SEEDS, EXPLORE_FROM and
// EXPLORE_SEED instead. A seed's schedule is deterministic, and CI explores the same 10,000
// every run; a nightly job can move EXPLORE_FROM to explore new ones. Events a schedule puts at
// the same instant can reach the environment in either order from one run to the next, so a
// seed that fails in CI may need a few replays to fail again.

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

var (
	exploreSeeds = flag.Int("explore.seeds", envInt("EXPLORE_SEEDS", 10000), "seeds the explorer runs (env EXPLORE_SEEDS)")
	exploreFrom  = flag.Int("explore.from", envInt("EXPLORE_FROM", 1), "first seed (env EXPLORE_FROM)")
	exploreSeed  = flag.Int("explore.seed", envInt("EXPLORE_SEED", 0), "replay only this seed and print its trace (env EXPLORE_SEED)")
	exploreShow  = flag.Int("explore.show", 3, "failing seeds printed with their full trace")
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

func TestExploreSagaInterleavings(t *testing.T) {
	if missing := unfakedActivities(); len(missing) > 0 {
		t.Fatalf("the worker registers %v, which have no fake: add each to fakeActivities in explore_world_test.go", missing)
	}
	first, n := *exploreFrom, *exploreSeeds
	if *exploreSeed != 0 {
		first, n = *exploreSeed, 1
	}

	// Seeds run on every core: each has its own test environment and model.
	results := make([]*seedResult, n)
	var next atomic.Int64
	began := time.Now()
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for k := int(next.Add(1) - 1); k < n; k = int(next.Add(1) - 1) {
				results[k] = runSeed(uint64(first + k))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	t.Logf("explored %d seeds (%d..%d) in %v: %.0f seeds/s on %d cores",
		n, first, first+n-1, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), runtime.GOMAXPROCS(0))

	var failed []*seedResult
	byPromise := map[string][]uint64{}
	for _, r := range results {
		if len(r.violations) == 0 {
			continue
		}
		failed = append(failed, r)
		seen := map[string]bool{}
		for _, v := range r.violations {
			if k := v.key(); !seen[k] {
				seen[k] = true
				byPromise[k] = append(byPromise[k], r.w.s.Seed)
			}
		}
	}
	if len(failed) == 0 {
		if *exploreSeed != 0 {
			t.Logf("seed %d kept every promise:\n%s", first, results[0].report(true))
		}
		return
	}

	keys := make([]string, 0, len(byPromise))
	for k := range byPromise {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var summary strings.Builder
	for _, k := range keys {
		seeds := byPromise[k]
		fmt.Fprintf(&summary, "  %-42s %4d seeds, e.g. %v\n", k, len(seeds), seeds[:min(5, len(seeds))])
	}
	t.Errorf("%d of %d seeds broke a promise:\n%s", len(failed), n, summary.String())
	for k, r := range failed {
		t.Errorf("seed %d: replay with: go test -count=1 ./workflows/ -run Explore -explore.seed=%d -v\n%s",
			r.w.s.Seed, r.w.s.Seed, r.report(k < *exploreShow || *exploreSeed != 0))
	}
}

// seedResult is one seed's run and what it broke.
type seedResult struct {
	w          *world
	violations []violation
}

func (r *seedResult) report(withTrace bool) string {
	var b strings.Builder
	for _, v := range r.violations {
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	b.WriteString("  schedule:\n")
	b.WriteString(indent(r.w.s.String()))
	if r.w.final != nil {
		f := r.w.final
		fmt.Fprintf(&b, "  ended %s (reason %q), order %q, refunds %d, needs attention %v\n",
			f.Status, deref(f.Reason), deref(f.OrderID), len(r.w.refunds), f.NeedsAttention)
	}
	if withTrace {
		b.WriteString("  trace:\n")
		for _, line := range r.w.trace {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	return b.String()
}

// indent moves the schedule's lines under the "schedule:" heading.
func indent(s string) string { return strings.ReplaceAll("  "+s, "\n  ", "\n    ") }

func exploreLogger(level slog.Level) log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

// runSeed runs one seed's schedule against the saga and checks the promises.
func runSeed(seed uint64) (res *seedResult) {
	s := generate(seed)
	w := newWorld(s)
	res = &seedResult{w: w}

	var suite testsuite.WorkflowTestSuite
	level := slog.LevelError + 1 // the saga logs every stuck step; the trace says what matters
	if *exploreSeed != 0 {
		level = slog.LevelInfo
	}
	suite.SetLogger(exploreLogger(level))
	env := suite.NewTestWorkflowEnvironment()
	w.env = env
	env.SetStartTime(s.Start)
	// Wall-clock bound for one seed: a saga that blocks with nothing scheduled fails the seed.
	env.SetTestTimeout(20 * time.Second)
	if err := w.register(env); err != nil {
		res.violations = append(res.violations, violation{Promise: "explorer", Detail: err.Error()})
		return res
	}
	env.OnWorkflow(workflows.Refund, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, in workflows.RefundInput) (workflows.RefundView, error) {
			w.refund(in)
			return workflows.RefundView{RefundInput: in, Status: workflows.RefundRefunded}, nil
		})
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if st, ok := sa.GetKeyword(workflows.AttrCheckoutState); ok {
			w.observe(shop.Status(st), nil, "CheckoutState upsert")
		}
	}).Return(nil)

	// The API sends the reservation update with the start; its answer anchors the events
	// relative to expires_at.
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdateReservation, "reserve-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { w.runErr = fmt.Errorf("reservation update refused: %w", err) },
			OnComplete: func(v any, err error) {
				w.reservationAnswered = true
				if err != nil {
					// A workflow cancelled while reserving fails the update: the API answers
					// an error, which the contract allows.
					w.mu.Lock()
					w.logf("reservation update failed: %v", err)
					w.mu.Unlock()
					return
				}
				r := v.(workflows.ReservationResult)
				w.observe(r.View.Status, r.View.ExpiresAt, "reservation answer")
				if r.View.Status == shop.StatusAwaitingPayment && r.View.ExpiresAt != nil {
					w.mu.Lock()
					w.phase = "awaiting payment"
					w.mu.Unlock()
					for _, e := range s.Events {
						if e.Anchor == atExpiry {
							env.RegisterDelayedCallback(w.whenSettled(func() { w.fire(e, false) }), max(0, r.View.ExpiresAt.Add(e.At).Sub(env.Now())))
						}
					}
				}
			},
		}, workflows.ReservationRequest{RequestID: "req-1"})
	}, 0)
	for _, e := range s.Events {
		if e.Anchor == atTime {
			env.RegisterDelayedCallback(w.whenSettled(func() { w.fire(e, false) }), e.At)
		}
	}
	env.RegisterDelayedCallback(func() { panic(errSeedStuck) }, 7*24*time.Hour)

	func() {
		defer func() {
			if p := recover(); p != nil {
				w.runErr = fmt.Errorf("the run panicked: %v\n%s", p, debug.Stack())
			}
		}()
		env.ExecuteWorkflow(workflows.Checkout, workflows.Input{
			CheckoutID: fmt.Sprintf("c-%d", seed), CustomerID: "u-9", Items: cartLines(s.Cart),
			PaymentTimeoutSeconds: s.TimeoutSeconds, RequestID: "req-1", RequestHash: "h", IdempotencyKey: fmt.Sprintf("c-%d", seed),
		})
	}()
	if w.runErr == nil && env.IsWorkflowCompleted() {
		var v shop.View
		if err := env.GetWorkflowError(); err != nil {
			w.runErr = fmt.Errorf("the workflow failed: %w", err)
		} else if err := env.GetWorkflowResult(&v); err != nil {
			w.runErr = fmt.Errorf("read the result: %w", err)
		} else {
			w.final = &v
			w.observe(v.Status, v.ExpiresAt, "result")
		}
	}
	res.violations = w.check()
	return res
}

// cartLines is the cart as the client sends it: prices come from RecordCheckout.
func cartLines(items []shop.Item) []shop.CartLine {
	out := make([]shop.CartLine, len(items))
	for i, it := range items {
		out[i] = shop.CartLine{SKU: it.SKU, Quantity: it.Quantity}
	}
	return out
}

// unfakedActivities lists the activities worker.Register registers that fakeActivities has no
// line for.
func unfakedActivities() []string {
	var reg registryRecorder
	worker.Register(&reg, &activities.Activities{})
	faked := map[string]bool{}
	for _, a := range newWorld(generate(1)).fakeActivities() {
		faked[activityName(a.real)] = true
	}
	var missing []string
	for _, name := range reg.activities {
		if !faked[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing
}

// registryRecorder records the names of the activities registered with it, the way the SDK
// names them: every exported method of a registered struct, or the option's name.
type registryRecorder struct {
	sdkworker.Registry // nil: only the methods below are called by worker.Register
	activities         []string
}

func (r *registryRecorder) RegisterWorkflow(any) {}

func (r *registryRecorder) RegisterWorkflowWithOptions(any, workflow.RegisterOptions) {}

func (r *registryRecorder) RegisterActivity(a any) {
	r.RegisterActivityWithOptions(a, activity.RegisterOptions{})
}

func (r *registryRecorder) RegisterActivityWithOptions(a any, opts activity.RegisterOptions) {
	t := reflect.TypeOf(a)
	switch {
	case t.Kind() != reflect.Func:
		for i := range t.NumMethod() {
			r.activities = append(r.activities, opts.Name+t.Method(i).Name)
		}
	case opts.Name != "":
		r.activities = append(r.activities, opts.Name)
	default:
		r.activities = append(r.activities, activityName(a))
	}
}

// TestExploreFakesServeLocalAndRegularActivities proves the explorer keeps working when the
// saga turns a local activity into a regular one (or back), or calls one by name: every way
// reaches the same fake and the same model.
func TestExploreFakesServeLocalAndRegularActivities(t *testing.T) {
	w := newWorld(generate(1))
	w.s.Faults, w.s.Events = nil, nil
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(exploreLogger(slog.LevelError + 1))
	env := suite.NewTestWorkflowEnvironment()
	w.env = env
	if err := w.register(env); err != nil {
		t.Fatal(err)
	}
	sku := w.s.Cart[0].SKU
	in := steps.StockInput{CheckoutID: "c-1", SKU: sku, Quantity: w.s.Cart[0].Quantity}
	env.ExecuteWorkflow(func(ctx workflow.Context) error {
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Second})
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Second})
		if err := workflow.ExecuteLocalActivity(lctx, nilActs.ReserveStock, in).Get(ctx, nil); err != nil {
			return fmt.Errorf("local reserve: %w", err)
		}
		if err := workflow.ExecuteActivity(actx, nilActs.CommitStock, in).Get(ctx, nil); err != nil {
			return fmt.Errorf("regular commit: %w", err)
		}
		// By name, as a regular activity: a committed hold refuses a release.
		err := workflow.ExecuteActivity(actx, "ReleaseStock", in).Get(ctx, nil)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != shop.ErrTypeHoldCommitted {
			return fmt.Errorf("release by name after commit: %v, want %s", err, shop.ErrTypeHoldCommitted)
		}
		return nil
	})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if got := w.holds[sku]; got != holdCommitted {
		t.Errorf("hold on %s is %s, want committed", sku, got)
	}
	want := map[string]int{"ReserveStock(" + sku + ")": 1, "CommitStock(" + sku + ")": 1, "ReleaseStock(" + sku + ")": 1}
	for k, n := range want {
		if w.calls[k] != n {
			t.Errorf("%s called %d times, want %d (calls: %v)", k, w.calls[k], n, w.calls)
		}
	}
}
