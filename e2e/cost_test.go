//go:build cost

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// TestSagaCost measures what one checkout costs the Temporal server, from the server's own
// numbers: history events (GetWorkflowHistory), state transitions (the dev server's
// state_transition_count metric) and persistence requests by operation (persistence_requests
// and visibility_persistence_requests). It is a measurement, not a check, built only with the
// cost tag; the figures it logs are quoted in docs/design.md ("Design choices, and why"):
//
//	TEMPORAL_CLI=$PWD/.tools/temporal go test -tags cost -count=1 -run TestSagaCost -v ./e2e/
func TestSagaCost(t *testing.T) {
	metricsPort := testenv.FreePort(t)
	args := append(workflows.DevServerFlags(), "--metrics-port", metricsPort)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
		ExistingPath: testenv.TemporalCLI(t), LogLevel: "error", ExtraArgs: args,
		ClientOptions: &client.Options{Namespace: "default"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Stop() }()
	c := srv.Client()
	_, pool := testenv.Postgres(t)
	p, err := checkouttest.Open(ctx, checkouttest.Services{Temporal: c, Pool: pool, Redis: testenv.Redis(t)}, checkouttest.Options{NoAPI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	sku, soldOut := testenv.RandomID("COST-"), testenv.RandomID("GONE-")
	if err := p.SetStock(ctx, sku, 1000, 5); err != nil {
		t.Fatal(err)
	}
	if err := p.SetStock(ctx, soldOut, 0, 5); err != nil {
		t.Fatal(err)
	}

	const n = 20
	measure := func(name, item string, pay bool) {
		before, opsBefore := settledCounters(t, metricsPort)
		var events int
		for i := 0; i < n; i++ {
			id := fmt.Sprintf("%s-%s-%d", name, testenv.RandomID(""), i)
			in := workflows.Input{CheckoutID: id, CustomerID: "u-cost", Items: []shop.CartLine{{SKU: item, Quantity: 1}}, PaymentTimeoutSeconds: 600, RequestID: "req-" + id}
			start := workflows.StartOperation(c, in)
			h, err := c.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
				StartWorkflowOperation: start, UpdateOptions: workflows.ReservationUpdate(in)})
			if err != nil {
				t.Fatal(err)
			}
			var res workflows.ReservationResult
			if err := h.Get(ctx, &res); err != nil {
				t.Fatal(err)
			}
			if pay {
				// The verified event a webhook records first: the saga confirms only those.
				pm := shop.Payment{Provider: "stripe", EventID: "evt_" + id, Outcome: shop.PaymentSucceeded, PaymentRef: "pi_" + id,
					AmountCents: res.View.AmountCents, Currency: "usd"}
				if _, err := p.Store.RecordPaymentEvent(ctx, shop.PaymentEvent{Provider: pm.Provider, EventID: pm.EventID, Type: "payment_intent.succeeded",
					CheckoutID: id, PaymentRef: pm.PaymentRef, AmountCents: pm.AmountCents, Currency: pm.Currency,
					Outcome: string(pm.Outcome), Payload: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
				if err := c.SignalWorkflow(ctx, shop.WorkflowID(id), "", workflows.SignalPayment, pm); err != nil {
					t.Fatal(err)
				}
			}
			var v shop.View
			if err := c.GetWorkflow(ctx, shop.WorkflowID(id), "").Get(ctx, &v); err != nil {
				t.Fatal(err)
			}
			iter := c.GetWorkflowHistory(ctx, shop.WorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for iter.HasNext() {
				if _, err := iter.Next(); err != nil {
					t.Fatal(err)
				}
				events++
			}
		}
		after, opsAfter := settledCounters(t, metricsPort)
		var ops []string
		total := 0.0
		for _, op := range slices.Sorted(maps.Keys(opsAfter)) {
			if d := opsAfter[op] - opsBefore[op]; d > 0 {
				ops = append(ops, fmt.Sprintf("%s %.1f", op, d/n))
				total += d / n
			}
		}
		t.Logf("%s: %.1f history events, %.1f state transitions and %.1f persistence requests per checkout (%d checkouts): %s",
			name, float64(events)/n, (after-before)/n, total, n, strings.Join(ops, ", "))
	}
	measure("confirmed", sku, true)
	measure("out_of_stock", soldOut, false)
}

// settledCounters reads the state transitions and the persistence requests once they stopped
// moving: the server publishes its counters every second or so, and the work a checkout left
// (visibility, timer tasks) finishes after its result.
func settledCounters(t *testing.T, port string) (float64, map[string]float64) {
	last, lastOps := stateTransitions(t, port), persistenceRequests(t, port)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		time.Sleep(1500 * time.Millisecond)
		now, ops := stateTransitions(t, port), persistenceRequests(t, port)
		if now == last && maps.Equal(ops, lastOps) {
			return now, ops
		}
		last, lastOps = now, ops
	}
	t.Fatal("the server's counters still moved a minute after the checkouts")
	return 0, nil
}

// persistenceRequests reads the dev server's persistence_requests and
// visibility_persistence_requests counters by operation.
func persistenceRequests(t *testing.T, port string) map[string]float64 {
	families, err := checkouttest.ScrapeMetrics(t.Context(), "http://127.0.0.1:"+port+"/metrics")
	if err != nil {
		t.Fatalf("read server metrics: %v", err)
	}
	byOp := map[string]float64{}
	for family, prefix := range map[string]string{"persistence_requests": "", "visibility_persistence_requests": "visibility "} {
		for _, m := range families[family].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operation" {
					byOp[prefix+l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return byOp
}

// stateTransitions sums the dev server's state_transition_count histogram.
func stateTransitions(t *testing.T, port string) float64 {
	families, err := checkouttest.ScrapeMetrics(t.Context(), "http://127.0.0.1:"+port+"/metrics")
	if err != nil {
		t.Fatalf("read server metrics: %v", err)
	}
	return checkouttest.Sum(families["state_transition_count"])
}
