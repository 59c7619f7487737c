package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// Secrets of the payment webhook tests: two Stripe secrets (a rotation in progress) and two
// Standard Webhooks secrets for the provider acme-pay.
const (
	stripeSecretOld  = "whsec_e2e_old_secret"
	stripeSecretNew  = "whsec_e2e_new_secret"
	standardProvider = "acme-pay"
)

var (
	standardSecretOld = "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-standard-key-old-0123456789ab"))
	standardSecretNew = "whsec_" + base64.StdEncoding.EncodeToString([]byte("e2e-standard-key-new-0123456789ab"))
)

// settleWait bounds every wait for the saga, a refund or visibility: generous, because the
// dev server shares the machine with other tests.
const settleWait = 60 * time.Second

// payStack is the product in-process for payment tests: one dev server, a worker whose
// activities refund through a local scripted Stripe API, and two APIs on the same Postgres
// and Redis: one with a direct Temporal client, one whose client goes through a TCP proxy the
// test can cut, so that Temporal is unreachable from that API only.
type payStack struct {
	temporal client.Client
	pool     *pgxpool.Pool
	store    *store.Store
	inv      *inventory.Inventory
	fake     *stripetest.Server
	api      string // base URL of the API with the direct client
	cutAPI   string // base URL of the API behind the proxy
	proxy    *checkouttest.Proxy
	http     *http.Client
	sku      string // stocked at 1,999 cents (usd), max 2 per order
	frontend string // the dev server's gRPC address
}

const unitPrice = checkouttest.UnitPrice

func newPayStack(t *testing.T) *payStack {
	fake := stripetest.New(t)
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true,
		Payments: map[string]payments.Provider{"stripe": payments.NewStripe(fake.Key(), payments.WithStripeAPIURL(fake.URL()))},
	})
	serve := func(tc client.Client, requestTimeout time.Duration) string {
		return p.ServeAPI(api.Config{
			StripeWebhookSecrets:   []string{stripeSecretOld, stripeSecretNew},
			StandardWebhookSecrets: map[string][]string{standardProvider: {standardSecretOld, standardSecretNew}},
			RequestTimeout:         requestTimeout, DefaultPaymentTimeoutSeconds: 600,
		}, tc, true)
	}
	proxy := checkouttest.StartProxy(t, p.DevServer.FrontendHostPort())
	s := &payStack{
		temporal: p.Temporal, pool: p.Pool, store: p.Store, inv: p.Inventory, fake: fake, frontend: p.DevServer.FrontendHostPort(),
		api: serve(p.Temporal, 0),
		// A short request timeout: while Temporal is unreachable the SDK retries until the
		// request's deadline, and the test need not wait the default 15 s for each 503.
		cutAPI: serve(checkouttest.Dial(t, proxy.Addr(), p.Logger), 3*time.Second),
		proxy:  proxy,
		http:   &http.Client{Timeout: 60 * time.Second},
		sku:    testenv.RandomID("PAY-"),
	}
	if err := p.SetStock(t.Context(), s.sku, 1000, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Redis.Del(context.Background(), lua.StockKey(s.sku), lua.HoldsKey(s.sku)) })
	return s
}

// post sends a body with headers to base+path, once, and returns the status and the
// decoded JSON body.
func (s *payStack) post(t *testing.T, base, path string, body []byte, header http.Header) (int, map[string]any) {
	t.Helper()
	h := map[string]string{}
	for k := range header {
		h[k] = header.Get(k)
	}
	a, err := (&checkouttest.Client{BaseURL: base, HTTP: s.http}).Do(t.Context(), http.MethodPost, path, body, h, nil)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return a.Code, a.JSON()
}

// openCheckout starts a checkout of one unit and returns its view (201 required).
func (s *payStack) openCheckout(t *testing.T, id string, timeoutSeconds int64) api.CheckoutView {
	t.Helper()
	body, _ := json.Marshal(api.CheckoutRequest{CartID: id, CustomerID: "u-" + id,
		Items: []api.RequestItem{{SKU: s.sku, Quantity: 1}}, PaymentTimeoutSeconds: &timeoutSeconds})
	code, out := s.post(t, s.api, "/v1/checkouts", body, nil)
	if code != http.StatusCreated {
		t.Fatalf("POST checkout %s: %d %v", id, code, out)
	}
	var v api.CheckoutView
	raw, _ := json.Marshal(out)
	_ = json.Unmarshal(raw, &v)
	if v.Status != shop.StatusAwaitingPayment || v.AmountCents != unitPrice {
		t.Fatalf("checkout %s: %+v, want awaiting_payment for %d", id, v, unitPrice)
	}
	return v
}

// view reads a checkout through the API, as its buyer.
func (s *payStack) view(t *testing.T, id string) api.CheckoutView {
	t.Helper()
	resp, err := s.buyerGet(t.Context(), id, "")
	if err != nil {
		t.Fatalf("GET checkout %s: %v", id, err)
	}
	defer resp.Body.Close()
	var v api.CheckoutView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET checkout %s: %d %v", id, resp.StatusCode, err)
	}
	return v
}

// buyerGet sends GET /v1/checkouts/{id}{query} once, with the checkout's secret.
func (s *payStack) buyerGet(ctx context.Context, id, query string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.api+"/v1/checkouts/"+id+query, nil)
	if err != nil {
		return nil, err
	}
	req.Header = buyer(id)
	return s.http.Do(req)
}

// buyer is the Checkout-Secret header of checkout id's buyer (the product signs with
// checkouttest's key).
func buyer(id string) http.Header {
	return http.Header{api.CheckoutSecretHeader: {api.CheckoutSecret(checkouttest.CheckoutSecretKey, id)}}
}

// stripeEvent renders a PaymentIntent event; checkoutID "" leaves the metadata out.
func stripeEvent(eventID, typ, checkoutID, paymentIntent string, amount int64) []byte {
	return checkouttest.StripeEvent{ID: eventID, Type: typ, CheckoutID: checkoutID, PaymentIntent: paymentIntent, Amount: amount}.Body()
}

func stripeHeader(body []byte, secret string, at time.Time) http.Header {
	return http.Header{"Stripe-Signature": {checkouttest.StripeSignature(body, secret, at)}}
}

// sendStripe posts a Stripe event signed now with the new secret to the API at base.
func (s *payStack) sendStripe(t *testing.T, base string, body []byte) (int, string) {
	t.Helper()
	code, out := s.post(t, base, "/v1/webhooks/stripe", body, stripeHeader(body, stripeSecretNew, time.Now()))
	status, _ := out["status"].(string)
	if status == "" {
		status, _ = out["code"].(string)
	}
	return code, status
}

// standardEvent renders and signs a Standard Webhooks payment event.
func standardEvent(t *testing.T, msgID, typ, checkoutID, paymentID string, amount int64, secret string) ([]byte, http.Header) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"type": typ, "timestamp": time.Now().UTC().Format(time.RFC3339),
		"data": map[string]any{"payment_id": paymentID, "checkout_id": checkoutID, "amount_cents": amount, "currency": "usd"}})
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign(msgID, now, body)
	if err != nil {
		t.Fatal(err)
	}
	return body, http.Header{
		"Webhook-Id": {msgID}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}, "Webhook-Signature": {sig},
	}
}

// eventRow is one payment_events row.
type eventRow struct {
	Provider, EventID, Disposition string
	Delivered                      bool
}

// events returns the payment_events rows of a checkout, oldest first.
func (s *payStack) events(t *testing.T, checkoutID string) []eventRow {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `
		SELECT provider, event_id, disposition, delivered_at IS NOT NULL FROM payment_events
		WHERE checkout_id = $1 ORDER BY received_at, event_id`, checkoutID)
	if err != nil {
		t.Fatalf("read payment events: %v", err)
	}
	defer rows.Close()
	var out []eventRow
	for rows.Next() {
		var r eventRow
		if err := rows.Scan(&r.Provider, &r.EventID, &r.Disposition, &r.Delivered); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// pgStatus is the checkout's status in Postgres ("" when it has no row) and how many orders it has.
func (s *payStack) pgStatus(t *testing.T, checkoutID string) (status string, orders int) {
	t.Helper()
	rec, err := s.store.Checkout(t.Context(), checkoutID)
	switch {
	case errors.Is(err, shop.ErrNotFound):
	case err != nil:
		t.Fatalf("read checkout %s: %v", checkoutID, err)
	default:
		status = rec.Status
	}
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM orders WHERE checkout_id = $1`, checkoutID).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	return status, orders
}

// refundsOf counts the refunds the fake Stripe made for the payment intents.
func (s *payStack) refundsOf(intents ...string) int {
	n := 0
	for _, r := range s.fake.Refunds() {
		if slices.Contains(intents, r.PaymentIntent) {
			n++
		}
	}
	return n
}

// paymentSignals counts the payment signals in a saga's history.
func (s *payStack) paymentSignals(t *testing.T, checkoutID string) int {
	t.Helper()
	iter := s.temporal.GetWorkflowHistory(t.Context(), shop.WorkflowID(checkoutID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatalf("read history of %s: %v", checkoutID, err)
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED &&
			ev.GetWorkflowExecutionSignaledEventAttributes().GetSignalName() == workflows.SignalPayment {
			n++
		}
	}
	return n
}

// waitRefund waits for the refund workflow of a payment to finish and returns its view. The
// saga starts it as an abandoned child as it ends: until then it is not found.
func (s *payStack) waitRefund(t *testing.T, paymentIntent string) workflows.RefundView {
	t.Helper()
	id := workflows.RefundWorkflowID("stripe", paymentIntent)
	var v workflows.RefundView
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ctx, cancel := context.WithTimeout(t.Context(), settleWait)
		defer cancel()
		require.NoError(c, s.temporal.GetWorkflow(ctx, id, "").Get(ctx, &v), "refund workflow %s", id)
	}, settleWait, 100*time.Millisecond)
	return v
}

// eventually polls cond until it holds or settleWait passes; the failure names what was
// awaited and the last state cond saw.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ok, state := cond()
		assert.True(c, ok, "%s: not reached; last state: %s", what, state)
	}, settleWait, 50*time.Millisecond)
}

// webhookCase is one row of the end-to-end webhook table. The harness opens a checkout (unless
// noCheckout), runs send, then waits until Postgres shows wantState and the fake Stripe shows
// wantRefunds, and checks the checkout's payment_events rows.
type webhookCase struct {
	name           string
	paymentTimeout int64 // seconds; 600 unless set
	noCheckout     bool
	// send delivers the case's events and returns the status of each delivery and the
	// payment intents the events named (their refunds are counted).
	send             func(t *testing.T, s *payStack, id string) (codes []int, intents []string)
	wantCodes        []int
	wantDispositions []string // of the checkout's payment_events rows, oldest first; all delivered
	wantState        string   // Postgres status at the end ("" = no checkout row)
	wantRefunds      int
	check            func(t *testing.T, s *payStack, id string) // extra assertions
}

// TestWebhooksAreVerifiedRecordedOnceAndReachTheirSaga runs every webhook case end to end over HTTP on one dev server: real
// Postgres, Redis and Temporal, the worker refunding through a local scripted Stripe API.
func TestWebhooksAreVerifiedRecordedOnceAndReachTheirSaga(t *testing.T) {
	t.Parallel()
	started := time.Now()
	s := newPayStack(t)
	t.Logf("stack up in %s", time.Since(started).Round(time.Millisecond))

	confirmedOnce := func(t *testing.T, s *payStack, id string) {
		t.Helper()
		if _, orders := s.pgStatus(t, id); orders != 1 {
			t.Errorf("checkout %s has %d orders, want 1", id, orders)
		}
		if n := s.paymentSignals(t, id); n != 1 {
			t.Errorf("checkout %s got %d payment signals, want 1", id, n)
		}
	}

	cases := []webhookCase{
		{
			name: "valid event confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
				code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice))
				if status != shop.DispositionSignalled {
					t.Errorf("answer status %q, want signalled", status)
				}
				return []int{code}, []string{pi}
			},
			wantCodes: []int{200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "bad signature is refused and records nothing",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				code, _ := s.post(t, s.api, "/v1/webhooks/stripe", body, stripeHeader(body, "whsec_someone_else", time.Now()))
				tampered := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, 1)
				code2, _ := s.post(t, s.api, "/v1/webhooks/stripe", tampered, stripeHeader(body, stripeSecretNew, time.Now()))
				return []int{code, code2}, []string{"pi_" + id}
			},
			wantCodes: []int{400, 400}, wantState: "open",
			check: func(t *testing.T, s *payStack, id string) {
				if v := s.view(t, id); v.Status != shop.StatusAwaitingPayment {
					t.Errorf("status %s, want awaiting_payment", v.Status)
				}
				if n := s.paymentSignals(t, id); n != 0 {
					t.Errorf("%d payment signals, want 0", n)
				}
			},
		},
		{
			name: "stale timestamp is refused",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				code, _ := s.post(t, s.api, "/v1/webhooks/stripe", body, stripeHeader(body, stripeSecretNew, time.Now().Add(-6*time.Minute)))
				return []int{code}, nil
			},
			wantCodes: []int{400}, wantState: "open",
		},
		{
			name: "event signed with the second of two secrets confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				code, _ := s.post(t, s.api, "/v1/webhooks/stripe", body, stripeHeader(body, stripeSecretOld, time.Now()))
				return []int{code}, nil
			},
			wantCodes: []int{200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
		},
		{
			name: "same event three times: one row, one confirmation",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				var codes []int
				for range 3 {
					code, _ := s.sendStripe(t, s.api, body)
					codes = append(codes, code)
				}
				return codes, nil
			},
			wantCodes: []int{200, 200, 200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "failed then succeeded (same PaymentIntent) confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				c1, _ := s.sendStripe(t, s.api, stripeEvent("evt_1_"+id, "payment_intent.payment_failed", id, "pi_"+id, unitPrice))
				c2, _ := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice))
				return []int{c1, c2}, []string{"pi_" + id}
			},
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled", "signalled"}, wantState: "confirmed",
		},
		{
			name: "succeeded then failed stays confirmed",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				c1, _ := s.sendStripe(t, s.api, stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice))
				// Let the saga finish, so the failure meets a finished checkout.
				var v shop.View
				if err := s.temporal.GetWorkflow(t.Context(), shop.WorkflowID(id), "").Get(t.Context(), &v); err != nil || v.Status != shop.StatusConfirmed {
					t.Fatalf("saga ended %s (%v), want confirmed", v.Status, err)
				}
				c2, _ := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.payment_failed", id, "pi_"+id, unitPrice))
				return []int{c1, c2}, []string{"pi_" + id}
			},
			// The failure reaches a finished saga: recorded, acknowledged, changes nothing.
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled", "ignored"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "late payment after expiry is refunded once",
			// 2 s: the dev server fires timers on a one-second grain.
			paymentTimeout: 2,
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				// Expired in Postgres and its saga closed: a payment while the saga still
				// runs its ending steps is refunded by the saga (signalled), not late_refund.
				eventually(t, "expired and closed", func() (bool, string) {
					st, _ := s.pgStatus(t, id)
					d, err := s.temporal.DescribeWorkflowExecution(t.Context(), shop.WorkflowID(id), "")
					if err != nil {
						return false, err.Error()
					}
					running := d.WorkflowExecutionInfo.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
					return st == "expired" && !running, st + ", saga " + d.WorkflowExecutionInfo.Status.String()
				})
				pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
				body := stripeEvent("evt_1_"+id, "payment_intent.succeeded", id, pi, unitPrice)
				c1, st1 := s.sendStripe(t, s.api, body)
				c2, st2 := s.sendStripe(t, s.api, body)
				// Another event id for the same payment (Stripe's charge and intent events,
				// say) must not refund it a second time either.
				c3, st3 := s.sendStripe(t, s.api, stripeEvent("evt_2_"+id, "payment_intent.succeeded", id, pi, unitPrice))
				if st1 != shop.DispositionLate || st2 != "duplicate" || st3 != shop.DispositionLate {
					t.Errorf("answers %q, %q, %q; want late_refund, duplicate, late_refund", st1, st2, st3)
				}
				if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
					t.Errorf("refund workflow ended %+v, want refunded", v)
				}
				return []int{c1, c2, c3}, []string{pi}
			},
			wantCodes: []int{200, 200, 200}, wantDispositions: []string{"late_refund", "late_refund"}, wantState: "expired",
			wantRefunds: 1,
			check: func(t *testing.T, s *payStack, id string) {
				if _, orders := s.pgStatus(t, id); orders != 0 {
					t.Errorf("expired checkout has %d orders", orders)
				}
				var refunded int
				if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM refunds WHERE checkout_id = $1 AND status = 'refunded'`, id).Scan(&refunded); err != nil || refunded != 1 {
					t.Errorf("refunds rows with status refunded: %d (%v), want 1", refunded, err)
				}
			},
		},
		{
			name: "wrong amount is flagged and refunded once, not confirmed",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				pi := s.fake.AddIntent(id, "succeeded", unitPrice-1000, "usd")
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice-1000)
				c1, _ := s.sendStripe(t, s.api, body)
				if v := s.waitRefund(t, pi); v.Status != workflows.RefundRefunded {
					t.Errorf("refund workflow ended %+v, want refunded", v)
				}
				c2, _ := s.sendStripe(t, s.api, body)
				return []int{c1, c2}, []string{pi}
			},
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled"}, wantState: "open", wantRefunds: 1,
			check: func(t *testing.T, s *payStack, id string) {
				v := s.view(t, id)
				if v.Status != shop.StatusAwaitingPayment || !v.NeedsAttention || len(v.Refunds) != 1 {
					t.Errorf("view %+v: want awaiting_payment, needs_attention, one refund", v)
				}
			},
		},
		{
			name:       "unknown checkout is an orphan and signals nothing",
			noCheckout: true,
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice))
				if status != shop.DispositionOrphan {
					t.Errorf("answer status %q, want orphan", status)
				}
				return []int{code}, []string{"pi_" + id}
			},
			wantCodes: []int{200}, wantDispositions: []string{"orphan"}, wantState: "",
			check: func(t *testing.T, s *payStack, id string) {
				_, err := s.temporal.DescribeWorkflowExecution(t.Context(), shop.WorkflowID(id), "")
				var nf *serviceerror.NotFound
				if !errors.As(err, &nf) {
					t.Errorf("describe saga of an unknown checkout: %v, want not found", err)
				}
			},
		},
		{
			name: "temporal unreachable: 503 and recorded, then delivered once on redelivery",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body := stripeEvent("evt_"+id, "payment_intent.succeeded", id, "pi_"+id, unitPrice)
				s.proxy.Cut()
				c1, _ := s.sendStripe(t, s.cutAPI, body)
				if rows := s.events(t, id); len(rows) != 1 || rows[0].Delivered || rows[0].Disposition != "pending" {
					t.Errorf("after the 503: rows %+v, want one recorded, not delivered", rows)
				}
				if n := s.paymentSignals(t, id); n != 0 {
					t.Errorf("after the 503: %d payment signals, want 0", n)
				}
				s.proxy.Restore()
				// The provider retries until it gets a 2xx; the client reconnects with backoff.
				codes := []int{c1}
				eventually(t, "redelivery answered 200", func() (bool, string) {
					code, status := s.sendStripe(t, s.cutAPI, body)
					if code != http.StatusOK && code != http.StatusServiceUnavailable {
						t.Errorf("redelivery answered %d %s", code, status)
					}
					if code == http.StatusOK && status != shop.DispositionSignalled {
						t.Errorf("redelivery answered %s, want signalled", status)
					}
					return code == http.StatusOK, strconv.Itoa(code)
				})
				t.Logf("redelivered after the proxy came back")
				c3, status := s.sendStripe(t, s.cutAPI, body)
				if status != "duplicate" {
					t.Errorf("third delivery answered %q, want duplicate", status)
				}
				return append(codes, http.StatusOK, c3), nil
			},
			wantCodes: []int{503, 200, 200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: confirmedOnce,
		},
		{
			name: "standard webhooks: valid event confirms",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body, hdr := standardEvent(t, "msg_"+id, "payment.succeeded", id, "pay_"+id, unitPrice, standardSecretNew)
				code, out := s.post(t, s.api, "/v1/webhooks/standard/"+standardProvider, body, hdr)
				if out["status"] != shop.DispositionSignalled {
					t.Errorf("answer %v, want status signalled", out)
				}
				code2, out2 := s.post(t, s.api, "/v1/webhooks/standard/"+standardProvider, body, hdr)
				if out2["status"] != "duplicate" {
					t.Errorf("repeat answered %v, want duplicate", out2)
				}
				return []int{code, code2}, nil
			},
			wantCodes: []int{200, 200}, wantDispositions: []string{"signalled"}, wantState: "confirmed",
			check: func(t *testing.T, s *payStack, id string) {
				confirmedOnce(t, s, id)
				rows := s.events(t, id)
				var provider, ref string
				_ = s.pool.QueryRow(t.Context(), `SELECT payment_provider, payment_ref FROM orders WHERE checkout_id = $1`, id).Scan(&provider, &ref)
				if len(rows) != 1 || rows[0].Provider != standardProvider || rows[0].EventID != "msg_"+id || provider != standardProvider || ref != "pay_"+id {
					t.Errorf("rows %+v, order paid by %s %s; want one %s event msg_%s and the order paid by it", rows, provider, ref, standardProvider, id)
				}
			},
		},
		{
			name: "standard webhooks: bad signature is refused and records nothing",
			send: func(t *testing.T, s *payStack, id string) ([]int, []string) {
				body, hdr := standardEvent(t, "msg_"+id, "payment.succeeded", id, "pay_"+id, unitPrice,
					"whsec_"+base64.StdEncoding.EncodeToString([]byte("an-unknown-key-0123456789abcdef")))
				code, _ := s.post(t, s.api, "/v1/webhooks/standard/"+standardProvider, body, hdr)
				return []int{code}, nil
			},
			wantCodes: []int{400}, wantState: "open",
		},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			caseStart := time.Now()
			id := testenv.RandomID("wh-")
			if !tc.noCheckout {
				timeout := tc.paymentTimeout
				if timeout == 0 {
					timeout = 600
				}
				s.openCheckout(t, id, timeout)
			}
			codes, intents := tc.send(t, s, id)
			if !slices.Equal(codes, tc.wantCodes) {
				t.Errorf("HTTP statuses %v, want %v", codes, tc.wantCodes)
			}
			eventually(t, "final state", func() (bool, string) {
				st, _ := s.pgStatus(t, id)
				n := s.refundsOf(intents...)
				return st == tc.wantState && n == tc.wantRefunds, fmt.Sprintf("postgres status %q, %d refunds", st, n)
			})
			rows := s.events(t, id)
			var dispositions []string
			for _, r := range rows {
				dispositions = append(dispositions, r.Disposition)
				if !r.Delivered {
					t.Errorf("event %s recorded but not delivered", r.EventID)
				}
			}
			if !slices.Equal(dispositions, tc.wantDispositions) {
				t.Errorf("payment_events dispositions %v, want %v", dispositions, tc.wantDispositions)
			}
			if tc.check != nil {
				tc.check(t, s, id)
			}
			if n := s.refundsOf(intents...); n != tc.wantRefunds {
				t.Errorf("%d refunds at Stripe, want %d", n, tc.wantRefunds)
			}
			if tc.wantState == shop.RecordOpen {
				// Leave nothing awaiting payment for the reconciliation test below.
				if code, out := s.post(t, s.api, "/v1/checkouts/"+id+"/cancel", nil, buyer(id)); code != http.StatusOK {
					t.Errorf("cancel %s: %d %v", id, code, out)
				}
			}
			t.Logf("settled in %s", time.Since(caseStart).Round(time.Millisecond))
		})
	}

	// Visibility lags the saga a little: wait until the reconciliation's query sees it.
	awaitVisible := func(t *testing.T, id string) {
		query := fmt.Sprintf("WorkflowId = '%s' AND CheckoutState = '%s'", shop.WorkflowID(id), shop.StatusAwaitingPayment)
		eventually(t, "visible as awaiting_payment", func() (bool, string) {
			resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			return err == nil && len(resp.GetExecutions()) == 1, fmt.Sprint(err)
		})
	}
	reconcileIn := func(t *testing.T, in workflows.ReconcileInput) workflows.ReconcileResult {
		in.WithinSeconds = 2 * workflows.MaxPaymentTimeoutSeconds
		run, err := s.temporal.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
			ID: testenv.RandomID("reconcile-"), TaskQueue: workflows.TaskQueue,
		}, workflows.ReconcilePayments, in)
		if err != nil {
			t.Fatalf("start reconciliation: %v", err)
		}
		var res workflows.ReconcileResult
		if err := run.Get(t.Context(), &res); err != nil { // follows the run's continue-as-new chain
			t.Fatalf("reconciliation: %v", err)
		}
		return res
	}
	reconcile := func(t *testing.T) workflows.ReconcileResult { return reconcileIn(t, workflows.ReconcileInput{}) }
	awaitNoneAwaiting := func(t *testing.T) {
		eventually(t, "nothing visible as awaiting_payment", func() (bool, string) {
			resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("CheckoutState = '%s' AND ExecutionStatus = 'Running'", shop.StatusAwaitingPayment)})
			return err == nil && len(resp.GetExecutions()) == 0, fmt.Sprint(len(resp.GetExecutions()), err)
		})
	}

	// A run used to ask about one page of checkouts, the same first page every minute, so
	// in a sale with more checkouts near their deadline than a page holds the rest were never
	// asked about. Five paid checkouts whose webhooks never came, pages of two: the run goes
	// through three pages (continuing as new) and confirms all five.
	t.Run("reconciliation pages through every checkout near its deadline", func(t *testing.T) {
		awaitNoneAwaiting(t) // the cases above cancelled theirs; the run must see only these five
		var ids []string
		for range 5 {
			id := testenv.RandomID("page-")
			s.openCheckout(t, id, 600)
			s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
			ids = append(ids, id)
		}
		for _, id := range ids {
			awaitVisible(t, id)
		}
		res := reconcileIn(t, workflows.ReconcileInput{PageSize: 2})
		if res.Checked != 5 || res.Delivered != 5 || res.Pages != 3 {
			t.Errorf("reconciliation %+v: want 5 checked and delivered in 3 pages", res)
		}
		for _, id := range ids {
			eventually(t, "confirmed", func() (bool, string) {
				st, _ := s.pgStatus(t, id)
				return st == "confirmed", id + " " + st
			})
		}
	})

	// Reconciliation used to ask only about running sagas, so a checkout that expired
	// while the webhook of its (succeeded) payment was lost kept the money until the
	// provider's own retry came. Now the run refunds it, once: a second run starts nothing.
	t.Run("reconciliation refunds the payment of a checkout that ended while its webhook was lost", func(t *testing.T) {
		id := testenv.RandomID("ended-")
		s.openCheckout(t, id, 2)
		pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		eventually(t, "expired", func() (bool, string) {
			st, _ := s.pgStatus(t, id)
			return st == string(shop.StatusExpired), st
		})
		query := fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Completed' AND CheckoutState = '%s'", shop.WorkflowID(id), shop.StatusExpired)
		eventually(t, "visible as expired", func() (bool, string) {
			resp, err := s.temporal.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			return err == nil && len(resp.GetExecutions()) == 1, fmt.Sprint(err)
		})
		if first := reconcile(t); first.Refunded < 1 || first.EndedChecked < 1 {
			t.Errorf("first run %+v: want this checkout's payment refunded", first)
		}
		eventually(t, "refunded at Stripe", func() (bool, string) {
			return s.refundsOf(pi) == 1, fmt.Sprint(s.refundsOf(pi), " refunds")
		})
		if second := reconcile(t); second.Refunded != 0 {
			t.Errorf("second run %+v: want no refund started", second)
		}
		if n := s.refundsOf(pi); n != 1 {
			t.Errorf("%d refunds of %s after two runs, want 1", n, pi)
		}
	})

	// The checkout's first payment was of the wrong amount (refunded by the product
	// but still "succeeded" at Stripe), its second the right one, and neither webhook came.
	// Reconciliation delivers both: the order is paid by the right one and the wrong one is
	// refunded, where asking Stripe for one payment found only the wrong one.
	t.Run("reconciliation finds the right payment behind one of the wrong amount", func(t *testing.T) {
		id := testenv.RandomID("wh-")
		s.openCheckout(t, id, 600)
		wrong := s.fake.AddIntent(id, "succeeded", unitPrice-1, "usd")
		right := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		awaitVisible(t, id)
		if res := reconcile(t); res.Delivered != 2 {
			t.Errorf("reconciliation %+v: want both payments delivered", res)
		}
		eventually(t, "confirmed, the wrong payment refunded", func() (bool, string) {
			st, _ := s.pgStatus(t, id)
			return st == "confirmed" && s.refundsOf(wrong) == 1, fmt.Sprintf("status %s, %d refunds of the wrong payment", st, s.refundsOf(wrong))
		})
		var ref string
		if err := s.pool.QueryRow(t.Context(), `SELECT payment_ref FROM orders WHERE checkout_id = $1`, id).Scan(&ref); err != nil || ref != right {
			t.Errorf("order paid by %q (%v), want %s", ref, err, right)
		}
		if n := s.refundsOf(right); n != 0 {
			t.Errorf("%d refunds of the right payment, want 0", n)
		}
	})

	// Reconciliation: a paid checkout whose webhook never arrives is confirmed by
	// ReconcilePayments asking Stripe; a second run changes nothing.
	t.Run("reconciliation confirms a checkout whose webhook was lost", func(t *testing.T) {
		caseStart := time.Now()
		id := testenv.RandomID("wh-")
		s.openCheckout(t, id, 600)
		pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		awaitVisible(t, id)
		first := reconcile(t)
		if first.Delivered != 1 {
			t.Errorf("first run %+v: want exactly this checkout's payment delivered", first)
		}
		eventually(t, "confirmed", func() (bool, string) {
			st, _ := s.pgStatus(t, id)
			return st == "confirmed", st
		})
		var ref string
		if err := s.pool.QueryRow(t.Context(), `SELECT payment_ref FROM orders WHERE checkout_id = $1`, id).Scan(&ref); err != nil || ref != pi {
			t.Errorf("order paid by %q (%v), want %s", ref, err, pi)
		}
		// The second run must find nothing to do: wait until visibility no longer lists any
		// checkout as awaiting payment (the earlier cases cancelled theirs).
		awaitNoneAwaiting(t)
		second := reconcile(t)
		if second.Delivered != 0 {
			t.Errorf("second run %+v: want nothing delivered", second)
		}
		status, orders := s.pgStatus(t, id)
		if status != "confirmed" || orders != 1 || s.refundsOf(pi) != 0 || s.paymentSignals(t, id) != 1 {
			t.Errorf("after a second run (%+v): status %s, %d orders, %d refunds, %d payment signals; want confirmed, 1, 0, 1",
				second, status, orders, s.refundsOf(pi), s.paymentSignals(t, id))
		}
		// What the provider listed is recorded as the verified payment the saga confirmed
		// with, once, under the event id the saga saw: never a webhook's.
		if rows := s.events(t, id); len(rows) != 1 || rows[0].EventID != "reconcile-"+pi || rows[0].Disposition != shop.DispositionSignalled {
			t.Errorf("reconciliation recorded rows %+v; want one, reconcile-%s, signalled", rows, pi)
		}
		t.Logf("first run %+v, second run %+v; settled in %s", first, second, time.Since(caseStart).Round(time.Millisecond))
	})

	// GET ?wait long-polls the outcome. A GET sent before the payment is still waiting a
	// second later (a plain GET answers in milliseconds) and answers confirmed once the
	// webhook's payment confirms the checkout; one of a checkout nobody pays answers its
	// current state once the wait is over, not before.
	t.Run("GET with wait answers the outcome once it is decided", func(t *testing.T) {
		id := testenv.RandomID("wait-")
		s.openCheckout(t, id, 600)
		type answer struct {
			v   api.CheckoutView
			err error
		}
		waitGET := func(id string, seconds int) answer {
			resp, err := s.buyerGet(t.Context(), id, fmt.Sprintf("?wait=%d", seconds))
			if err != nil {
				return answer{err: err}
			}
			defer resp.Body.Close()
			var a answer
			if a.err = json.NewDecoder(resp.Body).Decode(&a.v); a.err == nil && resp.StatusCode != http.StatusOK {
				a.err = fmt.Errorf("status %d", resp.StatusCode)
			}
			return a
		}
		got := make(chan answer, 1)
		go func() { got <- waitGET(id, api.MaxWaitSeconds) }()
		select {
		case a := <-got:
			t.Fatalf("GET ?wait answered %s (%v) before the checkout was paid", a.v.Status, a.err)
		case <-time.After(time.Second):
		}
		pi := s.fake.AddIntent(id, "succeeded", unitPrice, "usd")
		if code, status := s.sendStripe(t, s.api, stripeEvent("evt_"+id, "payment_intent.succeeded", id, pi, unitPrice)); code != http.StatusOK {
			t.Fatalf("webhook: %d %s", code, status)
		}
		a := <-got
		for i := 0; a.err == nil && !a.v.Status.Final() && i < 3; i++ { // a slow machine: wait again
			a = waitGET(id, api.MaxWaitSeconds)
		}
		if a.err != nil || a.v.Status != shop.StatusConfirmed || a.v.OrderID == nil {
			t.Errorf("GET ?wait after the payment: %+v (%v), want confirmed with its order", a.v, a.err)
		}

		unpaid := testenv.RandomID("wait-")
		s.openCheckout(t, unpaid, 600)
		sent := time.Now()
		if a := waitGET(unpaid, 1); a.err != nil || a.v.Status != shop.StatusAwaitingPayment || time.Since(sent) < time.Second {
			t.Errorf("GET ?wait=1 of an unpaid checkout: %s (%v) after %s, want awaiting_payment after the full second",
				a.v.Status, a.err, time.Since(sent))
		}
		if code, _ := s.post(t, s.api, "/v1/checkouts/"+unpaid+"/cancel", nil, buyer(unpaid)); code != http.StatusOK {
			t.Errorf("cancel %s: %d", unpaid, code)
		}
	})
}
