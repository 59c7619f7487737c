package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
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

// payStackWithCheckout is the opening of a test of one checkout: a payStack of its own and
// a checkout, its id starting with prefix, holding one unit and awaiting payment for 600 s.
func payStackWithCheckout(t *testing.T, prefix string) (*payStack, string) {
	t.Helper()
	s := newPayStack(t)
	return s, s.openNew(t, prefix, 600)
}

// openNew opens a checkout of one unit with a new id starting with prefix (see openCheckout)
// and returns the id.
func (s *payStack) openNew(t *testing.T, prefix string, timeoutSeconds int64) string {
	t.Helper()
	id := prefix + testenv.RandomID("")
	s.openCheckout(t, id, timeoutSeconds)
	return id
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
	code, out := s.post(t, s.api, "/v1/checkouts", s.checkoutBody(id, timeoutSeconds), nil)
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

// checkoutBody is the body of openCheckout's POST: a retry sends it again.
func (s *payStack) checkoutBody(id string, timeoutSeconds int64) []byte {
	body, _ := json.Marshal(api.CheckoutRequest{CartID: id, CustomerID: "u-" + id,
		Items: []api.RequestItem{{SKU: s.sku, Quantity: 1}}, PaymentTimeoutSeconds: &timeoutSeconds})
	return body
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
