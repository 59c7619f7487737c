package scale

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82/webhook"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

type buyer struct {
	id    string
	addr  string // its address, as the load balancer names it (X-Forwarded-For)
	code  int
	view  api.CheckoutView
	final api.CheckoutView
	pay   bool // a winner pays; the others cancel
}

// TestFlashSaleOnPostgresTemporal sells 60 units to 400 buyers through two API replicas, on
// the full Temporal server on Postgres with 4 history shards, a 3-master Redis Cluster and two
// worker processes, one of them killed (SIGKILL) while the burst is under way. Every unit is
// sold at most once, every paid checkout is confirmed, every cancelled one gives its unit back,
// and the operator's audit finds nothing.
func TestFlashSaleOnPostgresTemporal(t *testing.T) {
	s := newShape(t, 4, 3)
	workerA, _ := s.worker("worker-a"), s.worker("worker-b")
	apis := []*product{s.api("api-1"), s.api("api-2")}

	run := testenv.RandomID("")
	sku := "SCALE-" + run
	const units, buyers = 60, 400
	stock, _ := json.Marshal(map[string]any{"on_hand": units, "price_cents": 4_999, "currency": "usd", "max_per_order": 1})
	if code, err := s.do(apis[0], http.MethodPut, "/v1/inventory/"+sku, stock, nil, "Authorization", "Bearer "+adminToken); err != nil || code != http.StatusOK {
		t.Fatalf("stock %s: %d %v", sku, code, err)
	}

	all := make([]*buyer, buyers)
	for i := range all {
		all[i] = &buyer{id: fmt.Sprintf("c-%s-%03d", run, i), addr: fmt.Sprintf("198.18.%d.%d", i/250, i%250+1), pay: i%4 != 3}
	}
	var answered, shed atomic.Int32
	killed := make(chan struct{})
	go func() { // kill one worker once a third of the buyers have their answer
		defer close(killed)
		for answered.Load() < buyers/3 {
			time.Sleep(10 * time.Millisecond)
		}
		workerA.kill()
		t.Logf("worker-a killed after %d answers", answered.Load())
	}()
	started := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64) // 64 buyers at once, across both replicas
	for i, b := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			replica := apis[i%2]
			body, _ := json.Marshal(api.CheckoutRequest{CartID: b.id, CustomerID: "u-" + b.id, Items: []api.RequestItem{{SKU: sku, Quantity: 1}}, PaymentTimeoutSeconds: new(int64(600))})
			// A well-behaved client retries a 503 (shed, or a step retried past the request's
			// timeout while the killed worker's tasks time out) with the same cart id, after
			// its Retry-After (checkouttest.Client); a transport error is retried too.
			retrying := *replica.client
			retrying.MaxRetries = 60
			for range 5 {
				a, err := retrying.Checkout(t.Context(), body, map[string]string{forwardedFor: b.addr}, &b.view)
				b.code = a.Code
				shed.Add(int32(a.Retried))
				if err == nil {
					break
				}
				time.Sleep(time.Second)
			}
			answered.Add(1)
		}()
	}
	wg.Wait()
	<-killed
	burst := time.Since(started)

	var winners []*buyer
	for _, b := range all {
		switch {
		case (b.code == http.StatusCreated || b.code == http.StatusOK) && b.view.Status == shop.StatusOutOfStock:
			// Left the waiting room for a saga that refused it.
		case b.code == http.StatusCreated || b.code == http.StatusOK:
			winners = append(winners, b)
		case b.code == http.StatusConflict:
		default:
			t.Errorf("buyer %s: POST answered %d", b.id, b.code)
		}
	}
	if len(winners) != units {
		t.Errorf("%d winners for %d units among %d buyers; want every unit sold once", len(winners), units, buyers)
	}

	// Winners pay (a signed webhook) or cancel, through the other replica: the checkout
	// secret one replica answered opens the checkout on the other.
	for i, b := range winners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replica := apis[(i+1)%2]
			var code int
			var err error
			if b.pay {
				code, err = s.payment(replica, b)
			} else {
				code, err = s.do(replica, http.MethodPost, "/v1/checkouts/"+b.id+"/cancel", nil, nil, api.CheckoutSecretHeader, b.view.CheckoutSecret, forwardedFor, b.addr)
			}
			if err != nil || code != http.StatusOK {
				t.Errorf("buyer %s (pay %v): %d %v", b.id, b.pay, code, err)
			}
		}()
	}
	wg.Wait()

	paid := 0
	deadline := time.Now().Add(3 * time.Minute)
	for i, b := range winners {
		want := shop.StatusCancelled
		if b.pay {
			want, paid = shop.StatusConfirmed, paid+1
		}
		for {
			code, err := s.do(apis[i%2], http.MethodGet, "/v1/checkouts/"+b.id, nil, &b.final, api.CheckoutSecretHeader, b.view.CheckoutSecret, forwardedFor, b.addr)
			if err == nil && code == http.StatusOK && b.final.Status.Final() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("buyer %s not finished by the deadline: %q (%d, %v)", b.id, b.final.Status, code, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if b.final.Status != want {
			t.Errorf("buyer %s ended %s, want %s", b.id, b.final.Status, want)
		}
	}

	tc, err := client.Dial(client.Options{HostPort: s.temporal.HostPort, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	report := s.soldAsPaid(apis[1], tc, sku, units, int64(paid), "the sale")
	t.Logf("%d buyers, %d units: burst %s (%d retried 503s and 429s), %d winners, %d paid, %d cancelled; audit: %d checks, %d violations",
		buyers, units, burst.Round(time.Millisecond), shed.Load(), len(winners), paid, len(winners)-paid, len(report.Checks), len(report.Violations))

	scriptAcrossReplicas(t, s, apis, run)
}

// forwardedFor names the client behind the suite, which is the replicas' load balancer.
const forwardedFor = "X-Forwarded-For"

// scriptAcrossReplicas: a script inventing customers from one address, its checkouts spread
// over both replicas, gets the address's share once (RATE_LIMIT_CHECKOUTS_PER_ADDRESS's
// burst, counted in the Redis Cluster every replica shares), not once per replica.
func scriptAcrossReplicas(t *testing.T, s *shape, apis []*product, run string) {
	sku := "SCALE-GONE-" + run
	stock, _ := json.Marshal(map[string]any{"on_hand": 0, "price_cents": 4_999, "currency": "usd", "max_per_order": 1})
	if code, err := s.do(apis[0], http.MethodPut, "/v1/inventory/"+sku, stock, nil, "Authorization", "Bearer "+adminToken); err != nil || code != http.StatusOK {
		t.Fatalf("stock %s: %d %v", sku, code, err)
	}
	const tries, share = 30, 10 // share: the default limit's burst
	passed, limited := 0, map[string]int{}
	for i := range tries {
		replica := apis[i%2]
		body, _ := json.Marshal(api.CheckoutRequest{CartID: fmt.Sprintf("bot-%s-%d", run, i), CustomerID: fmt.Sprintf("bot-%s-%d", run, i),
			Items: []api.RequestItem{{SKU: sku, Quantity: 1}}})
		switch code, err := s.do(replica, http.MethodPost, "/v1/checkouts", body, nil, forwardedFor, "198.19.255.1"); {
		case err != nil:
			t.Fatalf("script's checkout %d: %v", i, err)
		case code == http.StatusConflict: // past the limits: the sold-out gate answers
			passed++
		case code == http.StatusTooManyRequests:
			limited[replica.name]++
		default:
			t.Fatalf("script's checkout %d: %d, want 409 or 429", i, code)
		}
	}
	// One more token may come in while the script runs (10 a minute).
	if passed < share || passed > share+1 || len(limited) != 2 {
		t.Errorf("a script's %d checkouts from one address over two replicas: %d passed, limited %v; want %d passed (one share, not one per replica) and both replicas limiting",
			tries, passed, limited, share)
	}
	t.Logf("a script's %d checkouts from one address over two replicas: %d passed, limited %v", tries, passed, limited)
}

// payment sends a correctly signed payment_intent.succeeded for the buyer's checkout.
func (s *shape) payment(p *product, b *buyer) (int, error) {
	body, _ := json.Marshal(map[string]any{
		"id": "evt_" + b.id, "object": "event", "type": "payment_intent.succeeded", "api_version": "2024-06-20",
		"data": map[string]any{"object": map[string]any{
			"id": "pi_" + b.id, "object": "payment_intent", "amount": b.view.AmountCents, "amount_received": b.view.AmountCents,
			"currency": "usd", "metadata": map[string]string{"checkout_id": b.id},
		}},
	})
	signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: webhookSecret})
	return s.do(p, http.MethodPost, "/v1/webhooks/stripe", body, nil, "Stripe-Signature", signed.Header)
}

// soldAsPaid checks, once a sale is over, that the SKU sold exactly the paid units and holds
// none (on_hand is what is left to sell: the sold units leave it, the cancelled ones came
// back), and that the operator's audit across Postgres, the Redis Cluster and Temporal on
// Postgres is clean. It returns the audit's report.
func (s *shape) soldAsPaid(p *product, tc client.Client, sku string, units, paid int64, after string) shop.AuditReport {
	s.t.Helper()
	t := s.t
	var inv shop.InventoryView
	if code, err := s.do(p, http.MethodGet, "/v1/inventory/"+sku, nil, &inv, "Authorization", "Bearer "+adminToken); err != nil || code != http.StatusOK {
		t.Fatalf("read stock: %d %v", code, err)
	}
	if inv.Sold != paid || inv.Held != 0 || inv.OnHand != units-paid || inv.Available != inv.OnHand {
		t.Errorf("stock after %s: %+v; want sold %d, held 0, on_hand and available %d", after, inv, paid, units-paid)
	}
	pool, err := pgxpool.New(t.Context(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	report, err := audit.New(pool, s.rdb, tc, audit.Options{Grace: -1}).Run(ctx(t, time.Minute))
	if err != nil || !report.Clean() {
		t.Errorf("audit after %s: %v; violations %+v", after, err, report.Violations)
	}
	return report
}
