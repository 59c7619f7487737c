package lua

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Sentinels, for errors.Is. The errors this package returns wrap them in a
// typed error carrying the ids and numbers involved. Two refusals an operator's change
// can meet unwrap to the vocabulary's sentinels, which the API maps:
// *OnHandBelowHeldError to shop.ErrOnHandBelowHeld and *InsufficientStockError to
// shop.ErrInsufficientStock.
var (
	// ErrNotStocked: reserve on a SKU that set_stock never loaded.
	ErrNotStocked = errors.New("sku not stocked")
	// ErrOutOfStock: fewer units available than requested. See *OutOfStockError.
	ErrOutOfStock = errors.New("out of stock")
	// ErrOverLimit: more units requested than max_per_order. See *OverLimitError.
	ErrOverLimit = errors.New("over the per-order limit")
	// ErrHoldReleased: commit of a hold that was already released.
	ErrHoldReleased = errors.New("hold already released")
	// ErrHoldCommitted: release of a hold that was already committed.
	ErrHoldCommitted = errors.New("hold already committed")
	// ErrHoldEnded: reserve for a checkout whose hold was already released or
	// committed (or released before it was ever made). See *HoldEndedError.
	ErrHoldEnded = errors.New("hold already ended")
	// ErrNoHold: commit for a checkout that holds nothing.
	ErrNoHold = errors.New("no hold")
	// ErrInvalidArgument: an argument failed validation; Redis was not called.
	// See *ArgumentError.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrRolledBack: Redis shows the SKU at a lower gen than this process has seen, so it
	// went back in time and may have lost holds; nothing changed. Resync the SKU from
	// Postgres (rebuild or reconcile) and try again. See *RolledBackError.
	ErrRolledBack = errors.New("redis went back in time")
)

// RolledBackError is a script refused because Redis's gen of the SKU is below one seen, or
// (Seen -1) because the SKU was last resynced on another Redis node: Redis restarted or
// failed over since, and may have come back with older data.
type RolledBackError struct {
	Op, SKU   string
	Gen, Seen int64
}

func (e *RolledBackError) Error() string {
	if e.Seen < 0 {
		return fmt.Sprintf("%s of %s: redis restarted or failed over since the sku was resynced; resync the sku from postgres", e.Op, e.SKU)
	}
	return fmt.Sprintf("%s of %s: redis went back in time (gen %d, seen %d); resync the sku from postgres", e.Op, e.SKU, e.Gen, e.Seen)
}

func (e *RolledBackError) Unwrap() error { return ErrRolledBack }

// InsufficientStockError is a staged decrease of on_hand larger than the units available
// (on_hand minus the units held).
type InsufficientStockError struct {
	SKU              string
	Delta, Available int64
}

func (e *InsufficientStockError) Error() string {
	return fmt.Sprintf("take %d from on hand of %s: insufficient stock (%d not held)", -e.Delta, e.SKU, e.Available)
}

func (e *InsufficientStockError) Unwrap() error { return shop.ErrInsufficientStock }

// OutOfStockError is a reserve refused because too few units are available.
type OutOfStockError struct {
	SKU, CheckoutID      string
	Requested, Available int64
}

func (e *OutOfStockError) Error() string {
	return fmt.Sprintf("%s: out of stock (%d available)",
		describe(opReserve.String(), e.SKU, e.CheckoutID, e.Requested), e.Available)
}

func (e *OutOfStockError) Unwrap() error { return ErrOutOfStock }

// OverLimitError is a reserve refused because it asks for more than the
// SKU's max_per_order.
type OverLimitError struct {
	SKU, CheckoutID        string
	Requested, MaxPerOrder int64
}

func (e *OverLimitError) Error() string {
	return fmt.Sprintf("%s: over the per-order limit (at most %d)",
		describe(opReserve.String(), e.SKU, e.CheckoutID, e.Requested), e.MaxPerOrder)
}

func (e *OverLimitError) Unwrap() error { return ErrOverLimit }

// HoldEndedError is a reserve refused because the checkout's hold on the
// SKU already ended. Outcome is "released" or "committed".
type HoldEndedError struct {
	SKU, CheckoutID string
	Requested       int64
	Outcome         string
}

func (e *HoldEndedError) Error() string {
	return fmt.Sprintf("%s: hold already ended (%s)",
		describe(opReserve.String(), e.SKU, e.CheckoutID, e.Requested), e.Outcome)
}

func (e *HoldEndedError) Unwrap() error { return ErrHoldEnded }

// OnHandBelowHeldError is a set stock refused because live holds keep more
// units than the new on-hand count.
type OnHandBelowHeldError struct {
	SKU          string
	OnHand, Held int64
}

func (e *OnHandBelowHeldError) Error() string {
	return fmt.Sprintf("set stock of %s to %d on hand: on hand below held (%d held)", e.SKU, e.OnHand, e.Held)
}

func (e *OnHandBelowHeldError) Unwrap() error { return shop.ErrOnHandBelowHeld }

// HoldError is a refusal that carries nothing beyond its ids: Err is
// ErrNotStocked, ErrHoldReleased, ErrHoldCommitted or ErrNoHold. Op is
// "reserve", "release" or "commit"; Quantity is set for reserve only.
type HoldError struct {
	Op              string
	SKU, CheckoutID string
	Quantity        int64
	Err             error
}

func (e *HoldError) Error() string {
	return describe(e.Op, e.SKU, e.CheckoutID, e.Quantity) + ": " + e.Err.Error()
}

func (e *HoldError) Unwrap() error { return e.Err }

// ArgumentError is an argument rejected before any Redis call.
type ArgumentError struct {
	Op     string // "reserve", "release", "commit", "set stock", "read stock"
	Field  string // "sku", "checkout id", "quantity", "on hand", "max per order"
	Value  string // as given, truncated
	Reason string
}

func (e *ArgumentError) Error() string {
	return fmt.Sprintf("%s: invalid argument: %s %s %s", e.Op, e.Field, e.Value, e.Reason)
}

func (e *ArgumentError) Unwrap() error { return ErrInvalidArgument }

// Return codes shared by every script; doc.go has the table.
const (
	codeOK               = 0
	codeNotStocked       = 1
	codeHoldEnded        = 2
	codeAlreadyHeld      = 3
	codeOverLimit        = 4
	codeOutOfStock       = 5
	codeAlreadyReleased  = 6
	codeAlreadyCommitted = 7
	codeNoHold           = 8
	codeOnHandBelowHeld  = 9
	codeInvalidArgument  = 10
	codeAlreadyStocked   = 11
	codeRolledBack       = 12
)

// reply is a script's {code, value, extra, gen, more...}.
type reply struct {
	code, value, extra, gen int64
	more                    []int64 // reconcile.lua's restored and rolled-back flags
}

// shared turns the replies every script can give, whatever its operation, into errors:
// ROLLED_BACK and INVALID_ARGUMENT. Each wrapper maps its own script's other codes (see the
// script's header), and calls unexpected for any it does not know.
func (c call) shared(r reply) error {
	switch r.code {
	case codeRolledBack:
		return &RolledBackError{Op: c.op.String(), SKU: c.sku, Gen: r.value, Seen: r.extra}
	case codeInvalidArgument:
		// The Go side validates first, so this means the two disagree.
		return fmt.Errorf("%s: %s script rejected ARGV[%d]: %w", c, c.op.script(), r.value, ErrInvalidArgument)
	}
	return nil
}

func (c call) unexpected(r reply) error {
	return fmt.Errorf("%s: unexpected reply {%d, %d, %d} from %s script", c, r.code, r.value, r.extra, c.op.script())
}

func (c call) holdError(sentinel error) error {
	return &HoldError{Op: c.op.String(), SKU: c.sku, CheckoutID: c.checkoutID, Quantity: c.quantity, Err: sentinel}
}

// Argument bounds, checked in Go before any Redis call and again in Lua.
const (
	maxQuantity    = 1_000_000
	maxOnHand      = 1_000_000_000
	maxMaxPerOrder = 1_000_000
)

const idRule = "must be 1 to 64 characters of A-Z a-z 0-9 . _ -"

// validate checks every argument the operation uses, as its opSpec says.
func (c call) validate() error {
	if !shop.ValidID(c.sku) {
		return c.argError("sku", strconv.Quote(truncate(c.sku)), idRule)
	}
	spec := opSpecs[c.op]
	if !spec.holder.allows(c.checkoutID) {
		return c.argError("checkout id", strconv.Quote(truncate(c.checkoutID)), idRule)
	}
	for _, b := range spec.bounds {
		if v := b.arg(c); v < b.min || v > b.max {
			return c.argError(b.field, strconv.FormatInt(v, 10), fmt.Sprintf("must be %d to %d", b.min, b.max))
		}
	}
	return nil
}

func (c call) argError(field, value, reason string) error {
	return &ArgumentError{Op: c.op.String(), Field: field, Value: value, Reason: reason}
}

func truncate(s string) string {
	const limit = 80
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
