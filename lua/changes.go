package lua

import "context"

// Operators' changes of on_hand: staged as a hold while Postgres records them (StageChange),
// and the absolute load of benchmarks and tests (SetStock).

// ChangeHoldID is the holder id under which stage_change.lua holds an operator's change of
// on_hand. The "~" cannot start a checkout id (shop.ValidID), so the two never collide; Release,
// Commit and Forfeit accept it to finish or undo the change.
func ChangeHoldID(changeID string) string { return "~" + changeID }

// IsChangeHold reports whether a holder id is an operator change's (ChangeHoldID), and
// returns the change id.
func IsChangeHold(holder string) (changeID string, ok bool) {
	if len(holder) > 1 && holder[0] == '~' {
		return holder[1:], true
	}
	return "", false
}

// StageChange holds an operator's change of sku's on_hand by delta while Postgres records it
// (see stage_change.lua), and writes maxPerOrder. changeID starts with 'i' for an increase
// and 'd' for a decrease. It returns the units held for the change.
// After Postgres took the change, finish it: Commit (delta < 0) or Release (delta > 0) the
// hold ChangeHoldID(changeID); after Postgres refused it, undo it: Release (delta < 0) or
// Forfeit (delta > 0). It refuses with *InsufficientStockError when a decrease exceeds the
// units not held, ErrNotStocked (rebuild from Postgres first) and ErrRolledBack.
func (s *Stock) StageChange(ctx context.Context, sku, changeID string, delta, maxPerOrder int64) (held int64, err error) {
	holder := ChangeHoldID(changeID)
	c := call{op: opStage, sku: sku, checkoutID: holder, delta: delta, maxPerOrder: maxPerOrder}
	if err := c.validate(); err != nil {
		return 0, err
	}
	if delta > 0 && changeID[0] != 'i' || delta < 0 && changeID[0] != 'd' {
		return 0, c.argError("change id", changeID, "must start with i for an increase and d for a decrease: reconcile.lua reads the direction from it")
	}
	r, err := s.run(ctx, stageChangeScript, c,
		[]string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)},
		holder, delta, maxPerOrder, s.gens.seen(sku))
	if err != nil {
		return 0, err
	}
	switch r.code { // stage_change.lua's header
	case codeOK, codeAlreadyHeld:
		return r.value, nil
	case codeNotStocked:
		return 0, c.holdError(ErrNotStocked)
	case codeHoldEnded:
		return 0, c.holdError(ErrHoldEnded)
	case codeOutOfStock:
		return 0, &InsufficientStockError{SKU: sku, Delta: delta, Available: r.value}
	}
	return 0, c.unexpected(r)
}

// SetStock loads sku's on-hand count and per-order limit as an absolute value (benchmarks
// and tests; operators' changes go through StageChange). Live holds are kept: available
// becomes onHand - held. It fails with shop.ErrOnHandBelowHeld, changing nothing, when
// onHand < held.
func (s *Stock) SetStock(ctx context.Context, sku string, onHand, maxPerOrder int64) (Level, error) {
	c := call{op: opSetStock, sku: sku, onHand: onHand, maxPerOrder: maxPerOrder}
	if err := c.validate(); err != nil {
		return Level{}, err
	}
	r, err := s.run(ctx, setStockScript, c,
		[]string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)},
		onHand, maxPerOrder)
	if err != nil {
		return Level{}, err
	}
	if r.code == codeOnHandBelowHeld { // set_stock.lua's header
		return Level{}, &OnHandBelowHeldError{SKU: sku, OnHand: onHand, Held: r.value}
	}
	if r.code != codeOK {
		return Level{}, c.unexpected(r)
	}
	return Level{Available: r.value, Held: r.extra, MaxPerOrder: maxPerOrder, Stocked: true, Gen: r.gen}, nil
}
