package scale

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// A deployBuyer is a buyer of the rolling deploy: the build its saga must run on from its
// first task to its last, and how it must end.
type deployBuyer struct {
	*buyer
	build string
	want  shop.Status
}

// TestRollingDeployDuringASale deploys a new build of the worker in the middle of a sale and
// rolls it back, on the production shape (the full Temporal server on Postgres, a Redis
// Cluster, workers and APIs as processes of the product's binary), with Worker Versioning:
//
//   - build A is current and takes 20 checkouts of 30 units;
//   - build B starts beside it and is made current (`checkout deployment set-current`): 15
//     buyers go for the 10 units left, 10 win on B and 5 are told sold out;
//   - A's checkouts are then paid, cancelled or left to expire, while B is current; B's are
//     paid or cancelled, two of them only after the rollback;
//   - the rollback makes A current again: 4 new checkouts run on A.
//
// Every saga runs all its workflow tasks on the build it started on (its history names the
// build of each task, and the worker process of each activity) and is pinned there; nothing
// is sold twice, every paid checkout is confirmed, the stock adds up, and the audit across
// Postgres, the Redis Cluster and Temporal finds nothing.
func TestRollingDeployDuringASale(t *testing.T) {
	s := newShape(t, 4, 3)
	workers := map[string]*product{"build-a": s.versionedWorker("worker-a", "build-a")}
	s.deployment("set-current", "-build-id", "build-a")
	apis := []*product{s.api("api-1"), s.api("api-2")}

	run := testenv.RandomID("")
	sku := "DEPLOY-" + run
	const units = 30
	stock, _ := json.Marshal(map[string]any{"on_hand": units, "price_cents": 4_999, "currency": "usd", "max_per_order": 1})
	if code, err := s.do(apis[0], http.MethodPut, "/v1/inventory/"+sku, stock, nil, "Authorization", "Bearer "+adminToken); err != nil || code != http.StatusOK {
		t.Fatalf("stock %s: %d %v", sku, code, err)
	}
	var all []*deployBuyer
	buyers := func(phase string, n int, build string) []*deployBuyer {
		bs := make([]*deployBuyer, n)
		for i := range bs {
			id := fmt.Sprintf("c-%s-%s%02d", run, phase, i)
			bs[i] = &deployBuyer{buyer: &buyer{id: id, addr: fmt.Sprintf("198.18.%d.%d", len(all)/250, len(all)%250+1)}, build: build}
			all = append(all, bs[i])
		}
		return bs
	}

	// Build A: 20 checkouts. Five have a payment window that ends after B is current, so
	// their expiry (a timer) fires while B takes the new sagas.
	const expiring = 60
	phaseA := buyers("a", 20, "build-a")
	s.checkoutAll(apis, sku, phaseA, func(i int) int64 {
		if i%4 == 3 {
			return expiring
		}
		return 600
	})
	for i, b := range phaseA {
		if !b.won() {
			t.Fatalf("buyer %s on build A: POST answered %d %q; want every one of the first 20 to hold a unit", b.id, b.code, b.view.Status)
		}
		b.want = []shop.Status{shop.StatusConfirmed, shop.StatusConfirmed, shop.StatusCancelled, shop.StatusExpired}[i%4]
	}
	phaseAStarted := time.Now()

	// The deploy: build B beside A, then B current.
	workers["build-b"] = s.versionedWorker("worker-b", "build-b")
	s.deployment("set-current", "-build-id", "build-b")
	t.Logf("build B current %s after build A's checkouts", time.Since(phaseAStarted).Round(time.Millisecond))
	for _, b := range phaseA {
		if b.want == shop.StatusExpired {
			if st := s.status(apis[0], b.buyer); st != shop.StatusAwaitingPayment {
				t.Fatalf("buyer %s (window %d s) is %q once B is current, want awaiting_payment: the deploy took longer than the window; lengthen it", b.id, expiring, st)
			}
		}
	}

	// Build B: 15 buyers for the 10 units left.
	phaseB := buyers("b", 15, "build-b")
	s.checkoutAll(apis, sku, phaseB, func(int) int64 { return 600 })
	var winnersB []*deployBuyer
	for _, b := range phaseB {
		switch {
		case b.won():
			winnersB = append(winnersB, b)
		case b.code == http.StatusConflict || b.view.Status == shop.StatusOutOfStock:
		default:
			t.Errorf("buyer %s on build B: POST answered %d %q", b.id, b.code, b.view.Status)
		}
	}
	if len(winnersB) != units-len(phaseA) {
		t.Fatalf("%d winners on build B for the %d units left; want each unit sold once", len(winnersB), units-len(phaseA))
	}
	// Six pay and two cancel now; the last two stay open across the rollback.
	for i, b := range winnersB {
		b.want = shop.StatusConfirmed
		if i == 6 || i == 7 {
			b.want = shop.StatusCancelled
		}
	}
	// A's checkouts end while B is current, B's first eight too.
	s.settle(apis, append(phaseA, winnersB[:8]...))

	// The rollback: A current again; the next checkouts run on A, B's open ones stay on B.
	s.deployment("set-current", "-build-id", "build-a")
	phaseC := buyers("c", 4, "build-a")
	s.checkoutAll(apis, sku, phaseC, func(int) int64 { return 600 })
	for i, b := range phaseC {
		if !b.won() {
			t.Fatalf("buyer %s after the rollback: POST answered %d %q; want a unit (cancelled ones came back)", b.id, b.code, b.view.Status)
		}
		b.want = []shop.Status{shop.StatusConfirmed, shop.StatusCancelled}[i%2]
	}
	s.settle(apis, append(phaseC, winnersB[8:]...))

	ended := append(append(phaseA, winnersB...), phaseC...)
	s.awaitEnds(apis, ended, 4*time.Minute)

	tc, err := client.Dial(client.Options{HostPort: s.temporal.HostPort, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	moved := 0
	for _, b := range ended {
		if err := s.ranOn(tc, b, workers); err != nil {
			moved++
			t.Errorf("saga %s: %v", b.id, err)
		}
	}

	paid := 0
	for _, b := range ended {
		if b.want == shop.StatusConfirmed {
			paid++
		}
	}
	report := s.soldAsPaid(apis[1], tc, sku, units, int64(paid), "the deploy and the rollback")
	t.Logf("deployment after the rollback:\n%s", s.deployment("describe"))
	t.Logf("%d sagas checked: %d on build A, %d on build B, %d moved build; %d paid; audit: %d checks, %d violations",
		len(ended), len(phaseA)+len(phaseC), len(winnersB), moved, paid, len(report.Checks), len(report.Violations))
}

// versionedWorker starts `checkout worker` as build of deployment checkout.
func (s *shape) versionedWorker(name, build string) *product {
	return s.startWorker(name, []string{"WORKER_BUILD_ID=" + build})
}

// deployment runs `checkout deployment args...`, the operator's command, and returns its
// output.
func (s *shape) deployment(args ...string) string {
	s.t.Helper()
	cmd := exec.CommandContext(ctx(s.t, 3*time.Minute), s.bin, append([]string{"deployment"}, args...)...)
	cmd.Env = append(cmd.Environ(), s.env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("checkout deployment %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// won reports whether the buyer's POST holds a unit.
func (b *buyer) won() bool {
	return (b.code == http.StatusCreated || b.code == http.StatusOK) && b.view.Status == shop.StatusAwaitingPayment
}

// checkoutAll posts each buyer's checkout through the replicas in turn, at once, with the
// payment window window(i) and a well-behaved client's retries (flashsale_test.go).
func (s *shape) checkoutAll(apis []*product, sku string, bs []*deployBuyer, window func(i int) int64) {
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Go(func() {
			body, _ := json.Marshal(api.CheckoutRequest{CartID: b.id, CustomerID: "u-" + b.id, Items: []api.RequestItem{{SKU: sku, Quantity: 1}},
				PaymentTimeoutSeconds: new(window(i))})
			retrying := *apis[i%2].client
			retrying.MaxRetries = 60
			for range 5 {
				a, err := retrying.Checkout(s.t.Context(), body, map[string]string{forwardedFor: b.addr}, &b.view)
				b.code = a.Code
				if err == nil {
					return
				}
				time.Sleep(time.Second)
			}
		})
	}
	wg.Wait()
}

// settle pays or cancels each buyer as its want says, through the other replica; an expiring
// one is left alone.
func (s *shape) settle(apis []*product, bs []*deployBuyer) {
	var wg sync.WaitGroup
	for i, b := range bs {
		replica := apis[(i+1)%2]
		var send func() (int, error)
		switch b.want {
		case shop.StatusConfirmed:
			send = func() (int, error) { return s.payment(replica, b.buyer) }
		case shop.StatusCancelled:
			send = func() (int, error) {
				return s.do(replica, http.MethodPost, "/v1/checkouts/"+b.id+"/cancel", nil, nil, api.CheckoutSecretHeader, b.view.CheckoutSecret, forwardedFor, b.addr)
			}
		default:
			continue
		}
		wg.Go(func() {
			if code, err := send(); err != nil || code != http.StatusOK {
				s.t.Errorf("buyer %s (to end %s): %d %v", b.id, b.want, code, err)
			}
		})
	}
	wg.Wait()
}

// status reads the buyer's checkout, retrying a failed read for up to a minute.
func (s *shape) status(p *product, b *buyer) shop.Status {
	deadline := time.Now().Add(time.Minute)
	for {
		var v api.CheckoutView
		code, err := s.do(p, http.MethodGet, "/v1/checkouts/"+b.id, nil, &v, api.CheckoutSecretHeader, b.view.CheckoutSecret, forwardedFor, b.addr)
		if err == nil && code == http.StatusOK {
			return v.Status
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("read checkout %s: %d %v", b.id, code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// awaitEnds waits until every buyer's checkout has ended, and checks it ended as wanted.
func (s *shape) awaitEnds(apis []*product, bs []*deployBuyer, within time.Duration) {
	deadline := time.Now().Add(within)
	for i, b := range bs {
		for {
			code, err := s.do(apis[i%2], http.MethodGet, "/v1/checkouts/"+b.id, nil, &b.final, api.CheckoutSecretHeader, b.view.CheckoutSecret, forwardedFor, b.addr)
			if err == nil && code == http.StatusOK && b.final.Status.Final() {
				break
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("buyer %s not ended by the deadline: %q (%d, %v)", b.id, b.final.Status, code, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if b.final.Status != b.want {
			s.t.Errorf("buyer %s ended %s, want %s", b.id, b.final.Status, b.want)
		}
	}
}

// ranOn checks that the buyer's saga ran on its build only: Temporal pinned it there, every
// workflow task completed names that build, and every activity started in a worker process
// of that build (the identity of a worker is pid@host@).
func (s *shape) ranOn(tc client.Client, b *deployBuyer, workers map[string]*product) error {
	c := ctx(s.t, time.Minute)
	desc, err := tc.DescribeWorkflowExecution(c, "checkout-"+b.id, "")
	if err != nil {
		return fmt.Errorf("describe: %w", err)
	}
	var errs []error
	vi := desc.GetWorkflowExecutionInfo().GetVersioningInfo()
	if vi.GetBehavior() != enumspb.VERSIONING_BEHAVIOR_PINNED || vi.GetDeploymentVersion().GetBuildId() != b.build {
		errs = append(errs, fmt.Errorf("versioning info %s on build %q, want pinned on %s", vi.GetBehavior(), vi.GetDeploymentVersion().GetBuildId(), b.build))
	}
	own := strconv.Itoa(workers[b.build].cmd.Process.Pid) + "@"
	builds := map[string]int{}
	for it := tc.GetWorkflowHistory(c, "checkout-"+b.id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT); it.HasNext(); {
		e, err := it.Next()
		if err != nil {
			return fmt.Errorf("read history: %w", err)
		}
		if done := e.GetWorkflowTaskCompletedEventAttributes(); done != nil {
			builds[done.GetDeploymentVersion().GetBuildId()]++
			if done.GetVersioningBehavior() != enumspb.VERSIONING_BEHAVIOR_PINNED {
				errs = append(errs, fmt.Errorf("workflow task (event %d) completed %s, not pinned", e.GetEventId(), done.GetVersioningBehavior()))
			}
		}
		if started := e.GetActivityTaskStartedEventAttributes(); started != nil && !strings.HasPrefix(started.GetIdentity(), own) {
			errs = append(errs, fmt.Errorf("activity (event %d) started by %s, not by %s's worker (%s...)", e.GetEventId(), started.GetIdentity(), b.build, own))
		}
	}
	if len(builds) != 1 || builds[b.build] == 0 {
		errs = append(errs, fmt.Errorf("workflow tasks completed by builds %v, want all by %s", builds, b.build))
	}
	return errors.Join(errs...)
}
