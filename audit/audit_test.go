package audit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/payments/stripetest"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// stack is the product on real services: a Temporal dev server, a fresh Postgres database,
// Redis, a local Stripe for refunds, the worker, and the API in process.
type stack struct {
	*checkouttest.Product
	t    *testing.T
	tc   client.Client
	pool *pgxpool.Pool
	rdb  redis.UniversalClient
	strp *stripetest.Server
}

func newStack(t *testing.T) *stack {
	strp := stripetest.New(t)
	p := checkouttest.Start(t, checkouttest.Options{
		API:      api.Config{DefaultPaymentTimeoutSeconds: 900},
		Payments: map[string]payments.Provider{"stripe": payments.NewStripe(strp.Key(), payments.WithStripeAPIURL(strp.URL()))},
	})
	return &stack{Product: p, t: t, tc: p.Temporal, pool: p.Pool, rdb: p.Redis, strp: strp}
}

// auditor judges everything at once (no grace): the tests audit at rest.
func (s *stack) auditor() *audit.Auditor { return s.Auditor() }

func (s *stack) do(method, path string, body any, header map[string]string) (int, []byte) {
	s.t.Helper()
	a, err := s.Client.Do(s.t.Context(), method, path, body, header, nil)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return a.Code, a.Body
}

func (s *stack) sku(onHand int64) string {
	sku := testenv.RandomID("AUD-")
	s.t.Cleanup(func() { s.rdb.Del(s.t.Context(), lua.StockKey(sku), lua.HoldsKey(sku)) })
	code, raw := s.do(http.MethodPut, "/v1/inventory/"+sku,
		map[string]any{"on_hand": onHand, "price_cents": 1_000, "currency": "usd", "max_per_order": 5},
		map[string]string{"Authorization": "Bearer " + checkouttest.AdminToken})
	if code != http.StatusOK {
		s.t.Fatalf("stock %s: %d %s", sku, code, raw)
	}
	return sku
}

// checkout starts one checkout of 1 x sku through the API and returns its id.
func (s *stack) checkout(sku string, timeoutSeconds int) string {
	id := testenv.RandomID("c-")
	code, raw := s.do(http.MethodPost, "/v1/checkouts", map[string]any{
		"cart_id": id, "customer_id": "u-audit", "items": []map[string]any{{"sku": sku, "quantity": 1}},
		"payment_timeout_seconds": timeoutSeconds,
	}, nil)
	if code != http.StatusCreated {
		s.t.Fatalf("start checkout %s: %d %s", id, code, raw)
	}
	return id
}

// pay sends a signed payment_intent.succeeded of 10.00 USD for the checkout, with a payment
// intent the local Stripe knows (so a refund of it succeeds), and returns the intent's id.
func (s *stack) pay(checkoutID string) string {
	pi := s.strp.AddIntent(checkoutID, "succeeded", 1_000, "usd")
	a, status, err := s.Client.SendStripe(s.t.Context(), checkouttest.StripeEvent{ID: "evt_" + pi + "_" + checkoutID,
		Type: "payment_intent.succeeded", PaymentIntent: pi, CheckoutID: checkoutID, Amount: 1_000}, checkouttest.WebhookSecret)
	if err != nil || a.Code != http.StatusOK {
		s.t.Fatalf("pay %s: webhook answered %d %s (%v)", checkoutID, a.Code, status, err)
	}
	return pi
}

// waitFor polls cond until it holds or 30 s pass.
func (s *stack) waitFor(what string, cond func() bool) {
	s.t.Helper()
	require.Eventually(s.t, cond, 30*time.Second, 50*time.Millisecond, "timed out waiting for %s", what)
}

func (s *stack) status(checkoutID string) string {
	var v struct {
		Status string `json:"status"`
	}
	if code, raw := s.do(http.MethodGet, "/v1/checkouts/"+checkoutID, nil, checkouttest.BuyerOf(checkoutID)); code == http.StatusOK {
		_ = json.Unmarshal(raw, &v)
	}
	return v.Status
}

func (s *stack) refundStatus(pi string) string {
	var status string
	_ = s.pool.QueryRow(s.t.Context(), `SELECT status FROM refunds WHERE payment_ref = $1`, pi).Scan(&status)
	return status
}

func (s *stack) exec(sql string, args ...any) {
	s.t.Helper()
	if _, err := s.pool.Exec(s.t.Context(), sql, args...); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

func (s *stack) redis(cmds ...func(redis.Pipeliner)) {
	s.t.Helper()
	pipe := s.rdb.TxPipeline()
	for _, c := range cmds {
		c(pipe)
	}
	if _, err := pipe.Exec(s.t.Context()); err != nil {
		s.t.Fatalf("write redis: %v", err)
	}
}

// key names a violation by its check and the ids it carries.
func key(v shop.AuditViolation) string {
	return strings.Join([]string{v.Check, v.CheckoutID, v.SKU, v.OrderID, v.PaymentRef}, "|")
}

func (s *stack) audit() (shop.AuditReport, []string) {
	s.t.Helper()
	rep, err := s.auditor().Run(s.t.Context())
	if err != nil {
		s.t.Fatalf("audit: %v", err)
	}
	keys := make([]string, len(rep.Violations))
	for i, v := range rep.Violations {
		keys[i] = key(v)
		if v.Detail == "" {
			s.t.Errorf("violation %s has no detail", keys[i])
		}
	}
	slices.Sort(keys)
	return rep, keys
}

// TestAuditNamesEachBrokenPromise runs the product through a confirmed checkout and a late, refunded payment, and
// checks that this state audits clean; then breaks each promise for real, one at a time (the
// product's own paths where one leads there, direct writes where only a bug or a person would),
// and checks that the audit names exactly the new violation with the ids to act on it.
func TestAuditNamesEachBrokenPromise(t *testing.T) {
	s := newStack(t)
	a := s.sku(5)
	confirmed := s.checkout(a, 900)
	confirmedPI := s.pay(confirmed)
	expired := s.checkout(a, 1)
	s.waitFor("the second checkout to expire", func() bool { return s.status(expired) == "expired" })
	latePI := s.pay(expired) // after the end: refunded
	s.waitFor("the first checkout to confirm", func() bool { return s.status(confirmed) == "confirmed" })
	s.waitFor("the late payment's refund", func() bool { return s.refundStatus(latePI) == workflows.RefundRefunded })
	// The commit follows the confirm by a moment; at rest no hold is left.
	s.waitFor("the confirmed hold to be committed", func() bool {
		holds, err := s.Stock.Holds(t.Context(), a)
		return err == nil && len(holds) == 0
	})

	if rep, keys := s.audit(); !rep.Clean() || len(rep.Checks) != len(audit.Checks) {
		t.Fatalf("a confirmed checkout and a refunded late payment: audit found %v, want clean with every check run", keys)
	}

	var want []string
	step := func(what string, newViolations ...string) {
		t.Helper()
		want = append(want, newViolations...)
		slices.Sort(want)
		if _, got := s.audit(); !slices.Equal(got, want) {
			t.Errorf("after %s: audit found\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}

	// A payment for a checkout that never existed: the API acknowledges it as an orphan and
	// nobody refunds it.
	orphan := testenv.RandomID("c-never-")
	orphanPI := s.pay(orphan)
	step("an orphan payment", audit.CheckPayments+"|"+orphan+"|||"+orphanPI)

	// The confirmed order's payment also gets a refund row: money both kept as an order and
	// given back.
	s.exec(`INSERT INTO refunds (refund_key, checkout_id, provider, payment_ref, amount_cents, currency, reason, status)
		VALUES ($1, $2, 'stripe', $3, 1000, 'usd', 'test', 'refunded')`, "refund-x-"+confirmedPI, confirmed, confirmedPI)
	step("a refund of a confirmed order's payment", audit.CheckPayments+"|"+confirmed+"||"+shop.OrderID(confirmed)+"|"+confirmedPI)

	// An order written around the payment check: paid by a payment no verified event recorded.
	forged := testenv.RandomID("c-forged-")
	s.exec(`INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents, ended_at) VALUES ($1, 'u-audit', 'confirmed', 'usd', 1000, now())`, forged)
	s.exec(`INSERT INTO orders (order_id, checkout_id, customer_id, amount_cents, currency, payment_provider, payment_ref)
		VALUES ($1, $2, 'u-audit', 1000, 'usd', 'stripe', $3)`, shop.OrderID(forged), forged, "pi_forged-"+forged)
	step("an order paid by a payment nobody recorded", audit.CheckVerifiedOrders+"|"+forged+"||"+shop.OrderID(forged)+"|pi_forged-"+forged)

	// on_hand changed behind the ledger's back: the ledger no longer adds up, and Redis no
	// longer agrees at rest.
	b := s.sku(3)
	s.exec(`UPDATE skus SET on_hand = on_hand + 1 WHERE sku = $1`, b)
	step("on_hand changed without a ledger row", audit.CheckLedger+"||"+b+"||", audit.CheckStockAtRest+"||"+b+"||")

	// A live hold for the expired checkout, and one for a checkout Postgres never heard of;
	// units moved from available to held as reserve.lua would, so the level still adds up.
	ghost := testenv.RandomID("c-ghost-")
	s.redis(func(p redis.Pipeliner) {
		p.HSet(t.Context(), lua.HoldsKey(a), expired, 1, ghost, 1)
		p.HIncrBy(t.Context(), lua.StockKey(a), "held", 2)
		p.HIncrBy(t.Context(), lua.StockKey(a), "available", -2)
	})
	step("holds of an ended and an unknown checkout",
		audit.CheckEndedHolds+"|"+expired+"|"+a+"||", audit.CheckEndedHolds+"|"+ghost+"|"+a+"||")

	// The confirmed checkout's hold on a is marked released, as a stale release would.
	s.rdb.HSet(t.Context(), lua.HoldEndsKey(a), confirmed, fmt.Sprintf("released:%d", time.Now().Add(time.Hour).Unix()))
	step("a confirmed order's hold released", audit.CheckConfirmedHolds+"|"+confirmed+"|"+a+"|"+shop.OrderID(confirmed)+"|")

	// A checkout waiting for payment whose saga is terminated (the runbook says never do
	// that: the clean-up does not run), and a checkout row no saga was ever started for.
	c := s.sku(2)
	open := s.checkout(c, 900)
	if err := s.tc.TerminateWorkflow(t.Context(), shop.WorkflowID(open), "", "audit test"); err != nil {
		t.Fatalf("terminate saga of %s: %v", open, err)
	}
	noSaga := testenv.RandomID("c-nosaga-")
	s.exec(`INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents) VALUES ($1, 'u-audit', 'open', 'usd', 0)`, noSaga)
	step("open checkouts without a running saga", audit.CheckSagas+"|"+open+"|||", audit.CheckSagas+"|"+noSaga+"|||")

	// The API serves the same report to the admin token only.
	code, raw := s.do(http.MethodGet, "/v1/admin/audit", nil, map[string]string{"Authorization": "Bearer " + checkouttest.AdminToken})
	var rep shop.AuditReport
	if err := json.Unmarshal(raw, &rep); code != http.StatusOK || err != nil || len(rep.Violations) != len(want) {
		t.Errorf("GET /v1/admin/audit: %d %s, want 200 with %d violations", code, raw, len(want))
	}
	for _, v := range rep.Violations {
		if v.Check == audit.CheckSagas && v.WorkflowID != shop.WorkflowID(v.CheckoutID) {
			t.Errorf("violation %+v does not name the saga's workflow id", v)
		}
	}
	if code, _ := s.do(http.MethodGet, "/v1/admin/audit", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/admin/audit without the token: %d, want 401", code)
	}
}

// An audit that cannot reach a db says so instead of reading as clean.
func TestAuditWithRedisDownIsNotClean(t *testing.T) {
	_, pool := testenv.Postgres(t)
	s := &stack{t: t, pool: pool}
	s.exec(`INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order) VALUES ('AUD-X', 1, 1, 'usd', 1)`)
	s.exec(`INSERT INTO inventory_ledger (sku, delta_on_hand, delta_sold, reason) VALUES ('AUD-X', 1, 0, 'test')`)
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + testenv.FreePort(t), MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	rep, err := audit.New(pool, down, nil, audit.Options{Grace: -1}).Run(t.Context())
	if err == nil || rep.Clean() {
		t.Fatalf("audit with Redis down: clean=%v err=%v, want an error and not clean", rep.Clean(), err)
	}
	var failed []string
	for _, e := range rep.Errors {
		failed = append(failed, e.Check)
	}
	if !slices.Contains(failed, audit.CheckEndedHolds) || slices.Contains(failed, audit.CheckLedger) {
		t.Errorf("failed checks %v, want the Redis checks only", failed)
	}
}
