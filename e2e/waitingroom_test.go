package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/room"
	"github.com/checkout-saga/checkout-saga/shop"
)

// oneStartAtOnce is an API that starts one saga at a time: every other cart waits in line.
var oneStartAtOnce = api.Config{Room: room.Config{MaxStarting: 1}}

// roomBuyer is one cart of a waiting-room sale, as its buyer saw it.
type roomBuyer struct {
	id       string
	sent     time.Time // the first POST was written to the connection
	answered time.Time // the final answer (201, or the GET that saw it leave the room) came
	queued   bool      // the POST answered 202
	won      bool      // it holds its unit
	err      error
}

// buy checks a cart out as a browser does: POST, and on a 202 GET ?wait=10 with the secret
// until the cart has left the waiting room.
func buy(ctx context.Context, cl *checkouttest.Client, b *roomBuyer, sku string) {
	var raw json.RawMessage
	wrote := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		if b.sent.IsZero() { // the first attempt's
			b.sent = time.Now()
		}
	}})
	a, err := cl.Do(wrote, http.MethodPost, "/v1/checkouts", api.CheckoutRequest{CartID: b.id, CustomerID: "u-" + b.id,
		Items: []api.RequestItem{{SKU: sku, Quantity: 1}}}, nil, &raw)
	var secret string
	for ; err == nil; a, err = cl.Do(ctx, http.MethodGet, "/v1/checkouts/"+b.id+"?wait=10", nil, checkouttest.Buyer(secret), &raw) {
		var v struct {
			Status shop.Status `json:"status"`
			Secret string      `json:"checkout_secret"`
		}
		_ = json.Unmarshal(raw, &v)
		switch {
		case a.Code == http.StatusAccepted:
			b.queued, secret = true, v.Secret
			continue
		case a.Code == http.StatusOK && v.Status == "queued":
			continue
		case a.Code == http.StatusConflict && a.Problem == "out_of_stock",
			(a.Code == http.StatusOK || a.Code == http.StatusCreated) && v.Status == shop.StatusOutOfStock:
		case (a.Code == http.StatusOK || a.Code == http.StatusCreated) && v.Status == shop.StatusAwaitingPayment:
			b.won = true
		default:
			err = fmt.Errorf("answered %d %s", a.Code, a.Body)
		}
		break
	}
	b.answered, b.err = time.Now(), err
}

// TestTheWaitingRoomServesFirstComeFirstServedAcrossTwoReplicas sells 12 units to 48 buyers
// arriving one every 15 ms at two API replicas, each starting one saga at a time, so most
// wait in the room. Every buyer gets an answer; exactly the 12 units are held; and no buyer
// holds a unit that an earlier buyer (by more than 300 ms) was refused. A buyer's time is when
// its POST was written to the connection; the margin is the API's own scheduling under load
// (a CI run once saw 205 ms between timestamps taken before the request). A buyer that passed
// straight to its saga (the room was empty) was never in line: its hold races those of the
// carts started while its own start ran, so it may lose to any buyer sent before it was
// answered (a loaded CI run saw the first buyer's start outlast 12 others).
func TestTheWaitingRoomServesFirstComeFirstServedAcrossTwoReplicas(t *testing.T) {
	t.Parallel()
	const units, buyers = 12, 48
	p, sku, all, _ := roomSale(t, units, buyers)
	ctx := t.Context()

	won, queued := 0, 0
	for _, b := range all {
		if b.won {
			won++
		}
		if b.queued {
			queued++
		}
	}
	if won != units {
		t.Errorf("%d buyers hold a unit of %d", won, units)
	}
	if queued == 0 {
		t.Error("no buyer waited in the room: the test did not test it")
	}
	overtaken := 0
	for _, early := range all {
		for _, late := range all {
			margin := 300 * time.Millisecond
			if !early.queued { // it passed: its start raced those of the carts sent meanwhile
				margin = max(margin, early.answered.Sub(early.sent))
			}
			if !early.won && late.won && late.sent.Sub(early.sent) > margin {
				overtaken++
				t.Errorf("buyer %s (sent %s) holds a unit that %s, sent %s earlier, was refused",
					late.id, late.sent.Format("15:04:05.000"), early.id, late.sent.Sub(early.sent))
			}
		}
	}
	t.Logf("%d buyers, %d waited in the room, %d hold a unit, %d overtaken", buyers, queued, won, overtaken)
	if overtaken > 0 || t.Failed() {
		for _, b := range all {
			t.Logf("%s sent +%v answered after %v queued=%v won=%v", b.id, b.sent.Sub(all[0].sent).Round(time.Millisecond),
				b.answered.Sub(b.sent).Round(time.Millisecond), b.queued, b.won)
		}
	}
	level, err := p.Stock.Level(ctx, sku)
	if err != nil || level.Available != 0 || level.Held != units {
		t.Errorf("stock of %s = %+v %v, want all %d units held", sku, level, err, units)
	}
}

// roomSale sells units of a new SKU to buyers arriving one every 15 ms at two API replicas,
// each starting one saga at a time, so most wait in the room, and returns what each buyer saw
// and the carts each replica took from the room, in the order it took them.
func roomSale(t *testing.T, units int64, buyers int) (*checkouttest.Product, string, []*roomBuyer, [][]shop.RoomEntry) {
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true})
	ctx := t.Context()
	run := testenv.RandomID("")
	sku := "ROOM-" + run
	if err := p.SetStock(ctx, sku, units, 1); err != nil {
		t.Fatal(err)
	}
	room := lua.NewRoom(p.Redis, "room-"+run)
	var replicas []*checkouttest.Client
	var mu sync.Mutex
	taken := make([][]shop.RoomEntry, 2)
	for i := range taken {
		took := func(e shop.RoomEntry) { mu.Lock(); defer mu.Unlock(); taken[i] = append(taken[i], e) }
		url := p.ServeAPIWith(oneStartAtOnce, p.Temporal, checkouttest.APIOptions{Gate: true, Room: room, Dispatch: true, Took: took})
		replicas = append(replicas, checkouttest.NewClient(url))
	}
	all := make([]*roomBuyer, buyers)
	var wg sync.WaitGroup
	for i := range all {
		all[i] = &roomBuyer{id: fmt.Sprintf("w-%s-%02d", run, i)}
		wg.Add(1)
		go func() { defer wg.Done(); buy(ctx, replicas[i%2], all[i], sku) }()
		time.Sleep(15 * time.Millisecond)
	}
	wg.Wait()
	for _, b := range all {
		if b.err != nil {
			t.Errorf("buyer %s: %v", b.id, b.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return p, sku, all, [][]shop.RoomEntry{slices.Clone(taken[0]), slices.Clone(taken[1])}
}

// TestEachReplicaTakesWaitingCartsInTheOrderTheyArrived: the same crowd with a unit for
// every buyer, so nobody is refused at the door and the line stays long. Each replica takes
// carts from the room in the order they arrived in it (their tickets), but for a cart taken
// again (its start failed, or its replica's lease ran out). It fails on a room that takes its
// newest cart first, which the sale above cannot see: there the door lets in about as many
// carts as units, and every one of them wins in any order. The order is read where the
// replicas take the carts: the sagas' start times, read once instead, moved by half a second
// under a loaded CI run.
func TestEachReplicaTakesWaitingCartsInTheOrderTheyArrived(t *testing.T) {
	t.Parallel()
	const buyers = 48
	_, _, all, taken := roomSale(t, buyers, buyers)
	queued := 0
	for _, b := range all {
		if b.queued {
			queued++
		}
	}
	if queued < buyers/4 {
		t.Fatalf("%d of %d buyers waited in the room: too few to see its order", queued, buyers)
	}
	took := 0
	for r, entries := range taken {
		var last shop.RoomEntry
		for _, e := range entries {
			if e.Taken > 1 { // taken again: back at its place in line, behind those taken meanwhile
				continue
			}
			if e.Ticket <= last.Ticket {
				t.Errorf("replica %d took %s (ticket %d) after %s (ticket %d)", r, e.CartID, e.Ticket, last.CartID, last.Ticket)
			}
			last = e
			took++
		}
	}
	if took < queued {
		t.Errorf("the replicas took %d carts from the room, but %d buyers waited in it", took, queued)
	}
	t.Logf("%d buyers, %d waited in the room; the replicas took %d and %d", buyers, queued, len(taken[0]), len(taken[1]))
}

// TestCartsWaitingOnAReplicaThatDiedAreServedOnceByAnother: replica A answered 202 to its
// buyers, took the first cart from the line and died before it started its saga. Replica B
// serves every one of them, the taken cart once its lease ran out, each with one saga and
// one hold.
func TestCartsWaitingOnAReplicaThatDiedAreServedOnceByAnother(t *testing.T) {
	t.Parallel()
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true})
	ctx := t.Context()
	run := testenv.RandomID("")
	sku := "ROOM-" + run
	if err := p.SetStock(ctx, sku, 100, 1); err != nil {
		t.Fatal(err)
	}
	room := lua.NewRoom(p.Redis, "room-"+run).WithLease(2 * time.Second)
	dead := checkouttest.NewClient(p.ServeAPIWith(oneStartAtOnce, p.Temporal,
		checkouttest.APIOptions{Gate: true, Room: room}))

	// A's dispatcher took the first cart and died with it.
	first := shop.RoomEntry{CartID: "taken-" + run, CustomerID: "u-0", Items: []shop.CartLine{{SKU: sku, Quantity: 1}},
		TimeoutSeconds: 600, IdempotencyKey: "taken-" + run, RequestHash: "h"}
	if a, err := room.Enter(ctx, first, false, 100, 0); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("enter %s: %+v %v", first.CartID, a, err)
	}
	if e, ok, err := room.Pop(ctx); err != nil || !ok || e.CartID != first.CartID {
		t.Fatalf("take %s: %+v %v %v", first.CartID, e, ok, err)
	}
	carts := []string{first.CartID}
	secrets := map[string]string{first.CartID: api.CheckoutSecret(checkouttest.CheckoutSecretKey, first.CartID)}
	for i := range 10 {
		id := fmt.Sprintf("d-%s-%02d", run, i)
		var v api.QueuedView
		a, err := dead.Do(ctx, http.MethodPost, "/v1/checkouts", api.CheckoutRequest{CartID: id, CustomerID: "u-" + id,
			Items: []api.RequestItem{{SKU: sku, Quantity: 1}}}, nil, &v)
		if err != nil || a.Code != http.StatusAccepted {
			t.Fatalf("POST %s to replica A: %d %s %v, want 202", id, a.Code, a.Body, err)
		}
		carts, secrets[id] = append(carts, id), v.CheckoutSecret
	}

	alive := checkouttest.NewClient(p.ServeAPIWith(api.Config{}, p.Temporal, checkouttest.APIOptions{Gate: true, Room: room, Dispatch: true}))
	for _, id := range carts {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var v api.CheckoutView
			a, err := alive.Do(ctx, http.MethodGet, "/v1/checkouts/"+id+"?wait=10", nil, checkouttest.Buyer(secrets[id]), &v)
			if err != nil {
				t.Fatalf("GET %s: %v", id, err)
			}
			if a.Code == http.StatusOK && v.Status == shop.StatusAwaitingPayment {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cart %s never left the room: %d %s", id, a.Code, a.Body)
			}
		}
	}
	level, err := p.Stock.Level(ctx, sku)
	holds, herr := p.Redis.HLen(ctx, lua.HoldsKey(sku)).Result()
	if err != nil || herr != nil || level.Held != int64(len(carts)) || holds != int64(len(carts)) {
		t.Errorf("stock of %s = %+v with %d holds (%v %v), want %d holds of one unit", sku, level, holds, err, herr, len(carts))
	}
	if place, err := room.Lookup(ctx, first.CartID); err != nil || place.InLine() {
		t.Errorf("the room still knows %s: %+v %v", first.CartID, place, err)
	}
}

// TestEndsSurviveRedisGoingBackInTime: a cart cancelled while it waited and one whose saga
// found its SKU sold out at its turn are put back in line when the room's keys go back to a
// copy from before both ends (as a Redis restarted from an older snapshot would). While
// they wait again, their GETs answer the ends Postgres recorded, never "queued"; taken
// again, with units on sale again or not, the cancelled cart's saga adopts its end and the
// other's answers its own: neither holds a unit, and each buyer's first answer stands.
func TestEndsSurviveRedisGoingBackInTime(t *testing.T) {
	t.Parallel()
	for _, onSaleFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("on sale again before the rollback: %v", onSaleFirst), func(t *testing.T) {
			t.Parallel()
			endsSurviveRollback(t, onSaleFirst)
		})
	}
}

func endsSurviveRollback(t *testing.T, onSaleFirst bool) {
	p := checkouttest.Start(t, checkouttest.Options{NoAPI: true})
	ctx := t.Context()
	run := testenv.RandomID("")
	sku, other := "ROOM-"+run, "OTHER-"+run
	for _, s := range []string{sku, other} {
		if err := p.SetStock(ctx, s, 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	room := lua.NewRoom(p.Redis, "room-"+run)
	// The front replica answers 202s and takes no cart; a cart of another SKU is ahead.
	front := checkouttest.NewClient(p.ServeAPIWith(oneStartAtOnce, p.Temporal,
		checkouttest.APIOptions{Gate: true, Room: room}))
	ahead := shop.RoomEntry{CartID: "ahead-" + run, CustomerID: "u-ahead-" + run, Items: []shop.CartLine{{SKU: other, Quantity: 1}},
		TimeoutSeconds: 600, IdempotencyKey: "ahead-" + run, RequestHash: "h"}
	if a, err := room.Enter(ctx, ahead, false, 100, 0); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("enter %s: %+v %v", ahead.CartID, a, err)
	}
	cancelled, refused := "cancelled-"+run, "refused-"+run
	secrets := map[string]string{}
	for _, id := range []string{cancelled, refused} {
		var v api.QueuedView
		a, err := front.Do(ctx, http.MethodPost, "/v1/checkouts", api.CheckoutRequest{CartID: id, CustomerID: "u-" + id,
			Items: []api.RequestItem{{SKU: sku, Quantity: 1}}}, nil, &v)
		if err != nil || a.Code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s %v, want 202", id, a.Code, a.Body, err)
		}
		secrets[id] = v.CheckoutSecret
	}
	before := dumpRoom(t, p, room)

	// One buyer cancels; the SKU sells out, and another replica starts the other at its
	// turn: its saga answers out of stock.
	var v api.CheckoutView
	if a, err := front.Do(ctx, http.MethodPost, "/v1/checkouts/"+cancelled+"/cancel", nil, checkouttest.Buyer(secrets[cancelled]), &v); err != nil ||
		a.Code != http.StatusOK || v.Status != shop.StatusCancelled {
		t.Fatalf("cancel %s: %d %s %v", cancelled, a.Code, a.Body, err)
	}
	if err := p.SetStock(ctx, sku, 0, 1); err != nil {
		t.Fatal(err)
	}
	back := checkouttest.NewClient(p.ServeAPIWith(api.Config{}, p.Temporal, checkouttest.APIOptions{Gate: true, Room: room, Dispatch: true}))
	if a, err := back.Do(ctx, http.MethodGet, "/v1/checkouts/"+refused+"?wait=10", nil, checkouttest.Buyer(secrets[refused]), &v); err != nil ||
		!(a.Code == http.StatusConflict && a.Problem == "out_of_stock" || a.Code == http.StatusOK && v.Status == shop.StatusOutOfStock) {
		t.Fatalf("GET %s at its turn: %d %s %v, want its saga's out_of_stock", refused, a.Code, a.Body, err)
	}

	// Units go on sale again, and Redis goes back to the copy from before both ends (or the
	// other way round).
	restock := func() {
		if err := p.SetStock(ctx, sku, 2, 1); err != nil {
			t.Fatal(err)
		}
	}
	if onSaleFirst {
		restock()
		time.Sleep(3 * lua.DefaultSoldOutBound) // the replica's gate trusts its sold-out read this long
	}
	restoreRoom(t, p, room, before)
	ends := map[string]shop.Status{cancelled: shop.StatusCancelled, refused: shop.StatusOutOfStock}
	answersItsEnd := func(id string) {
		t.Helper()
		var v api.CheckoutView
		a, err := front.Do(ctx, http.MethodGet, "/v1/checkouts/"+id, nil, checkouttest.Buyer(secrets[id]), &v)
		switch {
		case err != nil:
			t.Errorf("GET %s: %v", id, err)
		case ends[id] == shop.StatusOutOfStock && a.Code == http.StatusConflict && a.Problem == "out_of_stock":
		case a.Code != http.StatusOK || v.Status != ends[id]:
			t.Errorf("GET %s after the rollback: %d %s; want its first end, %s", id, a.Code, a.Body, ends[id])
		}
	}
	for _, id := range []string{cancelled, refused} {
		eventually(t, id+" taken again and its saga answered", func() (bool, string) {
			answersItsEnd(id)
			place, err := room.Lookup(ctx, id)
			return err == nil && place.State != shop.PlaceQueued && place.State != shop.PlaceLeaving, fmt.Sprintf("%+v %v", place, err)
		})
	}
	if !onSaleFirst {
		restock()
	}
	level, err := p.Stock.Level(ctx, sku)
	if err != nil || level.Held != 0 || level.Available != 2 {
		t.Errorf("stock of %s after the ended carts came back = %+v %v; want nothing held", sku, level, err)
	}
	// The cancelled cart was started again, and its saga adopted the recorded end.
	if _, err := p.Temporal.DescribeWorkflowExecution(ctx, shop.WorkflowID(cancelled), ""); err != nil {
		t.Errorf("%s was not started again (the case did not happen): %v", cancelled, err)
	}
	for id := range ends {
		answersItsEnd(id)
	}
}

// roomCopy is the room's keys as DUMP gave them, with their time to live.
type roomCopy map[string]struct {
	value string
	ttl   time.Duration
}

func dumpRoom(t *testing.T, p *checkouttest.Product, room *lua.Room) roomCopy {
	t.Helper()
	keys, err := p.Redis.Keys(t.Context(), fmt.Sprintf("room:{%s}:*", room.Name())).Result()
	if err != nil {
		t.Fatal(err)
	}
	c := roomCopy{}
	for _, k := range keys {
		v, err := p.Redis.Dump(t.Context(), k).Result()
		ttl, terr := p.Redis.PTTL(t.Context(), k).Result()
		if err != nil || terr != nil {
			t.Fatalf("dump %s: %v %v", k, err, terr)
		}
		c[k] = struct {
			value string
			ttl   time.Duration
		}{v, max(ttl, 0)}
	}
	return c
}

// restoreRoom puts the room's keys back as they were in c, in one transaction (as a Redis
// restarted from a snapshot would show them, all at once): keys written since are gone.
func restoreRoom(t *testing.T, p *checkouttest.Product, room *lua.Room, c roomCopy) {
	t.Helper()
	ctx := t.Context()
	keys, err := p.Redis.Keys(ctx, fmt.Sprintf("room:{%s}:*", room.Name())).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Redis.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		for _, k := range keys {
			if _, ok := c[k]; !ok {
				tx.Del(ctx, k)
			}
		}
		for k, v := range c {
			tx.RestoreReplace(ctx, k, v.ttl, v.value)
		}
		return nil
	}); err != nil {
		t.Fatalf("restore the room: %v", err)
	}
}
