package lua

import (
	"fmt"
	"strconv"

	"github.com/checkout-saga/checkout-saga/shop"
)

// One Stock operation's name and arguments, for validation, reading return codes and error
// messages (errors.go maps the codes).

// op names a Stock operation, for messages and for reading return codes.
type op int

// opSpec is one Stock operation: its name in messages, the script it runs, and what its
// arguments must be. validate reads the bounds; each script checks the same bounds again.
type opSpec struct {
	name   string  // "reserve", "set stock", ...
	script string  // the script's name; "" for an operation that runs none (read stock)
	holder holder  // what the checkout id may name
	bounds []bound // the numeric arguments, in the order they are checked
}

// holder is what an operation's checkout id may name.
type holder int

const (
	noHolder  holder = iota // the operation takes no checkout id
	aCheckout               // a checkout's id
	aHold                   // a checkout's id, or an operator's change (ChangeHoldID)
	aChange                 // an operator's change only (ChangeHoldID)
)

// bound is a numeric argument's range, both ends included.
type bound struct {
	field    string
	min, max int64
	arg      func(call) int64
}

var (
	quantityBound    = bound{"quantity", 1, maxQuantity, func(c call) int64 { return c.quantity }}
	onHandBound      = bound{"on hand", 0, maxOnHand, func(c call) int64 { return c.onHand }}
	maxPerOrderBound = bound{"max per order", 1, maxMaxPerOrder, func(c call) int64 { return c.maxPerOrder }}
	deltaBound       = bound{"delta", -maxOnHand, maxOnHand, func(c call) int64 { return c.delta }}
)

var opSpecs = map[op]opSpec{
	opReserve:   {"reserve", reserveScript.name, aCheckout, []bound{quantityBound}},
	opRelease:   {"release", releaseScript.name, aHold, nil},
	opCommit:    {"commit", commitScript.name, aHold, nil},
	opSetStock:  {"set stock", setStockScript.name, noHolder, []bound{onHandBound, maxPerOrderBound}},
	opLevel:     {"read stock", "", noHolder, nil},
	opRebuild:   {"rebuild stock", rebuildScript.name, noHolder, []bound{onHandBound, maxPerOrderBound}},
	opReconcile: {"reconcile stock", reconcileScript.name, noHolder, []bound{onHandBound, maxPerOrderBound}},
	opForfeit:   {"forfeit", forfeitScript.name, aHold, nil},
	opStage:     {"stage stock change", stageChangeScript.name, aChange, []bound{deltaBound, maxPerOrderBound}},
	opSweep:     {"sweep hold ends", sweepScript.name, noHolder, nil},
}

func (o op) String() string {
	if spec, ok := opSpecs[o]; ok {
		return spec.name
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

func (o op) script() string {
	if spec := opSpecs[o]; spec.script != "" {
		return spec.script
	}
	return o.String()
}

// allows tells whether id may stand as the checkout id of an operation taking h.
func (h holder) allows(id string) bool {
	switch h {
	case noHolder:
		return true
	case aCheckout:
		return shop.ValidID(id)
	}
	changeID, isChange := IsChangeHold(id)
	if h == aChange {
		return isChange && shop.ValidID(changeID)
	}
	if !isChange {
		changeID = id
	}
	return shop.ValidID(changeID)
}

// call is one operation's arguments, for validation, return-code mapping
// and error messages.
type call struct {
	op                  op
	sku, checkoutID     string
	quantity            int64 // reserve
	onHand, maxPerOrder int64 // set stock
	delta               int64 // stage change
}

// String reads as the start of an error sentence:
// "reserve 2 x PHONE-X for checkout c-123".
func (c call) String() string {
	switch c.op {
	case opSetStock:
		return fmt.Sprintf("set stock of %s to %d on hand", c.sku, c.onHand)
	case opStage:
		return fmt.Sprintf("stage a change of %+d on hand of %s as %s", c.delta, c.sku, c.checkoutID)
	case opLevel, opRebuild, opReconcile, opSweep:
		return c.op.String() + " of " + c.sku
	}
	return describe(c.op.String(), c.sku, c.checkoutID, c.quantity)
}

func describe(opName, sku, checkoutID string, quantity int64) string {
	if quantity > 0 {
		return fmt.Sprintf("%s %d x %s for checkout %s", opName, quantity, sku, checkoutID)
	}
	return fmt.Sprintf("%s %s for checkout %s", opName, sku, checkoutID)
}
