package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The waiting room. A flash sale's crowd arrives in one second; the API can start only so
// many sagas at once (admission.go). A cart that cannot start now waits in a line shared by
// every API replica (lua.Room), in the order it first arrived, holding nothing, and its POST
// is answered 202 at once with its place. Each replica takes carts from the head whenever it
// has a free place (RunWaitingRoom) and starts their sagas. A cart whose units are all spoken
// for by the carts ahead is answered 409 at once; one that finds its SKU sold out at its turn
// ends 409 without a saga. The reserve script stays the judge of every hold.

// WaitingRoom is the line of carts waiting for their saga (lua.Room).
type WaitingRoom interface {
	// Enter asks for the cart to pass (mayPass and an empty line), be queued, or be told
	// the room is full or its units are spoken for.
	Enter(ctx context.Context, e shop.RoomEntry, mayPass bool, size, perCustomer int64) (shop.RoomAnswer, error)
	// Pop takes the head of the line under a lease; false when the line is empty.
	Pop(ctx context.Context) (shop.RoomEntry, bool, error)
	// Leave forgets a cart whose saga started; answer (JSON, or nil) is kept a short while
	// for the GET that waited for it (RoomPlace.Answer).
	Leave(ctx context.Context, cartID string, answer []byte) error
	Retry(ctx context.Context, cartID string) error // its saga could not start now
	Refuse(ctx context.Context, end shop.RoomEnd) error
	// Cancel ends a waiting cart; record keeps the end first (see Server.recordRoomEnd).
	// Not cancelled, place is what the room knows of the cart instead.
	Cancel(ctx context.Context, cartID string, record func(*shop.RoomEnd) error) (end shop.RoomEnd, place shop.RoomPlace, cancelled bool, err error)
	Lookup(ctx context.Context, cartID string) (shop.RoomPlace, error)
	Served(ctx context.Context) (int64, error) // carts ever taken from the line
}

// DefaultWaitingPerCustomer is how many carts one customer may have in the waiting room at
// once, as many as open checkouts (MAX_OPEN_CHECKOUTS_PER_CUSTOMER's default).
const DefaultWaitingPerCustomer = 5

// DefaultWaitingRoomSize holds a 70,000-buyer drop with room to spare: a waiting cart costs
// Redis about 300 bytes.
const DefaultWaitingRoomSize = 100_000

// QueuedView is the answer for a cart in the waiting room (POST's 202, GET while it waits).
type QueuedView struct {
	CheckoutID      string      `json:"checkout_id"`
	Status          string      `json:"status"` // "queued"
	Position        int64       `json:"position"`
	EstimatedWaitMS int64       `json:"estimated_wait_ms"`
	Links           QueuedLinks `json:"links"`
	CheckoutSecret  string      `json:"checkout_secret,omitempty"`
}

// QueuedLinks point at the waiting cart in the API (it has no saga to see in Temporal yet).
type QueuedLinks struct {
	Self string `json:"self"`
}

// enterRoom puts a new cart in the room unless it may start its saga now. When the cart
// passes it returns the place to release once the saga's reservation is answered; otherwise
// answered is true and err is the answer's error, if any (202, 409 or 503 sent). Without a
// room, when Redis cannot answer, or for a retry of a cart known to have a saga (which
// answers it, see gate; a cart the room would refuse is asked about in Postgres too), the
// request waits for a place as before the room.
func (s *Server) enterRoom(c echo.Context, e shop.RoomEntry, retry bool) (release func(), answered bool, err error) {
	ctx := c.Request().Context()
	var a shop.RoomAnswer
	if s.Room != nil && !retry {
		release = s.admission.tryAcquire()
		a, err = s.Room.Enter(ctx, e, release != nil, s.cfg.WaitingRoomSize, s.cfg.WaitingPerCustomer)
		if err != nil {
			s.Logger.Warn("waiting room unreachable; admitting as without it", "checkout_id", e.CartID, "error", err)
			a.Outcome = shop.RoomPass
		}
		if (a.Outcome == shop.RoomShort || a.Outcome == shop.RoomBusy) && s.recordedCart(ctx, e.CartID) {
			// The room refuses new carts (it wrote nothing). This one Postgres recorded: a
			// retry whose Redis markers are gone (the gate let it through, as its units
			// looked free), whose saga answers, whatever units the line speaks for.
			if release != nil {
				release()
				release = nil
			}
			retry = true
		}
	}
	if a.Outcome == shop.RoomPass && release != nil {
		return release, false, nil
	}
	if s.Room == nil || retry || a.Outcome == shop.RoomPass {
		release, p := s.admit(ctx)
		if p != nil {
			return nil, true, p
		}
		return release, false, nil
	}
	if release != nil {
		release()
	}
	switch a.Outcome {
	case shop.RoomQueued:
		s.ringRoom()
		return nil, true, s.answerQueued(c, a.Entry, a.Position, e.IdempotencyKey, http.StatusAccepted)
	case shop.RoomShort:
		return nil, true, outOfStock(a.Shortages)
	case shop.RoomBusy:
		r := rejections[shop.RejectTooManyOpen]
		return nil, true, problem(r.status, r.code, r.detail)
	default: // shop.RoomFull
		p := problem(http.StatusServiceUnavailable, "waiting_room_full", "the waiting room is full; retry shortly")
		p.retryAfter = 5
		return nil, true, p
	}
}

// recordedCart reports whether Postgres recorded the cart (so it has, or had, a saga); false
// when it cannot tell, which keeps a refusal.
func (s *Server) recordedCart(ctx context.Context, cartID string) bool {
	if s.recorded == nil {
		return false
	}
	_, recorded, err := s.recorded.recorded(ctx, cartID)
	return err == nil && recorded
}

// answerRoom answers a POST of a cart the room knows: still waiting (202 with its place, if
// the body is the one it entered with), or ended in the room (its end).
func (s *Server) answerRoom(c echo.Context, place shop.RoomPlace, hash, key string) error {
	if place.End != nil {
		return s.answerRoomEnd(c, *place.End)
	}
	e := place.Entry
	if e == nil { // taken and started between the two reads: the saga answers
		return nil
	}
	if e.RequestHash != hash {
		if e.IdempotencyKey == key {
			return keyReused(key)
		}
		return problem(http.StatusConflict, "checkout_exists",
			"cart "+e.CartID+" is already checking out with different contents; use a new cart_id")
	}
	return s.answerQueued(c, *e, place.Position, key, http.StatusAccepted)
}

// answerQueued is the 202 (or a GET's 200) of a waiting cart. The checkout's secret goes
// only to requests under the key the cart entered with, as for a created checkout.
func (s *Server) answerQueued(c echo.Context, e shop.RoomEntry, position int64, key string, status int) error {
	v := QueuedView{
		CheckoutID: e.CartID, Status: "queued", Position: position,
		EstimatedWaitMS: s.estimateWait(position),
		Links:           QueuedLinks{Self: "/v1/checkouts/" + e.CartID},
	}
	if key != "" && key == e.IdempotencyKey {
		v.CheckoutSecret = s.secrets.sign(e.CartID)
	}
	c.Response().Header().Set(echo.HeaderLocation, v.Links.Self)
	c.Response().Header().Set("Retry-After", "1")
	return c.JSON(status, v)
}

// answerRoomEnd answers a cart that ended in the room: 409 for one refused for stock at its
// turn, the cancelled view for one cancelled while it waited.
func (s *Server) answerRoomEnd(c echo.Context, end shop.RoomEnd) error {
	if end.Status == shop.StatusOutOfStock {
		return outOfStock(end.Shortages)
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/checkouts/"+end.Entry.CartID)
	return c.JSON(http.StatusOK, s.present(roomView(end)))
}

// errSagaRecorded: Postgres recorded the cart for a saga, so it is not the room's to end.
var errSagaRecorded = errors.New("a saga recorded the cart")

// recordRoomEnd keeps the end of a cart that ended in the room in Postgres, priced from the
// catalog, before the room (in Redis) writes it. Redis can go back in time (a restart from an
// older snapshot, a failover that lost writes) and put the cart back in line; its saga then
// finds this end, adopts it and holds nothing, so the buyer's answer stands. An end recorded
// before stands: end takes its status. A cart a saga recorded is errSagaRecorded.
func (s *Server) recordRoomEnd(ctx context.Context, end *shop.RoomEnd) error {
	skus := make([]string, len(end.Entry.Items))
	for i, it := range end.Entry.Items {
		skus[i] = it.SKU
	}
	products, err := s.Catalog.Products(ctx, skus)
	if err != nil {
		return err
	}
	rec := shop.CheckoutRecord{CheckoutID: end.Entry.CartID, CustomerID: end.Entry.CustomerID,
		Status: string(end.Status), Reason: roomEndReason(end.Status)}
	for _, it := range end.Entry.Items {
		// Every SKU is in the catalog: a cart enters the room only after the catalog knew its
		// SKUs, and SKUs are never deleted (checkout_items' foreign key would refuse the end).
		p := products[it.SKU]
		rec.Currency = cmp.Or(rec.Currency, p.Currency)
		rec.AmountCents += p.PriceCents * it.Quantity
		rec.Items = append(rec.Items, shop.Item{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: p.PriceCents})
	}
	status, err := s.Records.RecordEnd(ctx, rec)
	switch {
	case err != nil:
		return err
	case status == shop.RecordOpen:
		return errSagaRecorded
	case shop.Status(status) != end.Status:
		end.Status, end.Shortages = shop.Status(status), nil
	}
	return nil
}

func roomEndReason(status shop.Status) string {
	if status == shop.StatusCancelled {
		return "cancelled by the customer while waiting in the waiting room"
	}
	return "sold out when its turn in the waiting room came"
}

// roomView is the checkout view of a cart that ended in the room: no saga, nothing held,
// no price taken.
func roomView(end shop.RoomEnd) shop.View {
	reason := roomEndReason(end.Status)
	v := shop.View{CheckoutID: end.Entry.CartID, WorkflowID: shop.WorkflowID(end.Entry.CartID),
		Status: end.Status, CustomerID: end.Entry.CustomerID, Reason: &reason, Shortages: end.Shortages}
	for _, it := range end.Entry.Items {
		v.Items = append(v.Items, shop.Item{SKU: it.SKU, Quantity: it.Quantity})
	}
	return v
}

func outOfStock(shortages []shop.Shortage) *Problem {
	p := problem(http.StatusConflict, "out_of_stock", "some items cannot be held; nothing was held")
	p.Shortages = append([]shop.Shortage(nil), shortages...)
	sort.Slice(p.Shortages, func(i, j int) bool { return p.Shortages[i].SKU < p.Shortages[j].SKU })
	return p
}

// roomPlace is what the room knows of a cart; nothing without a room or when Redis cannot
// answer (then the saga and Postgres answer, as for any cart).
func (s *Server) roomPlace(ctx context.Context, cartID string) shop.RoomPlace {
	place, _ := s.lookupRoom(ctx, cartID)
	return place
}

// lookupRoom is roomPlace, with the error when Redis could not answer.
func (s *Server) lookupRoom(ctx context.Context, cartID string) (shop.RoomPlace, error) {
	if s.Room == nil {
		return shop.RoomPlace{}, nil
	}
	place, err := s.Room.Lookup(ctx, cartID)
	if err != nil {
		s.Logger.Warn("waiting room lookup", "checkout_id", cartID, "error", err)
		return shop.RoomPlace{}, err
	}
	return place, nil
}

// unknownToSaga answers a GET or cancel of a cart that neither Temporal nor Postgres knows
// (err is their answer): a cart taken from the line whose saga is not there yet is still
// waiting; one the room could not be asked about may be waiting, so the caller retries.
func (s *Server) unknownToSaga(c echo.Context, err error, place shop.RoomPlace, roomErr error) error {
	var p *Problem
	if !errors.As(err, &p) || p.Status != http.StatusNotFound {
		return err
	}
	switch {
	case place.Leaving && place.Entry != nil:
		return s.answerQueued(c, *place.Entry, 0, "", http.StatusOK)
	case roomErr != nil:
		return unavailable("redis", roomErr)
	}
	return err
}

// awaitRoom waits up to d for the cart to leave the line (its saga started, or its end in
// the room), and returns what the room then knows. It looks the cart up again only when the
// cart may have moved (roomCount.untilMoved). If Redis stops answering meanwhile, it returns
// what the room said last, with the error: a GET must not take a cart it could not look up
// for one that does not exist.
func (s *Server) awaitRoom(ctx context.Context, cartID string, place shop.RoomPlace, d time.Duration) (shop.RoomPlace, error) {
	deadline := time.Now().Add(d)
	for (place.Queued || place.Leaving) && time.Now().Before(deadline) {
		if !s.roomCount.untilMoved(ctx, place, deadline) {
			return place, nil
		}
		next, err := s.lookupRoom(ctx, cartID)
		if err != nil {
			return place, err
		}
		place = next
	}
	return place, nil
}

// answerRoomGet answers a GET of a cart the room knows, once it waited; false when the cart
// has left the line for its saga, or is being started, which the saga then answers (a
// replica that could not tell the room its start went through leaves the cart marked as
// being started: the saga is the truth).
func (s *Server) answerRoomGet(c echo.Context, place shop.RoomPlace) (bool, error) {
	switch {
	case place.End != nil:
		return true, s.answerRoomEnd(c, *place.End)
	case place.Queued && place.Entry != nil:
		return true, s.answerQueued(c, *place.Entry, place.Position, "", http.StatusOK)
	}
	return false, nil
}

func (s *Server) ringRoom() {
	select {
	case s.roomBell <- struct{}{}:
	default:
	}
}

// roomIdle is how long a replica with a free place waits before it looks at an empty line
// again, when no cart entered through it; each look that finds the line empty doubles the
// wait, up to roomIdleMax. A cart that enters through a replica rings it at once; one that
// entered through another replica, whose places are all taken, waits at most roomIdleMax for
// this one. Looking every 20 ms, each idle replica ran 50 take scripts a second in the room's
// one Redis slot.
const (
	roomIdle    = 20 * time.Millisecond
	roomIdleMax = 320 * time.Millisecond
)

// RunWaitingRoom starts the sagas of the carts in the room, from the head of the line, each
// time this replica has a place free, until ctx ends. Every replica runs it; the room's lease
// brings back at its place a cart whose replica died while starting it.
func (s *Server) RunWaitingRoom(ctx context.Context) {
	if s.Room == nil {
		return
	}
	go s.roomCount.follow(ctx, s.Room.Served)
	var starts sync.WaitGroup
	defer starts.Wait()
	idle := roomIdle
	for ctx.Err() == nil {
		release, err := s.admission.acquire(ctx, time.Second)
		if err != nil {
			sleep(ctx, roomIdle)
			continue
		}
		e, ok, err := s.Room.Pop(ctx)
		if err != nil || !ok {
			release()
			if err != nil && ctx.Err() == nil {
				s.Logger.Warn("waiting room: take", "error", err)
			}
			select {
			case <-ctx.Done():
			case <-s.roomBell:
				idle = roomIdle
			case <-time.After(idle):
				idle = min(2*idle, roomIdleMax)
			}
			continue
		}
		idle = roomIdle
		starts.Add(1)
		go func() {
			defer starts.Done()
			defer release()
			if !s.startFromRoom(ctx, e) {
				sleep(ctx, time.Second) // no worker, or Temporal down: do not spin on the head
			}
		}()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// roomPutBackTimeout bounds the put-back of a cart whose start failed; if it cannot be put
// back, its lease brings it back.
const roomPutBackTimeout = 5 * time.Second

// startFromRoom starts the saga of a cart taken from the line; it reports false when the
// cart went back in line because its saga could not start now.
func (s *Server) startFromRoom(base context.Context, e shop.RoomEntry) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(base), s.cfg.RequestTimeout)
	defer cancel()
	log := s.Logger.With("checkout_id", e.CartID)
	back := func(why string, err error) bool {
		log.Warn("waiting room: cart back in line", "why", why, "error", err)
		// Its own time: a start that timed out has used up ctx.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(base), roomPutBackTimeout)
		defer cancel()
		if err := s.Room.Retry(ctx, e.CartID); err != nil {
			log.Warn("waiting room: put back", "error", err) // its lease brings it back
		}
		return false
	}
	// Only a cart taken for the first time may be refused here: a cart taken again may have
	// a saga that holds its units (a replica started it and could not tell the room, or Redis
	// lost the word), and that saga answers, through update-with-start below.
	if s.Gate != nil && e.Taken <= 1 {
		items := make(map[string]int64, len(e.Items))
		for _, it := range e.Items {
			items[it.SKU] = it.Quantity
		}
		if pre, err := s.Gate.Precheck(ctx, e.CartID, items); err == nil && pre.SoldOut() && !pre.Seen && !s.sagaMayExist(ctx, e.CartID) {
			var short []shop.Shortage
			for _, sh := range pre.Shortages {
				short = append(short, shop.Shortage{SKU: sh.SKU, Requested: sh.Requested, Available: sh.Available})
			}
			end := shop.RoomEnd{Status: shop.StatusOutOfStock, Entry: e, Shortages: short}
			switch err := s.recordRoomEnd(ctx, &end); {
			case errors.Is(err, errSagaRecorded): // its saga answers, through the start below
			case err != nil:
				return back("record its end", err)
			default:
				if err := s.Room.Refuse(ctx, end); err != nil {
					return back("refuse", err)
				}
				return true
			}
		}
	}
	if p := s.requireWorker(ctx); p != nil {
		return back(p.Code, nil)
	}
	if s.Gate != nil {
		if err := s.Gate.MarkStarted(ctx, e.CartID); err != nil {
			log.Warn("mark checkout started", "error", err)
		}
	}
	in := workflows.Input{
		CheckoutID: e.CartID, CustomerID: e.CustomerID, Items: e.Items,
		PaymentTimeoutSeconds: e.TimeoutSeconds, RequestID: newRequestID(),
		RequestHash: e.RequestHash, IdempotencyKey: e.IdempotencyKey,
	}
	var answer []byte
	res, err := s.reserve(ctx, in)
	if err != nil {
		var p *Problem
		if errors.As(err, &p) && p.Status < 500 {
			// The saga exists and answered (a limit on its updates, say): the cart has left.
			log.Warn("waiting room: start answered", "error", err)
		} else {
			return back("start", err)
		}
	} else if res.View.CheckoutID == e.CartID {
		// The waiting GET answers with it, instead of asking the saga a moment later.
		answer, _ = json.Marshal(res.View)
	}
	if err := s.Room.Leave(ctx, e.CartID, answer); err != nil {
		log.Warn("waiting room: leave", "error", err) // its lease brings it back; a second start is harmless
	}
	return true
}

// sagaMayExist reports whether the cart may have a saga: Temporal knows its workflow, or
// cannot say. Redis can lose the room's word that a cart was taken and started (a failover
// that lost its last writes puts it back in line as new) together with its hold: a refusal
// by the gate would then hide the saga that holds its units.
func (s *Server) sagaMayExist(ctx context.Context, cartID string) bool {
	_, err := s.Temporal.DescribeWorkflowExecution(ctx, shop.WorkflowID(cartID), "")
	return !isNotFound(err)
}

// estimateWait is how long a cart at position should wait: its place over the rate carts
// leave the room. Before any rate is measured (the first second of a sale) it is the
// admission bound's own pace: the bound's places, each freed in about the target latency.
func (s *Server) estimateWait(position int64) int64 {
	if position <= 0 {
		return 0
	}
	rate := s.roomCount.rate()
	if rate < 1 {
		limit, _ := s.admission.current()
		rate = float64(max(limit, 1)) / s.cfg.AdmissionTarget.Seconds()
	}
	return int64(math.Ceil(float64(position) / rate * 1000))
}

// cancelInRoom cancels a cart that waits in the room, or answers the end it had there;
// answered is false when the saga must answer: the room does not know the cart, is starting
// its saga (place.Leaving), or could not be asked (roomErr).
func (s *Server) cancelInRoom(c echo.Context, cartID string) (place shop.RoomPlace, roomErr error, answered bool, err error) {
	if s.Room == nil {
		return place, nil, false, nil
	}
	ctx := c.Request().Context()
	var recordErr error
	end, place, cancelled, roomErr := s.Room.Cancel(ctx, cartID, func(end *shop.RoomEnd) error {
		recordErr = s.recordRoomEnd(ctx, end)
		return recordErr
	})
	switch {
	case errors.Is(recordErr, errSagaRecorded):
		// Redis lost the word that the cart left for its saga: the saga answers the cancel
		// once the cart is taken again (or at once, if it runs).
		return shop.RoomPlace{Leaving: true}, nil, false, nil
	case recordErr != nil:
		return shop.RoomPlace{}, nil, true, unavailable("postgres", recordErr)
	case roomErr != nil:
		s.Logger.Warn("waiting room cancel", "checkout_id", cartID, "error", roomErr)
		return place, roomErr, false, nil
	case cancelled:
		return place, nil, true, c.JSON(http.StatusOK, s.present(roomView(end)))
	case place.End != nil:
		return place, nil, true, c.JSON(http.StatusOK, s.present(roomView(*place.End)))
	}
	return place, nil, false, nil
}

// checkoutStarting answers a cancel of a cart whose saga is being started this moment.
func checkoutStarting() *Problem {
	p := problem(http.StatusServiceUnavailable, "checkout_starting", "the checkout is leaving the waiting room; retry shortly")
	p.retryAfter = 1
	return p
}
