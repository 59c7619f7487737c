package lua

import "strings"

// The one place key names are built. Each carries the SKU as a {sku} hash
// tag so that all keys a script touches hash to the same Cluster slot;
// ValidID keeps braces out of SKUs so the tag cannot be broken.

// StockKey is the hash holding a SKU's available, held and max_per_order.
func StockKey(sku string) string { return "stock:{" + sku + "}" }

// HoldsKey is the hash of a SKU's live holds, checkout id -> quantity.
func HoldsKey(sku string) string { return "holds:{" + sku + "}" }

// HoldEndsKey is the hash of a SKU's hold-end markers: holder -> "released:<expiry>" or
// "committed:<expiry>" (a tombstone recording that the hold ended), or "rebuilt" (see
// common.lua). Its field ":layout" keeps it in existence (see doc.go, "Redis Cluster").
func HoldEndsKey(sku string) string { return "hold-ends:{" + sku + "}" }

// HoldEndOutcome reads a marker of HoldEndsKey: "released", "committed", "rebuilt", or ""
// for none.
func HoldEndOutcome(marker string) string {
	outcome, _, _ := strings.Cut(marker, ":")
	return outcome
}

// StartedKey marks a checkout whose saga the API has started (see Stock.MarkStarted). It
// belongs to no SKU, so it has no hash tag; only the gate's pipelined read touches it.
func StartedKey(checkoutID string) string { return "checkout-started:" + checkoutID }

// maxIDLen bounds SKUs and checkout ids so keys stay short.
const maxIDLen = 64

// ValidID reports whether s can be used as a SKU or checkout id: 1 to 64
// characters of A-Z, a-z, 0-9, '.', '_' and '-'. Anything else (braces,
// colons, spaces) could break a key's hash tag or shape.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
