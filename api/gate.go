// Before the saga: unknown SKUs, quantities over limit and sold-out new carts refused early.

package api

import (
	"context"
	"fmt"

	"github.com/checkout-saga/checkout-saga/shop"
)

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

// soldOut is the sold-out gate: a new cart that cannot be held right now is refused with its
// shortages from one Redis round trip, without a saga. A SKU Redis does not know, or a Redis
// error, passes to the room and the saga, which decide. The answer's Seen says Redis knows
// the cart started or held stock: its saga answers it; its Available is what the room's door
// counts with.
func (s *Server) soldOut(ctx context.Context, cartID string, lines []shop.CartLine) shop.Precheck {
	if s.Gate == nil {
		return shop.Precheck{}
	}
	items := make(map[string]int64, len(lines))
	for _, it := range lines {
		items[it.SKU] = it.Quantity
	}
	pre, err := s.Gate.Precheck(ctx, cartID, items)
	if err != nil {
		s.Logger.Warn("sold-out gate skipped", "checkout_id", cartID, "error", err)
		return shop.Precheck{}
	}
	if !pre.SoldOut() {
		pre.Shortages = nil
	}
	return pre
}
