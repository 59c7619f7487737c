package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/shop"
)

// dropResult is a scheduled drop: every buyer comes before the sale starts, one after the
// other at recorded times, and waits in the room; at the start their carts take places in
// line in a random order. Arriving early must win nothing: the order in which the buyers are
// served should not follow the order in which they came.
type dropResult struct {
	sku           string
	units, buyers int
	spread, lead  time.Duration // the arrivals span spread; the sale starts lead after the first
	early         int           // buyers answered 202 waiting_for_sale (all of them, unless something is wrong)
	served        int           // buyers whose cart got a hold (their saga started and reserved)
	refused       int           // buyers answered 409 at the start (their units spoken for)
	errors        int           // any other final answer, and transport errors
	sold          int64         // order lines of the drop's SKU in Postgres
	// rankAll is Spearman's rank correlation between arrival order and serving order over
	// every served or refused buyer, the refused ones tied after the last served;
	// rankServed is the same over the served buyers only. The serving order is the order of
	// created_at of their checkouts in Postgres: the row the saga writes as it starts.
	rankAll, rankServed float64
	// firstSaga and firstOrder are the earliest saga start and order of the drop's SKU
	// (Postgres's created_at) after sale_starts_at: negative would be a sale before the start.
	firstSaga, firstOrder time.Duration
}

// dropBuyer is one buyer of the drop: when its POST left, and how its cart ended.
type dropBuyer struct {
	sent      time.Time
	firstCode int    // of the POST: 202 while the sale has not started
	first     string // the POST's status: waiting_for_sale
	code      int
	view      api.CheckoutView
	err       error
}

// roomView is a checkout view, with what a waiting cart's answer adds to it.
type roomView struct {
	api.CheckoutView
	SaleStartsAt   *time.Time `json:"sale_starts_at"`
	RefreshAfterMS int64      `json:"refresh_after_ms"`
}

func (s *stack) benchDrop(ctx context.Context, sz sizes) (dropResult, error) {
	r := dropResult{sku: s.sku("DROP"), units: sz.dropUnits, buyers: sz.dropBuyers, spread: sz.dropSpread, lead: sz.dropLead}
	t0 := time.Now()
	startsAt := t0.Add(r.lead).UTC().Truncate(time.Millisecond)
	if _, err := s.inv.Set(ctx, shop.Product{SKU: r.sku, OnHand: int64(r.units), SaleTerms: shop.SaleTerms{PriceCents: 1_999, Currency: "usd", MaxPerOrder: 1, SaleStartsAt: &startsAt}}); err != nil {
		return r, fmt.Errorf("set drop %s: %w", r.sku, err)
	}
	prefix := "d-" + s.runID + "-"
	gap := r.spread / time.Duration(r.buyers)

	buyers := make([]dropBuyer, r.buyers)
	_, err := pool(ctx, r.buyers, r.buyers, func(i int) error {
		select { // each buyer comes at its own time, so the arrival order is known
		case <-time.After(time.Until(t0.Add(time.Duration(i) * gap))):
		case <-ctx.Done():
			return ctx.Err()
		}
		buyers[i] = s.followDropCart(ctx, fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("u-%s-d%d", s.runID, i), r.sku)
		return nil
	})
	if err != nil {
		return r, err
	}

	served := map[string]int{} // checkout id -> buyer
	for i, b := range buyers {
		if b.firstCode == http.StatusAccepted && b.first == "waiting_for_sale" && b.sent.Before(startsAt) {
			r.early++
		}
		switch {
		case b.err != nil:
			r.errors++
		case (b.code == http.StatusOK || b.code == http.StatusCreated) && b.view.Status == shop.StatusAwaitingPayment:
			r.served++
			served[b.view.CheckoutID] = i
		case b.code == http.StatusConflict:
			r.refused++
		default:
			r.errors++
		}
	}
	progress("   %d of %d buyers came before the start and waited; %d served, %d refused, %d errors",
		r.early, r.buyers, r.served, r.refused, r.errors)

	// The serving order: when each served buyer's saga started.
	ids := make([]string, 0, len(served))
	for id := range served {
		ids = append(ids, id)
	}
	startedAt := map[string]time.Time{}
	rows, err := s.pool.Query(ctx, `SELECT checkout_id, created_at FROM checkouts WHERE checkout_id = ANY($1)`, ids)
	if err != nil {
		return r, fmt.Errorf("read the drop's checkouts: %w", err)
	}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			rows.Close()
			return r, fmt.Errorf("read the drop's checkouts: %w", err)
		}
		startedAt[id] = at
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read the drop's checkouts: %w", err)
	}
	r.rankAll, r.rankServed = dropRanks(buyers, served, startedAt)

	// Every winner pays, so the units are sold and the earliest order can be compared with
	// the start.
	if _, err := pool(ctx, len(ids), 32, func(i int) error {
		b := buyers[served[ids[i]]]
		if err := s.pay(ctx, b.view.CheckoutID, b.view.AmountCents); err != nil {
			progress("   %v", err)
		}
		return nil
	}); err != nil {
		return r, err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0) FROM order_lines WHERE sku = $1`, r.sku).Scan(&r.sold); err != nil {
			return r, fmt.Errorf("count the drop's order lines: %w", err)
		}
		if r.sold >= int64(r.served) || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	var firstSaga, firstOrder *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT
		(SELECT min(c.created_at) FROM checkouts c JOIN checkout_items i USING (checkout_id) WHERE i.sku = $1),
		(SELECT min(o.created_at) FROM orders o JOIN order_lines l USING (order_id) WHERE l.sku = $1)`, r.sku).Scan(&firstSaga, &firstOrder); err != nil {
		return r, fmt.Errorf("read the drop's first sale: %w", err)
	}
	if firstSaga != nil {
		r.firstSaga = firstSaga.Sub(startsAt)
	}
	if firstOrder != nil {
		r.firstOrder = firstOrder.Sub(startsAt)
	}
	progress("   rank correlation of arrival and serving order: %.3f over the %d served and refused (|ρ| should stay within 0.2), %.3f over the %d served",
		r.rankAll, r.served+r.refused, r.rankServed, r.served)
	progress("   sold %d of %d; first saga started %s after sale_starts_at, first order %s after",
		r.sold, r.units, fmtSigned(r.firstSaga), fmtSigned(r.firstOrder))
	return r, nil
}

// followDropCart POSTs a cart as a browser does before a drop: a 202 waiting_for_sale is
// asked again (with the cart's secret) at the start and then as often as the answer's
// refresh_after_ms says; a cart in line is asked with GET ?wait=10 until it has left the
// room. The answer is the final one: 200 with the cart's hold, or 409.
func (s *stack) followDropCart(ctx context.Context, cartID, customerID, sku string) dropBuyer {
	c := checkouttest.Client{BaseURL: s.url, HTTP: s.http, MaxRetries: 20, Header: s.client}
	b := dropBuyer{sent: time.Now()}
	var v roomView
	a, err := c.Do(ctx, http.MethodPost, "/v1/checkouts", api.CheckoutRequest{CartID: cartID, CustomerID: customerID,
		Items: []api.RequestItem{{SKU: sku, Quantity: 1}}, PaymentTimeoutSeconds: ptr[int64](600)}, nil, &v)
	b.firstCode, b.first = a.Code, string(v.Status)
	get := map[string]string{api.CheckoutSecretHeader: v.CheckoutSecret}
	for k, val := range s.client {
		get[k] = val
	}
	for err == nil && (a.Code == http.StatusAccepted || a.Code == http.StatusOK) {
		switch v.Status {
		case "waiting_for_sale":
			pause := time.Duration(v.RefreshAfterMS) * time.Millisecond
			if v.SaleStartsAt != nil {
				pause = min(pause, max(time.Until(*v.SaleStartsAt), 0))
			}
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				b.err = ctx.Err()
				return b
			}
		case "queued", shop.StatusReserving:
		default:
			b.code, b.view = a.Code, v.CheckoutView
			return b
		}
		v = roomView{}
		a, err = c.Do(ctx, http.MethodGet, "/v1/checkouts/"+cartID+"?wait=10", nil, get, &v)
	}
	b.code, b.view, b.err = a.Code, v.CheckoutView, err
	return b
}

// dropRanks is Spearman's rank correlation between the buyers' arrival order (when their
// POST left) and their serving order (when their saga started): over every served or
// refused buyer with the refused ones tied after the last served, and over the served only.
func dropRanks(buyers []dropBuyer, served map[string]int, startedAt map[string]time.Time) (all, servedOnly float64) {
	var arrived, serving, arrivedServed, servingServed []float64
	var last float64
	for _, at := range startedAt {
		last = max(last, float64(at.UnixNano()))
	}
	for _, b := range buyers {
		switch {
		case b.err != nil:
		case b.code == http.StatusConflict:
			arrived = append(arrived, float64(b.sent.UnixNano()))
			serving = append(serving, last+1) // after every served buyer, all tied
		default:
			at, ok := startedAt[b.view.CheckoutID]
			if _, won := served[b.view.CheckoutID]; !won || !ok {
				continue
			}
			arrived = append(arrived, float64(b.sent.UnixNano()))
			serving = append(serving, float64(at.UnixNano()))
			arrivedServed = append(arrivedServed, float64(b.sent.UnixNano()))
			servingServed = append(servingServed, float64(at.UnixNano()))
		}
	}
	return spearman(arrived, serving), spearman(arrivedServed, servingServed)
}

// spearman is Spearman's rank correlation of x and y: Pearson's correlation of their ranks,
// tied values taking the mean of the ranks they span. NaN for fewer than two pairs or a
// sample whose values are all equal.
func spearman(x, y []float64) float64 {
	if len(x) != len(y) || len(x) < 2 {
		return math.NaN()
	}
	return pearson(ranks(x), ranks(y))
}

// ranks are the 1-based ranks of v, ties sharing their mean rank.
func ranks(v []float64) []float64 {
	order := make([]int, len(v))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return v[order[a]] < v[order[b]] })
	r := make([]float64, len(v))
	for i := 0; i < len(order); {
		j := i
		for j < len(order) && v[order[j]] == v[order[i]] {
			j++
		}
		mean := float64(i+j+1) / 2 // ranks i+1 .. j
		for _, k := range order[i:j] {
			r[k] = mean
		}
		i = j
	}
	return r
}

func pearson(x, y []float64) float64 {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i] / n
		my += y[i] / n
	}
	var sxy, sxx, syy float64
	for i := range x {
		sxy += (x[i] - mx) * (y[i] - my)
		sxx += (x[i] - mx) * (x[i] - mx)
		syy += (y[i] - my) * (y[i] - my)
	}
	return sxy / math.Sqrt(sxx*syy)
}

// fmtSigned is fmtDur with a sign: a negative duration is an event before its reference.
func fmtSigned(d time.Duration) string {
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return fmtDur(d)
}
