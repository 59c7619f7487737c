package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
)

// payBeforeCheckout sends every cart's payment before the cart is posted: with no checkout to
// deliver it to, each must be recorded and acknowledged as an orphan.
func (sl *sale) payBeforeCheckout(t *testing.T) {
	t.Helper()
	for _, c := range sl.carts {
		err := sl.retry(&sl.webhook5xx, func() (int, error) {
			code, status, err := sl.sendWebhook(sl.paymentEvent(c))
			if err == nil && code == http.StatusOK && status != "orphan" {
				err = fmt.Errorf("answered %q, want orphan", status)
			}
			return code, err
		})
		if err != nil {
			t.Errorf("payment of %s before its checkout: %v", c.id, err)
			continue
		}
		c.markPaid()
	}
}

// checkPaidBy checks that every paid cart's order was paid by the cart's own payment and that
// nothing of the sale was refunded: an orphan is claimed, never refunded while its checkout
// can take it.
func (sl *sale) checkPaidBy(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, c := range sl.carts {
		if !c.paid {
			continue
		}
		var ref string
		err := sl.s.pool.QueryRow(ctx, `SELECT payment_ref FROM orders WHERE checkout_id = $1`, c.id).Scan(&ref)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			t.Errorf("checkout %s, paid before it existed, has no order (ended %s)", c.id, c.final)
		case err != nil:
			t.Errorf("read order of %s: %v", c.id, err)
		case ref != "pi_"+c.id:
			t.Errorf("order of %s was paid by %q, want pi_%s", c.id, ref, c.id)
		}
	}
	var refunds int
	if err := sl.s.pool.QueryRow(ctx, `SELECT count(*) FROM refunds WHERE checkout_id LIKE $1`, "c-"+sl.run+"-%").Scan(&refunds); err != nil || refunds != 0 {
		t.Errorf("%d refunds of payments that had their checkout (%v), want none", refunds, err)
	}
}

// forgetAndRetry moves the product onto a fresh Temporal server over the same Postgres and
// Redis, as if retention had dropped every finished saga of the sale, and posts and reads
// again every cart whose end Postgres recorded. Each must answer its recorded end; nothing
// may move in stock or holds.
func (sl *sale) forgetAndRetry(t *testing.T) {
	t.Helper()
	s := sl.s
	ends := sl.recordedEnds(t)
	before := sl.stockSnapshot(t)
	old := s.temporal
	s.useTemporal(startTemporal(s.t, s.dir, "temporal-fresh-"+sl.run))
	old.stop()

	// Clients retrying after the sale, a few at once.
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[string]int{}
	for _, c := range sl.carts {
		end, recorded := ends[c.id]
		if !recorded {
			// Refused by the sold-out gate before any saga or the room: it never was a
			// checkout, and a retry now would rightly start one.
			continue
		}
		if end != c.final {
			t.Errorf("cart %s: postgres recorded %s, the sale saw %s", c.id, end, c.final)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// Read first, while the fresh server has no saga of this cart at all. A cart
			// whose saga ended out of stock may read as 409 out_of_stock.
			answers := func(code int, v api.CheckoutView) bool {
				return code == http.StatusOK && v.Status == end || end == shop.StatusOutOfStock && code == http.StatusConflict
			}
			var v api.CheckoutView
			code, _, err := s.do(http.MethodGet, "/v1/checkouts/"+c.id, nil, checkouttest.BuyerOf(c.id), &v)
			if err != nil || !answers(code, v) {
				t.Errorf("GET %s (ended %s) with no saga in temporal: %d %q %v", c.id, end, code, v.Status, err)
			}
			again := &cart{id: c.id, body: c.body}
			sl.post(again)
			switch {
			case again.err != nil:
				t.Errorf("retried POST of %s (ended %s): %v", c.id, end, again.err)
			case end == shop.StatusOutOfStock && again.code != http.StatusConflict:
				t.Errorf("retried POST of %s (ended out_of_stock): %d %s, want 409", c.id, again.code, again.view.Status)
			case end != shop.StatusOutOfStock && (again.code != http.StatusOK || again.view.Status != end):
				t.Errorf("retried POST of %s (ended %s): %d %q, want 200 %s", c.id, end, again.code, again.view.Status, end)
			}
			v = api.CheckoutView{}
			code, _, err = s.do(http.MethodGet, "/v1/checkouts/"+c.id, nil, checkouttest.BuyerOf(c.id), &v)
			if err != nil || !answers(code, v) {
				t.Errorf("GET %s (ended %s) after the retry: %d %q %v", c.id, end, code, v.Status, err)
			}
			mu.Lock()
			answered[fmt.Sprintf("%s %d", end, again.code)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	t.Logf("retried POSTs on the fresh temporal, by recorded end and answer: %v", answered)
	sl.othersPostsRefused(t, ends)
	if after := sl.stockSnapshot(t); after != before {
		t.Errorf("stock moved when the carts were retried:\nbefore %s\nafter  %s", before, after)
	}
}

// othersPostsRefused posts, for every cart whose end Postgres recorded, another buyer's body
// under another key, now that Temporal forgot the saga: each is 409 checkout_exists, with no
// view and no checkout secret, for Postgres keeps who created the checkout.
func (sl *sale) othersPostsRefused(t *testing.T, ends map[string]shop.Status) {
	t.Helper()
	refused := 0
	for id := range ends {
		var c *cart
		for _, x := range sl.carts {
			if x.id == id {
				c = x
			}
		}
		if c == nil {
			continue
		}
		body, _ := json.Marshal(api.CheckoutRequest{CartID: id, CustomerID: "someone-else", Items: c.items})
		a, err := (&checkouttest.Client{BaseURL: sl.s.url, HTTP: sl.s.http}).Do(context.Background(), http.MethodPost, "/v1/checkouts", body,
			map[string]string{"Idempotency-Key": "other-" + id}, nil)
		if err != nil || a.Code != http.StatusConflict || a.Problem != "checkout_exists" ||
			strings.Contains(string(a.Body), "checkout_secret") || strings.Contains(string(a.Body), "u-"+id) {
			t.Errorf("another buyer's POST of %s (ended %s) after Temporal forgot it: %d %s %v; want 409 checkout_exists and nothing of it",
				id, ends[id], a.Code, a.Body, err)
			continue
		}
		refused++
	}
	t.Logf("another buyer's POST of each of the %d ended carts: %d refused with 409 checkout_exists", len(ends), refused)
}

// recordedEnds returns how Postgres recorded the end of each of the sale's checkouts.
func (sl *sale) recordedEnds(t *testing.T) map[string]shop.Status {
	rows, err := sl.s.pool.Query(context.Background(),
		`SELECT checkout_id, status FROM checkouts WHERE checkout_id LIKE $1 AND ended_at IS NOT NULL`, "c-"+sl.run+"-%")
	if err != nil {
		t.Fatalf("read recorded ends: %v", err)
	}
	ends := map[string]shop.Status{}
	for rows.Next() {
		var id, status string
		if err := rows.Scan(&id, &status); err != nil {
			t.Fatalf("read recorded ends: %v", err)
		}
		ends[id] = shop.Status(status)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read recorded ends: %v", err)
	}
	return ends
}

// stockSnapshot renders the sale's stock as Postgres and Redis hold it: on_hand and sold,
// available and held, and every hold.
func (sl *sale) stockSnapshot(t *testing.T) string {
	ctx := context.Background()
	var out []string
	for _, sku := range sl.skus() {
		var onHand, sold int64
		if err := sl.s.pool.QueryRow(ctx, `SELECT on_hand, sold FROM skus WHERE sku = $1`, sku).Scan(&onHand, &sold); err != nil {
			t.Fatalf("read %s: %v", sku, err)
		}
		level, err := sl.s.rdb.HGetAll(ctx, lua.StockKey(sku)).Result()
		if err != nil {
			t.Fatalf("read stock of %s: %v", sku, err)
		}
		holds, err := sl.s.rdb.HGetAll(ctx, lua.HoldsKey(sku)).Result()
		if err != nil {
			t.Fatalf("read holds of %s: %v", sku, err)
		}
		ids := make([]string, 0, len(holds))
		for id, q := range holds {
			ids = append(ids, id+"="+q)
		}
		sort.Strings(ids)
		lv, _ := json.Marshal(map[string]string{"available": level["available"], "held": level["held"]})
		out = append(out, fmt.Sprintf("%s: on_hand %d sold %d redis %s holds [%s]", sku, onHand, sold, lv, strings.Join(ids, " ")))
	}
	return strings.Join(out, "; ")
}
