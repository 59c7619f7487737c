package lua

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/checkout-saga/checkout-saga/shop"
)

// redisNow is Redis's clock, the one clock of a drop.
func redisNow(t *testing.T, r *Room) time.Time {
	t.Helper()
	now, err := testClient(t).Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// earlyEntry is roomEntry for a cart whose sale starts at start.
func earlyEntry(cart, sku string, qty int64, start time.Time) shop.RoomEntry {
	e := roomEntry(cart, sku, qty)
	e.StartsAt = start.UnixMilli()
	return e
}

// Carts that come before a drop's start wait for it, holding nothing and speaking for no
// units (so coming first gains nothing), and none leaves the line before the start. At the
// start they take their places in line in the order of their draws, ahead of every cart that
// comes after; each is judged as the door judges: the ones whose units the carts released
// before them speak for are refused, and their refusal is kept for their GET.
func TestADropReleasesItsEarlyCartsByTheirDrawsAheadOfLaterOnes(t *testing.T) {
	r, stock, _, sku := testRoom(t, 4)
	ctx := t.Context()
	other := sku + "-other"
	if _, err := stock.SetStock(ctx, other, 10, 10); err != nil {
		t.Fatal(err)
	}
	start := redisNow(t, r).Add(1500 * time.Millisecond)
	// Draws in the reverse order of arrival: e4 draws first.
	draws := map[string]string{"e0": "f000000000000000", "e1": "c000000000000000", "e2": "8000000000000000",
		"e3": "4000000000000000", "e4": "0000000000000000"}
	r.draw = func() string { return "ffffffffffffffff" }
	for i := range 5 {
		id := fmt.Sprint("e", i)
		r.draw = func() string { return draws[id] }
		if a := enter(t, r, earlyEntry(id, sku, 1, start), 100); a.Outcome != shop.RoomEarly {
			t.Fatalf("cart %s before the start of a 4-unit drop: %+v, want early (no unit spoken for)", id, a)
		}
	}
	ahead := roomEntry("ahead", other, 1)
	if a := enter(t, r, ahead, 100); a.Outcome != shop.RoomQueued || a.Position != 1 {
		t.Fatalf("a cart of another SKU before the start: %+v, want first in line", a)
	}
	if e, ok := pop(t, r); !ok || e.CartID != "ahead" {
		t.Fatalf("took %+v %v, want the cart of another SKU", e, ok)
	}
	if e, ok := pop(t, r); ok {
		t.Fatalf("took %s before its sale started", e.CartID)
	}
	if place, err := r.Lookup(ctx, "e2"); err != nil || place.State != shop.PlaceEarly || !place.InLine() || place.Entry.StartsAt != start.UnixMilli() {
		t.Fatalf("an early cart: %+v %v", place, err)
	}
	if st, err := r.Status(ctx); err != nil || st.BeforeSale != 5 || st.Waiting != 0 || st.SpokenFor[sku] != 0 {
		t.Fatalf("status before the start: %+v %v, want 5 before the sale, none in line, no unit spoken for", st, err)
	}
	for redisNow(t, r).Before(start) {
		time.Sleep(20 * time.Millisecond)
	}

	// The first to come after the start finds the drop released, and takes its place behind.
	if a := enter(t, r, roomEntry("late", other, 1), 100); a.Outcome != shop.RoomQueued || a.Position != 5 {
		t.Fatalf("a cart after the start: %+v, want place 5 behind the 4 released", a)
	}
	if a := enter(t, r, roomEntry("late-drop", sku, 1), 100); a.Outcome != shop.RoomShort {
		t.Fatalf("a cart of the drop's SKU after the start: %+v, want short (the released carts speak for all 4)", a)
	}
	refused, err := r.Lookup(ctx, "e0")
	if err != nil || refused.InLine() || len(refused.Refused) != 1 || refused.Refused[0].SKU != sku {
		t.Fatalf("the cart with the last draw: %+v %v, want refused for %s", refused, err, sku)
	}
	var order []string
	for {
		e, ok := pop(t, r)
		if !ok {
			break
		}
		order = append(order, e.CartID)
	}
	if want := []string{"e4", "e3", "e2", "e1", "late"}; !slices.Equal(order, want) {
		t.Fatalf("took %v, want %v: the drop's carts by their draws, then the later one", order, want)
	}
}

// A cart waiting for its sale can be forgotten (its cancel recorded), and gives its
// customer's count back.
func TestAnEarlyCartCanBeForgotten(t *testing.T) {
	r, _, _, sku := testRoom(t, 4)
	start := redisNow(t, r).Add(time.Hour)
	enter(t, r, earlyEntry("e", sku, 1, start), 100)
	if gone, err := r.Forget(t.Context(), "e"); err != nil || !gone {
		t.Fatalf("forget an early cart: %v %v", gone, err)
	}
	if place, err := r.Lookup(t.Context(), "e"); err != nil || place.State == shop.PlaceEarly || place.Entry != nil {
		t.Fatalf("after the forget: %+v %v", place, err)
	}
	if st, err := r.Status(t.Context()); err != nil || st.Waiting != 0 || st.BeforeSale != 0 {
		t.Fatalf("status: %+v %v", st, err)
	}
}

// The drop's shuffle is uniform: a cart's place at the start depends on its draw alone
// (newDraw, sorted as room_release.lua sorts them). Over 10,000 drops of 20 carts, the
// counts of each cart at each place are tested with Pearson's chi-square against the uniform
// law: 400 cells of 500 expected, 361 degrees of freedom, refused at a significance of 1e-6
// (the critical value by the Wilson-Hilferty approximation, about 503), so a correct shuffle
// fails it once in a million runs, and one that leans toward arrival order (a few percent at
// one place is enough) fails it every time.
func TestTheDropsShuffleIsUniform(t *testing.T) {
	const carts, drops = 20, 10_000
	var counts [carts][carts]int
	for range drops {
		type draw struct {
			cart int
			draw string
		}
		d := make([]draw, carts)
		for i := range d {
			d[i] = draw{i, newDraw()}
		}
		slices.SortFunc(d, func(a, b draw) int {
			if a.draw != b.draw {
				return map[bool]int{true: -1, false: 1}[a.draw < b.draw]
			}
			return a.cart - b.cart
		})
		for place, x := range d {
			counts[x.cart][place]++
		}
	}
	expected := float64(drops) / carts
	var chi2 float64
	for _, row := range counts {
		for _, n := range row {
			chi2 += math.Pow(float64(n)-expected, 2) / expected
		}
	}
	df := float64((carts - 1) * (carts - 1))
	const z = 4.753 // the standard normal's quantile at 1 - 1e-6
	critical := df * math.Pow(1-2/(9*df)+z*math.Sqrt(2/(9*df)), 3)
	t.Logf("chi-square over %d drops of %d carts: %.1f on %.0f degrees of freedom (critical at 1e-6: %.1f)", drops, carts, chi2, df, critical)
	if chi2 > critical {
		t.Fatalf("chi-square %.1f > %.1f: the shuffle is not uniform", chi2, critical)
	}
}

// A cart already in line when an operator moves its SKU's start into the future is not
// taken before the start: it waits for it with the carts that came before the start, and
// holds nothing. (It was taken at its turn and its saga sold before the start.)
func TestACartInLineWaitsForAStartMovedIntoTheFuture(t *testing.T) {
	r, _, _, sku := testRoom(t, 4)
	ctx := t.Context()
	other := sku + "-other"
	for _, e := range []shop.RoomEntry{roomEntry("c-drop", sku, 1), roomEntry("c-other", other, 1)} {
		if a := enter(t, r, e, 100); a.Outcome != shop.RoomQueued {
			t.Fatalf("%s enters on sale: %+v", e.CartID, a)
		}
	}
	start := redisNow(t, r).Add(time.Hour)
	if err := r.SetSaleStart(ctx, sku, &start); err != nil {
		t.Fatal(err)
	}
	if e, ok := pop(t, r); !ok || e.CartID != "c-other" {
		t.Fatalf("took %+v %v, want the cart of the SKU on sale, behind the one whose start moved", e, ok)
	}
	if e, ok := pop(t, r); ok {
		t.Fatalf("took %s before its SKU's start", e.CartID)
	}
	place, err := r.Lookup(ctx, "c-drop")
	if err != nil || place.State != shop.PlaceEarly || place.Entry == nil || place.Entry.StartsAt != start.UnixMilli() {
		t.Fatalf("the cart whose start moved: %+v %v, want it waiting for the start", place, err)
	}
	if st, err := r.Status(ctx); err != nil || st.BeforeSale != 1 || st.SpokenFor[sku] != 0 {
		t.Fatalf("status: %+v %v, want 1 before the sale and no unit of %s spoken for", st, err, sku)
	}
	// A replica whose catalog has not seen the change yet (its cache) cannot let a cart pass.
	a, err := r.Enter(ctx, roomEntry("c-stale", sku, 1), true, 100, 0)
	if err != nil || a.Outcome != shop.RoomEarly || a.Entry.StartsAt != start.UnixMilli() {
		t.Fatalf("a cart entering with no start known to its replica: %+v %v, want it waiting for the start", a, err)
	}
}

// A start an operator clears, or moves earlier, no longer holds the carts that wait for it:
// the cart sent back from the line for the start, the one that came before it, and one sent
// by a replica whose catalog cache still has the old start are taken at once when it is
// cleared, and at the new start when it moves earlier, not at the old start.
func TestClearingOrMovingAStartEarlierReleasesTheCartsWaitingForIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		now  func(now time.Time) *time.Time // the new start, from Redis's clock; nil: cleared
	}{
		{"cleared", func(time.Time) *time.Time { return nil }},
		{"moved earlier", func(now time.Time) *time.Time { return new(now.Add(time.Second)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _, sku := testRoom(t, 4)
			ctx := t.Context()
			if a := enter(t, r, roomEntry("c-line", sku, 1), 100); a.Outcome != shop.RoomQueued {
				t.Fatalf("a cart enters on sale: %+v", a)
			}
			later := redisNow(t, r).Add(time.Hour)
			if err := r.SetSaleStart(ctx, sku, &later); err != nil {
				t.Fatal(err)
			}
			if e, ok := pop(t, r); ok {
				t.Fatalf("took %s before its SKU's start", e.CartID)
			}
			if a := enter(t, r, earlyEntry("c-early", sku, 1, later), 100); a.Outcome != shop.RoomEarly {
				t.Fatalf("a cart before the start: %+v, want early", a)
			}

			start := tc.now(redisNow(t, r))
			if err := r.SetSaleStart(ctx, sku, start); err != nil {
				t.Fatal(err)
			}
			// A replica whose catalog cache still has the old start cannot hold a new cart
			// for it either: the operator's word wins.
			stale, err := r.Enter(ctx, earlyEntry("c-stale", sku, 1, later), false, 100, 0)
			if err != nil || start == nil && stale.Outcome != shop.RoomQueued || start != nil && stale.Outcome != shop.RoomEarly {
				t.Fatalf("a cart entering with the old start: %+v %v, want it in line (cleared) or waiting for the new start", stale, err)
			}
			for _, cart := range []string{"c-line", "c-early", "c-stale"} {
				place, err := r.Lookup(ctx, cart)
				if err != nil || place.Entry == nil || start != nil && place.Entry.StartsAt != start.UnixMilli() {
					t.Fatalf("%s after the start moved to %v: %+v %v, want it waiting for the new start", cart, start, place, err)
				}
			}
			if start != nil {
				for redisNow(t, r).Before(*start) {
					time.Sleep(20 * time.Millisecond)
				}
			}
			var took []string
			for {
				e, ok := pop(t, r)
				if !ok {
					break
				}
				took = append(took, e.CartID)
			}
			if slices.Sort(took); !slices.Equal(took, []string{"c-early", "c-line", "c-stale"}) {
				t.Fatalf("took %v once the start was %s, want both carts that waited for the old start", took, tc.name)
			}
		})
	}
}
