package shop

// CartLine is one line of the cart as the client sent it. It has no price field: the UI shows
// the saga's input as it was started, and an `"unit_price_cents": 0` there, before the
// checkout was priced, read as a free item. Histories recorded with that field still decode
// (encoding/json ignores it) and replay: the input is not a command.
type CartLine struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// Item is one priced line of a checkout. UnitPriceCents is filled in from the catalog when the
// checkout is recorded; zero before.
type Item struct {
	SKU            string `json:"sku"`
	Quantity       int64  `json:"quantity"`
	UnitPriceCents int64  `json:"unit_price_cents"`
}

// Unpriced is the cart as Items, before the catalog prices it.
func Unpriced(lines []CartLine) []Item {
	items := make([]Item, len(lines))
	for i, l := range lines {
		items[i] = Item{SKU: l.SKU, Quantity: l.Quantity}
	}
	return items
}

// Shortage is a SKU that cannot be held: the detail of an out-of-stock answer.
type Shortage struct {
	SKU       string `json:"sku"`
	Requested int64  `json:"requested"`
	Available int64  `json:"available"`
}

// Precheck is the sold-out gate's answer for one cart, read from Redis without a saga.
type Precheck struct {
	// Shortages lists the SKUs whose available units are below the requested quantity.
	Shortages []Shortage
	// Known is false when a SKU has no stock hash (never stocked, or Redis lost it): the
	// gate then has no opinion and the saga must decide.
	Known bool
	// Seen is true when the checkout already holds, or held, one of the SKUs: a retry of a
	// checkout that exists must reach its saga, whatever the stock says now.
	Seen bool
	// Available is each stocked SKU's available units, as read (the waiting room's door
	// counts with them instead of reading them again).
	Available map[string]int64
}

// SoldOut reports whether the cart can be refused without starting a saga.
func (p Precheck) SoldOut() bool { return p.Known && !p.Seen && len(p.Shortages) > 0 }
