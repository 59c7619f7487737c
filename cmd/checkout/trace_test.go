package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stretchr/testify/require"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/tracing"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// One checkout is one trace: the API and worker run as `checkout dev` wires them (open,
// serveWorker, serveAPI) on real Redis, Postgres and a Temporal dev server, with spans going
// to an in-memory exporter instead of OTLP. One POST /v1/checkouts and one signed payment
// webhook later, the span tree must run from the HTTP request through update-with-start,
// the workflow and each of its (local) activities down to the Redis and Postgres calls, and
// the logs must carry the trace id.
func TestOneCheckoutIsOneTrace(t *testing.T) {
	srv := testenv.DevServer(t, workflows.DevServerFlags()...)
	dbURL, _ := testenv.Postgres(t)
	const secret = "whsec_trace_test_secret"
	for name, value := range map[string]string{
		"DATABASE_URL": dbURL, "REDIS_URL": testenv.RedisURL(), "TEMPORAL_ADDRESS": srv.FrontendHostPort(),
		"API_ADDR": "127.0.0.1:" + testenv.FreePort(t), "API_METRICS_ADDR": "127.0.0.1:" + testenv.FreePort(t),
		"ADMIN_TOKEN": "trace-test-admin-token", "STRIPE_WEBHOOK_SECRET": secret, "API_DRAIN_DELAY_SECONDS": "0",
		"STRIPE_TEST_MODE": "true", // the test signs test-mode events
	} {
		t.Setenv(name, value)
	}
	cfg, err := loadConfig(false)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := slog.New(tracing.LogHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	exporter := tracetest.NewInMemoryExporter()
	tr := tracing.New(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })

	d, err := open(t.Context(), cfg, logger, tr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var running sync.WaitGroup
	for _, serve := range []func(context.Context, config, *deps) error{serveWorker, serveAPI} {
		running.Go(func() {
			if err := serve(ctx, cfg, d); err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(func() { stop(); running.Wait(); d.Close() })

	sku := testenv.RandomID("TRACE-")
	inv := &inventory.Inventory{Store: d.store, Stock: d.stock}
	if _, err := inv.Set(t.Context(), shop.Product{SKU: sku, OnHand: 10, SaleTerms: shop.SaleTerms{PriceCents: 1500, Currency: "usd", MaxPerOrder: 5}}); err != nil {
		t.Fatal(err)
	}
	base := "http://" + cfg.APIAddr
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 100*time.Millisecond, "the API ready with its worker")

	cart := testenv.RandomID("c-trace-")
	body := fmt.Sprintf(`{"cart_id": %q, "customer_id": "u-trace", "items": [{"sku": %q, "quantity": 2}]}`, cart, sku)
	resp, err := http.Post(base+"/v1/checkouts", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/checkouts: %s %s", resp.Status, answer)
	}
	if err := signWebhook(t.Context(), []string{"-checkout", cart, "-amount", "3000", "-secret", secret,
		"-url", base + "/v1/webhooks/stripe"}); err != nil {
		t.Fatal(err)
	}

	// A span is exported when it ends: the workflow's when the saga does (confirmed, once the
	// payment arrived), each HTTP request's just after its answer went out.
	workflowID := shop.WorkflowID(cart)
	var spans spanTree
	require.Eventually(t, func() bool {
		spans = newSpanTree(exporter.GetSpans())
		return len(spans.named("RunWorkflow:Checkout", attribute.String("temporalWorkflowID", workflowID))) > 0 &&
			len(spans.named("RunActivity:CommitStock", attribute.String("temporalWorkflowID", workflowID))) > 0 &&
			len(spans.named("POST /v1/checkouts")) > 0 && len(spans.named("POST /v1/webhooks/stripe")) > 0
	}, 60*time.Second, 100*time.Millisecond, "the saga's and both requests' spans")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("spans:\n%s", spans)
		}
	})

	request := spans.one(t, "POST /v1/checkouts")
	if request.Parent.IsValid() || request.SpanKind != trace.SpanKindServer {
		t.Fatalf("the checkout's HTTP span is not a root server span: kind %v, parent %v", request.SpanKind, request.Parent.SpanID())
	}
	traceID := request.SpanContext.TraceID()
	update := spans.childOf(t, request, "UpdateWithStartWorkflow:"+workflows.UpdateReservation)
	run := spans.childOf(t, update, "RunWorkflow:Checkout")
	spans.childOf(t, update, "HandleUpdate:"+workflows.UpdateReservation)

	// Every step of a confirmed checkout is a local activity: the workflow's StartActivity
	// span parents the worker's RunActivity span, as for a regular activity.
	steps := map[string]tracetest.SpanStub{}
	for _, step := range []string{"RecordCheckout", "ReserveStock", "ConfirmOrder", "CommitStock"} {
		started := spans.childOf(t, run, "StartActivity:"+step)
		steps[step] = spans.childOf(t, started, "RunActivity:"+step)
	}
	for _, s := range spans.all {
		if s.SpanContext.TraceID() != traceID && spans.descends(s, request) {
			t.Errorf("span %s is under the checkout's request but in trace %s, not %s", s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	spans.childOf(t, steps["ReserveStock"], "evalsha", "eval")
	spans.childOf(t, steps["CommitStock"], "evalsha", "eval")
	for _, step := range []string{"RecordCheckout", "ConfirmOrder"} {
		if len(spans.children(steps[step], attribute.String("db.system.name", "postgresql"))) == 0 {
			t.Errorf("no Postgres query span under RunActivity:%s", step)
		}
	}

	// The payment is a second trace, the webhook's, whose signal span reaches into the saga.
	webhook := spans.one(t, "POST /v1/webhooks/stripe")
	if webhook.Parent.IsValid() {
		t.Errorf("the webhook's HTTP span has a parent %v", webhook.Parent.SpanID())
	}
	signal := spans.childOf(t, webhook, "SignalWorkflow:"+workflows.SignalPayment)
	spans.childOf(t, signal, "HandleSignal:"+workflows.SignalPayment)
	if len(spans.children(webhook, attribute.String("db.system.name", "postgresql"))) == 0 {
		t.Errorf("no Postgres span (the event's record) under the webhook's HTTP span")
	}

	// Logs carry the trace: the API's request line, and an activity's line (logged through
	// the SDK's logger, which the interceptor gives the span's ids).
	lines := logs.lines(t)
	requestLine := findLine(lines, map[string]string{"msg": "http request", "path": "/v1/checkouts"})
	if requestLine == nil || requestLine[tracing.TraceIDKey] != traceID.String() {
		t.Errorf("the request's log line %v does not carry trace_id %s", requestLine, traceID)
	}
	heldLine := findLine(lines, map[string]string{"msg": "stock held", "checkout_id": cart})
	if heldLine == nil || heldLine[tracing.TraceIDKey] != traceID.String() ||
		heldLine[tracing.SpanIDKey] != steps["ReserveStock"].SpanContext.SpanID().String() {
		t.Errorf("the ReserveStock log line %v does not carry trace_id %s and the activity's span_id %s",
			heldLine, traceID, steps["ReserveStock"].SpanContext.SpanID())
	}
}

// spanTree indexes exported spans by id, to walk parent links.
type spanTree struct {
	all  tracetest.SpanStubs
	byID map[trace.SpanID]tracetest.SpanStub
}

func newSpanTree(spans tracetest.SpanStubs) spanTree {
	tree := spanTree{all: spans, byID: map[trace.SpanID]tracetest.SpanStub{}}
	for _, s := range spans {
		tree.byID[s.SpanContext.SpanID()] = s
	}
	return tree
}

// named returns the spans with that name and every attribute of attrs.
func (tree spanTree) named(name string, attrs ...attribute.KeyValue) []tracetest.SpanStub {
	var found []tracetest.SpanStub
	for _, s := range tree.all {
		if s.Name == name && hasAttributes(s, attrs) {
			found = append(found, s)
		}
	}
	return found
}

// one is the single span with that name, or the test stops.
func (tree spanTree) one(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	found := tree.named(name)
	if len(found) != 1 {
		t.Fatalf("%d spans named %q, want 1", len(found), name)
	}
	return found[0]
}

// children are parent's direct children with every attribute of attrs.
func (tree spanTree) children(parent tracetest.SpanStub, attrs ...attribute.KeyValue) []tracetest.SpanStub {
	var found []tracetest.SpanStub
	for _, s := range tree.all {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() && s.Parent.TraceID() == parent.SpanContext.TraceID() && hasAttributes(s, attrs) {
			found = append(found, s)
		}
	}
	return found
}

// childOf is a direct child of parent named one of names, or the test stops.
func (tree spanTree) childOf(t *testing.T, parent tracetest.SpanStub, names ...string) tracetest.SpanStub {
	t.Helper()
	for _, s := range tree.children(parent) {
		for _, name := range names {
			if s.Name == name {
				return s
			}
		}
	}
	t.Fatalf("no span named %s under %s", strings.Join(names, " or "), parent.Name)
	return tracetest.SpanStub{}
}

// descends reports whether ancestor is s's parent, or its parent's, and so on.
func (tree spanTree) descends(s, ancestor tracetest.SpanStub) bool {
	for s.Parent.IsValid() {
		parent, ok := tree.byID[s.Parent.SpanID()]
		if !ok {
			return false
		}
		if parent.SpanContext.SpanID() == ancestor.SpanContext.SpanID() {
			return true
		}
		s = parent
	}
	return false
}

// String lists the spans as "name (kind) id <- parent", for a failing test's log.
func (tree spanTree) String() string {
	var b strings.Builder
	for _, s := range tree.all {
		fmt.Fprintf(&b, "  %s (%s) %s <- %s trace %s\n", s.Name, s.SpanKind, s.SpanContext.SpanID(), s.Parent.SpanID(), s.SpanContext.TraceID())
	}
	return b.String()
}

func hasAttributes(s tracetest.SpanStub, want []attribute.KeyValue) bool {
	for _, w := range want {
		found := false
		for _, a := range s.Attributes {
			if a == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// syncBuffer is a log destination that the API's and worker's goroutines share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines decodes the JSON log lines written so far.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var lines []map[string]any
	for _, raw := range bytes.Split(b.buf.Bytes(), []byte("\n")) {
		if len(raw) == 0 {
			continue
		}
		var line map[string]any
		if err := json.Unmarshal(raw, &line); err != nil {
			t.Fatalf("log line %q: %v", raw, err)
		}
		lines = append(lines, line)
	}
	return lines
}

// findLine is the first line with every field of want.
func findLine(lines []map[string]any, want map[string]string) map[string]any {
next:
	for _, line := range lines {
		for k, v := range want {
			if line[k] != v {
				continue next
			}
		}
		return line
	}
	return nil
}
