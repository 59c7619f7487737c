// The gate before the saga: unknown SKUs, quantities over limit and sold-out carts refused early.

package api

import (
	"context"
	"fmt"

	"github.com/checkout-saga/checkout-saga/metrics"
)

// gate refuses a new cart before any saga: bad input first (a quantity over its SKU's limit
// is 422 whatever the stock, so the catalog answers before the sold-out gate can call the
// same cart 409), then the sold-out gate. Both judge from memory and Redis, which forget: a
// cart Postgres already recorded (a retry, perhaps long after its end, after Redis lost its
// markers or the operator changed the SKU) goes on to its saga, which answers its recorded
// end. Only refused carts cost the Postgres read, and the carts refused at the same moment
// share one query (recordedCheck); if Postgres cannot answer, the refusal stands.
//
// retry says the cart is known to have a saga (Redis saw it start or hold, or Postgres
// recorded it): it goes straight to its saga, never into the waiting room, where it would
// wait behind new carts or be refused for units it already holds or held.
func (s *Server) gate(ctx context.Context, req CheckoutRequest) (p *Problem, retry bool) {
	p = s.checkCatalog(ctx, req)
	if p == nil {
		p, retry = s.soldOut(ctx, req)
	}
	if p == nil {
		return p, retry
	}
	if s.recordedCart(ctx, req.CartID) {
		return nil, true
	}
	return p, false
}

// checkCatalog refuses unknown SKUs and quantities over a SKU's limit before any saga starts.
// The saga checks again (the Lua script is the judge); this only answers bad carts early.
func (s *Server) checkCatalog(ctx context.Context, req CheckoutRequest) *Problem {
	skus := make([]string, len(req.Items))
	for i, it := range req.Items {
		skus[i] = it.SKU
	}
	products, err := s.Catalog.Products(ctx, skus)
	if err != nil {
		return unavailable("postgres", err)
	}
	// Every problem is collected; the code names the most basic one (unknown SKU first).
	var unknown, mixed, over []FieldError
	currency := ""
	for i, it := range req.Items {
		p, ok := products[it.SKU]
		field := fmt.Sprintf("items[%d]", i)
		if !ok {
			unknown = append(unknown, FieldError{field + ".sku", "unknown SKU " + it.SKU})
			continue
		}
		if currency == "" {
			currency = p.Currency
		} else if p.Currency != currency {
			mixed = append(mixed, FieldError{field + ".sku", fmt.Sprintf("%s is priced in %s, the cart in %s", it.SKU, p.Currency, currency)})
		}
		if it.Quantity > p.MaxPerOrder {
			over = append(over, FieldError{field + ".quantity", fmt.Sprintf("at most %d of %s per order", p.MaxPerOrder, it.SKU)})
		}
	}
	switch all := append(append(append([]FieldError(nil), unknown...), mixed...), over...); {
	case len(unknown) > 0:
		return invalid("unknown_sku", all...)
	case len(mixed) > 0:
		return invalid("mixed_currency", all...)
	case len(over) > 0:
		return invalid("quantity_over_limit", all...)
	}
	return nil
}

// soldOut is the sold-out gate: a cart that cannot be held right now is answered 409 from one
// Redis round trip, without a saga. A retry of a cart that already holds (or held) stock, a SKU
// Redis does not know, or a Redis error all pass through to the saga, which decides. seen
// says Redis knows the cart started or held stock.
func (s *Server) soldOut(ctx context.Context, req CheckoutRequest) (p *Problem, seen bool) {
	if s.Gate == nil {
		return nil, false
	}
	items := make(map[string]int64, len(req.Items))
	for _, it := range req.Items {
		items[it.SKU] = it.Quantity
	}
	pre, err := s.Gate.Precheck(ctx, req.CartID, items)
	if err != nil {
		s.Logger.Warn("sold-out gate skipped", "checkout_id", req.CartID, "error", err)
		return nil, false
	}
	if !pre.SoldOut() {
		return nil, pre.Seen
	}
	metrics.SoldOut.Inc()
	return outOfStock(pre.Shortages), false
}
