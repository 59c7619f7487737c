package lua

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTombstoneTTL is how long a hold-end tombstone refuses late
// reserves and recognises repeated releases and commits. It must outlast
// every retry of a stock activity; a week is far beyond any retry policy
// the saga uses, and a tombstone costs a few dozen bytes.
const DefaultTombstoneTTL = 7 * 24 * time.Hour

// maxTombstoneTTL bounds the TTL so it fits the scripts' ARGV check.
const maxTombstoneTTL = 315_360_000 * time.Second // ten years

// Client is the part of go-redis this package needs: scripts, plus HMGET
// for Level and a pipeline for Precheck. *redis.Client, *redis.ClusterClient
// and *redis.Ring satisfy it.
type Client interface {
	redis.Scripter
	HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	HGet(ctx context.Context, key, field string) *redis.StringCmd
	HScan(ctx context.Context, key string, cursor uint64, match string, count int64) *redis.ScanCmd
	Pipeline() redis.Pipeliner
}

// Stock holds, releases and commits units of SKUs in Redis. It is safe for
// concurrent use.
type Stock struct {
	rdb          Client
	tombstoneTTL int64 // seconds
	gens         *gens // shared by copies (WithTombstoneTTL)
}

// New returns a Stock on rdb whose tombstones live DefaultTombstoneTTL.
func New(rdb Client) *Stock {
	return &Stock{rdb: rdb, tombstoneTTL: ttlSeconds(DefaultTombstoneTTL), gens: &gens{}}
}

// gens is the highest gen this process has seen of each SKU. Every script that changes a
// SKU bumps its gen in Redis (stock:{sku}.gen), so gen only grows; the hold scripts refuse
// with ErrRolledBack when Redis shows a lower gen than one seen here, which means Redis went
// back in time (a restart from an older snapshot, a failover to a lagging replica) and may
// have lost holds. The caller then resyncs the SKU from Postgres before any unit moves.
type gens struct{ m sync.Map } // sku -> int64

func (g *gens) seen(sku string) int64 {
	if v, ok := g.m.Load(sku); ok {
		return v.(int64)
	}
	return 0
}

// observe raises the SKU's gen to gen; it never lowers it.
func (g *gens) observe(sku string, gen int64) {
	for {
		v, loaded := g.m.LoadOrStore(sku, gen)
		if !loaded {
			return
		}
		if v.(int64) >= gen || g.m.CompareAndSwap(sku, v, gen) {
			return
		}
	}
}

// SeenGen is the highest gen of sku this Stock has seen (0: none), for resyncs that must
// start above it.
func (s *Stock) SeenGen(sku string) int64 { return s.gens.seen(sku) }

// WithTombstoneTTL returns a copy of s whose tombstones live d, rounded up
// to whole seconds and kept within 1 second to 10 years.
func (s *Stock) WithTombstoneTTL(d time.Duration) *Stock {
	c := *s
	c.tombstoneTTL = ttlSeconds(d)
	return &c
}

func ttlSeconds(d time.Duration) int64 {
	d = min(max(d, time.Second), maxTombstoneTTL)
	return int64((d + time.Second - 1) / time.Second)
}

// Level is a SKU's stock as Redis sees it. Stocked is false when the SKU was
// never loaded with SetStock; the numbers are then zero.
type Level struct {
	Available, Held, MaxPerOrder int64
	Stocked                      bool
	// Gen counts the SKU's changes in Redis (see gens).
	Gen int64
}

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

// ChangeHoldID is the holder id under which stage_change.lua holds an operator's change of
// on_hand. The "~" cannot start a checkout id (ValidID), so the two never collide; Release,
// Commit and Forfeit accept it to finish or undo the change.
func ChangeHoldID(changeID string) string { return "~" + changeID }

// UnsoldHoldID names, among the settled holders Rebuild and Reconcile take, a checkout that
// ended without a sale in Postgres while Redis still holds for it (its release was lost, as
// in a failover to a lagging replica): its hold is released, not committed. The "!" cannot
// start a checkout id (ValidID).
func UnsoldHoldID(checkoutID string) string { return "!" + checkoutID }

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
// becomes onHand - held. It fails with ErrOnHandBelowHeld, changing nothing, when
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
		if !ValidID(h.CheckoutID) || h.Quantity < 1 || h.Quantity > maxQuantity {
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

// HoldEnd reads holder's hold-end marker on sku: outcome "released", "committed" or
// "rebuilt", or "" when there is none, and when the sweep may delete it (zero for "rebuilt").
func (s *Stock) HoldEnd(ctx context.Context, sku, holder string) (outcome string, expires time.Time, err error) {
	v, err := s.rdb.HGet(ctx, HoldEndsKey(sku), holder).Result()
	if errors.Is(err, redis.Nil) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the hold end of %s on %s: %w", holder, sku, err)
	}
	outcome, at, _ := strings.Cut(v, ":")
	if at == "" {
		return outcome, time.Time{}, nil
	}
	sec, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read the hold end of %s on %s: marker %q: %w", holder, sku, v, err)
	}
	return outcome, time.Unix(sec, 0), nil
}

// sweepBatch is how many markers one sweep script judges: a short script, so Redis keeps
// answering reserves in between.
const sweepBatch = 500

// SweepHoldEnds deletes sku's hold-end markers whose time is up and returns how many it
// deleted. Redis 7.0 has no per-field TTL, so the reconciler calls this for every SKU. It
// reads the markers with HSCAN and lets sweep.lua judge each expired one again on Redis's
// clock, in batches of sweepBatch.
func (s *Stock) SweepHoldEnds(ctx context.Context, sku string) (int64, error) {
	c := call{op: opSweep, sku: sku}
	if err := c.validate(); err != nil {
		return 0, err
	}
	var swept int64
	var batch []any
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := s.run(ctx, sweepScript, c, []string{HoldEndsKey(sku)}, batch...)
		batch = batch[:0]
		if err == nil && r.code != codeOK {
			err = c.unexpected(r)
		}
		swept += r.value
		return err
	}
	now := time.Now().Unix()
	iter := s.rdb.HScan(ctx, HoldEndsKey(sku), 0, "", sweepBatch).Iterator()
	for iter.Next(ctx) {
		holder := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		_, at, _ := strings.Cut(iter.Val(), ":")
		if sec, err := strconv.ParseInt(at, 10, 64); err != nil || sec > now {
			continue
		}
		if batch = append(batch, holder); len(batch) == sweepBatch {
			if err := flush(); err != nil {
				return swept, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return swept, fmt.Errorf("%s: hscan: %w", c, err)
	}
	return swept, flush()
}

// Holds lists a SKU's live holds.
func (s *Stock) Holds(ctx context.Context, sku string) ([]Hold, error) {
	c := call{op: opLevel, sku: sku}
	if err := c.validate(); err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, HoldsKey(sku)).Result()
	if err != nil {
		return nil, fmt.Errorf("list holds of %s: %w", sku, err)
	}
	holds := make([]Hold, 0, len(m))
	for id, q := range m {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("list holds of %s: hold of %s is %q: %w", sku, id, q, err)
		}
		holds = append(holds, Hold{CheckoutID: id, Quantity: n})
	}
	return holds, nil
}

// Level reads sku's stock with a plain HMGET. The three fields are read in
// one command, so they are consistent with each other.
func (s *Stock) Level(ctx context.Context, sku string) (Level, error) {
	c := call{op: opLevel, sku: sku}
	if err := c.validate(); err != nil {
		return Level{}, err
	}
	vals, err := s.rdb.HMGet(ctx, StockKey(sku), "available", "held", "max_per_order", "gen").Result()
	if err != nil {
		return Level{}, fmt.Errorf("%s: hmget: %w", c, err)
	}
	var nums [4]int64
	var l Level
	for i, v := range vals {
		if v == nil {
			continue
		}
		l.Stocked = l.Stocked || i < 3
		str, ok := v.(string)
		if !ok {
			return Level{}, fmt.Errorf("%s: unexpected %T in stock hash", c, v)
		}
		n, err := strconv.ParseInt(str, 10, 64)
		if err != nil {
			return Level{}, fmt.Errorf("%s: parse stock hash: %w", c, err)
		}
		nums[i] = n
	}
	l.Available, l.Held, l.MaxPerOrder, l.Gen = nums[0], nums[1], nums[2], nums[3]
	return l, nil
}

// Preload loads every script into the script cache of the server, or of every node of a
// cluster (go-redis' ClusterClient.ScriptLoad), so the first calls run by EVALSHA. The
// product calls it at start; a NOSCRIPT answer later (a failover, a restarted node) calls
// it again.
func (s *Stock) Preload(ctx context.Context) error {
	for _, sc := range allScripts {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return fmt.Errorf("preload %s script: %w", sc.name, err)
		}
	}
	return nil
}

// eval runs sc by EVALSHA, never inside a pipeline: there go-redis cannot fall back from
// NOSCRIPT. NOSCRIPT means a node lost its script cache (a restart, a failover to a replica
// that never loaded the scripts, SCRIPT FLUSH), so every script is loaded again on every
// node (Preload), not only this one, and the call runs again; Run still falls back to EVAL
// should the slot have moved to yet another node meanwhile.
func (s *Stock) eval(ctx context.Context, sc script, keys []string, args ...any) *redis.Cmd {
	cmd := sc.EvalSha(ctx, s.rdb, keys, args...)
	if !errors.Is(cmd.Err(), redis.ErrNoScript) && !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return cmd
	}
	_ = s.Preload(ctx) // on failure Run falls back to EVAL, and the next NOSCRIPT tries again
	return sc.Run(ctx, s.rdb, keys, args...)
}

// run runs sc and returns its reply, or the error of a reply every script shares (see
// call.shared); the caller maps the rest. Every reply's fourth value is the SKU's
// gen, which this Stock remembers (see gens).
func (s *Stock) run(ctx context.Context, sc script, c call, keys []string, args ...any) (reply, error) {
	vals, err := s.eval(ctx, sc, keys, args...).Int64Slice()
	if err != nil {
		return reply{}, fmt.Errorf("%s: run %s script: %w", c, sc.name, err)
	}
	want := 4
	if sc.name == reconcileScript.name {
		want = 6
	}
	if len(vals) != want {
		return reply{}, fmt.Errorf("%s: %s script returned %d values, want %d", c, sc.name, len(vals), want)
	}
	r := reply{code: vals[0], value: vals[1], extra: vals[2], gen: vals[3], more: vals[4:]}
	if r.code != codeRolledBack && r.code != codeInvalidArgument {
		s.gens.observe(c.sku, r.gen)
	}
	return r, c.shared(r)
}

// op names a Stock operation, for messages and for reading return codes.
type op int

const (
	opReserve op = iota + 1
	opRelease
	opCommit
	opSetStock
	opLevel
	opRebuild
	opReconcile
	opForfeit
	opStage
	opSweep
)

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
