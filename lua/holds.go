package lua

import "context"

// A checkout's hold of a SKU: taken once (Reserve), ended once (Release, Commit, Forfeit).

// ReserveResult is a successful reserve. Held is the quantity this checkout
// holds; when AlreadyHeld is true the hold existed before this call (a
// retry) and Held is the quantity held then, even if this call asked for a
// different one. Available is the SKU's available count after the call.
type ReserveResult struct {
	Held        int64
	Available   int64
	AlreadyHeld bool
}

// Reserve holds quantity units of sku for checkoutID, at most once per
// checkout: a repeated reserve returns the existing hold. It refuses with
// ErrNotStocked, ErrHoldEnded (the hold was already released or committed),
// ErrOverLimit, ErrOutOfStock or ErrRolledBack, changing nothing.
func (s *Stock) Reserve(ctx context.Context, sku, checkoutID string, quantity int64) (ReserveResult, error) {
	c := call{op: opReserve, sku: sku, checkoutID: checkoutID, quantity: quantity}
	if err := c.validate(); err != nil {
		return ReserveResult{}, err
	}
	r, err := s.run(ctx, reserveScript, c,
		[]string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)},
		checkoutID, quantity, s.gens.seen(sku))
	if err != nil {
		return ReserveResult{}, err
	}
	switch r.code { // reserve.lua's header
	case codeOK, codeAlreadyHeld:
		return ReserveResult{Held: r.value, Available: r.extra, AlreadyHeld: r.code == codeAlreadyHeld}, nil
	case codeNotStocked:
		return ReserveResult{}, c.holdError(ErrNotStocked)
	case codeHoldEnded:
		outcome := "released"
		if r.value == 2 {
			outcome = "committed"
		}
		return ReserveResult{}, &HoldEndedError{SKU: sku, CheckoutID: checkoutID, Requested: quantity, Outcome: outcome}
	case codeOverLimit:
		return ReserveResult{}, &OverLimitError{SKU: sku, CheckoutID: checkoutID, Requested: quantity, MaxPerOrder: r.value}
	case codeOutOfStock:
		return ReserveResult{}, &OutOfStockError{SKU: sku, CheckoutID: checkoutID, Requested: quantity, Available: r.value}
	}
	return ReserveResult{}, c.unexpected(r)
}

// Release returns checkoutID's held units of sku to available and records
// that the hold ended, so a later Reserve for the checkout is refused. It
// returns the units released: 0 with a nil error when nothing was held or
// the hold was already released. Releasing a committed hold fails with
// ErrHoldCommitted; a Redis that went back in time, with ErrRolledBack.
func (s *Stock) Release(ctx context.Context, sku, checkoutID string) (released int64, err error) {
	return s.endHold(ctx, opRelease, releaseScript, sku, checkoutID, releaseCodes)
}

// releaseCodes maps release.lua's and forfeit.lua's refusals and no-ops (their headers).
func releaseCodes(c call, r reply) error {
	switch r.code {
	case codeAlreadyReleased, codeNoHold:
		return nil // a retried release; or nothing held, and the tombstone is written
	case codeAlreadyCommitted:
		return c.holdError(ErrHoldCommitted)
	}
	return c.unexpected(r)
}

// commitCodes maps commit.lua's refusals and no-ops (its header).
func commitCodes(c call, r reply) error {
	switch r.code {
	case codeAlreadyCommitted:
		return nil // a retried commit
	case codeAlreadyReleased:
		return c.holdError(ErrHoldReleased)
	case codeNoHold:
		return c.holdError(ErrNoHold)
	}
	return c.unexpected(r)
}

// Commit turns checkoutID's hold on sku into a sale: held drops by the
// quantity and available stays as it is (the caller decrements on_hand in
// Postgres). It returns the units committed, or 0 with a nil error when the
// hold was already committed. It fails with ErrHoldReleased after a release,
// ErrNoHold when the checkout holds nothing, and ErrRolledBack.
func (s *Stock) Commit(ctx context.Context, sku, checkoutID string) (committed int64, err error) {
	return s.endHold(ctx, opCommit, commitScript, sku, checkoutID, commitCodes)
}

// Forfeit ends checkoutID's hold on sku without giving its units back to available: for a
// hold whose units Postgres no longer has (see forfeit.lua). Like Release it returns the
// units, 0 with a nil error when nothing was held or the hold already ended without a sale,
// ErrHoldCommitted after a commit, and ErrRolledBack.
func (s *Stock) Forfeit(ctx context.Context, sku, checkoutID string) (forfeited int64, err error) {
	return s.endHold(ctx, opForfeit, forfeitScript, sku, checkoutID, releaseCodes)
}

// endHold runs a script that ends a hold; OK is the units, codes maps every other code.
func (s *Stock) endHold(ctx context.Context, o op, sc script, sku, holder string, codes func(call, reply) error) (int64, error) {
	c := call{op: o, sku: sku, checkoutID: holder}
	if err := c.validate(); err != nil {
		return 0, err
	}
	r, err := s.run(ctx, sc, c,
		[]string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)},
		holder, s.tombstoneTTL, s.gens.seen(sku))
	if err != nil {
		return 0, err
	}
	if r.code != codeOK {
		return 0, codes(c, r)
	}
	return r.value, nil
}
