package api_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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

// The door's tests: a cart Postgres recorded is never the room's to answer, whatever Redis
// holds or lost, and nothing of a cart is answered to a request before it is judged against
// the one that created it.

// confirmed records cart as the saga would, paid and confirmed, with its order.
func (h *roomHarness) confirmed(t *testing.T, cart string) string {
	t.Helper()
	ctx := t.Context()
	db := store.New(h.pool)
	if _, err := db.InsertCheckout(ctx, h.record(cart, 1), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordPaymentEvent(ctx, shop.PaymentEvent{Provider: "stripe", EventID: "evt_" + cart, Type: "payment_intent.succeeded",
		CheckoutID: cart, PaymentRef: "pi_" + cart, AmountCents: 500, Currency: "usd", Outcome: string(shop.PaymentSucceeded), Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	orderID, created, err := db.ConfirmOrder(ctx, store.Order{CheckoutID: cart, CustomerID: "u-" + cart,
		Items: []shop.Item{{SKU: h.sku, Quantity: 1, UnitPriceCents: 500}}, AmountCents: 500, Currency: "usd",
		PaymentProvider: "stripe", PaymentRef: "pi_" + cart})
	if err != nil || !created {
		t.Fatalf("confirm the order of %s: %v %v", cart, created, err)
	}
	return orderID
}

// A retried POST of a cart Postgres holds as confirmed, whose Redis markers are gone (they
// expire; Redis can lose them), while carts wait in line: its end answers, from its saga or
// Postgres, never a place in line; its GET answers the end, and its cancel 409. (It was
// queued as a new cart, and its cancel answered 200 with an invented end.)
func TestARetryOfAConfirmedCartAnswersItsEndNotAPlaceInLine(t *testing.T) {
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = temporalForgot(t) })
	cart := testenv.RandomID("c-paid-")
	orderID := h.confirmed(t, cart)
	h.srv.Gate = lua.NewSoldOutFlag(h.stock, time.Millisecond)

	post := checkoutView(t, h.post(t, cart, 1, ""), http.StatusOK)
	if post.Status != shop.StatusConfirmed || post.OrderID == nil || *post.OrderID != orderID || post.CheckoutSecret == "" {
		t.Fatalf("retried POST = %+v, want the confirmed view with order %s and its secret", post, orderID)
	}
	secret := withSecret(post.CheckoutSecret)
	if get := checkoutView(t, h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/" + cart, header: secret}), http.StatusOK); get.Status != shop.StatusConfirmed {
		t.Fatalf("GET = %+v, want confirmed", get)
	}
	problemOf(t, h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/" + cart + "/cancel", body: body(`{}`), header: secret}),
		http.StatusConflict, "already_confirmed")
	if place, err := h.room.Lookup(t.Context(), cart); err != nil || place.InLine() {
		t.Fatalf("the confirmed cart is in line: %+v %v", place, err)
	}
}

// A retried POST of a confirmed cart is answered from Postgres and its saga while the
// room's Redis hangs (it takes connections and never answers): the door asks the room and
// Postgres at once, and a cart Postgres recorded does not wait for the room's word.
func TestARetryOfARecordedCartDoesNotWaitForAHungRoom(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		hung.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			conn, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	rdb := redis.NewClient(&redis.Options{Addr: hung.Addr().String(), ReadTimeout: -1, WriteTimeout: -1})
	t.Cleanup(func() { rdb.Close() })
	h := emptyRoomHarness(t, rdb, 5, 100, func(cfg *api.Config, d *api.Deps) {
		cfg.RequestTimeout = 5 * time.Second
		d.Temporal = temporalForgot(t)
	})
	cart := testenv.RandomID("c-paid-")
	h.confirmed(t, cart)
	if v := checkoutView(t, h.post(t, cart, 1, ""), http.StatusOK); v.Status != shop.StatusConfirmed {
		t.Fatalf("retried POST = %+v, want its confirmed end", v)
	}
	// A new cart needs the room's word: it waits for it, and is 503 when it does not come.
	problemOf(t, h.post(t, testenv.RandomID("c-new-"), 1, ""), http.StatusServiceUnavailable, "service_unavailable")
}

// A retried POST of a cart whose saga runs (recorded open), its Redis markers lost, while
// carts wait in line: its saga answers, not the room.
func TestARetryOfAnOpenCartIsAnsweredByItsSaga(t *testing.T) {
	tc := mocks.NewClient(t)
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })
	cart := testenv.RandomID("c-open-")
	rec := h.record(cart, 1)
	if _, err := store.New(h.pool).InsertCheckout(t.Context(), rec, nil); err != nil {
		t.Fatal(err)
	}
	tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil).Once()
	handle := mocks.NewWorkflowUpdateHandle(t)
	handle.On("Get", mock.Anything, mock.Anything).Run(func(args mock.Arguments) {
		v := shop.ViewFromRecord(rec)
		v.Status = shop.StatusAwaitingPayment
		*args.Get(1).(*workflows.ReservationResult) = workflows.ReservationResult{View: v,
			RequestHash: rec.RequestHash, IdempotencyKey: rec.IdempotencyKey}
	}).Return(nil).Once()
	tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Return(handle, nil).Once()

	if v := checkoutView(t, h.post(t, cart, 1, ""), http.StatusOK); v.Status != shop.StatusAwaitingPayment {
		t.Fatalf("retried POST = %+v, want its saga's awaiting_payment view", v)
	}
}

// snapshotRoom copies the room's keys, as an RDB file would keep them.
func snapshotRoom(t *testing.T, room *lua.Room) map[string]string {
	rdb := testenv.Redis(t)
	snapshot := map[string]string{}
	for _, k := range rdb.Keys(t.Context(), "room:{"+room.Name()+"}:*").Val() {
		if d, err := rdb.Dump(t.Context(), k).Result(); err == nil {
			snapshot[k] = d
		}
	}
	return snapshot
}

// restoreRoom puts the room's keys back as they were in snapshot, in one transaction: Redis
// restarted from an older file, or failed over to a replica that lagged.
func restoreRoom(t *testing.T, room *lua.Room, snapshot map[string]string) {
	rdb := testenv.Redis(t)
	_, err := rdb.TxPipelined(t.Context(), func(pipe redis.Pipeliner) error {
		for _, k := range rdb.Keys(t.Context(), "room:{"+room.Name()+"}:*").Val() {
			pipe.Del(t.Context(), k)
		}
		for k, d := range snapshot {
			pipe.RestoreReplace(t.Context(), k, 0, d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A cart cancelled while it waited stays cancelled after Redis goes back in time and puts it
// back in line: its GET and its retried POST answer the end Postgres recorded. (They
// answered "queued".)
func TestACancelledCartStaysCancelledAfterRedisGoesBackInTime(t *testing.T) {
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = temporalForgot(t) })
	v := queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	before := snapshotRoom(t, h.room)
	cancel := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/c-1/cancel", body: body(`{}`), header: withSecret(v.CheckoutSecret)})
	if got := checkoutView(t, cancel, http.StatusOK); got.Status != shop.StatusCancelled || got.AmountCents != 500 {
		t.Fatalf("cancel = %+v, want cancelled, priced from the catalog", got)
	}
	restoreRoom(t, h.room, before)
	if place, err := h.room.Lookup(t.Context(), "c-1"); err != nil || place.State != shop.PlaceQueued {
		t.Fatalf("the restored room: %+v %v, want c-1 back in line", place, err)
	}

	get := h.do(t, request{method: http.MethodGet, path: "/v1/checkouts/c-1", header: withSecret(v.CheckoutSecret)})
	if got := checkoutView(t, get, http.StatusOK); got.Status != shop.StatusCancelled {
		t.Fatalf("GET after Redis went back in time = %+v, want cancelled (an end is final)", got)
	}
	if got := checkoutView(t, h.post(t, "c-1", 1, ""), http.StatusOK); got.Status != shop.StatusCancelled {
		t.Fatalf("retried POST after Redis went back in time = %+v, want cancelled", got)
	}
	again := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/c-1/cancel", body: body(`{}`), header: withSecret(v.CheckoutSecret)})
	if got := checkoutView(t, again, http.StatusOK); got.Status != shop.StatusCancelled {
		t.Fatalf("a second cancel = %+v, want the same end", got)
	}
	if place, err := h.room.Lookup(t.Context(), "c-1"); err != nil || place.InLine() {
		t.Fatalf("the cancelled cart is still in line after its second cancel: %+v %v", place, err)
	}
}

// A cart that ended in the room answers another body under its Idempotency-Key with 422,
// and another body under another key with 409, showing nothing of the checkout. (Its end
// answered both.)
func TestACartThatEndedInTheRoomIsJudgedBeforeItIsShown(t *testing.T) {
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = temporalForgot(t) })
	v := queued(t, h.post(t, "c-1", 1, "k-1"), http.StatusAccepted)
	cancel := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/c-1/cancel", body: body(`{}`), header: withSecret(v.CheckoutSecret)})
	checkoutView(t, cancel, http.StatusOK)
	problemOf(t, h.post(t, "c-1", 2, "k-1"), http.StatusUnprocessableEntity, "idempotency_key_reused")
	rec := h.post(t, "c-1", 2, "k-2")
	problemOf(t, rec, http.StatusConflict, "checkout_exists")
	if strings.Contains(rec.Body.String(), "u-c-1") {
		t.Errorf("another request was shown the checkout: %s", rec.Body)
	}
}

// browserRoom is a room harness in browser mode: callers are customers with login tokens.
func browserRoom(t *testing.T, tc client.Client) *roomHarness {
	return newRoomHarness(t, 5, 1, 100, func(cfg *api.Config, d *api.Deps) {
		cfg.IdentityTokens = hmacIdentity(t)
		d.Temporal = tc
	})
}

// postFor posts cart for customer with their token (key "" for none).
func (h *roomHarness) postFor(t *testing.T, customer, cart string, qty int64) *httptest.ResponseRecorder {
	t.Helper()
	return h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
		header: map[string]string{"Authorization": "Bearer " + loginToken(t, customer)},
		body:   body(fmt.Sprintf(`{"cart_id":%q,"items":[{"sku":%q,"quantity":%d}]}`, cart, h.sku, qty))})
}

// Another customer's POST of a cart id, whether the cart waits in line or was cancelled
// there (its view kept in Postgres): 409, with no view and no secret. The creator's retry
// still gets both.
func TestAnotherCustomersPostOfACartInTheRoomIsRefused(t *testing.T) {
	h := browserRoom(t, temporalForgot(t))
	v := queued(t, h.postFor(t, "alice", "c-1", 1), http.StatusAccepted)
	refused := func(when string) {
		t.Helper()
		rec := h.postFor(t, "bob", "c-1", 1)
		problemOf(t, rec, http.StatusConflict, "checkout_exists")
		if strings.Contains(rec.Body.String(), "alice") || strings.Contains(rec.Body.String(), "checkout_secret") {
			t.Errorf("%s: bob was shown alice's checkout: %s", when, rec.Body)
		}
	}
	refused("in line")
	if again := queued(t, h.postFor(t, "alice", "c-1", 1), http.StatusAccepted); again.CheckoutSecret != v.CheckoutSecret {
		t.Fatalf("alice's retry in line = %+v, want her secret", again)
	}
	cancel := h.do(t, request{method: http.MethodPost, path: "/v1/checkouts/c-1/cancel", body: body(`{}`), header: withSecret(v.CheckoutSecret)})
	checkoutView(t, cancel, http.StatusOK)
	refused("cancelled in the room")
	mine := checkoutView(t, h.postFor(t, "alice", "c-1", 1), http.StatusOK)
	if mine.Status != shop.StatusCancelled || mine.CheckoutSecret != v.CheckoutSecret {
		t.Fatalf("alice's retry after her cancel = %+v, want the cancelled view and her secret", mine)
	}
}

// Support's cancel reaches a cart waiting in line, as its buyer's does, and records it.
func TestSupportCancelsACartWaitingInLine(t *testing.T) {
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = temporalForgot(t) })
	queued(t, h.post(t, "c-1", 1, ""), http.StatusAccepted)
	rec := h.do(t, request{method: http.MethodPost, path: "/v1/admin/checkouts/c-1/cancel", body: body(`{}`),
		header: map[string]string{"Authorization": "Bearer " + testAdminToken}})
	if v := checkoutView(t, rec, http.StatusOK); v.Status != shop.StatusCancelled || v.Reason == nil || !strings.Contains(*v.Reason, "support") {
		t.Fatalf("support's cancel = %+v, want cancelled by support", v)
	}
	if place, err := h.room.Lookup(t.Context(), "c-1"); err != nil || place.InLine() {
		t.Fatalf("the cancelled cart is still in line: %+v %v", place, err)
	}
}

// Two first POSTs of one cart with different bodies, at the same moment: the second finds
// the first in line and is judged against it (409), never given a place of its own.
func TestTheSecondOfTwoFirstPostsWithAnotherBodyIsRefused(t *testing.T) {
	h := newRoomHarness(t, 5, 1, 100, nil)
	// The first POST's entry is in line (it won the race to the room's script).
	e := shop.RoomEntry{CartID: "c-1", CustomerID: "u-c-1", Items: []shop.CartLine{{SKU: h.sku, Quantity: 1}},
		TimeoutSeconds: 900, IdempotencyKey: "k-first", RequestHash: "the first body"}
	if a, err := h.room.Enter(t.Context(), e, false, 100, 0); err != nil || a.Outcome != shop.RoomQueued {
		t.Fatalf("the first POST's entry: %+v %v", a, err)
	}
	problemOf(t, h.post(t, "c-1", 2, "k-second"), http.StatusConflict, "checkout_exists")
	problemOf(t, h.post(t, "c-1", 2, "k-first"), http.StatusUnprocessableEntity, "idempotency_key_reused")
}

// When the room cannot be asked, a new cart does not pass it: it is told to retry (503),
// and no cart overtakes the carts in line. (It was admitted as if the line were empty.)
func TestANewCartDoesNotPassARoomThatCannotBeAsked(t *testing.T) {
	rdb := redis.NewClient(testenv.Redis(t).Options())
	h := emptyRoomHarness(t, rdb, 5, 100, nil)
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	rec := h.post(t, "c-1", 1, "")
	problemOf(t, rec, http.StatusServiceUnavailable, "service_unavailable")
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	h.assertUntouched(t, h.sku, 5)
}

// One customer's carts in line speak for at most the SKU's max_per_customer: the carts past
// it are 409 customer_limit at the door, and the units they would have spoken for stay free
// for the buyers behind. (Ten accounts of five carts could make a 100-unit drop answer
// out_of_stock to everyone behind them, though the saga would refuse 40 of their 50 carts.)
func TestACustomersCartsInLineCountAtMostTheirLimit(t *testing.T) {
	h := newRoomHarness(t, 7, 1, 100, nil)
	if _, err := h.inv.Set(t.Context(), shop.Product{SKU: h.sku, OnHand: 7, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 2, MaxPerCustomer: 2}}); err != nil {
		t.Fatal(err)
	}
	post := func(cart, customer string) *httptest.ResponseRecorder {
		return h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
			body: body(fmt.Sprintf(`{"cart_id":%q,"customer_id":%q,"items":[{"sku":%q,"quantity":2}]}`, cart, customer, h.sku))})
	}
	queued(t, post("alice-1", "alice"), http.StatusAccepted)
	for i := 2; i <= 5; i++ {
		problemOf(t, post(fmt.Sprint("alice-", i), "alice"), http.StatusConflict, "customer_limit")
	}
	// 7 units, 1 for the cart ahead, 2 for alice's: 4 left for the buyers behind her.
	queued(t, post("bob-1", "bob"), http.StatusAccepted)
	queued(t, post("carol-1", "carol"), http.StatusAccepted)
	problemOf(t, post("dave-1", "dave"), http.StatusConflict, "out_of_stock")
	h.assertUntouched(t, h.sku, 7)
}

// A customer's open checkouts count with their carts in line: carts in line plus open
// checkouts stay within the customer's cap (429 too_many_open_checkouts at the door), and
// the units their open and confirmed checkouts hold or bought count against the SKU's
// max_per_customer (409 customer_limit). (The door counted the line alone: a customer at
// their cap could still put carts in line that speak for units the saga would refuse.)
func TestTheDoorCountsACustomersOpenCheckoutsWithTheirCartsInLine(t *testing.T) {
	h := newRoomHarness(t, 20, 1, 100, func(cfg *api.Config, _ *api.Deps) { cfg.Room.PerCustomer = 2 })
	if _, err := h.inv.Set(t.Context(), shop.Product{SKU: h.sku, OnHand: 20, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 2, MaxPerCustomer: 3}}); err != nil {
		t.Fatal(err)
	}
	db := store.New(h.pool)
	open := func(cart, customer string, qty int64) {
		t.Helper()
		rec := h.record(cart, qty)
		rec.CustomerID = customer
		if _, err := db.InsertCheckout(t.Context(), rec, nil); err != nil {
			t.Fatal(err)
		}
	}
	post := func(cart, customer string, qty int64) *httptest.ResponseRecorder {
		return h.do(t, request{method: http.MethodPost, path: "/v1/checkouts",
			body: body(fmt.Sprintf(`{"cart_id":%q,"customer_id":%q,"items":[{"sku":%q,"quantity":%d}]}`, cart, customer, h.sku, qty))})
	}

	// Alice has one open checkout: one cart in line reaches her cap of two.
	alice := testenv.RandomID("alice-")
	open(alice+"-open", alice, 1)
	queued(t, post(alice+"-1", alice, 1), http.StatusAccepted)
	problemOf(t, post(alice+"-2", alice, 1), http.StatusTooManyRequests, "too_many_open_checkouts")

	// Bob's open checkout holds 2 of the SKU's 3 per customer: a cart of 2 more is refused
	// at the door, a cart of 1 waits.
	bob := testenv.RandomID("bob-")
	open(bob+"-open", bob, 2)
	problemOf(t, post(bob+"-1", bob, 2), http.StatusConflict, "customer_limit")
	queued(t, post(bob+"-2", bob, 1), http.StatusAccepted)

	// An ended checkout counts for neither.
	carol := testenv.RandomID("carol-")
	open(carol+"-ended", carol, 2)
	if _, err := db.RecordOutcomeOrEarlier(t.Context(), store.Outcome{CheckoutID: carol + "-ended", Status: string(shop.StatusCancelled), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	queued(t, post(carol+"-1", carol, 2), http.StatusAccepted)
	queued(t, post(carol+"-2", carol, 1), http.StatusAccepted)
}

// A retry of a recorded cart is not queued behind the starts of new carts: with every place
// of the bound taken (here a start that hangs in Temporal), it is answered by its saga or
// Postgres at once. (It waited in an in-process line for ADMISSION_WAIT_MS, 2 s, then was
// 503 overloaded while the room had space; with a 30 s wait the test saw it wait 10 s.)
func TestARetryOfARecordedCartDoesNotWaitForAPlace(t *testing.T) {
	hung, inside := make(chan struct{}), make(chan struct{})
	tc := temporalForgot(t)
	var calls atomic.Int32
	tc.ExpectedCalls = slices.DeleteFunc(tc.ExpectedCalls, func(c *mock.Call) bool { return c.Method == "UpdateWithStartWorkflow" })
	tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).Run(func(mock.Arguments) {
		if calls.Add(1) == 1 {
			close(inside)
			<-hung
		}
	}).Return(nil, serviceerror.NewNotFound("workflow not found"))
	h := newRoomHarness(t, 5, 1, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })
	first, second := testenv.RandomID("c-paid-"), testenv.RandomID("c-paid-")
	h.confirmed(t, first)
	h.confirmed(t, second)
	done := testenv.Go(func() *httptest.ResponseRecorder { return h.post(t, first, 1, "") })
	defer func() { close(hung); <-done }()
	testenv.Receive(t, "the first retry in Temporal", inside)

	answered := testenv.Go(func() *httptest.ResponseRecorder { return h.post(t, second, 1, "") })
	select {
	case rec := <-answered:
		if v := checkoutView(t, rec, http.StatusOK); v.Status != shop.StatusConfirmed {
			t.Fatalf("the second retry = %+v, want its confirmed end", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the retry of a recorded cart waited for a place of the bound")
	}
}

// TestARetryOfACartThatLeftTheLineIsAnsweredByItsSaga: the runner marks a cart started
// before its saga starts, but the mark can be lost while the room keeps its word (in a Redis
// Cluster they live on different nodes, and a failover loses a node's last writes). A cart
// that left the line for its saga without the mark, retried before the saga recorded or held
// anything, is answered by its
// saga, as the room's word that it left says: not refused out of stock by the sold-out gate,
// and not put in line a second time, where it would speak for its units again.
func TestARetryOfACartThatLeftTheLineIsAnsweredByItsSaga(t *testing.T) {
	for _, stock := range []string{"sold out", "on sale"} {
		t.Run(stock, func(t *testing.T) {
			tc := mocks.NewClient(t)
			h := emptyRoomHarness(t, testenv.Redis(t), 2, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })
			ctx := t.Context()
			cart := testenv.RandomID("c-left-")
			e := shop.RoomEntry{CartID: cart, CustomerID: "u-" + cart, Items: []shop.CartLine{{SKU: h.sku, Quantity: 1}},
				TimeoutSeconds: 900, IdempotencyKey: cart, RequestHash: h.record(cart, 1).Fingerprint.RequestHash}
			if a, err := h.room.Enter(ctx, e, false, 100, 0); err != nil || a.Outcome != shop.RoomQueued {
				t.Fatalf("enter %s: %+v %v", cart, a, err)
			}
			if got, ok, err := h.room.Pop(ctx); err != nil || !ok || got.CartID != cart {
				t.Fatalf("take %s: %+v %v %v", cart, got, ok, err)
			}
			if err := h.room.Leave(ctx, cart, nil); err != nil { // its saga started; no mark
				t.Fatal(err)
			}
			h.enterBlocker(t, 1, 100) // a new cart would wait behind it
			if stock == "sold out" {
				if _, err := h.inv.Set(ctx, shop.Product{SKU: h.sku, OnHand: 0, SaleTerms: shop.SaleTerms{PriceCents: 500, Currency: "usd", MaxPerOrder: 5}}); err != nil {
					t.Fatal(err)
				}
			}
			// The saga is asked (update-with-start attaches to it); here Temporal is down.
			tc.On("NewWithStartWorkflowOperation", mock.Anything, mock.Anything, mock.Anything).Return(nil).Once()
			tc.On("UpdateWithStartWorkflow", mock.Anything, mock.Anything).
				Return(nil, serviceerror.NewUnavailable("temporal is down")).Once()

			rec := h.post(t, cart, 1, "")
			if rec.Code != http.StatusServiceUnavailable {
				t.Fatalf("retried POST of a cart that left the line: %d %s, want its saga's answer (503: Temporal down)", rec.Code, rec.Body)
			}
			if place, err := h.room.Lookup(ctx, cart); err != nil || place.InLine() {
				t.Fatalf("the room took the cart again: %+v %v", place, err)
			}
			if st, err := h.room.Status(ctx); err != nil || st.Waiting != 1 || st.SpokenFor[h.sku] != 1 {
				t.Fatalf("the room's books: %+v %v, want the blocker alone, speaking for its unit", st, err)
			}
		})
	}
}

// unmarkableGate is the stock's gate on a Redis that refuses the start's mark.
type unmarkableGate struct{ api.Gate }

func (unmarkableGate) MarkStarted(context.Context, string) error {
	return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}

// TestNoSagaStartsWithoutItsStartMark: until Postgres records a cart, the mark of its start
// is what sends a retry of its POST to its saga. A cart that passes the door with no mark
// would leave a retry to the gate (409 out_of_stock while its saga holds a unit) or to the
// room, so a mark Redis refuses is a 503 with nothing started; the buyer's retry starts it.
func TestNoSagaStartsWithoutItsStartMark(t *testing.T) {
	tc := mocks.NewClient(t) // no saga may be started: any call to Temporal fails the test
	h := emptyRoomHarness(t, testenv.Redis(t), 2, 100, func(_ *api.Config, d *api.Deps) { d.Temporal = tc })
	h.srv.Gate = unmarkableGate{h.stock}
	rec := h.post(t, "c-unmarked", 1, "")
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("POST whose start cannot be marked: %d %s, want 503 and no saga", rec.Code, rec.Body)
	}
	if place, err := h.room.Lookup(t.Context(), "c-unmarked"); err != nil || place.State != shop.PlaceNone {
		t.Fatalf("the room after the refused start: %+v %v, want it not to know the cart", place, err)
	}
}
