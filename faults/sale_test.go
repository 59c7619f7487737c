package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

type role int

const (
	rolePay      role = iota // paid by a signed webhook as soon as it holds
	rolePayTwice             // the webhook is delivered twice, as providers do
	roleCancel               // cancelled by the customer
	roleExpire               // left to expire on a 3-second timer
	// rolePayLate holds for lateWindow and is paid by the fault in the window's last seconds.
	rolePayLate
	// rolePayFirst is paid before its checkout exists: the webhook is an orphan until the
	// saga records the checkout and claims it.
	rolePayFirst
)

// standardRoles are the roles of a flash sale, one cart in four each.
var standardRoles = []role{rolePay, rolePayTwice, roleCancel, roleExpire}

// lateWindow is rolePayLate's payment window: long enough for a sale's carts to be answered
// and the worker stopped before the first of them is paid in its last seconds. 12 s was too
// short on a busy machine (2026-12-07, make test): with 24 of the 40 POSTs answered 503 and
// retried, the last answer came after the first carts' windows had closed, every late payment
// was refused as late_refund, and the case did not happen.
const lateWindow = 30 * time.Second

func (r role) String() string {
	return [...]string{"pay", "pay-twice", "cancel", "expire", "pay-late", "pay-first"}[r]
}

func (r role) want() shop.Status {
	return [...]shop.Status{shop.StatusConfirmed, shop.StatusConfirmed, shop.StatusCancelled,
		shop.StatusExpired, shop.StatusConfirmed, shop.StatusConfirmed}[r]
}

// timeout is the payment window the cart asks for, in seconds.
func (r role) timeout() int64 {
	switch r {
	case roleExpire:
		return 3
	case rolePayLate:
		return int64(lateWindow / time.Second)
	}
	return 120
}

type skuUnits struct {
	name  string
	units int64
}

type cart struct {
	id      string
	role    role
	items   []api.RequestItem
	body    []byte
	code    int // the POST's last answer
	created bool
	view    api.CheckoutView
	final   shop.Status
	paid    bool        // a payment webhook was acknowledged
	paidAt  atomic.Bool // paid, readable while the sale runs
	ackedAt time.Time   // when the payment webhook was acknowledged
	err     error
}

// sale is one flash sale: its SKUs and carts, and what the clients saw.
type sale struct {
	s      *stack
	run    string
	stock  map[string]int64 // units stocked per SKU
	carts  []*cart
	mu     sync.Mutex // guards winner while the sale runs
	winner []*cart

	answered       atomic.Int32 // carts whose POST got a final answer
	post503        atomic.Int32 // POSTs answered 503 (and retried)
	noRetryAfter   atomic.Int32 // 503s without Retry-After
	post5xx        atomic.Int32 // other 5xx answers to a POST
	webhook5xx     atomic.Int32 // webhook deliveries answered 5xx (redelivered)
	cancel5xx      atomic.Int32
	transportFails atomic.Int32
	supportRetries atomic.Int32 // stuck checkouts retried through the support API
	// not503 counts 5xx answers other than 503 to any request: the contract answers a passing
	// cause (a dependency down, load shed) with 503 and Retry-After, so each one is a defect.
	not503 atomic.Int32
	// refusedButStarted counts carts answered out_of_stock whose saga was still running.
	refusedButStarted int
}

// unitPrice is every SKU's price in a sale, so a buyer's payment can be priced before the
// checkout exists.
const unitPrice = 1_999

// newSale stocks the SKUs (every cart wants the first; one in five also the second) and
// prepares the carts, giving them the roles in turn (the standard four when none is named).
func newSale(s *stack, carts int, units []skuUnits, roles ...role) *sale {
	if len(roles) == 0 {
		roles = standardRoles
	}
	sl := &sale{s: s, run: testenv.RandomID(""), stock: map[string]int64{}}
	var skus []string
	for _, u := range units {
		sku := u.name + "-" + sl.run
		skus = append(skus, sku)
		sl.stock[sku] = u.units
		body, _ := json.Marshal(map[string]any{"on_hand": u.units, "price_cents": unitPrice, "currency": "usd", "max_per_order": 2})
		code, _, err := s.do(http.MethodPut, "/v1/inventory/"+sku, body, map[string]string{"Authorization": "Bearer " + adminToken}, nil)
		if err != nil || code != http.StatusOK {
			s.t.Fatalf("stock %s: %d %v", sku, code, err)
		}
	}
	first, second := skus[0], skus[len(skus)-1]
	for i := 0; i < carts; i++ {
		c := &cart{id: fmt.Sprintf("c-%s-%03d", sl.run, i), role: roles[i%len(roles)]}
		c.items = []api.RequestItem{{SKU: first, Quantity: int64(1 + i%2)}}
		if i%5 == 0 && second != first {
			c.items = append(c.items, api.RequestItem{SKU: second, Quantity: 1})
		}
		timeout := c.role.timeout()
		c.body, _ = json.Marshal(api.CheckoutRequest{CartID: c.id, CustomerID: "u-" + c.id, Items: c.items, PaymentTimeoutSeconds: &timeout})
		sl.carts = append(sl.carts, c)
	}
	return sl
}

func (sl *sale) skus() []string {
	out := make([]string, 0, len(sl.stock))
	for sku := range sl.stock {
		out = append(out, sku)
	}
	sort.Strings(out)
	return out
}

// clientDeadline bounds how long a client keeps retrying one request: generous, so the suite
// judges promises, not latency. (One cart of 150 was seen answered 503 for 90 s on CI on
// 2026-12-01, most likely on a keep-alive connection whose context an expired read deadline
// had cancelled, the defect fixed on 2026-12-02; see boundBodyRead in api/server.go.)
const clientDeadline = 180 * time.Second

// post checks a cart out, retrying 503s after their Retry-After and transport errors, as a
// well-behaved client does; the same cart id makes every retry safe.
func (sl *sale) post(c *cart) {
	deadline := time.Now().Add(clientDeadline)
	for {
		var v api.CheckoutView
		code, hdr, queued, err := sl.s.checkout(c.body, &v)
		switch {
		case err != nil && code == 0:
			sl.transportFails.Add(1)
		case code == http.StatusServiceUnavailable:
			sl.post503.Add(1)
			wait, perr := strconv.Atoi(hdr.Get("Retry-After"))
			if perr != nil || wait < 1 {
				sl.noRetryAfter.Add(1)
				wait = 1
			}
			if time.Now().Add(time.Duration(wait) * time.Second).Before(deadline) {
				time.Sleep(time.Duration(wait) * time.Second)
				continue
			}
		case code >= 500:
			// Another 5xx: a defect (the report fails the test), but a client would retry it
			// like a 503, and the same cart id makes that safe, so the sale goes on.
			sl.post5xx.Add(1)
			sl.not503.Add(1)
			if time.Now().Add(time.Second).Before(deadline) {
				time.Sleep(time.Second)
				continue
			}
			c.code, c.view, c.err = code, v, err
			return
		default:
			c.code, c.view, c.err = code, v, err
			// A cart that waited in the room and left it holding is a 201's promise too.
			c.created = code == http.StatusCreated || queued && code == http.StatusOK && v.Status == shop.StatusAwaitingPayment
			return
		}
		if time.Now().After(deadline) {
			c.code, c.err = code, fmt.Errorf("POST %s: no answer but %d/%v by the deadline", c.id, code, err)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// deliverPayment sends a signed payment_intent.succeeded until it is acknowledged (2xx), the
// way Stripe redelivers after a 5xx.
func (sl *sale) deliverPayment(c *cart) error {
	return sl.retry(&sl.webhook5xx, func() (int, error) { return sl.sendPayment(c, sl.paymentEvent(c)) })
}

// amount is what the cart costs at the sale's prices.
func (c *cart) amount() int64 {
	var n int64
	for _, it := range c.items {
		n += it.Quantity * unitPrice
	}
	return n
}

// paymentEvent is the body of the cart's payment_intent.succeeded event (one event id per
// cart), for the cart's price: the buyer pays what the cart costs, whatever the API answered.
func (sl *sale) paymentEvent(c *cart) []byte {
	return checkouttest.Paid(c.id, c.amount()).Body()
}

// sendPayment delivers one signed payment event once.
func (sl *sale) sendPayment(c *cart, body []byte) (int, error) {
	code, status, err := sl.sendWebhook(body)
	// "ignored": a redelivery of the payment that already confirmed the checkout, after the
	// saga closed (the first delivery signalled it but could not mark it delivered).
	if err == nil && code == http.StatusOK && status != "signalled" && status != "duplicate" && status != "ignored" {
		return code, fmt.Errorf("webhook for %s answered %q", c.id, status)
	}
	return code, err
}

// sendWebhook signs and sends one Stripe event and returns the answer's status field.
func (sl *sale) sendWebhook(body []byte) (int, string, error) {
	var answer map[string]string
	code, _, err := sl.s.do(http.MethodPost, "/v1/webhooks/stripe", body,
		map[string]string{"Stripe-Signature": checkouttest.StripeSignature(body, webhookSecret, time.Now())}, &answer)
	return code, answer["status"], err
}

// markPaid notes that the cart's payment webhook was acknowledged.
func (c *cart) markPaid() {
	c.paid, c.ackedAt = true, time.Now()
	c.paidAt.Store(true)
}

// retry repeats a request answered 5xx (or not at all) until it gets a 2xx-4xx answer.
func (sl *sale) retry(count *atomic.Int32, send func() (int, error)) error {
	deadline := time.Now().Add(clientDeadline)
	for {
		code, err := send()
		if code >= 500 {
			count.Add(1)
		}
		if code >= 500 && code != http.StatusServiceUnavailable {
			sl.not503.Add(1)
		}
		if code > 0 && code < 500 {
			if err == nil && code >= 300 {
				err = fmt.Errorf("answered %d", code)
			}
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer but %d (%v) by the deadline", code, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitFinal polls a checkout until it ended.
func (sl *sale) waitFinal(c *cart, deadline time.Time) error {
	var lastRetry time.Time
	for {
		var v api.CheckoutView
		code, _, err := sl.s.do(http.MethodGet, "/v1/checkouts/"+c.id, nil, checkouttest.BuyerOf(c.id), &v)
		if err == nil && code == http.StatusOK && v.Status.Final() {
			c.final = v.Status
			return nil
		}
		if err == nil && code == http.StatusOK && v.Attention != "" && time.Since(lastRetry) > 2*time.Second {
			// A step gave up its retries during the outage and waits for support (or its
			// 5-minute retry): do what support would, once the fault is over.
			lastRetry = time.Now()
			if code, _, _ := sl.s.do(http.MethodPost, "/v1/admin/checkouts/"+c.id+"/retry", []byte(`{}`),
				map[string]string{"Authorization": "Bearer " + adminToken}, nil); code == http.StatusOK {
				sl.supportRetries.Add(1)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("checkout %s (%s) not ended by the deadline: status %q, code %d, err %v", c.id, c.role, v.Status, code, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// play runs the sale: every cart checks out at once; each winner is paid, cancelled or left
// to expire as soon as it holds; fault runs (in its own goroutine) once trigger carts have
// their answer. It returns when every cart ended and the fault is over.
func (sl *sale) play(t *testing.T, trigger int, fault func()) {
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		_ = waitFor(clientDeadline, func() error {
			if int(sl.answered.Load()) >= trigger {
				return nil
			}
			return fmt.Errorf("not yet")
		})
		fault()
	}()

	var wg sync.WaitGroup
	for _, c := range sl.carts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sl.post(c)
			// Counted once the cart is among the winners or not, so a fault that strikes when
			// every cart has its answer sees every winner.
			if !sl.answer(t, c) {
				return
			}
			var err error
			switch c.role {
			case rolePay:
				err = sl.deliverPayment(c)
			case rolePayTwice:
				if err = sl.deliverPayment(c); err == nil {
					err = sl.deliverPayment(c)
				}
			case roleCancel:
				err = sl.retry(&sl.cancel5xx, func() (int, error) {
					code, _, err := sl.s.do(http.MethodPost, "/v1/checkouts/"+c.id+"/cancel", nil, checkouttest.BuyerOf(c.id), nil)
					return code, err
				})
			}
			if err != nil {
				t.Errorf("%s %s: %v", c.role, c.id, err)
			}
			if err == nil && (c.role == rolePay || c.role == rolePayTwice) {
				c.markPaid()
			}
		}()
	}
	wg.Wait()
	<-faultDone

	// A cart refused while its saga was already starting (a POST that timed out behind the
	// fault, retried, and refused by the sold-out gate before the saga reserved) can leave a
	// saga that goes on to hold stock for a buyer who was told "out of stock". Count them and
	// cancel them, so they end within the suite's time instead of at their payment deadline.
	var orphans []*cart
	for _, c := range sl.carts {
		if c.final != shop.StatusOutOfStock {
			continue
		}
		var running bool
		if err := waitFor(clientDeadline, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			desc, err := sl.s.tc.DescribeWorkflowExecution(ctx, shop.WorkflowID(c.id), "")
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
				return nil
			case err != nil: // Temporal busy or cut: ask again, never take it for "no saga"
				return err
			}
			running = desc.GetWorkflowExecutionInfo().GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_RUNNING
			return nil
		}); err != nil {
			t.Errorf("is the saga of refused cart %s running? %v", c.id, err)
		}
		if !running {
			continue
		}
		orphans = append(orphans, c)
		if err := sl.retry(&sl.cancel5xx, func() (int, error) {
			code, _, err := sl.s.do(http.MethodPost, "/v1/checkouts/"+c.id+"/cancel", nil, checkouttest.BuyerOf(c.id), nil)
			return code, err
		}); err != nil {
			t.Errorf("cancel refused cart %s whose saga runs: %v", c.id, err)
		}
	}
	sl.refusedButStarted = len(orphans)

	deadline := time.Now().Add(clientDeadline)
	for _, c := range append(orphans, sl.winner...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sl.waitFinal(c, deadline); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// answer records a cart's answer to its POST and reports whether it holds (a winner).
func (sl *sale) answer(t *testing.T, c *cart) (held bool) {
	defer sl.answered.Add(1)
	if c.err != nil {
		t.Errorf("cart %s: %v", c.id, c.err)
		return false
	}
	switch {
	case c.code == http.StatusConflict:
		c.final = shop.StatusOutOfStock
		return false
	case (c.code == http.StatusOK || c.code == http.StatusCreated) && c.view.Status.Final():
		// A retried POST of a cart whose saga already ended answers with that end.
		c.final = c.view.Status
		return false
	case c.code == http.StatusOK || c.code == http.StatusCreated:
	default:
		t.Errorf("cart %s: POST answered %d", c.id, c.code)
		return false
	}
	sl.mu.Lock()
	sl.winner = append(sl.winner, c)
	sl.mu.Unlock()
	return true
}

// held returns the winners so far.
func (sl *sale) held() []*cart {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return append([]*cart(nil), sl.winner...)
}

// paidSoFar returns up to n winners already paid.
func (sl *sale) paidSoFar(n int) []*cart {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	var out []*cart
	for _, c := range sl.winner {
		if c.paidAt.Load() && len(out) < n {
			out = append(out, c)
		}
	}
	return out
}

// figures are the counts one fault run saw.
type figures struct {
	carts, winners, created, rejected, failed int
	paid, refunded                            int // payments acknowledged; refunds recorded
	ends                                      map[shop.Status]int
}

func (sl *sale) figures() figures {
	f := figures{carts: len(sl.carts), winners: len(sl.winner), ends: map[shop.Status]int{}}
	if err := sl.s.pool.QueryRow(context.Background(), `SELECT count(*) FROM refunds WHERE checkout_id LIKE $1`,
		"c-"+sl.run+"-%").Scan(&f.refunded); err != nil {
		f.refunded = -1 // shown as such: the count could not be read
	}
	for _, c := range sl.carts {
		if c.paid {
			f.paid++
		}
		switch {
		case c.created:
			f.created++
		case c.code == http.StatusConflict || c.final == shop.StatusOutOfStock:
			f.rejected++
		}
		if c.final != "" {
			f.ends[c.final]++
		}
		if c.final == shop.StatusFailed {
			f.failed++
		}
	}
	return f
}

// checkEnds compares each winner's end with its role.
func (sl *sale) checkEnds(t *testing.T) {
	for _, c := range sl.winner {
		if c.role == rolePayLate && c.paid && c.view.ExpiresAt != nil && c.ackedAt.After(*c.view.ExpiresAt) && c.final == shop.StatusExpired {
			continue // acknowledged after expires_at: no promise to confirm; violations checks the refund
		}
		if c.final != "" && c.final != c.role.want() {
			t.Errorf("cart %s (%s) ended %s, want %s", c.id, c.role, c.final, c.role.want())
		}
	}
}

// violations checks the invariants from Postgres, Redis and Temporal and lists what is wrong.
func (sl *sale) violations(ctx context.Context) []string {
	var bad []string
	badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	s := sl.s
	prefix := "c-" + sl.run + "-"

	for _, sku := range sl.skus() {
		stocked := sl.stock[sku]
		var onHand, sold, lines, ledgerOnHand, ledgerSold int64
		if err := s.pool.QueryRow(ctx, `SELECT on_hand, sold FROM skus WHERE sku = $1`, sku).Scan(&onHand, &sold); err != nil {
			badf("read %s from postgres: %v", sku, err)
			continue
		}
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0) FROM order_lines WHERE sku = $1`, sku).Scan(&lines); err != nil {
			badf("read order lines of %s: %v", sku, err)
			continue
		}
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(delta_on_hand), 0), coalesce(sum(delta_sold), 0) FROM inventory_ledger WHERE sku = $1`, sku).Scan(&ledgerOnHand, &ledgerSold); err != nil {
			badf("read ledger of %s: %v", sku, err)
			continue
		}
		if sold != lines || onHand+sold != stocked || sold > stocked {
			badf("%s oversold or miscounted: stocked %d, sold %d, order lines %d, on_hand %d", sku, stocked, sold, lines, onHand)
		}
		if ledgerOnHand != onHand || ledgerSold != sold {
			badf("%s ledger disagrees: ledger on_hand %d sold %d, skus on_hand %d sold %d", sku, ledgerOnHand, ledgerSold, onHand, sold)
		}
		level, err := s.rdb.HMGet(ctx, lua.StockKey(sku), "available", "held").Result()
		if err != nil || level[0] == nil || level[1] == nil {
			badf("%s: %s (%v, %v)", sku, errNoStock, level, err)
			continue
		}
		available, _ := strconv.ParseInt(level[0].(string), 10, 64)
		held, _ := strconv.ParseInt(level[1].(string), 10, 64)
		if available+held != onHand {
			badf("%s: available %d + held %d != on_hand %d", sku, available, held, onHand)
		}
		holds, err := s.rdb.HGetAll(ctx, lua.HoldsKey(sku)).Result()
		if err != nil {
			badf("read holds of %s: %v", sku, err)
			continue
		}
		var sum int64
		for id, q := range holds {
			n, _ := strconv.ParseInt(q, 10, 64)
			sum += n
			var status string
			var ended bool
			err := s.pool.QueryRow(ctx, `SELECT status, ended_at IS NOT NULL FROM checkouts WHERE checkout_id = $1`, id).Scan(&status, &ended)
			if err != nil || ended {
				badf("%s: %d held by %s, which ended as %q (%v)", sku, n, id, status, err)
			}
		}
		if sum != held {
			badf("%s: held %d, but the holds add up to %d", sku, held, sum)
		}
	}

	// Every checkout is whole: ended, and confirmed exactly when it has an order whose lines
	// are its items.
	rows, err := s.pool.Query(ctx, `
		SELECT c.checkout_id, c.status, c.ended_at IS NOT NULL, o.order_id IS NOT NULL,
		       (SELECT count(*) FROM checkout_items ci WHERE ci.checkout_id = c.checkout_id),
		       (SELECT count(*) FROM order_lines ol JOIN checkout_items ci ON ci.sku = ol.sku AND ci.quantity = ol.quantity
		          AND ci.checkout_id = c.checkout_id WHERE ol.order_id = o.order_id),
		       (SELECT count(*) FROM refunds r WHERE r.checkout_id = c.checkout_id)
		FROM checkouts c LEFT JOIN orders o USING (checkout_id) WHERE c.checkout_id LIKE $1`, prefix+"%")
	if err != nil {
		return append(bad, fmt.Sprintf("read checkouts: %v", err))
	}
	type rec struct {
		status       string
		ended, order bool
		items, lines int
		refunds      int
	}
	recs := map[string]rec{}
	for rows.Next() {
		var id string
		var r rec
		if err := rows.Scan(&id, &r.status, &r.ended, &r.order, &r.items, &r.lines, &r.refunds); err != nil {
			rows.Close()
			return append(bad, fmt.Sprintf("read checkouts: %v", err))
		}
		recs[id] = r
		switch {
		case !r.ended:
			badf("checkout %s is still open in postgres (%s)", id, r.status)
		case (r.status == string(shop.StatusConfirmed)) != r.order:
			badf("checkout %s is %s with order=%v", id, r.status, r.order)
		case r.order && r.lines != r.items:
			badf("checkout %s: order has %d matching lines for %d items", id, r.lines, r.items)
		}
	}
	rows.Close()
	for _, c := range sl.winner {
		if _, ok := recs[c.id]; !ok {
			badf("held checkout %s is not in postgres", c.id)
		}
	}
	// Every cart, not only the winners: a cart paid before it was posted may have been
	// refused, or confirmed before its POST was answered.
	for _, c := range sl.carts {
		r, ok := recs[c.id]
		switch {
		case !c.paid:
		case !ok:
			badf("paid cart %s has no checkout in postgres: its payment is neither an order nor a refund", c.id)
		case r.status != string(shop.StatusConfirmed) && r.refunds == 0:
			badf("paid checkout %s is %s and not refunded", c.id, r.status)
		}
	}

	// Temporal: no saga open past its deadline plus a slack, none of this sale still running,
	// and no cart with more than one saga.
	slack := time.Now().Add(-30 * time.Second).UTC().Format(time.RFC3339)
	if n, err := sl.count(ctx, fmt.Sprintf("WorkflowType = 'Checkout' AND ExecutionStatus = 'Running' AND HoldExpiresAt < '%s'", slack)); err != nil || n > 0 {
		badf("%d checkouts still open 30 s past their deadline (%v)", n, err)
	}
	skuList := "'" + strings.Join(sl.skus(), "', '") + "'"
	if n, err := sl.count(ctx, "WorkflowType = 'Checkout' AND ExecutionStatus = 'Running' AND Skus IN ("+skuList+")"); err != nil || n > 0 {
		badf("%d checkouts of this sale still running (%v)", n, err)
	}
	runs := map[string]int{}
	var token []byte
	for {
		resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: "default", PageSize: 1000, NextPageToken: token,
			Query: "WorkflowType = 'Checkout' AND Skus IN (" + skuList + ")",
		})
		if err != nil {
			return append(bad, fmt.Sprintf("list sagas: %v", err))
		}
		for _, e := range resp.GetExecutions() {
			runs[e.GetExecution().GetWorkflowId()]++
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	for id, n := range runs {
		if n > 1 {
			badf("%s ran %d times", id, n)
		}
	}
	for _, c := range sl.winner {
		if runs[shop.WorkflowID(c.id)] != 1 {
			badf("held checkout %s has %d sagas in temporal", c.id, runs[shop.WorkflowID(c.id)])
		}
	}
	return bad
}

func (sl *sale) count(ctx context.Context, query string) (int64, error) {
	resp, err := sl.s.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: query})
	return resp.GetCount(), err
}

// settle polls the invariants until they hold or the deadline passes, and fails the test
// with what was still wrong. It returns how long they took to hold and how many were still
// broken at the deadline.
//
// A SKU that Redis lost is rebuilt from Postgres by the next script that touches it, or by
// the stock reconcile every five minutes (lua.Stock.Rebuild). When none of the sale's carts
// touched it after the loss, its stock is still missing from Redis: then the suite runs the
// reconcile's schedule now, as its timer would later, and the invariants judge its rebuild.
func (sl *sale) settle(t *testing.T, within time.Duration) (time.Duration, int) {
	start := time.Now()
	var bad []string
	reconciled := false
	_ = waitFor(within, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if bad = sl.violations(ctx); len(bad) > 0 {
			if !reconciled && slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, errNoStock) }) {
				err := sl.s.tc.ScheduleClient().GetHandle(ctx, workflows.StockScheduleID).Trigger(ctx, client.ScheduleTriggerOptions{})
				t.Logf("a SKU's stock is missing from Redis after the sale (%v): stock reconcile triggered (%v)", bad, err)
				reconciled = err == nil
			}
			return fmt.Errorf("%d violations", len(bad))
		}
		return nil
	})
	for _, b := range bad {
		t.Error(b)
	}
	return time.Since(start), len(bad)
}

var errNotYet = errors.New("not yet")

// errNoStock is the violation of a SKU whose stock Redis does not have.
const errNoStock = "redis has no stock"
