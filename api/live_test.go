package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// live is a harness whose API talks to a real Temporal dev server (started from the pinned
// CLI on free ports), for the answers that depend on what Temporal and the workers do.
type live struct {
	*harness
	tc client.Client
}

// newLive starts a dev server (with devServerArgs, e.g. dynamic config) and an API on it;
// configure may change the API's config and deps as in newHarness. No worker runs until
// startWorker.
func newLive(t *testing.T, devServerArgs []string, configure func(*api.Config, *api.Deps)) *live {
	t.Helper()
	srv, _ := testenv.DevServerWith(t, testenv.DevServerOptions{ExtraArgs: append(workflows.DevServerFlags(), devServerArgs...)})
	tc := srv.Client()
	h := newHarness(t, func(cfg *api.Config, d *api.Deps) {
		d.Temporal = tc
		if configure != nil {
			configure(cfg, d)
		}
	})
	return &live{harness: h, tc: tc}
}

// startWorker runs the checkout worker against the harness's Redis and Postgres until the
// test ends.
func (l *live) startWorker(t *testing.T) sdkworker.Worker {
	t.Helper()
	w := worker.New(l.tc, &activities.Activities{Store: l.inv.Store, Stock: l.inv.Stock, Temporal: l.tc}, worker.Build{})
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
	return w
}

// openPhoneCheckout stocks a phone (10 units at $999.00, 2 an order) and opens a checkout of
// one of them for u-1, which must answer 201; it returns the phone's SKU and the cart id.
func (l *live) openPhoneCheckout(t *testing.T) (phone, id string) {
	t.Helper()
	phone = l.stockSKU(t, "PHONE-", 10, 99900, 2, "usd")
	id = testenv.RandomID("c-")
	if code, got := l.post(t, cart(id, "u-1", phone, 1), nil); code != http.StatusCreated {
		t.Fatalf("the buyer's POST of cart %s = %d %s, want 201", id, code, got)
	}
	return phone, id
}

func (l *live) post(t *testing.T, body string, header map[string]string) (int, string) {
	t.Helper()
	rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: strings.NewReader(body), header: header})
	return rec.Code, rec.Body.String()
}

// sagaExists reports whether Temporal has a workflow checkout-<cartID>, open or closed.
func (l *live) sagaExists(t *testing.T, cartID string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := l.tc.DescribeWorkflowExecution(ctx, shop.WorkflowID(cartID), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false
	}
	if err != nil {
		t.Fatalf("describe %s: %v", shop.WorkflowID(cartID), err)
	}
	return true
}
