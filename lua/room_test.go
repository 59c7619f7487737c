package lua

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/shop"
)

// testRoom returns a room of its own on the test Redis, and a SKU stocked with onHand units
// (the room's keys carry the SKU's name, so the SKU's cleanup removes them too).
func testRoom(t *testing.T, onHand int64) (*Room, *Stock, *redis.Client, string) {
	t.Helper()
	s, rdb, sku := stocked(t, onHand, 10)
	return NewRoom(rdb, sku), s, rdb, sku
}

func roomEntry(cart, sku string, qty int64) shop.RoomEntry {
	return shop.RoomEntry{CartID: cart, CustomerID: "u-" + cart, Items: []shop.CartLine{{SKU: sku, Quantity: qty}},
		TimeoutSeconds: 900, IdempotencyKey: cart, RequestHash: "h-" + cart}
}

func enter(t *testing.T, r *Room, e shop.RoomEntry, size int64) shop.RoomAnswer {
	t.Helper()
	a, err := r.Enter(t.Context(), e, false, size, 0)
	if err != nil {
		t.Fatalf("enter %s: %v", e.CartID, err)
	}
	return a
}

func pop(t *testing.T, r *Room) (shop.RoomEntry, bool) {
	t.Helper()
	e, ok, err := r.Pop(t.Context())
	if err != nil {
		t.Fatalf("pop: %v", err)
	}
	return e, ok
}

func TestTheRoomServesCartsInTheOrderTheyArrived(t *testing.T) {
	r, _, _, sku := testRoom(t, 100)
	for i := range 5 {
		a := enter(t, r, roomEntry(fmt.Sprint("c", i), sku, 1), 100)
		if a.Outcome != shop.RoomQueued || a.Position != int64(i+1) {
			t.Fatalf("cart %d: %+v, want queued at %d", i, a, i+1)
		}
	}
	// A retried POST keeps its place and its body.
	if a := enter(t, r, roomEntry("c2", sku, 1), 100); a.Outcome != shop.RoomQueued || a.Position != 3 || a.Entry.RequestHash != "h-c2" {
		t.Fatalf("retried c2: %+v, want queued at 3 with its hash", a)
	}
	for i := range 5 {
		e, ok := pop(t, r)
		if !ok || e.CartID != fmt.Sprint("c", i) {
			t.Fatalf("take %d: %+v %v, want c%d", i, e, ok, i)
		}
		if err := r.Leave(t.Context(), e.CartID, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := pop(t, r); ok {
		t.Fatal("took a cart from an empty line")
	}
}

func TestAnEmptyRoomLetsACartPassOnlyWhenTheCallerCanStartIt(t *testing.T) {
	r, _, _, sku := testRoom(t, 100)
	if a, err := r.Enter(t.Context(), roomEntry("a", sku, 1), true, 10, 0); err != nil || a.Outcome != shop.RoomPass {
		t.Fatalf("empty line, may pass: %+v %v", a, err)
	}
	enter(t, r, roomEntry("b", sku, 1), 10)
	// Someone waits: a newcomer with a free place still queues behind them.
	if a, err := r.Enter(t.Context(), roomEntry("c", sku, 1), true, 10, 0); err != nil || a.Outcome != shop.RoomQueued || a.Position != 2 {
		t.Fatalf("line of one, may pass: %+v %v", a, err)
	}
	// Nobody in line, but b and c are being started: a newcomer queues, and is next.
	pop(t, r)
	pop(t, r)
	if a, err := r.Enter(t.Context(), roomEntry("d", sku, 1), true, 10, 0); err != nil || a.Outcome != shop.RoomQueued || a.Position != 1 {
		t.Fatalf("empty line, two carts being started, may pass: %+v %v", a, err)
	}
}

func TestAFullRoomSaysSo(t *testing.T) {
	r, _, _, sku := testRoom(t, 100)
	enter(t, r, roomEntry("a", sku, 1), 2)
	enter(t, r, roomEntry("b", sku, 1), 2)
	if a := enter(t, r, roomEntry("c", sku, 1), 2); a.Outcome != shop.RoomFull {
		t.Fatalf("third cart in a room of 2: %+v", a)
	}
	if a := enter(t, r, roomEntry("a", sku, 1), 2); a.Outcome != shop.RoomQueued || a.Position != 1 {
		t.Fatalf("a cart already in a full room keeps its place: %+v", a)
	}
}

func TestCartsBehindSpokenForUnitsAreRefusedAtOnce(t *testing.T) {
	r, s, _, sku := testRoom(t, 3)
	enter(t, r, roomEntry("a", sku, 2), 100)
	enter(t, r, roomEntry("b", sku, 1), 100)
	a := enter(t, r, roomEntry("c", sku, 1), 100)
	if a.Outcome != shop.RoomShort || len(a.Shortages) != 1 || a.Shortages[0] != (shop.Shortage{SKU: sku, Requested: 1, Available: 0}) {
		t.Fatalf("c behind 3 units spoken for: %+v", a)
	}
	// a's turn: its units stop counting as spoken for once its hold counts them.
	e, _ := pop(t, r)
	if _, err := s.Reserve(t.Context(), sku, e.CartID, 2); err != nil {
		t.Fatal(err)
	}
	if a := enter(t, r, roomEntry("c", sku, 1), 100); a.Outcome != shop.RoomShort {
		t.Fatalf("c after a held 2 and b still waits for 1: %+v", a)
	}
	// A hold that ends gives its units to the next in line.
	if _, err := s.Release(t.Context(), sku, "a"); err != nil {
		t.Fatal(err)
	}
	if a := enter(t, r, roomEntry("c", sku, 1), 100); a.Outcome != shop.RoomQueued {
		t.Fatalf("c after a's hold ended: %+v", a)
	}
}

// TestTheDoorCountsWithTheUnitsTheCallerRead: the API reads each SKU's available units in
// the sold-out gate, a moment before the door; the room counts with that read (one Redis
// round trip less for every new cart of a sale) and reads only the SKUs it was not given.
func TestTheDoorCountsWithTheUnitsTheCallerRead(t *testing.T) {
	r, _, _, sku := testRoom(t, 3)
	_, _, other := stocked(t, 5, 10)
	e := roomEntry("a", sku, 1)
	e.Items = append(e.Items, shop.CartLine{SKU: other, Quantity: 6})
	e.Available = map[string]int64{sku: 0}
	a := enter(t, r, e, 100)
	want := []shop.Shortage{{SKU: sku, Requested: 1, Available: 0}, {SKU: other, Requested: 6, Available: 5}}
	slices.SortFunc(a.Shortages, func(x, y shop.Shortage) int { return cmp.Compare(x.SKU, y.SKU) })
	slices.SortFunc(want, func(x, y shop.Shortage) int { return cmp.Compare(x.SKU, y.SKU) })
	if a.Outcome != shop.RoomShort || !slices.Equal(a.Shortages, want) {
		t.Fatalf("a, with no unit of %s read by its caller and %s read by the room: %+v, want short %v", sku, other, a, want)
	}
	e.Available = map[string]int64{sku: 3, other: 6}
	if a := enter(t, r, e, 100); a.Outcome != shop.RoomQueued {
		t.Fatalf("a, with enough of both read by its caller: %+v, want queued", a)
	}
}

func TestACartWhoseReplicaDiedIsTakenAgainAtItsPlace(t *testing.T) {
	r, _, _, sku := testRoom(t, 100)
	r = r.WithLease(100 * time.Millisecond)
	enter(t, r, roomEntry("a", sku, 1), 10)
	enter(t, r, roomEntry("b", sku, 1), 10)
	if e, _ := pop(t, r); e.CartID != "a" {
		t.Fatalf("took %s, want a", e.CartID)
	}
	// The replica that took a dies: nobody says how a's start went. Until the lease runs
	// out b is next; after it, a is taken again before b.
	place, err := r.Lookup(t.Context(), "a")
	if err != nil || place.State != shop.PlaceLeaving || place.State == shop.PlaceQueued {
		t.Fatalf("a while its start runs: %+v %v", place, err)
	}
	time.Sleep(150 * time.Millisecond)
	if e, _ := pop(t, r); e.CartID != "a" || e.Taken != 2 {
		t.Fatalf("took %s (taken %d times) after a's lease ran out, want a, taken twice", e.CartID, e.Taken)
	}
	if err := r.Retry(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if e, _ := pop(t, r); e.CartID != "a" {
		t.Fatalf("took %s after a's start failed, want a again", e.CartID)
	}
}

// A cart forgotten (its cancel recorded) leaves the line and frees the units it spoke for;
// the room keeps nothing of it. A cart being started is not forgotten: its saga adopts the
// recorded end.
func TestAForgottenCartLeavesTheLineAndTheRoomKeepsNothing(t *testing.T) {
	r, _, _, sku := testRoom(t, 1)
	enter(t, r, roomEntry("a", sku, 1), 10)
	if a := enter(t, r, roomEntry("b", sku, 1), 10); a.Outcome != shop.RoomShort {
		t.Fatalf("b behind a: %+v", a)
	}
	if gone, err := r.Forget(t.Context(), "a"); err != nil || !gone {
		t.Fatalf("forget a: %v %v", gone, err)
	}
	if place, err := r.Lookup(t.Context(), "a"); err != nil || place.State == shop.PlaceQueued || place.State == shop.PlaceLeaving || place.Entry != nil {
		t.Fatalf("a after it was forgotten: %+v %v", place, err)
	}
	if a := enter(t, r, roomEntry("b", sku, 1), 10); a.Outcome != shop.RoomQueued || a.Position != 1 {
		t.Fatalf("b after a left: %+v", a)
	}
	if gone, err := r.Forget(t.Context(), "a"); err != nil || gone {
		t.Fatalf("a forgotten twice: %v %v", gone, err)
	}
	if e, _ := pop(t, r); e.CartID != "b" {
		t.Fatalf("took %s, want b", e.CartID)
	}
	if gone, err := r.Forget(t.Context(), "b"); err != nil || gone {
		t.Fatalf("b forgotten while being started: %v %v", gone, err)
	}
	if place, err := r.Lookup(t.Context(), "b"); err != nil || place.State != shop.PlaceLeaving {
		t.Fatalf("b after a forget while being started: %+v %v, want still being started", place, err)
	}
}

// TestTheRoomKeepsItsBooksUnderRandomSchedules drives the room with random arrivals, retries,
// takes by several replicas, starts that finish, fail or die (a lease that runs out), and
// cancels, and checks after every step, against a model, that: carts are taken in the order
// they first arrived (a cart put back keeps its place); the units spoken for are exactly
// those of the carts in line; a cart is never both in line and being started; a cart refused
// as short really was; and no cart is lost.
func TestTheRoomKeepsItsBooksUnderRandomSchedules(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { roomSchedule(t, seed) })
	}
}

func roomSchedule(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	r, _, rdb, sku := testRoom(t, 1_000_000)
	clock := time.Unix(1_000_000, 0)
	r.now = func() time.Time { return clock }
	const available = 40
	if err := rdb.HSet(t.Context(), StockKey(sku), "available", available).Err(); err != nil {
		t.Fatal(err)
	}
	type cart struct {
		id      string
		qty     int64
		arrived int // order of first arrival into line
	}
	var line []cart            // the model's line, in order
	taken := map[string]cart{} // being started, under its lease
	leaseEnd := map[string]time.Time{}
	// starting: carts a replica is starting, whether or not their lease ran out (a slow
	// replica's start may end after the next take put its cart back in line).
	starting := map[string]bool{}
	remove := func(id string) {
		delete(taken, id)
		for i, c := range line {
			if c.id == id {
				line = append(line[:i], line[i+1:]...)
				break
			}
		}
	}
	spoken := func() (n int64) {
		for _, c := range line {
			n += c.qty
		}
		return n
	}
	insert := func(c cart) {
		i := 0
		for i < len(line) && line[i].arrived < c.arrived {
			i++
		}
		line = append(line[:i], append([]cart{c}, line[i:]...)...)
	}
	requeueExpired := func() {
		for id, c := range taken {
			if !clock.Before(leaseEnd[id]) {
				delete(taken, id)
				insert(c)
			}
		}
	}
	next := 0
	for step := range 300 {
		switch op := rng.IntN(10); {
		case op < 4: // a new cart arrives, or one in line retries
			c := cart{id: fmt.Sprint("c", next), qty: int64(1 + rng.IntN(3)), arrived: next}
			if len(line) > 0 && rng.IntN(4) == 0 {
				c = line[rng.IntN(len(line))]
			} else {
				next++
			}
			a := enter(t, r, roomEntry(c.id, sku, c.qty), 1000)
			inLine := false
			for _, l := range line {
				inLine = inLine || l.id == c.id
			}
			switch {
			case inLine && a.Outcome != shop.RoomQueued:
				t.Fatalf("step %d: retry of %s in line answered %+v", step, c.id, a)
			case inLine:
			case available-spoken() < c.qty && a.Outcome != shop.RoomShort:
				t.Fatalf("step %d: %s for %d with %d free answered %+v", step, c.id, c.qty, available-spoken(), a)
			case available-spoken() >= c.qty && a.Outcome != shop.RoomQueued:
				t.Fatalf("step %d: %s for %d with %d free answered %+v", step, c.id, c.qty, available-spoken(), a)
			case a.Outcome == shop.RoomQueued:
				line = append(line, c)
			}
		case op < 7: // a replica takes the head
			requeueExpired()
			e, ok := pop(t, r)
			if ok != (len(line) > 0) {
				t.Fatalf("step %d: took %v with %d in line", step, ok, len(line))
			}
			if !ok {
				continue
			}
			if e.CartID != line[0].id {
				t.Fatalf("step %d: took %s, the head is %s", step, e.CartID, line[0].id)
			}
			taken[e.CartID], line = line[0], line[1:]
			leaseEnd[e.CartID] = clock.Add(r.lease)
			starting[e.CartID] = true
		case op < 8: // a start ends: started, failed (back in line), refused, or the replica died
			ids := slices.Sorted(maps.Keys(starting))
			if len(ids) == 0 {
				continue
			}
			id := ids[rng.IntN(len(ids))]
			delete(starting, id)
			switch rng.IntN(3) {
			case 0: // its saga started: the cart leaves the room, wherever it is now
				if err := r.Leave(t.Context(), id, nil); err != nil {
					t.Fatal(err)
				}
				remove(id)
			case 1: // back in line at once, if still under its lease
				if err := r.Retry(t.Context(), id); err != nil {
					t.Fatal(err)
				}
				if _, ok := taken[id]; ok {
					leaseEnd[id] = time.Time{}
				}
			}
		case op < 9: // a cart in line is cancelled
			if len(line) == 0 {
				continue
			}
			i := rng.IntN(len(line))
			gone, err := r.Forget(t.Context(), line[i].id)
			if err != nil || !gone {
				t.Fatalf("step %d: forget %s in line: %v %v", step, line[i].id, gone, err)
			}
			line = append(line[:i], line[i+1:]...)
		default: // time passes
			clock = clock.Add(time.Duration(rng.IntN(20)) * time.Second)
		}
		demand, err := rdb.HGet(t.Context(), r.key("demand"), sku).Int64()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		// Carts whose lease ran out count again once the next take puts them back.
		want := spoken()
		if demand != want {
			t.Fatalf("step %d: %d units spoken for in Redis, %d in the model", step, demand, want)
		}
		if n, _ := r.Waiting(t.Context()); n != int64(len(line)) {
			t.Fatalf("step %d: %d in line in Redis, %d in the model", step, n, len(line))
		}
		// Each customer's units in line are the units spoken for, counted per customer.
		var perCustomer int64
		for _, v := range rdb.HGetAll(t.Context(), r.key("units")).Val() {
			n, _ := strconv.ParseInt(v, 10, 64)
			perCustomer += n
		}
		if perCustomer != want {
			t.Fatalf("step %d: customers' units in line add up to %d, %d spoken for", step, perCustomer, want)
		}
	}
}

func TestACustomerMayNotFillTheRoom(t *testing.T) {
	r, _, _, sku := testRoom(t, 100)
	for i := range 3 {
		e := roomEntry(fmt.Sprint("c", i), sku, 1)
		e.CustomerID = "hoarder"
		want := shop.RoomQueued
		if i == 2 {
			want = shop.RoomBusy
		}
		if a, err := r.Enter(t.Context(), e, false, 100, 2); err != nil || a.Outcome != want {
			t.Fatalf("hoarder's cart %d: %+v %v, want %s", i, a, err, want)
		}
	}
	// Once one of them is taken for its saga, the customer may queue another.
	pop(t, r)
	e := roomEntry("c9", sku, 1)
	e.CustomerID = "hoarder"
	if a, err := r.Enter(t.Context(), e, false, 100, 2); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("hoarder's cart after one left: %+v %v", a, err)
	}
}

// A customer's carts in line speak for at most a SKU's max_per_customer: the cart that
// would ask for more is refused at the door (RoomLimit), naming the SKU, and every unit it
// would have spoken for stays free for the next buyer. The units come back to the customer
// as its carts leave the line (taken, or forgotten).
func TestACustomersCartsInLineSpeakForAtMostItsLimit(t *testing.T) {
	r, _, _, sku := testRoom(t, 10)
	limited := func(cart, customer string, qty int64) shop.RoomEntry {
		e := roomEntry(cart, sku, qty)
		e.CustomerID, e.MaxPerCustomer = customer, map[string]int64{sku: 2}
		return e
	}
	if a := enter(t, r, limited("a1", "alice", 2), 100); a.Outcome != shop.RoomQueued {
		t.Fatalf("alice's first cart: %+v", a)
	}
	for _, cart := range []string{"a2", "a3", "a4", "a5"} {
		if a := enter(t, r, limited(cart, "alice", 2), 100); a.Outcome != shop.RoomLimit || a.SKU != sku {
			t.Fatalf("alice's cart %s past her limit: %+v, want limit on %s", cart, a, sku)
		}
	}
	// The units alice's refused carts asked for are free: 8 more for others.
	for i := range 4 {
		if a := enter(t, r, limited(fmt.Sprint("b", i), fmt.Sprint("bob", i), 2), 100); a.Outcome != shop.RoomQueued {
			t.Fatalf("another customer's cart %d: %+v, want queued", i, a)
		}
	}
	if e, _ := pop(t, r); e.CartID != "a1" {
		t.Fatalf("took %s, want a1", e.CartID)
	}
	// Taken from the line, a1 is its saga's to judge now (the saga counts her holds).
	if a := enter(t, r, limited("a6", "alice", 2), 100); a.Outcome == shop.RoomLimit {
		t.Fatalf("alice's cart after her first left the line: %+v, want it judged by stock alone", a)
	}
}

// The customer's standing (their open checkouts, their units held or bought, as the API
// read them from Postgres) counts with their carts in the room: open checkouts plus carts
// stay under the cap, held units plus units in line under the SKU's max_per_customer. A
// cart that may pass (an empty line) is the saga's to judge.
func TestTheDoorCountsTheCustomersStandingWithTheirCarts(t *testing.T) {
	r, _, _, sku := testRoom(t, 10)
	entry := func(cart string, qty, open, owned int64) shop.RoomEntry {
		e := roomEntry(cart, sku, qty)
		e.CustomerID, e.MaxPerCustomer = "alice", map[string]int64{sku: 3}
		e.Standing = shop.Standing{Open: open, Units: map[string]int64{sku: owned}}
		return e
	}
	if a, err := r.Enter(t.Context(), entry("pass", 1, 2, 3), true, 100, 2); err != nil || a.Outcome != shop.RoomPass {
		t.Fatalf("a cart that may pass: %+v %v, want pass (the saga judges it)", a, err)
	}
	if a, err := r.Enter(t.Context(), entry("a1", 1, 1, 0), false, 100, 2); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("one open checkout, no cart in line: %+v %v, want queued", a, err)
	}
	if a, err := r.Enter(t.Context(), entry("a2", 1, 1, 0), false, 100, 2); err != nil || a.Outcome != shop.RoomBusy {
		t.Fatalf("one open checkout, one cart in line: %+v %v, want busy", a, err)
	}
	if a, err := r.Enter(t.Context(), entry("a3", 1, 0, 2), false, 100, 3); err != nil || a.Outcome != shop.RoomLimit {
		t.Fatalf("2 units owned, 1 in line, 1 more: %+v %v, want limit", a, err)
	}
	if a, err := r.Enter(t.Context(), entry("a4", 1, 0, 1), false, 100, 3); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("1 unit owned, 1 in line, 1 more: %+v %v, want queued", a, err)
	}
}

// While the line is held nobody leaves it, not even a cart that finds it empty, and new carts
// still queue; resumed, it serves them in order. The status tells what waits and what holds.
func TestAHeldLineLetsNobodyLeave(t *testing.T) {
	r, _, _, sku := testRoom(t, 10)
	ctx := t.Context()
	if err := r.Hold(ctx, true); err != nil {
		t.Fatal(err)
	}
	if a, err := r.Enter(ctx, roomEntry("a", sku, 1), true, 10, 0); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("a cart that finds a held line empty: %+v %v, want queued", a, err)
	}
	enter(t, r, roomEntry("b", sku, 2), 10)
	if e, ok := pop(t, r); ok {
		t.Fatalf("took %s from a held line", e.CartID)
	}
	st, err := r.Status(ctx)
	if err != nil || !st.Held || st.Waiting != 2 || st.SpokenFor[sku] != 3 {
		t.Fatalf("status of the held line: %+v %v, want held, 2 waiting, 3 units spoken for", st, err)
	}
	if err := r.Hold(ctx, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a", "b"} {
		if e, ok := pop(t, r); !ok || e.CartID != want {
			t.Fatalf("took %s %v after the resume, want %s", e.CartID, ok, want)
		}
	}
}

// With a pace, at most that many carts leave the line in each second of Redis's clock.
func TestAPacedLineLetsThatManyLeaveASecond(t *testing.T) {
	r, _, rdb, sku := testRoom(t, 100)
	ctx := t.Context()
	if err := r.SetPace(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		enter(t, r, roomEntry(fmt.Sprint("c", i), sku, 1), 100)
	}
	for try := 0; ; try++ {
		before := rdb.Time(ctx).Val().Unix()
		taken := 0
		for range 6 {
			if _, ok := pop(t, r); ok {
				taken++
			}
		}
		if rdb.Time(ctx).Val().Unix() != before {
			if try > 5 {
				t.Fatal("could not take six times within one second of Redis's clock")
			}
			continue // the takes straddled two seconds: try again within one
		}
		if taken > 3 {
			t.Fatalf("%d carts left in one second at a pace of 3", taken)
		}
		break
	}
	if st, err := r.Status(ctx); err != nil || st.Pace != 3 {
		t.Fatalf("status: %+v %v, want pace 3", st, err)
	}
	if err := r.SetPace(ctx, 0); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, ok := pop(t, r); !ok {
			t.Fatal("a line without a pace refused a take")
		}
	}
}

// Waiting counts the carts in line (for the tests).
func (r *Room) Waiting(ctx context.Context) (int64, error) {
	return r.rdb.ZCard(ctx, r.key("line")).Result()
}
