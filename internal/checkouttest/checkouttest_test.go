package checkouttest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/checkout-saga/checkout-saga/workflows"
)

// A 503 is retried after its Retry-After, with the same body; the answer lists both attempts.
func TestClientRetriesA503AfterItsRetryAfter(t *testing.T) {
	var calls atomic.Int32
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(raw))
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":"overloaded"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":"awaiting_payment"}`))
	}))
	defer srv.Close()
	c := NewClient(srv.URL)
	started := time.Now()
	var out struct{ Status string }
	a, err := c.Do(t.Context(), http.MethodPost, "/v1/checkouts", map[string]string{"cart_id": "c-1"}, nil, &out)
	if err != nil || a.Code != http.StatusCreated || out.Status != "awaiting_payment" {
		t.Fatalf("answer %d %q (%v), want 201 awaiting_payment", a.Code, a.Body, err)
	}
	if waited := time.Since(started); waited < time.Second {
		t.Errorf("retried after %s, before the answer's Retry-After of 1 s", waited)
	}
	if len(a.Attempts) != 2 || a.Attempts[0] != "503 overloaded" || a.Retried != 1 || bodies[0] != bodies[1] {
		t.Errorf("attempts %v, retried %d, bodies %q; want one 503 overloaded retried with the same body", a.Attempts, a.Retried, bodies)
	}
	c.MaxRetries = 0
	calls.Store(0)
	if a, _ := c.Do(t.Context(), http.MethodGet, "/", nil, nil, nil); a.Code != http.StatusServiceUnavailable {
		t.Errorf("MaxRetries 0: %d, want the 503 itself", a.Code)
	}
}

// The event is signed as Stripe signs: stripe-go's own check accepts it.
func TestStripeEventIsSignedAsStripeSignsIt(t *testing.T) {
	body := Paid("c-1", 1_999).Body()
	if _, err := webhook.ConstructEvent(body, StripeSignature(body, "whsec_x", time.Now()), "whsec_x"); err != nil {
		t.Fatalf("stripe-go refuses the event: %v", err)
	}
}

// While cut, the proxy drops open connections and refuses to forward new ones; restored, it
// forwards again.
func TestProxyCutsAndRestoresTheWayToItsTarget(t *testing.T) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c) }()
		}
	}()
	p := StartProxy(t, echo.Addr().String())
	roundTrip := func() error {
		c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		buf := make([]byte, 4)
		_, err = io.ReadFull(c, buf)
		return err
	}
	if err := roundTrip(); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	p.Cut()
	if err := roundTrip(); err == nil {
		t.Error("a round trip while cut succeeded")
	}
	p.Restore()
	if err := roundTrip(); err != nil {
		t.Errorf("after restore: %v", err)
	}
}

// The scrape reads what a Prometheus handler serves, histograms by their sums.
func TestScrapeMetricsReadsTheTextFormat(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "# TYPE state_transition_count histogram\n"+
			"state_transition_count_bucket{le=\"+Inf\"} 2\nstate_transition_count_sum 19\nstate_transition_count_count 2\n"+
			"# TYPE up gauge\nup 1\n")
	}))
	defer srv.Close()
	families, err := ScrapeMetrics(t.Context(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if got := Sum(families["state_transition_count"]); got != 19 {
		t.Errorf("state_transition_count sum %v, want 19", got)
	}
	if got := Sum(families["up"]); got != 1 {
		t.Errorf("up %v, want 1", got)
	}
}

// The product's dev server runs the checkout task queue on workflows.TaskQueuePartitions
// partitions, not Temporal's default four (see TaskQueuePartitions for why).
func TestStartRunsTheCheckoutQueueOnOnePartition(t *testing.T) {
	p := Start(t, Options{NoAPI: true})
	resp, err := p.Temporal.WorkflowService().ListTaskQueuePartitions(t.Context(), &workflowservice.ListTaskQueuePartitionsRequest{
		Namespace: "default", TaskQueue: &taskqueuepb.TaskQueue{Name: workflows.TaskQueue, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
	})
	if err != nil {
		t.Fatalf("list partitions of %s: %v", workflows.TaskQueue, err)
	}
	if n := len(resp.GetWorkflowTaskQueuePartitions()); n != workflows.TaskQueuePartitions {
		t.Errorf("task queue %s has %d workflow-task partitions, want %d", workflows.TaskQueue, n, workflows.TaskQueuePartitions)
	}
}
