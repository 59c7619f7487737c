package lua

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

func TestReserveHoldsOnlyWhatIsAvailableAndAllowed(t *testing.T) {
	tests := []struct {
		name          string
		onHand        int64
		quantity      int64
		wantErr       error
		wantAvailable int64 // after the call
		wantHeld      int64
	}{
		{name: "one unit", onHand: 3, quantity: 1, wantAvailable: 2, wantHeld: 1},
		{name: "max per order", onHand: 3, quantity: 2, wantAvailable: 1, wantHeld: 2},
		{name: "the last units", onHand: 2, quantity: 2, wantAvailable: 0, wantHeld: 2},
		{name: "over max per order changes nothing", onHand: 3, quantity: 3, wantErr: ErrOverLimit, wantAvailable: 3},
		{name: "out of stock changes nothing", onHand: 1, quantity: 2, wantErr: ErrOutOfStock, wantAvailable: 1},
		{name: "nothing left", onHand: 0, quantity: 1, wantErr: ErrOutOfStock, wantAvailable: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, rdb, sku := stocked(t, tt.onHand, 2)
			res, err := s.Reserve(t.Context(), sku, "c-1", tt.quantity)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("reserve: err = %v, want %v", err, tt.wantErr)
			}
			if err == nil && (res.Held != tt.wantHeld || res.Available != tt.wantAvailable || res.AlreadyHeld) {
				t.Errorf("reserve = %+v, want held %d available %d", res, tt.wantHeld, tt.wantAvailable)
			}
			holds := 0
			if tt.wantHeld > 0 {
				holds = 1
			}
			assertLevel(t, s, rdb, sku, tt.wantAvailable, tt.wantHeld, holds)
		})
	}
}

func TestReserveOverLimitCarriesLimit(t *testing.T) {
	s, rdb, sku := stocked(t, 10, 2)
	_, err := s.Reserve(t.Context(), sku, "c-1", 3)
	var over *OverLimitError
	if !errors.As(err, &over) || over.MaxPerOrder != 2 || over.Requested != 3 || over.SKU != sku {
		t.Fatalf("reserve 3 over a limit of 2: err = %#v, want *OverLimitError{MaxPerOrder: 2, Requested: 3}", err)
	}
	want := fmt.Sprintf("reserve 3 x %s for checkout c-1: over the per-order limit (at most 2)", sku)
	if err.Error() != want {
		t.Errorf("error text = %q, want %q", err.Error(), want)
	}
	assertLevel(t, s, rdb, sku, 10, 0, 0)
}

func TestReserveOutOfStockChangesNothing(t *testing.T) {
	s, rdb, sku := reserved(t, 3, 2, "c-1", 2)
	ctx := t.Context()
	_, err := s.Reserve(ctx, sku, "c-123", 2)
	var out *OutOfStockError
	if !errors.As(err, &out) || !errors.Is(err, ErrOutOfStock) || out.Available != 1 || out.Requested != 2 {
		t.Fatalf("reserve 2 with 1 left: err = %#v, want *OutOfStockError{Available: 1, Requested: 2}", err)
	}
	want := fmt.Sprintf("reserve 2 x %s for checkout c-123: out of stock (1 available)", sku)
	if err.Error() != want {
		t.Errorf("error text = %q, want %q", err.Error(), want)
	}
	assertLevel(t, s, rdb, sku, 1, 2, 1)
	if ended, _ := rdb.HExists(ctx, HoldEndsKey(sku), "c-123").Result(); ended {
		t.Errorf("out of stock wrote a tombstone for c-123")
	}
}

func TestReserveNeverStocked(t *testing.T) {
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	s := New(rdb)
	_, err := s.Reserve(t.Context(), sku, "c-1", 1)
	var hold *HoldError
	if !errors.Is(err, ErrNotStocked) || !errors.As(err, &hold) {
		t.Fatalf("reserve on a never-stocked SKU: err = %v, want a *HoldError wrapping ErrNotStocked", err)
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		t.Errorf("never-stocked SKU surfaced as a Redis error: %v", err)
	}
	l, err := s.Level(t.Context(), sku)
	if err != nil || l.Stocked || l != (Level{}) {
		t.Errorf("level = %+v, %v; want zero and not stocked", l, err)
	}
	if n, _ := rdb.Exists(t.Context(), StockKey(sku), HoldsKey(sku)).Result(); n != 0 {
		t.Errorf("reserve on a never-stocked SKU created %d keys", n)
	}
}

func TestReserveTwiceHoldsOnce(t *testing.T) {
	s, rdb, sku := stocked(t, 10, 5)
	ctx := t.Context()
	first, err := s.Reserve(ctx, sku, "c-1", 3)
	if err != nil {
		t.Fatalf("first reserve: %v", err)
	}
	if first.AlreadyHeld || first.Held != 3 || first.Available != 7 {
		t.Errorf("first reserve = %+v, want held 3 available 7", first)
	}
	// A retry, even one asking for another quantity, reports the hold it finds.
	for _, q := range []int64{3, 1} {
		again, err := s.Reserve(ctx, sku, "c-1", q)
		if err != nil {
			t.Fatalf("repeated reserve of %d: %v", q, err)
		}
		if !again.AlreadyHeld || again.Held != 3 || again.Available != 7 {
			t.Errorf("repeated reserve of %d = %+v, want already held 3, available 7", q, again)
		}
	}
	assertLevel(t, s, rdb, sku, 7, 3, 1)
}

// endHold is Stock.Release or Stock.Commit.
type endHold func(s *Stock, ctx context.Context, sku, checkoutID string) (int64, error)

// Ending a hold twice moves its units once: a release gives them back to available, a commit
// sells them (available is untouched; on_hand in Postgres drops with the order, so
// available + held == on_hand still holds). The second call ends nothing and answers 0.
func TestEndingAHoldTwiceMovesItsUnitsOnce(t *testing.T) {
	for _, tt := range []struct {
		name          string
		end           endHold
		wantAvailable int64
	}{
		{"release", (*Stock).Release, 10},
		{"commit", (*Stock).Commit, 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, rdb, sku := reserved(t, 10, 5, "c-1", 3)
			for i, want := range []int64{3, 0} {
				if n, err := tt.end(s, t.Context(), sku, "c-1"); err != nil || n != want {
					t.Fatalf("%s #%d = %d, %v; want %d, nil", tt.name, i+1, n, err, want)
				}
				assertLevel(t, s, rdb, sku, tt.wantAvailable, 0, 0)
			}
		})
	}
}

func TestReleaseBeforeReserveRefusesReserve(t *testing.T) {
	t.Run("stocked", func(t *testing.T) {
		s, rdb, sku := stocked(t, 10, 5)
		ctx := t.Context()
		n, err := s.Release(ctx, sku, "c-1")
		if err != nil || n != 0 {
			t.Fatalf("release with no hold = %d, %v; want 0, nil", n, err)
		}
		_, err = s.Reserve(ctx, sku, "c-1", 2)
		var ended *HoldEndedError
		if !errors.As(err, &ended) || !errors.Is(err, ErrHoldEnded) || ended.Outcome != "released" {
			t.Fatalf("late reserve: err = %v, want *HoldEndedError{Outcome: released}", err)
		}
		assertLevel(t, s, rdb, sku, 10, 0, 0)
		// Other checkouts are unaffected.
		if _, err := s.Reserve(ctx, sku, "c-2", 2); err != nil {
			t.Errorf("reserve for another checkout: %v", err)
		}
	})
	t.Run("not yet stocked", func(t *testing.T) {
		rdb := testClient(t)
		sku := testSKU(t, rdb)
		s := New(rdb)
		ctx := t.Context()
		n, err := s.Release(ctx, sku, "c-1")
		if err != nil || n != 0 {
			t.Fatalf("release on an unstocked SKU = %d, %v; want 0, nil", n, err)
		}
		if got, _ := rdb.HGet(ctx, HoldEndsKey(sku), "c-1").Result(); HoldEndOutcome(got) != "released" {
			t.Fatalf("tombstone = %q, want released", got)
		}
		if exists, _ := rdb.Exists(ctx, StockKey(sku)).Result(); exists != 0 {
			t.Fatalf("release created the stock hash of an unstocked SKU")
		}
		if _, err := s.SetStock(ctx, sku, 5, 5); err != nil {
			t.Fatalf("set stock: %v", err)
		}
		if _, err := s.Reserve(ctx, sku, "c-1", 1); !errors.Is(err, ErrHoldEnded) {
			t.Fatalf("late reserve: err = %v, want ErrHoldEnded", err)
		}
		assertLevel(t, s, rdb, sku, 5, 0, 0)
	})
}

// A committed hold is a sale: the checkout cannot reserve again (the commit twice is in
// TestEndingAHoldTwiceMovesItsUnitsOnce).
func TestCommitTurnsAHoldIntoASale(t *testing.T) {
	s, rdb, sku := reserved(t, 10, 5, "c-1", 3)
	ctx := t.Context()
	if n, err := s.Commit(ctx, sku, "c-1"); err != nil || n != 3 {
		t.Fatalf("commit = %d, %v; want 3, nil", n, err)
	}
	_, err := s.Reserve(ctx, sku, "c-1", 3)
	var ended *HoldEndedError
	if !errors.As(err, &ended) || ended.Outcome != "committed" {
		t.Fatalf("reserve after commit: err = %v, want *HoldEndedError{Outcome: committed}", err)
	}
	assertLevel(t, s, rdb, sku, 7, 0, 0)
}

// A hold ends once: a released hold cannot be committed, and a committed one cannot be
// released (its sold units must not come back to available). The refusal says which end came
// first, and nothing moves.
func TestEndingAHoldTheOtherWayIsRefused(t *testing.T) {
	for _, tt := range []struct {
		name          string
		first, then   endHold
		want, notWant error
		wantText      string // with the SKU for %s
		wantAvailable int64
	}{
		{"commit after release", (*Stock).Release, (*Stock).Commit, ErrHoldReleased, ErrHoldCommitted, "commit %s for checkout c-1: hold already released", 10},
		{"release after commit", (*Stock).Commit, (*Stock).Release, ErrHoldCommitted, ErrHoldReleased, "release %s for checkout c-1: hold already committed", 7},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, rdb, sku := reserved(t, 10, 5, "c-1", 3)
			if _, err := tt.first(s, t.Context(), sku, "c-1"); err != nil {
				t.Fatalf("first end: %v", err)
			}
			n, err := tt.then(s, t.Context(), sku, "c-1")
			if !errors.Is(err, tt.want) || errors.Is(err, tt.notWant) || n != 0 {
				t.Fatalf("%s = %d, %v; want 0, %v", tt.name, n, err, tt.want)
			}
			if want := fmt.Sprintf(tt.wantText, sku); err.Error() != want {
				t.Errorf("error text = %q, want %q", err.Error(), want)
			}
			assertLevel(t, s, rdb, sku, tt.wantAvailable, 0, 0)
		})
	}
}

func TestCommitWithoutAHoldIsRefusedAndEndsNothing(t *testing.T) {
	s, rdb, sku := stocked(t, 10, 5)
	ctx := t.Context()
	n, err := s.Commit(ctx, sku, "c-1")
	if !errors.Is(err, ErrNoHold) || n != 0 {
		t.Fatalf("commit with no hold = %d, %v; want 0, ErrNoHold", n, err)
	}
	if ended, _ := rdb.HExists(ctx, HoldEndsKey(sku), "c-1").Result(); ended {
		t.Errorf("commit with no hold wrote a tombstone")
	}
	// The checkout can still reserve: a failed commit ends nothing.
	if _, err := s.Reserve(ctx, sku, "c-1", 1); err != nil {
		t.Errorf("reserve after a refused commit: %v", err)
	}
	assertLevel(t, s, rdb, sku, 9, 1, 1)
}

func TestHoldEndMarkersLastTheirTTL(t *testing.T) {
	s, _, sku := stocked(t, 10, 5)
	ctx := t.Context()
	short := s.WithTombstoneTTL(90 * time.Second)
	if _, err := short.Release(ctx, sku, "c-1"); err != nil {
		t.Fatalf("release: %v", err)
	}
	outcome, expires, err := s.HoldEnd(ctx, sku, "c-1")
	if ttl := time.Until(expires); err != nil || outcome != "released" || ttl <= 0 || ttl > 91*time.Second {
		t.Errorf("tombstone = %q, expires in %v, %v; want released within (0, 90s]", outcome, ttl, err)
	}
	// The original keeps the default.
	if _, err := s.Release(ctx, sku, "c-2"); err != nil {
		t.Fatalf("release: %v", err)
	}
	_, expires, err = s.HoldEnd(ctx, sku, "c-2")
	if ttl := time.Until(expires); err != nil || ttl <= DefaultTombstoneTTL-time.Minute || ttl > DefaultTombstoneTTL+time.Second {
		t.Errorf("default tombstone TTL = %v, %v; want about %v", ttl, err, DefaultTombstoneTTL)
	}
}

func TestSetStockKeepsLiveHoldsAndRefusesBelowThem(t *testing.T) {
	s, rdb, sku := reserved(t, 10, 5, "c-1", 4)
	ctx := t.Context()
	if _, err := s.Reserve(ctx, sku, "c-2", 2); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	for _, onHand := range []int64{6, 20, 8} {
		l, err := s.SetStock(ctx, sku, onHand, 3)
		if err != nil {
			t.Fatalf("set stock to %d: %v", onHand, err)
		}
		if l.Available+l.Held != onHand || l.Held != 6 || l.MaxPerOrder != 3 || !l.Stocked {
			t.Errorf("set stock to %d = %+v, want available+held == on_hand and held 6", onHand, l)
		}
		if got, err := s.Level(ctx, sku); err != nil || got != l {
			t.Errorf("level after set stock = %+v, %v; want %+v", got, err, l)
		}
		assertLevel(t, s, rdb, sku, onHand-6, 6, 2)
	}

	before, _ := s.Level(ctx, sku)
	l, err := s.SetStock(ctx, sku, 5, 3)
	l.Gen = before.Gen // a refusal changes nothing, gen included
	var below *OnHandBelowHeldError
	if !errors.As(err, &below) || !errors.Is(err, shop.ErrOnHandBelowHeld) || below.Held != 6 || below.OnHand != 5 {
		t.Fatalf("set stock below held = %+v, %v; want *OnHandBelowHeldError{Held: 6}", l, err)
	}
	want := fmt.Sprintf("set stock of %s to 5 on hand: on hand below held (6 held)", sku)
	if err.Error() != want {
		t.Errorf("error text = %q, want %q", err.Error(), want)
	}
	// Unchanged, max_per_order included.
	got, err := s.Level(ctx, sku)
	if err != nil || got != (Level{Available: 2, Held: 6, MaxPerOrder: 3, Stocked: true, Gen: l.Gen}) {
		t.Errorf("level after refused set stock = %+v, %v", got, err)
	}

	// Releasing after a reload returns the units to the reloaded available.
	if n, err := s.Release(ctx, sku, "c-1"); err != nil || n != 4 {
		t.Fatalf("release = %d, %v", n, err)
	}
	assertLevel(t, s, rdb, sku, 6, 2, 1)
}

func TestSetStockCountsHoldsWhenHeldFieldIsMissing(t *testing.T) {
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	s := New(rdb)
	ctx := t.Context()
	if err := rdb.HSet(ctx, HoldsKey(sku), "c-1", 3, "c-2", 1).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := s.SetStock(ctx, sku, 10, 5)
	if err != nil || l.Available != 6 || l.Held != 4 {
		t.Fatalf("set stock = %+v, %v; want available 6 held 4", l, err)
	}
	if _, err := s.SetStock(ctx, sku, 3, 5); !errors.Is(err, shop.ErrOnHandBelowHeld) {
		t.Errorf("set stock below held: err = %v, want ErrOnHandBelowHeld", err)
	}
}

func TestInvalidArgumentsDoNotTouchRedis(t *testing.T) {
	log := &commandLog{}
	rdb := testClient(t)
	rdb.AddHook(log)
	s := New(rdb)
	ctx := t.Context()
	long := strings.Repeat("a", 65)

	tests := []struct {
		name string
		call func() error
	}{
		{"reserve empty sku", func() error { _, err := s.Reserve(ctx, "", "c-1", 1); return err }},
		{"reserve sku with a brace", func() error { _, err := s.Reserve(ctx, "A}B", "c-1", 1); return err }},
		{"reserve sku with a colon", func() error { _, err := s.Reserve(ctx, "A:B", "c-1", 1); return err }},
		{"reserve sku of 65 chars", func() error { _, err := s.Reserve(ctx, long, "c-1", 1); return err }},
		{"reserve empty checkout", func() error { _, err := s.Reserve(ctx, "SKU", "", 1); return err }},
		{"reserve checkout with a space", func() error { _, err := s.Reserve(ctx, "SKU", "c 1", 1); return err }},
		{"reserve zero", func() error { _, err := s.Reserve(ctx, "SKU", "c-1", 0); return err }},
		{"reserve negative", func() error { _, err := s.Reserve(ctx, "SKU", "c-1", -1); return err }},
		{"reserve too many", func() error { _, err := s.Reserve(ctx, "SKU", "c-1", 1_000_001); return err }},
		{"release bad sku", func() error { _, err := s.Release(ctx, "{x}", "c-1"); return err }},
		{"release bad checkout", func() error { _, err := s.Release(ctx, "SKU", long); return err }},
		{"commit bad sku", func() error { _, err := s.Commit(ctx, "", "c-1"); return err }},
		{"commit bad checkout", func() error { _, err := s.Commit(ctx, "SKU", "c/1"); return err }},
		{"set stock negative on hand", func() error { _, err := s.SetStock(ctx, "SKU", -1, 1); return err }},
		{"set stock on hand too large", func() error { _, err := s.SetStock(ctx, "SKU", 1_000_000_001, 1); return err }},
		{"set stock zero max per order", func() error { _, err := s.SetStock(ctx, "SKU", 1, 0); return err }},
		{"set stock max per order too large", func() error { _, err := s.SetStock(ctx, "SKU", 1, 1_000_001); return err }},
		{"set stock bad sku", func() error { _, err := s.SetStock(ctx, "é", 1, 1); return err }},
		{"level bad sku", func() error { _, err := s.Level(ctx, ""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log.reset()
			err := tt.call()
			var arg *ArgumentError
			if !errors.Is(err, ErrInvalidArgument) || !errors.As(err, &arg) {
				t.Fatalf("err = %v, want an *ArgumentError wrapping ErrInvalidArgument", err)
			}
			if cmds := log.commands(); len(cmds) != 0 {
				t.Errorf("sent %v to Redis before validating", cmds)
			}
		})
	}
	// The bounds themselves are accepted.
	sku := testSKU(t, rdb)
	if _, err := s.SetStock(ctx, sku, 1_000_000_000, 1_000_000); err != nil {
		t.Fatalf("set stock at the bounds: %v", err)
	}
	if _, err := s.Reserve(ctx, sku, strings.Repeat("c", 64), 1_000_000); err != nil {
		t.Fatalf("reserve at the bounds: %v", err)
	}
}

// The scripts check ARGV themselves and answer INVALID_ARGUMENT rather than
// raise a Lua error, for callers that skip the Go wrappers.
func TestScriptsRejectBadArgv(t *testing.T) {
	rdb := testClient(t)
	sku := testSKU(t, rdb)
	ctx := t.Context()
	if _, err := New(rdb).SetStock(ctx, sku, 10, 5); err != nil {
		t.Fatal(err)
	}
	holdKeys := []string{StockKey(sku), HoldsKey(sku), HoldEndsKey(sku)}
	tests := []struct {
		name    string
		sc      script
		keys    []string
		args    []any
		wantArg int64
	}{
		{"reserve no checkout", reserveScript, holdKeys, []any{"", 1}, 1},
		{"reserve quantity not a number", reserveScript, holdKeys, []any{"c-1", "two"}, 2},
		{"reserve quantity hex", reserveScript, holdKeys, []any{"c-1", "0x2"}, 2},
		{"reserve quantity fraction", reserveScript, holdKeys, []any{"c-1", "1.5"}, 2},
		{"reserve quantity zero", reserveScript, holdKeys, []any{"c-1", 0}, 2},
		{"reserve quantity missing", reserveScript, holdKeys, []any{"c-1"}, 2},
		{"release ttl zero", releaseScript, holdKeys, []any{"c-1", 0}, 2},
		{"commit ttl negative", commitScript, holdKeys, []any{"c-1", -5}, 2},
		{"release gen missing", releaseScript, holdKeys, []any{"c-1", 60}, 3},
		{"reserve gen negative", reserveScript, holdKeys, []any{"c-1", 1, -1}, 3},
		{"forfeit ttl zero", forfeitScript, holdKeys, []any{"c-1", 0, 0}, 2},
		{"stage not a change hold", stageChangeScript, holdKeys, []any{"c-1", 1, 1, 0}, 1},
		{"stage delta fraction", stageChangeScript, holdKeys, []any{"~x", "1.5", 1, 0}, 2},
		{"stage delta huge", stageChangeScript, holdKeys, []any{"~x", -1000000001, 1, 0}, 2},
		{"set stock on hand negative", setStockScript, holdKeys, []any{-1, 5}, 1},
		{"set stock max per order huge", setStockScript, holdKeys, []any{5, 99999999999}, 2},
		{"rebuild gen floor not a number", rebuildScript, holdKeys, []any{10, 5, "x", 60, 0}, 3},
		{"rebuild ttl zero", rebuildScript, holdKeys, []any{10, 5, 0, 0, 0}, 4},
		{"rebuild more settled holders than given", rebuildScript, holdKeys, []any{10, 5, 0, 60, 2, "c-1"}, 5},
		{"rebuild hold without quantity", rebuildScript, holdKeys, []any{10, 5, 0, 60, 0, "c-1"}, 6},
		{"rebuild hold quantity zero", rebuildScript, holdKeys, []any{10, 5, 0, 60, 0, "c-1", 0}, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.sc.Run(ctx, rdb, tt.keys, tt.args...).Int64Slice()
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			if !slices.Equal(got, []int64{codeInvalidArgument, tt.wantArg, 0, 0}) {
				t.Errorf("reply = %v, want {%d, %d, 0, 0}", got, codeInvalidArgument, tt.wantArg)
			}
		})
	}
	assertLevel(t, New(rdb), rdb, sku, 10, 0, 0)
}

// TestEveryScriptIsLoadedAgainAfterNOSCRIPT: a node that lost its script cache (SCRIPT FLUSH
// here; a restart or a failover to a replica that never loaded them) answers NOSCRIPT once,
// then every script is loaded again, not only the one that was called.
func TestEveryScriptIsLoadedAgainAfterNOSCRIPT(t *testing.T) {
	log := &commandLog{}
	s, rdb, sku := stocked(t, 10, 5)
	rdb.AddHook(log)
	ctx := t.Context()
	if err := s.Preload(ctx); err != nil {
		t.Fatalf("preload: %v", err)
	}
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("script flush: %v", err)
	}
	log.reset()
	res, err := s.Reserve(ctx, sku, "c-1", 2)
	if err != nil || res.Held != 2 {
		t.Fatalf("reserve after SCRIPT FLUSH = %+v, %v", res, err)
	}
	want := []string{"evalsha"}
	for range allScripts {
		want = append(want, "script")
	}
	if got := log.commands(); !slices.Equal(got, append(want, "evalsha")) {
		t.Errorf("commands = %v, want evalsha answered NOSCRIPT, a SCRIPT LOAD of each script, evalsha", got)
	}
	log.reset()
	if _, err := s.Release(ctx, sku, "c-1"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := s.Reserve(ctx, sku, "c-2", 1); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if got := log.commands(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
		t.Errorf("commands = %v, want release and reserve by evalsha only", got)
	}
	assertLevel(t, s, rdb, sku, 9, 1, 1)
}

// TestNoScriptRunsInsideAPipeline: every Stock operation, the gate's read included, sends
// its scripts as commands of their own. Inside a pipeline go-redis cannot fall back from
// NOSCRIPT, so a node that lost its cache would fail every call.
func TestNoScriptRunsInsideAPipeline(t *testing.T) {
	s, rdb, sku := stocked(t, 10, 5)
	piped := &pipelineLog{}
	rdb.AddHook(piped)
	ctx := t.Context()
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	steps := []func() error{
		func() error { _, err := s.Reserve(ctx, sku, "c-1", 1); return err },
		func() error { _, err := s.Precheck(ctx, "c-2", map[string]int64{sku: 1}); return err },
		func() error { return s.MarkStarted(ctx, "c-2") },
		func() error { _, err := s.Commit(ctx, sku, "c-1"); return err },
		func() error { _, err := s.Release(ctx, sku, "c-2"); return err },
		func() error { _, err := s.StageChange(ctx, sku, "d-1", -1, 5); return err },
		func() error { _, err := s.Forfeit(ctx, sku, ChangeHoldID("d-1")); return err },
		func() error { _, err := s.Reconcile(ctx, sku, 9, nil, nil, 0); return err },
		func() error { _, err := s.SweepHoldEnds(ctx, sku); return err },
		func() error { _, err := s.SetStock(ctx, sku, 9, 5); return err },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if got := piped.scripts(); len(got) > 0 {
		t.Errorf("scripts sent inside a pipeline: %v", got)
	}
	if piped.pipelines() == 0 {
		t.Errorf("the gate's pipelined read was not seen: the test no longer watches pipelines")
	}
}

// pipelineLog records the script commands sent inside pipelines.
type pipelineLog struct {
	commandLog
	n int
}

func (l *pipelineLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (l *pipelineLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.mu.Lock()
		l.n++
		for _, c := range cmds {
			if n := c.Name(); n == "eval" || n == "evalsha" || n == "fcall" || n == "evalsha_ro" || n == "eval_ro" {
				l.names = append(l.names, n)
			}
		}
		l.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (l *pipelineLog) scripts() []string { return l.commands() }

func (l *pipelineLog) pipelines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// A Redis that cannot be reached is "broken", not "no": the error carries
// the operation and ids, wraps the cause, and matches no sentinel.
func TestRedisFailureIsWrapped(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	s := New(rdb)
	ctx := t.Context()
	_, err := s.Reserve(ctx, "PHONE-X", "c-123", 2)
	if err == nil {
		t.Fatal("reserve against a closed port succeeded")
	}
	if !strings.HasPrefix(err.Error(), "reserve 2 x PHONE-X for checkout c-123: run reserve script: ") {
		t.Errorf("error text = %q", err.Error())
	}
	for _, sentinel := range []error{ErrNotStocked, ErrOutOfStock, ErrOverLimit, ErrHoldReleased,
		ErrHoldCommitted, ErrHoldEnded, ErrNoHold, shop.ErrOnHandBelowHeld, ErrInvalidArgument} {
		if errors.Is(err, sentinel) {
			t.Errorf("network error matches %v", sentinel)
		}
	}
	if _, err := s.Level(ctx, "PHONE-X"); err == nil || !strings.HasPrefix(err.Error(), "read stock of PHONE-X: hmget: ") {
		t.Errorf("level error = %v", err)
	}
	if err := s.Preload(ctx); err == nil || !strings.HasPrefix(err.Error(), "preload reserve script: ") {
		t.Errorf("preload error = %v", err)
	}
}

func TestErrorTextReadsAsASentence(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&OutOfStockError{SKU: "PHONE-X", CheckoutID: "c-123", Requested: 2, Available: 1},
			"reserve 2 x PHONE-X for checkout c-123: out of stock (1 available)"},
		{&HoldEndedError{SKU: "PHONE-X", CheckoutID: "c-123", Requested: 2, Outcome: "released"},
			"reserve 2 x PHONE-X for checkout c-123: hold already ended (released)"},
		{&HoldError{Op: "reserve", SKU: "PHONE-X", CheckoutID: "c-123", Quantity: 1, Err: ErrNotStocked},
			"reserve 1 x PHONE-X for checkout c-123: sku not stocked"},
		{&HoldError{Op: "release", SKU: "PHONE-X", CheckoutID: "c-123", Err: ErrHoldCommitted},
			"release PHONE-X for checkout c-123: hold already committed"},
		{&ArgumentError{Op: "reserve", Field: "quantity", Value: "0", Reason: "must be 1 to 1000000"},
			"reserve: invalid argument: quantity 0 must be 1 to 1000000"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

var _ Client = (*redis.Client)(nil)
var _ Client = (*redis.ClusterClient)(nil)
var _ Client = (*redis.Ring)(nil)

func ExampleStock_Reserve() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	stock := New(rdb)
	_, err := stock.Reserve(context.Background(), "PHONE-X", "c-123", 2)
	var out *OutOfStockError
	switch {
	case errors.As(err, &out):
		fmt.Printf("only %d left\n", out.Available)
	case err != nil:
		fmt.Println("retry later:", err)
	}
}
