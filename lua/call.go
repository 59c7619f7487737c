package lua

import (
	"fmt"
	"strconv"
)

// One Stock operation's name and arguments, for validation, reading return codes and error
// messages (errors.go maps the codes).

// op names a Stock operation, for messages and for reading return codes.
type op int

func (o op) String() string {
	switch o {
	case opReserve:
		return "reserve"
	case opRelease:
		return "release"
	case opCommit:
		return "commit"
	case opSetStock:
		return "set stock"
	case opLevel:
		return "read stock"
	case opRebuild:
		return "rebuild stock"
	case opReconcile:
		return "reconcile stock"
	case opForfeit:
		return "forfeit"
	case opStage:
		return "stage stock change"
	case opSweep:
		return "sweep hold ends"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

func (o op) script() string {
	switch o {
	case opReserve:
		return reserveScript.name
	case opRelease:
		return releaseScript.name
	case opCommit:
		return commitScript.name
	case opSetStock:
		return setStockScript.name
	case opRebuild:
		return rebuildScript.name
	case opReconcile:
		return reconcileScript.name
	case opForfeit:
		return forfeitScript.name
	case opStage:
		return stageChangeScript.name
	case opSweep:
		return sweepScript.name
	}
	return o.String()
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
