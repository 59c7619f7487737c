package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/mocks"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// roomHarness is a harness whose API puts carts in a waiting room of its own, behind a cart
// already waiting there (blocker, for blockerQty units of sku): every cart these tests send
// queues behind it, and nothing reaches Temporal (the harness has none) unless the test
// starts the room's dispatcher.
type roomHarness struct {
	*harness
	room *lua.Room
	sku  string
}

func newRoomHarness(t *testing.T, onHand, blockerQty, size int64, configure func(*api.Config, *api.Deps)) *roomHarness {
	t.Helper()
	h := emptyRoomHarness(t, testenv.Redis(t), onHand, size, configure)
	h.enterBlocker(t, blockerQty, size)
	return h
}

// enterBlocker puts the blocker's cart of quantity units of the SKU in line, in the room of size.
func (h *roomHarness) enterBlocker(t *testing.T, quantity, size int64) {
	t.Helper()
	blocker := shop.RoomEntry{CartID: "blocker", CustomerID: "u-0", Items: []shop.CartLine{{SKU: h.sku, Quantity: quantity}},
		TimeoutSeconds: 900, IdempotencyKey: "blocker", RequestHash: "h"}
	if a, err := h.room.Enter(t.Context(), blocker, false, size, 0); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("the blocker enters the room: %+v %v", a, err)
	}
}

// emptyRoomHarness is a harness whose room of size, on rdb, starts one saga at a time and
// has no cart in line yet; its SKU has onHand units.
func emptyRoomHarness(t *testing.T, rdb *redis.Client, onHand, size int64, configure func(*api.Config, *api.Deps)) *roomHarness {
	t.Helper()
	room := lua.NewRoom(rdb, testenv.RandomID("room"))
	t.Cleanup(func() { deleteRoom(t, room) })
	h := newHarness(t, func(cfg *api.Config, deps *api.Deps) {
		cfg.Room.MaxStarting = 1
		cfg.Room.Size = size
		deps.Room = room
		if configure != nil {
			configure(cfg, deps)
		}
	})
	return &roomHarness{harness: h, room: room, sku: h.stockSKU(t, "ROOM", onHand, 500, 5, "usd")}
}

// deleteRoom removes the room's keys (all on its hash tag).
func deleteRoom(t *testing.T, room *lua.Room) {
	ctx := context.Background()
	rdb := testenv.Redis(t)
	for _, k := range rdb.Keys(ctx, fmt.Sprintf("room:{%s}:*", room.Name())).Val() {
		rdb.Del(ctx, k)
	}
}

func (h *roomHarness) post(t *testing.T, cart string, qty int64, key string) *httptest.ResponseRecorder {
	t.Helper()
	header := map[string]string{}
	if key != "" {
		header["Idempotency-Key"] = key
	}
	return h.do(t, request{method: http.MethodPost, path: "/v1/checkouts", header: header,
		body: body(fmt.Sprintf(`{"cart_id":%q,"customer_id":"u-%s","items":[{"sku":%q,"quantity":%d}]}`, cart, cart, h.sku, qty))})
}

// record is the checkout record of the harness's post of cart for qty units, with the
// fingerprint that post has: as the saga would record it.
func (h *roomHarness) record(cart string, qty int64) shop.CheckoutRecord {
	hash := api.RequestHash(api.CheckoutRequest{CartID: cart, CustomerID: "u-" + cart,
		Items: []api.RequestItem{{SKU: h.sku, Quantity: qty}}}, 900)
	return shop.CheckoutRecord{CheckoutID: cart, CustomerID: "u-" + cart, Currency: "usd", AmountCents: 500 * qty,
		Items: []shop.Item{{SKU: h.sku, Quantity: qty, UnitPriceCents: 500}}, Fingerprint: shop.Fingerprint{RequestHash: hash, IdempotencyKey: cart}}
}

func queued(t *testing.T, rec *httptest.ResponseRecorder, status int) api.QueuedView {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("answer %d %s, want %d", rec.Code, rec.Body, status)
	}
	var v api.QueuedView
	decodeJSON(t, rec, &v)
	if v.Status != "queued" {
		t.Fatalf("answer %s, want a queued cart", rec.Body)
	}
	return v
}

func TestACartBehindACrowdIsAnsweredItsPlaceAtOnce(t *testing.T) {
	h := newRoomHarness(t, 100, 1, 100, nil)
	rec := h.post(t, "c-1", 1, "")
	v := queued(t, rec, http.StatusAccepted)
	if v.Position != 2 || v.CheckoutSecret == "" || rec.Header().Get("Location") != "/v1/checkouts/c-1" {
		t.Fatalf("202 = %+v, Location %q; want place 2 behind the blocker, a secret and a Location", v, rec.Header().Get("Location"))
	}
	if v.EstimatedWaitMS <= 0 {
		t.Errorf("estimated_wait_ms = %d, want an estimate", v.EstimatedWaitMS)
	}
	// A retried POST keeps its place and gets the secret again; the same key with another
	// body is refused, and nothing of it enters the room.
	if again := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted); again.Position != 2 || again.CheckoutSecret != v.CheckoutSecret {
		t.Fatalf("retried POST = %+v, want place 2 and the same secret", again)
	}
	if rec := h.post(t, "c-1", 2, ""); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("same key, other body: %d %s, want 422", rec.Code, rec.Body)
	}
	if rec := h.post(t, "c-1", 2, "other-key"); rec.Code != http.StatusConflict {
		t.Fatalf("same cart, other body and key: %d %s, want 409 checkout_exists", rec.Code, rec.Body)
	}
	// The buyer reads its place with the secret; anyone else learns nothing.
	get := queued(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1", header: withSecret(v.CheckoutSecret)}), http.StatusOK)
	if get.Position != 2 || get.CheckoutSecret != "" {
		t.Fatalf("GET = %+v, want place 2 and no secret", get)
	}
	if rec := h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1"}); rec.Code != http.StatusNotFound {
		t.Fatalf("GET without the secret: %d, want 404", rec.Code)
	}
	h.assertUntouched(t, h.sku, 100)
}

// countedRecords counts the reads of Postgres's records (each carries the carts' secret
// versions).
type countedRecords struct {
	api.CheckoutRecords
	reads atomic.Int64
}

func (c *countedRecords) RecordedCheckouts(ctx context.Context, ids, customers, skus []string) (shop.Recorded, error) {
	c.reads.Add(1)
	return c.CheckoutRecords.RecordedCheckouts(ctx, ids, customers, skus)
}

// countedRoomHarness is newRoomHarness(t, 100, 1, 100) whose reads of records are counted.
func countedRoomHarness(t *testing.T) (*roomHarness, *countedRecords) {
	var records *countedRecords
	h := newRoomHarness(t, 100, 1, 100, func(_ *api.Config, d *api.Deps) {
		records = &countedRecords{CheckoutRecords: d.Records}
		d.Records = records
	})
	return h, records
}

// A buyer's GET of its waiting cart asks Postgres once: the read that checks its secret's
// version also says whether Postgres recorded the cart (a recorded cart is its saga's, whatever
// the room says). A drop's crowd polls its places; two reads each doubled its load on the pool.
func TestAGetOfAWaitingCartReadsPostgresOnce(t *testing.T) {
	h, records := countedRoomHarness(t)
	secret := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted).CheckoutSecret
	before := records.reads.Load()
	if get := queued(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1", header: withSecret(secret)}), http.StatusOK); get.Position != 2 {
		t.Fatalf("GET = %+v, want place 2", get)
	}
	if n := records.reads.Load() - before; n != 1 {
		t.Errorf("the GET read Postgres %d times, want 1", n)
	}
}

// A waiting cart's 202 signs its secret with the version the door read with the cart's
// record: it asks Postgres no second time. Support's revocation of a waiting cart's secret
// still holds: the old secret opens nothing, and the creator's retry gets a fresh one that
// opens the cart.
func TestAWaitingCartsSecretComesWithTheDoorsReadAndCanBeRevoked(t *testing.T) {
	h, records := countedRoomHarness(t)
	old := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted).CheckoutSecret
	if again := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted); again.CheckoutSecret != old || old == "" {
		t.Fatalf("secrets of the POST and its retry: %q and %q, want one secret", old, again.CheckoutSecret)
	}
	if n := records.reads.Load(); n != 2 {
		t.Errorf("the two 202s read Postgres %d times, want 2 (each its door's read, which carries the version)", n)
	}

	if rec := h.do(t, request{method: http.MethodPost, path: "/v1/admin/checkouts/c-1/revoke-secret", header: bearer(testAdminToken)}); rec.Code != http.StatusOK {
		t.Fatalf("revoke the waiting cart's secret: %d %s", rec.Code, rec.Body)
	}
	problemOf(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1", header: withSecret(old)}), http.StatusNotFound, "not_found")
	fresh := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted).CheckoutSecret
	if fresh == old || fresh == "" {
		t.Fatalf("the retry after the revocation got %q, want a fresh secret", fresh)
	}
	if get := queued(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1", header: withSecret(fresh)}), http.StatusOK); get.Position != 2 {
		t.Errorf("GET with the fresh secret = %+v, want place 2", get)
	}
}

func TestAFullWaitingRoomAnswers503(t *testing.T) {
	h := newRoomHarness(t, 100, 1, 2, nil)
	queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	rec := h.post(t, "c-2", 1, "")
	problemOf(t, rec, http.StatusServiceUnavailable, "waiting_room_full")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
}

func TestCartsBehindSpokenForUnitsAreAnswered409AtOnce(t *testing.T) {
	h := newRoomHarness(t, 3, 2, 100, nil)
	queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	p := problemOf(t, h.post(t, "c-2", 1, ""), http.StatusConflict, "out_of_stock")
	if len(p.Shortages) != 1 || p.Shortages[0].Available != 0 {
		t.Errorf("shortages = %+v, want none of the SKU left", p.Shortages)
	}
	h.assertUntouched(t, h.sku, 3)
}

// A cart taken from the line always starts its saga, and the saga answers it, even when its
// SKU sold out while it waited: the reserve script is the one judge of stock. (The room used
// to refuse it at its turn from Redis, a second judge, and invent its end.)
func TestAWaitingCartWhoseSKUSoldOutIsAnsweredByItsSaga(t *testing.T) {
	tc := mocks.NewClient(t)
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })
	v := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	// The operator takes the SKU off sale while the carts wait.
	if _, err := h.inv.Set(t.Context(), shop.Product{SKU: h.sku, OnHand: 0, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 5}}); err != nil {
		t.Fatal(err)
	}
	h.srv.Gate = lua.NewSoldOutFlag(h.stock, time.Millisecond)
	started := make(chan string, 4)
	tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).
		Run(func(args mock.Arguments) { started <- args.Get(2).(workflows.Input).CheckoutID }).Return(nil)
	tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(
		func(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
			req := o.UpdateOptions.Args[0].(workflows.ReservationRequest)
			handle := mocks.NewWorkflowUpdateHandle(t)
			handle.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
				*args.Get(1).(*workflows.ReservationResult) = workflows.ReservationResult{
					View:        shop.View{CheckoutID: "c-1", Status: shop.StatusOutOfStock, RequestHash: req.RequestHash, IdempotencyKey: req.IdempotencyKey},
					RequestHash: req.RequestHash, IdempotencyKey: req.IdempotencyKey, Created: true, RejectCode: shop.RejectOutOfStock,
				}
			}).Return(nil).Maybe()
			return handle, nil
		})
	// A GET that comes once the cart left asks the saga, which has ended.
	ended := mocks.NewEncodedValue(t)
	ended.On("Get", mock.Anything).Run(func(args mock.Arguments) {
		*args.Get(0).(*shop.View) = shop.View{CheckoutID: "c-1", Status: shop.StatusOutOfStock}
	}).Return(nil).Maybe()
	tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).
		Return(&client.QueryWorkflowWithOptionsResponse{QueryResult: ended}, nil).Maybe()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.srv.RunWaitingRoom(ctx); close(done) }()
	defer func() { stop(); <-done }()
	if got := checkoutView(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1?wait=10", header: withSecret(v.CheckoutSecret)}),
		http.StatusOK); got.Status != shop.StatusOutOfStock {
		t.Fatalf("GET ?wait once the cart left = %+v, want its saga's out_of_stock view", got)
	}
	for _, cart := range []string{"blocker", "c-1"} {
		if got := testenv.Receive(t, "a start", started); got != cart {
			t.Fatalf("started %s, want %s: every cart taken starts its saga, in order", got, cart)
		}
	}
}

// temporalForgot is a Temporal client that knows no saga of any cart (retention dropped
// them, or none ever started), for tests whose answers come from Postgres.
func temporalForgot(t *testing.T) *mocks.Client {
	tc := mocks.NewClient(t)
	notFound := serviceerror.NewNotFound("workflow not found")
	tc.On("QueryWorkflowWithOptions", mock.Anything, mock.Anything).Return(nil, notFound).Maybe()
	tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil).Maybe()
	tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(nil, notFound).Maybe()
	tc.On("UpdateWorkflow", mock.Anything, mock.Anything).Return(nil, notFound).Maybe()
	run := mocks.NewWorkflowRun(t)
	run.On("Get", mock.Anything, mock.Anything).Return(notFound).Maybe()
	tc.On("GetWorkflow", mock.Anything, mock.Anything, "").Return(run).Maybe()
	return tc
}

func TestCancellingAWaitingCartFreesItsUnitsForTheNextInLine(t *testing.T) {
	h := newRoomHarness(t, 2, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = temporalForgot(t) })
	v := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	problemOf(t, h.post(t, "c-2", 1, ""), http.StatusConflict, "out_of_stock")
	cancel := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/c-1/cancel", body: body(`{}`), header: withSecret(v.CheckoutSecret)})
	var view api.CheckoutView
	decodeJSON(t, cancel, &view)
	if cancel.Code != http.StatusOK || view.Status != shop.StatusCancelled {
		t.Fatalf("cancel a waiting cart: %d %s", cancel.Code, cancel.Body)
	}
	// Its end is final for GET and for a retried POST.
	for _, rec := range []*httptest.ResponseRecorder{
		h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1", header: withSecret(v.CheckoutSecret)}),
		h.post(t, "c-1", 1, ""),
	} {
		decodeJSON(t, rec, &view)
		if rec.Code != http.StatusOK || view.Status != shop.StatusCancelled {
			t.Fatalf("after the cancel: %d %s, want the cancelled view", rec.Code, rec.Body)
		}
	}
	// Its unit is free for the next in line.
	queued(t, h.post(t, "c-3", 1, ""), http.StatusAccepted)
}

// A retried POST of a cart known to have a saga goes to that saga, which answers its
// recorded end, even when carts wait in the room: the room is for new carts, and a retry
// queued behind them, or refused for units it held, would answer something else. The cart
// is known by Postgres (Redis forgot it, and its SKU is sold out, or has a unit free that the
// carts ahead speak for) or by Redis (it started, and the carts ahead speak for the last unit).
func TestARetryOfACartWithASagaGoesToItsSagaNotTheRoom(t *testing.T) {
	for _, redisKnows := range []string{"nothing, sold out", "nothing, a unit the line speaks for", "the cart started"} {
		t.Run("redis knows "+redisKnows, func(t *testing.T) {
			tc := mocks.NewClient(t)
			h := newRoomHarness(t, 1, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })
			ctx := t.Context()
			cart := testenv.RandomID("c-paid-")
			db := store.New(h.pool)
			if _, err := db.InsertCheckout(ctx, h.record(cart, 1), nil); err != nil {
				t.Fatal(err)
			}
			if err := db.RecordOutcome(ctx, store.Outcome{CheckoutID: cart, Status: string(shop.StatusConfirmed)}); err != nil {
				t.Fatal(err)
			}
			switch redisKnows {
			case "nothing, sold out":
				if _, err := h.inv.Set(ctx, shop.Product{SKU: h.sku, OnHand: 0, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 5}}); err != nil {
					t.Fatal(err)
				}
			case "the cart started":
				if err := h.stock.MarkStarted(ctx, cart); err != nil {
					t.Fatal(err)
				}
			}
			h.srv.Gate = lua.NewSoldOutFlag(h.stock, time.Millisecond)
			// Temporal has forgotten the saga (retention): the start says so, and the API
			// answers from Postgres.
			tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil).Once()
			tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).
				Return(nil, serviceerror.NewWorkflowExecutionAlreadyStarted("finished", "", "")).Once()
			run := mocks.NewWorkflowRun(t)
			run.On("Get", mock.Anything, mock.Anything).Return(serviceerror.NewNotFound("workflow not found")).Once()
			tc.On("GetWorkflow", mock.Anything, shop.WorkflowID(cart), "").Return(run).Once()

			rec := h.post(t, cart, 1, "")
			if rec.Code != http.StatusOK {
				t.Fatalf("retried POST of a confirmed cart: %d %s, want 200 with its confirmed view", rec.Code, rec.Body)
			}
			var v api.CheckoutView
			decodeJSON(t, rec, &v)
			if v.Status != shop.StatusConfirmed {
				t.Fatalf("answer %+v, want confirmed", v)
			}
			if place, err := h.room.Lookup(ctx, cart); err != nil || place.InLine() {
				t.Fatalf("the room holds the retried cart: %+v %v", place, err)
			}
		})
	}
}

// A cart whose saga could not start in time (Temporal did not answer within the request's
// timeout) is put back for the next take at once: the put-back has its own time, not what is
// left of the start's, which the timeout used up. Without it the cart waits out its lease
// (30 s) marked as being started, and its buyer with it.
func TestACartWhoseStartTimedOutIsTakenAgainAtOnce(t *testing.T) {
	tc := mocks.NewClient(t)
	h := newRoomHarness(t, 5, 1, 100, func(cfg *api.Config, d *api.Deps) {
		cfg.RequestTimeout = 300 * time.Millisecond
		d.Temporal = tc
	})
	timedOut := make(chan struct{}, 10)
	tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil).Maybe()
	tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		<-args.Get(0).(context.Context).Done()
		timedOut <- struct{}{}
	}).Return(nil, context.DeadlineExceeded).Maybe()

	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.srv.RunWaitingRoom(ctx); close(done) }()
	defer func() { stop(); <-done }()
	testenv.Receive(t, "the blocker's first start timing out", timedOut)
	// The dispatcher waits a second before the next take; the lease would take 30.
	testenv.Receive(t, "the blocker's second start, well before its lease ran out", timedOut)
}

// A GET that waits for a cart in the room while Redis stops answering answers with what the
// room said last (the cart waits), not with the 404 of a cart that does not exist, which
// would send its buyer to POST it again as new.
func TestAWaitingGetThatLosesRedisKeepsTheCartsPlace(t *testing.T) {
	rdb := redis.NewClient(testenv.Redis(t).Options()) // the room's own client, closed mid-wait
	h := emptyRoomHarness(t, rdb, 5, 100, nil)
	h.enterBlocker(t, 1, 100)
	v := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)

	// Closed once the GET waits (its first lookup comes at once), well before its wait ends.
	time.AfterFunc(time.Second, func() { _ = rdb.Close() })
	rec := h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1?wait=5", header: withSecret(v.CheckoutSecret)})
	if got := queued(t, rec, http.StatusOK); got.Status != "queued" {
		t.Fatalf("GET while Redis went away: %+v, want the cart still queued", got)
	}
}

// countedRoom is the room, with a count of the lookups asked of it.
type countedRoom struct {
	*lua.Room
	lookups atomic.Int64
}

func (r *countedRoom) Lookup(ctx context.Context, cartID string) (shop.RoomPlace, error) {
	r.lookups.Add(1)
	return r.Room.Lookup(ctx, cartID)
}

// queuedBehindACountedRoom is a room harness whose room counts its lookups, with cart c-1
// posted and waiting in line (202) behind the harness's blocker.
func queuedBehindACountedRoom(t *testing.T) (*roomHarness, *countedRoom, api.QueuedView) {
	t.Helper()
	var room *countedRoom
	h := newRoomHarness(t, 100, 1, 100, func(_ *api.Config, deps *api.Deps) {
		room = &countedRoom{Room: deps.Room.(*lua.Room)}
		deps.Room = room
	})
	return h, room, queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
}

// A GET that waits for a cart far back in line looks it up when the cart may have moved,
// not every 50 ms: a crowd of waiting buyers would otherwise cost Redis a lookup (five
// reads) per buyer twenty times a second. Here nothing is taken from the line (no
// dispatcher), so the GET looks at most once a second.
func TestAWaitingGetLooksItsCartUpOnlyWhenItMayHaveMoved(t *testing.T) {
	h, room, v := queuedBehindACountedRoom(t)
	before := room.lookups.Load()
	rec := h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1?wait=3", header: withSecret(v.CheckoutSecret)})
	if got := queued(t, rec, http.StatusOK); got.Position != 2 {
		t.Fatalf("GET = %+v, want place 2", got)
	}
	if n := room.lookups.Load() - before; n > 6 {
		t.Errorf("a GET waiting 3 s for a cart that did not move looked it up %d times, want at most 6 (about once a second)", n)
	}
}

// poppedRoom is the room, with a count of the takes asked of it.
type poppedRoom struct {
	*lua.Room
	pops atomic.Int64
}

func (r *poppedRoom) Pop(ctx context.Context) (shop.RoomEntry, bool, error) {
	r.pops.Add(1)
	return r.Room.Pop(ctx)
}

// A replica whose line stays empty looks at it less and less often, down to a few times a
// second: every replica's idle takes are Lua scripts in the room's one Redis slot. (A cart
// that enters through the replica rings it, and is taken at once all the same.)
func TestAnIdleReplicaLooksAtAnEmptyLineLessAndLessOften(t *testing.T) {
	var room *poppedRoom
	h := newHarness(t, func(cfg *api.Config, deps *api.Deps) {
		room = &poppedRoom{Room: lua.NewRoom(testenv.Redis(t), testenv.RandomID("room"))}
		t.Cleanup(func() { deleteRoom(t, room.Room) })
		deps.Room = room
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.srv.RunWaitingRoom(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	time.Sleep(3 * time.Second)
	if n := room.pops.Load(); n > 30 {
		t.Errorf("an idle replica took from its empty line %d times in 3 s, want at most 30 (a take every 20 ms is 150)", n)
	}
}

// The replica that starts a waiting cart's saga keeps the saga's answer to the start in the
// room a moment, and the GET that waited for the cart answers with it instead of asking the
// saga: one status query less per cart that waited. (The harness has no Temporal: asking the
// saga would fail the GET.)
func TestAWaitingGetIsAnsweredWithTheSagasAnswerToItsStart(t *testing.T) {
	h, room, v := queuedBehindACountedRoom(t)
	before := room.lookups.Load()
	get := testenv.Go(func() *httptest.ResponseRecorder {
		return h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1?wait=10", header: withSecret(v.CheckoutSecret)})
	})
	// The GET waits once it found the cart in line (its first lookup).
	for deadline := time.Now().Add(10 * time.Second); room.lookups.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the GET did not look the cart up within 10 s")
		}
	}
	started := shop.View{CheckoutID: "c-1", CustomerID: "u-c-1", Status: shop.StatusAwaitingPayment, Currency: "usd", AmountCents: 500}
	answer, _ := json.Marshal(started)
	for _, cart := range []string{"blocker", "c-1"} { // as the dispatcher takes and starts them
		e, ok, err := h.room.Pop(t.Context())
		if err != nil || !ok || e.CartID != cart {
			t.Fatalf("take %s: %+v %v %v", cart, e, ok, err)
		}
		kept := answer
		if cart != "c-1" {
			kept = nil
		}
		if err := h.room.Leave(t.Context(), cart, kept); err != nil {
			t.Fatal(err)
		}
	}
	rec := testenv.Receive(t, "the waiting GET", get)
	var got api.CheckoutView
	if rec.Code != http.StatusOK {
		t.Fatalf("GET after the cart left: %d %s, want 200 with the saga's answer", rec.Code, rec.Body)
	}
	decodeJSON(t, rec, &got)
	if got.CheckoutID != "c-1" || got.Status != shop.StatusAwaitingPayment || got.AmountCents != 500 {
		t.Fatalf("GET after the cart left: %s, want the saga's answer to its start", rec.Body)
	}
}

// countedReads counts every read of Postgres's records a GET can make: the batched read that
// checks a secret (RecordedCheckouts) and the read of one checkout (Checkout).
type countedReads struct {
	countedRecords
	checkouts atomic.Int64
}

func (c *countedReads) Checkout(ctx context.Context, id string) (shop.CheckoutRecord, error) {
	c.checkouts.Add(1)
	return c.CheckoutRecords.Checkout(ctx, id)
}

func (c *countedReads) total() int64 { return c.reads.Load() + c.checkouts.Load() }

// countedLive is a live harness with a worker whose API's reads of records are counted.
func countedLive(t *testing.T) (*live, *countedReads) {
	var records *countedReads
	l := newLive(t, nil, func(_ *api.Config, d *api.Deps) {
		records = &countedReads{countedRecords: countedRecords{CheckoutRecords: d.Records}}
		d.Records = records
	})
	l.startWorker(t)
	return l, records
}

// A buyer's GET of an open checkout reads Postgres once: the read that checks its secret also
// says the checkout is open, so the saga's view answers without a second read for an end
// Postgres recorded (withRecordedEnd). A sale's buyers read their checkouts while they pay.
func TestAGetOfAnOpenCheckoutReadsPostgresOnce(t *testing.T) {
	l, records := countedLive(t)
	sku := l.stockSKU(t, "OPEN-", 10, 99900, 2, "usd")
	id := testenv.RandomID("c-")
	secret := secretOf(t, l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart(id, "u-1", sku, 1))}))
	before := records.total()
	if v := checkoutView(t, l.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + id, header: withSecret(secret)}), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
		t.Fatalf("GET = %+v, want awaiting_payment", v)
	}
	if n := records.total() - before; n != 1 {
		t.Errorf("the GET read Postgres %d times, want 1", n)
	}
}

// A POST reads Postgres's records once, at its door: the 201 signs the new checkout's secret
// with the version the door read, and a retry of an open checkout answers the saga's view
// without a second read for an end Postgres recorded (the door's read found none). A sale's
// buyers retry their POSTs when an answer is slow.
func TestAPostReadsPostgresOnlyAtItsDoor(t *testing.T) {
	l, records := countedLive(t)
	sku := l.stockSKU(t, "DOOR-", 10, 99900, 2, "usd")
	id := testenv.RandomID("c-")
	post := func(want int) string {
		t.Helper()
		before := records.total()
		rec := l.do(t, request{method: http.MethodPost, path: "/v1/checkouts", body: body(cart(id, "u-1", sku, 1))})
		secret := secretOf(t, rec)
		if rec.Code != want || secret == "" {
			t.Fatalf("POST = %d %s, want %d with the secret", rec.Code, rec.Body, want)
		}
		if n := records.total() - before; n != 1 {
			t.Errorf("the POST answered %d read Postgres %d times, want 1", want, n)
		}
		return secret
	}
	if first, again := post(http.StatusCreated), post(http.StatusOK); first != again {
		t.Errorf("the retry's secret %q, want the 201's %q", again, first)
	}
}
