package lua

import (
	"context"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Resyncing a SKU from Postgres: Rebuild when Redis lost it, Reconcile when its counters or
// holds drifted (a restart from an older snapshot, a failover, a lost release).

// UnsoldHoldID names, among the settled holders Rebuild and Reconcile take, a checkout that
// ended without a sale in Postgres while Redis still holds for it (its release was lost, as
// in a failover to a lagging replica): its hold is released, not committed. The "!" cannot
// start a checkout id (shop.ValidID).
func UnsoldHoldID(checkoutID string) string { return "!" + checkoutID }

// Hold is one checkout's hold of a SKU, as Postgres knows it.
type Hold struct {
	CheckoutID string
	Quantity   int64
}

// Rebuild restores a SKU that Redis lost (see rebuild.lua): on_hand and max_per_order from
// Postgres, and every open checkout as a hold. settled names the holders whose end
// Postgres already recorded (see Reconcile). Its gen starts above genFloor and above
// every gen this Stock has seen. It changes nothing and reports rebuilt=false when the SKU
// is stocked in Redis (another caller rebuilt it first). Call it while on_hand cannot
// change (the caller holds the SKU's row lock).
func (s *Stock) Rebuild(ctx context.Context, sku string, onHand, maxPerOrder int64, open []Hold, settled []string, genFloor int64) (Level, bool, error) {
	c := call{op: opRebuild, sku: sku, onHand: onHand, maxPerOrder: maxPerOrder}
	if err := c.validate(); err != nil {
		return Level{}, false, err
	}
	args := []any{onHand, maxPerOrder, max(genFloor, s.gens.seen(sku))}
	args = settledHolds(settled, s.tombstoneTTL, args)
	args, err := c.openHolds(open, args)
	if err != nil {
		return Level{}, false, err
	}
	keys := []string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)}
	r, err := s.run(ctx, rebuildScript, c, keys, args...)
	if err != nil {
		return Level{}, false, err
	}
	if r.code != codeOK && r.code != codeAlreadyStocked { // rebuild.lua's header
		return Level{}, false, c.unexpected(r)
	}
	return Level{Available: r.value, Held: r.extra, MaxPerOrder: maxPerOrder, Stocked: true, Gen: r.gen}, r.code == codeOK, nil
}

// settledHolds appends the tombstone TTL and the settled holders.
func settledHolds(settled []string, ttl int64, args []any) []any {
	args = append(args, ttl, len(settled))
	for _, h := range settled {
		args = append(args, h)
	}
	return args
}

// openHolds appends each open checkout's id and quantity to args.
func (c call) openHolds(open []Hold, args []any) ([]any, error) {
	for _, h := range open {
		if !shop.ValidID(h.CheckoutID) || h.Quantity < 1 || h.Quantity > maxQuantity {
			return nil, c.argError("open hold", h.CheckoutID, "needs a valid checkout id and a quantity of 1 to 1000000")
		}
		args = append(args, h.CheckoutID, h.Quantity)
	}
	return args, nil
}

// Reconciled is what Reconcile found and wrote.
type Reconciled struct {
	// Stocked is false when Redis does not have the SKU at all (Rebuild's job); nothing
	// else is set then.
	Stocked bool
	// Before and After are available before and after.
	Before, After int64
	// Restored counts the open checkouts that had neither a hold nor a tombstone and got a
	// placeholder hold.
	Restored int64
	// RolledBack: Redis's gen was below genFloor, so it went back in time.
	RolledBack bool
	// OtherNode: the SKU was last resynced on another Redis node (a restart, a failover), so
	// Redis may have come back with older data.
	OtherNode bool
	Gen       int64
}

// Reconcile repairs a SKU's counters from Postgres (see reconcile.lua): every open checkout
// without a hold or tombstone gets a placeholder hold, held is recounted and available set to
// onHand - held. settled names the live holds whose end Postgres already recorded (the
// checkouts whose order is confirmed, the operator changes written to on_hand, by
// ChangeHoldID): Redis ends them as their owners will, instead of counting their units
// against on_hand a second time. Call it while on_hand cannot change (the caller holds the
// SKU's row lock). Its gen ends above genFloor and above every gen this Stock has seen.
// A settled UnsoldHoldID(checkout) is released instead.
func (s *Stock) Reconcile(ctx context.Context, sku string, onHand int64, open []Hold, settled []string, genFloor int64) (Reconciled, error) {
	c := call{op: opReconcile, sku: sku, onHand: onHand, maxPerOrder: 1}
	if err := c.validate(); err != nil {
		return Reconciled{}, err
	}
	args := []any{onHand, max(genFloor, s.gens.seen(sku))}
	args = settledHolds(settled, s.tombstoneTTL, args)
	args, err := c.openHolds(open, args)
	if err != nil {
		return Reconciled{}, err
	}
	keys := []string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)}
	r, err := s.run(ctx, reconcileScript, c, keys, args...)
	switch {
	case err != nil:
		return Reconciled{}, err
	case r.code == codeNotStocked: // reconcile.lua's header: nothing to reconcile
		return Reconciled{}, nil
	case r.code != codeOK:
		return Reconciled{}, c.unexpected(r)
	}
	return Reconciled{Stocked: true, Before: r.value, After: r.extra, Gen: r.gen, Restored: r.more[0], RolledBack: r.more[1] == 1, OtherNode: r.more[1] == 2}, nil
}
