package lua

import "github.com/checkout-saga/checkout-saga/shop"

// The one place key names are built. Each carries the SKU as a {sku} hash
// tag so that all keys a script touches hash to the same Cluster slot;
// ValidID keeps braces out of SKUs so the tag cannot be broken.

// StockKey is the hash holding a SKU's available, held and max_per_order.
func StockKey(sku string) string { return "stock:{" + sku + "}" }

// HoldsKey is the hash of a SKU's live holds, checkout id -> quantity.
func HoldsKey(sku string) string { return "holds:{" + sku + "}" }

// HoldEndKey is the tombstone recording that a checkout's hold on a SKU
// ended, as "released" or "committed".
func HoldEndKey(sku, checkoutID string) string {
	return "hold-end:{" + sku + "}:" + checkoutID
}

// StartedKey marks a checkout whose saga the API has started (see Stock.MarkStarted). It
// belongs to no SKU, so it has no hash tag; only the gate's pipelined read touches it.
func StartedKey(checkoutID string) string { return "checkout-started:" + checkoutID }

// ValidID reports whether s can be used as a SKU or checkout id: the product's one id rule,
// shop.ValidID (1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'). Anything else (braces, colons,
// spaces) could break a key's hash tag or shape.
func ValidID(s string) bool { return shop.ValidID(s) }
