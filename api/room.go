package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The waiting room's answers (the room itself is package room): a new cart that cannot
// start its saga now waits in the line (enterRoom, 202), a GET of a waiting cart answers its
// place, a cancel in line records its end in Postgres, and startFromLine starts the saga of a
// cart the room's runner took from the line. A cart Postgres recorded is answered by its saga
// or from Postgres, whatever Redis holds or lost (door.go); the room keeps no ends.

// QueuedView is the answer for a cart in the waiting room (POST's 202, GET while it waits).
type QueuedView struct {
	CheckoutID      string `json:"checkout_id"`
	Status          string `json:"status"` // "queued", or "waiting_for_sale"
	Position        int64  `json:"position"`
	EstimatedWaitMS int64  `json:"estimated_wait_ms"`
	// RefreshAfterMS is when the client should ask again (a GET with ?wait answers sooner
	// when the cart leaves the line).
	RefreshAfterMS int64 `json:"refresh_after_ms"`
	// SaleStartsAt is the start of the cart's sale, while it waits for it
	// (status "waiting_for_sale").
	SaleStartsAt   *time.Time  `json:"sale_starts_at,omitempty"`
	Links          QueuedLinks `json:"links"`
	CheckoutSecret string      `json:"checkout_secret,omitempty"`
}

// QueuedLinks point at the waiting cart in the API (it has no saga to see in Temporal yet).
type QueuedLinks struct {
	Self string `json:"self"`
}

// enterRoom puts a new cart in the room unless it may start its saga now. When the cart
// passes it returns the place to release once the saga's reservation is answered; otherwise
// answered is true and err is the answer (202, 409, 429 or 503). Without a room a cart past
// the bound is 503 overloaded. When the room cannot be asked, no cart passes it:
// the caller retries (503), and the carts in line keep their order.
func (s *Server) enterRoom(c echo.Context, in workflows.Input, rules saleRules, f doorFacts) (release func(), answered bool, err error) {
	ctx := c.Request().Context()
	if s.Room == nil && rules.beforeSale() {
		return nil, true, problem(http.StatusConflict, "sale_not_started", "the sale of this cart's SKUs has not started")
	}
	if s.Room == nil {
		if release = s.admission.TryAcquire(); release == nil {
			return nil, true, overloaded()
		}
		return release, false, nil
	}
	e := shop.RoomEntry{
		CartID: in.CheckoutID, CustomerID: in.CustomerID, Items: in.Items, TimeoutSeconds: in.PaymentTimeoutSeconds,
		IdempotencyKey: in.IdempotencyKey, RequestHash: in.RequestHash, Caller: in.Caller,
	}
	e.MaxPerCustomer, e.Available, e.Standing = rules.maxPerCustomer, f.available, f.standing
	if !rules.startsAt.IsZero() {
		e.StartsAt = rules.startsAt.UnixMilli()
	}
	release = s.admission.TryAcquire()
	a, err := s.Room.Enter(ctx, e, release != nil, s.cfg.Room.Size, s.cfg.Room.PerCustomer)
	if err == nil && a.Outcome == shop.RoomPass {
		return release, false, nil
	}
	if release != nil {
		release()
	}
	switch {
	case err != nil:
		return nil, true, unavailable("redis", err)
	case a.Outcome == shop.RoomQueued || a.Outcome == shop.RoomEarly:
		return nil, true, s.answerEntered(c, in, a, f.secretVersion)
	}
	return nil, true, roomRefusal(a)
}

// answerEntered answers a POST whose cart the room has in line, or waiting for its sale:
// another request of the cart may have put it there a moment before this one. secretVersion
// is the cart's, as the door read it.
func (s *Server) answerEntered(c echo.Context, in workflows.Input, a shop.RoomAnswer, secretVersion int64) error {
	switch a.Entry.Creator().Judge(fingerprint(in)) {
	case shop.KeyReused:
		return keyReused(in.IdempotencyKey)
	case shop.OtherRequest:
		return checkoutExists(in.CheckoutID)
	}
	s.runner.Ring()
	place := shop.RoomPlace{State: shop.PlaceQueued, Position: a.Position, Entry: &a.Entry}
	if a.Outcome == shop.RoomEarly {
		place.State = shop.PlaceEarly
	}
	return s.answerQueued(c, place, s.creatorSecret(a.Entry, in.IdempotencyKey, secretVersion), http.StatusAccepted)
}

// roomRefusal is the answer to a cart the room would not take.
func roomRefusal(a shop.RoomAnswer) *Problem {
	switch a.Outcome {
	case shop.RoomShort:
		return outOfStock(a.Shortages)
	case shop.RoomBusy:
		r := rejections[shop.RejectTooManyOpen]
		return problem(r.status, r.code, r.detail)
	case shop.RoomLimit:
		r := rejections[shop.RejectCustomerLimit]
		return problem(r.status, r.code, r.detail+" ("+a.SKU+", counting the customer's carts in line)")
	default: // shop.RoomFull
		p := problem(http.StatusServiceUnavailable, "waiting_room_full", "the waiting room is full; retry shortly")
		p.retryAfter = 5
		return p
	}
}

// overloaded answers a new cart past the bound of an API without a waiting room.
func overloaded() *Problem {
	metrics.Shed.Inc()
	p := problem(http.StatusServiceUnavailable, "overloaded", "too many checkouts are starting right now; retry shortly")
	p.retryAfter = 1
	return p
}

// answerQueued is the 202 (or a GET's 200) of a waiting cart, with its secret ("" for none:
// see creatorSecret).
func (s *Server) answerQueued(c echo.Context, place shop.RoomPlace, secret string, status int) error {
	e := *place.Entry
	wait := s.runner.EstimateWait(place.Position)
	v := QueuedView{
		CheckoutID: e.CartID, Status: "queued", Position: place.Position,
		EstimatedWaitMS: wait, RefreshAfterMS: refreshAfter(wait),
		Links: QueuedLinks{Self: "/v1/checkouts/" + e.CartID},
	}
	if place.State == shop.PlaceEarly {
		// Waiting for its sale: its place comes at the start, drawn at random.
		starts := time.UnixMilli(e.StartsAt).UTC()
		wait = max(time.Until(starts).Milliseconds(), 0)
		v.Status, v.Position, v.SaleStartsAt = "waiting_for_sale", 0, &starts
		v.EstimatedWaitMS, v.RefreshAfterMS = wait, refreshAfter(wait)
	}
	v.CheckoutSecret = secret
	c.Response().Header().Set(echo.HeaderLocation, v.Links.Self)
	c.Response().Header().Set("Retry-After", "1")
	return c.JSON(status, v)
}

// creatorSecret is a waiting cart's secret, at version, for a POST under key: "" unless key is
// the one the cart entered with, as for a created checkout. The version is the door's read,
// with the cart's record: a revocation committed before the POST arrived is in it.
func (s *Server) creatorSecret(e shop.RoomEntry, key string, version int64) string {
	if key == "" || key != e.IdempotencyKey {
		return ""
	}
	return s.secrets.sign(e.CartID, version)
}

// saleRules are what the room must know of a cart's SKUs: each SKU's max_per_customer (for
// the SKUs that have one), and when the cart's sale starts (the latest sale_starts_at of its
// SKUs; zero when on sale).
type saleRules struct {
	maxPerCustomer map[string]int64
	startsAt       time.Time
}

// beforeSale reports whether the cart's sale has not started by now (the API's clock; the
// room judges by Redis's, the one clock of every replica).
func (r saleRules) beforeSale() bool { return !r.startsAt.IsZero() && time.Now().Before(r.startsAt) }

// rulesOf reads the cart's sale rules from the catalog (its cache answers: checkCatalog just
// read the same SKUs).
func (s *Server) rulesOf(ctx context.Context, items []shop.CartLine) (saleRules, error) {
	skus := make([]string, len(items))
	for i, it := range items {
		skus[i] = it.SKU
	}
	products, err := s.Catalog.Products(ctx, skus)
	if err != nil {
		return saleRules{}, unavailable("postgres", err)
	}
	r := saleRules{maxPerCustomer: map[string]int64{}}
	for sku, p := range products {
		if p.MaxPerCustomer > 0 {
			r.maxPerCustomer[sku] = p.MaxPerCustomer
		}
		if p.SaleStartsAt != nil && p.SaleStartsAt.After(r.startsAt) {
			r.startsAt = *p.SaleStartsAt
		}
	}
	return r, nil
}

// recordRoomEnd records in Postgres, priced from the catalog, the end of a cart cancelled
// while it waited (by "customer" or "support"), before the cart leaves the line: Redis can go
// back in time (a restart from an older snapshot, a failover that lost writes) and put the
// cart back in line, and its saga then finds this end, adopts it and holds nothing. It
// returns the status Postgres holds: cancelled, an end recorded before, or shop.RecordOpen
// when a saga recorded the cart (the saga answers then).
func (s *Server) recordRoomEnd(ctx context.Context, e shop.RoomEntry, by string) (string, error) {
	skus := make([]string, len(e.Items))
	for i, it := range e.Items {
		skus[i] = it.SKU
	}
	products, err := s.Catalog.Products(ctx, skus)
	if err != nil {
		return "", err
	}
	rec := shop.CheckoutRecord{CheckoutID: e.CartID, CustomerID: e.CustomerID, Status: string(shop.StatusCancelled),
		Reason: "cancelled by " + by + " while waiting in the waiting room", Fingerprint: e.Creator()}
	for _, it := range e.Items {
		// Every SKU is in the catalog: a cart enters the room only after the catalog knew its
		// SKUs, and SKUs are never deleted (checkout_items' foreign key would refuse the end).
		p := products[it.SKU]
		rec.Currency = cmp.Or(rec.Currency, p.Currency)
		rec.AmountCents += p.PriceCents * it.Quantity
		rec.Items = append(rec.Items, shop.Item{SKU: it.SKU, Quantity: it.Quantity, UnitPriceCents: p.PriceCents})
	}
	return s.Records.RecordEnd(ctx, rec)
}

func outOfStock(shortages []shop.Shortage) *Problem {
	p := problem(http.StatusConflict, "out_of_stock", "some items cannot be held; nothing was held")
	p.Shortages = append([]shop.Shortage(nil), shortages...)
	sort.Slice(p.Shortages, func(i, j int) bool { return p.Shortages[i].SKU < p.Shortages[j].SKU })
	return p
}

// unrecordedPlace is the room's place of a cart in line, or nothing when Postgres recorded
// the cart: then its saga or Postgres answers. read is a read of the cart's record made after
// the room's place was (nil: none yet; it reads one).
func (s *Server) unrecordedPlace(ctx context.Context, cartID string, place shop.RoomPlace, read *recordedAsk) (shop.RoomPlace, error) {
	if read == nil {
		var err error
		if read, err = s.readRecord(ctx, cartID); read == nil {
			return place, err
		}
	}
	if read.recorded {
		return shop.RoomPlace{}, nil
	}
	return place, nil
}

// lookupRoom is what the room knows of a cart; nothing without a room, and nothing with the
// error when Redis could not answer.
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
	case place.State == shop.PlaceLeaving:
		return s.answerQueued(c, place, "", http.StatusOK)
	case roomErr != nil:
		return unavailable("redis", roomErr)
	}
	return err
}

// awaitRoom waits up to d for the cart to leave the line (its saga started, or its end in
// the room), and returns what the room then knows. It looks the cart up again only when the
// cart may have moved (room.Runner.UntilMoved). If Redis stops answering meanwhile, it returns
// what the room said last, with the error: a GET must not take a cart it could not look up
// for one that does not exist.
func (s *Server) awaitRoom(ctx context.Context, cartID string, place shop.RoomPlace, d time.Duration) (shop.RoomPlace, error) {
	deadline := time.Now().Add(d)
	for (place.State == shop.PlaceQueued || place.State == shop.PlaceLeaving) && time.Now().Before(deadline) {
		if !s.runner.UntilMoved(ctx, place, deadline) {
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

// answerRoomGet answers a GET of a cart in line, once it waited; false when the cart has
// left the line for its saga, or is being started, which the saga then answers (a replica
// that could not tell the room its start went through leaves the cart marked as being
// started: the saga is the truth).
func (s *Server) answerRoomGet(c echo.Context, place shop.RoomPlace) (bool, error) {
	switch {
	case place.Waiting():
		return true, s.answerQueued(c, place, "", http.StatusOK)
	case place.State == shop.PlaceRefused:
		return true, outOfStock(place.Refused)
	}
	return false, nil
}

// startFromLine starts the saga of a cart the room's runner took from the line (a
// room.Start); an error puts the cart back at its place.
func (s *Server) startFromLine(base context.Context, e shop.RoomEntry) ([]byte, error) {
	ctx, cancel := context.WithTimeout(base, s.cfg.RequestTimeout)
	defer cancel()
	if p := s.requireWorker(ctx); p != nil {
		return nil, p
	}
	if err := s.markStarted(ctx, e.CartID); err != nil {
		return nil, err
	}
	in := workflows.Input{
		CheckoutID: e.CartID, CustomerID: e.CustomerID, Items: e.Items,
		PaymentTimeoutSeconds: e.TimeoutSeconds, RequestID: newRequestID(),
		RequestHash: e.RequestHash, IdempotencyKey: e.IdempotencyKey, Caller: e.Caller,
	}
	res, err := s.reserve(ctx, in)
	var p *Problem
	switch {
	case errors.As(err, &p) && p.Status < 500:
		// The saga exists and answered (a limit on its updates, say): the cart has left.
		s.Logger.Warn("waiting room: start answered", "checkout_id", e.CartID, "error", err)
		return nil, nil
	case err != nil:
		return nil, err
	case res.View.CheckoutID != e.CartID || res.View.Creator().Judge(e.Creator()) != shop.SameRequest:
		return nil, nil
	}
	// The waiting GET answers with it, instead of asking the saga a moment later.
	answer, _ := json.Marshal(res.View)
	return answer, nil
}

// refreshAfter is the hint for a waiting cart's next GET: half its estimated wait, between
// one second and MaxWaitSeconds, so a crowd far back in line does not ask every second.
func refreshAfter(estimatedWaitMS int64) int64 {
	return min(max(estimatedWaitMS/2, 1000), MaxWaitSeconds*1000)
}

// cancelInRoom cancels a cart that waits in line, for its buyer or support (by): its end is
// recorded in Postgres first, then the cart leaves the line, and the answer is Postgres's.
// answered is false when the saga must answer: the room does not have the cart in line, is
// starting its saga (shop.PlaceLeaving), could not be asked (roomErr), or Postgres recorded the
// cart for a saga.
func (s *Server) cancelInRoom(c echo.Context, cartID, by string) (place shop.RoomPlace, roomErr error, answered bool, err error) {
	ctx := c.Request().Context()
	place, roomErr = s.lookupRoom(ctx, cartID)
	if roomErr != nil || !place.Waiting() {
		return place, roomErr, false, nil
	}
	status, err := s.recordRoomEnd(ctx, *place.Entry, by)
	switch {
	case err != nil:
		return place, nil, true, unavailable("postgres", err)
	case status == shop.RecordOpen:
		// Its saga recorded it (Redis lost the word that the cart left the line): the saga
		// answers, and the cart's next turn attaches to it.
		return shop.RoomPlace{}, nil, false, nil
	}
	if _, err := s.Room.Forget(ctx, cartID); err != nil {
		// Left in line, the cart starts its saga at its turn, which adopts the recorded end.
		s.Logger.Warn("waiting room: forget a cancelled cart", "checkout_id", cartID, "error", err)
	}
	v, err := s.recordedView(ctx, cartID)
	if err == nil && v.Status == shop.StatusConfirmed {
		err = alreadyConfirmed(cartID)
	}
	if err != nil {
		return place, nil, true, err
	}
	return place, nil, true, c.JSON(http.StatusOK, s.present(v))
}

func alreadyConfirmed(cartID string) *Problem {
	return problem(http.StatusConflict, "already_confirmed", "checkout "+cartID+" is confirmed and cannot be cancelled")
}

// checkoutStarting answers a cancel of a cart whose saga is being started this moment.
func checkoutStarting() *Problem {
	p := problem(http.StatusServiceUnavailable, "checkout_starting", "the checkout is leaving the waiting room; retry shortly")
	p.retryAfter = 1
	return p
}
