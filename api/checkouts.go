// The checkout handlers (start, read, cancel), the reservation, and the reads of a checkout's view.

package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// startCheckout starts the saga of a cart with update-with-start and answers with the
// reservation outcome, so the client never polls to learn whether its items are held. A cart
// that cannot start now waits in the room (room.go); the door decides which.
func (s *Server) startCheckout(c echo.Context) error {
	req, in, err := s.checkoutRequest(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	if p := s.checkCatalog(ctx, req); p != nil {
		return p
	}
	rules, err := s.rulesOf(ctx, in.Items)
	if err != nil {
		return err
	}
	facts, err := s.doorFacts(ctx, in, rules)
	if err != nil {
		return err
	}
	switch decideDoor(facts, fingerprint(in)) {
	case doorKeyReused:
		return keyReused(in.IdempotencyKey)
	case doorOtherRequest:
		return checkoutExists(req.CartID)
	case doorInLine:
		return s.answerQueued(c, facts.place, s.creatorSecret(*facts.place.Entry, in.IdempotencyKey, facts.secretVersion), http.StatusAccepted)
	case doorSoldOut:
		metrics.SoldOut.Inc()
		return outOfStock(facts.shortages)
	case doorToSaga:
		if err := s.claim(c, in); err != nil {
			return err
		}
		// Its saga answers: it starts none, so it waits for no place (room.Bound.Take).
		defer s.admission.Take()()
		return s.startSaga(c, in, facts)
	default: // doorEnter
		if err := s.claim(c, in); err != nil {
			return err
		}
		release, answered, err := s.enterRoom(c, in, rules, facts)
		if answered {
			return err
		}
		defer release()
		if err := s.markStarted(ctx, in.CheckoutID); err != nil {
			return err
		}
		return s.startSaga(c, in, facts)
	}
}

// checkoutRequest reads and checks a POST's cart and names it for the request log; in is the
// saga's input it asks for, with the request's fingerprint (body hash, key, caller).
func (s *Server) checkoutRequest(c echo.Context) (CheckoutRequest, workflows.Input, error) {
	var req CheckoutRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return req, workflows.Input{}, err
	}
	if p := identify(c, &req); p != nil {
		return req, workflows.Input{}, p
	}
	key := c.Request().Header.Get("Idempotency-Key")
	if p := validateCheckout(req, key, s.maxPaymentTimeout()); p != nil {
		return req, workflows.Input{}, p
	}
	if key == "" {
		key = req.CartID
	}
	c.Set(ctxCheckoutID, req.CartID)
	c.Set(ctxWorkflowID, shop.WorkflowID(req.CartID))
	if err := s.limitCustomer(c.Request().Context(), req.CustomerID); err != nil {
		return req, workflows.Input{}, err
	}
	timeout := s.cfg.DefaultPaymentTimeoutSeconds
	if req.PaymentTimeoutSeconds != nil {
		timeout = *req.PaymentTimeoutSeconds
	}
	in := workflows.Input{
		CheckoutID: req.CartID, CustomerID: req.CustomerID,
		PaymentTimeoutSeconds: timeout, RequestID: newRequestID(),
		RequestHash: requestHash(req, timeout), IdempotencyKey: key, Caller: callerScope(c),
	}
	for _, it := range req.Items {
		in.Items = append(in.Items, shop.CartLine{SKU: it.SKU, Quantity: it.Quantity})
	}
	return req, in, nil
}

// claim readies a request that is about to start a saga or wait for one: a worker must be
// there to run it, and the cart and the Idempotency-Key are claimed only now, so a body
// refused as bad input or sold out writes nothing and leaves its key free (the client may fix
// the body and reuse it).
func (s *Server) claim(c echo.Context, in workflows.Input) error {
	ctx := c.Request().Context()
	if p := s.requireWorker(ctx); p != nil {
		return p
	}
	if err := s.checkOwner(c, in.CheckoutID, true); err != nil {
		return err
	}
	if p := s.claimKey(ctx, in.Caller, in.IdempotencyKey, in.CheckoutID, in.RequestHash); p != nil {
		return p
	}
	return nil
}

// markStarted marks in Redis that the cart's saga is about to start, before it starts: until
// Postgres records the cart, the mark is what sends a retry of its POST to the saga (the
// gate's Seen) instead of the sold-out gate or the room. No saga starts without it: a Redis
// that cannot take it is a 503, and nothing was started.
func (s *Server) markStarted(ctx context.Context, cartID string) error {
	if s.Gate == nil {
		return nil
	}
	if err := s.Gate.MarkStarted(ctx, cartID); err != nil {
		return unavailable("redis", err)
	}
	return nil
}

// startSaga starts the cart's saga, or attaches to the one it has, and answers with its
// reservation. Nothing of the saga's is shown to a request that did not create it. door is
// what the door read of the cart.
func (s *Server) startSaga(c echo.Context, in workflows.Input, door doorFacts) error {
	ctx := c.Request().Context()
	res, err := s.reserve(ctx, in)
	if err != nil {
		return err
	}
	creator := shop.Fingerprint{RequestHash: res.RequestHash, IdempotencyKey: res.IdempotencyKey, Caller: res.Caller}
	switch creator.Judge(fingerprint(in)) {
	case shop.KeyReused:
		return keyReused(in.IdempotencyKey)
	case shop.OtherRequest:
		return checkoutExists(in.CheckoutID)
	}
	return s.answerReservation(c, res, in.IdempotencyKey, door)
}

// fingerprint is the request's, to judge against a checkout's creator.
func fingerprint(in workflows.Input) shop.Fingerprint {
	return shop.Fingerprint{RequestHash: in.RequestHash, IdempotencyKey: in.IdempotencyKey, Caller: in.Caller}
}

// claimKey binds the caller's Idempotency-Key to this body, for any cart, and refuses the
// request when the key already belongs to another body of the same caller (scope, see
// callerScope). The saga checks again within its cart; this index is what catches a key
// reused for another cart, and it outlives Temporal's retention.
func (s *Server) claimKey(ctx context.Context, scope, key, cartID, hash string) *Problem {
	if s.keyClaims == nil {
		return nil
	}
	held, err := s.keyClaims.claim(ctx, shop.IdempotencyClaim{Scope: scope, Key: key, CartID: cartID, RequestHash: hash})
	if err != nil {
		return unavailable("postgres", err)
	}
	if held.RequestHash != hash {
		return keyReused(key)
	}
	return nil
}

func checkoutExists(cartID string) *Problem {
	return problem(http.StatusConflict, "checkout_exists",
		"cart "+cartID+" is already checking out with different contents; use a new cart_id")
}

func keyReused(key string) *Problem {
	return problem(http.StatusUnprocessableEntity, "idempotency_key_reused",
		"Idempotency-Key "+key+" was already used with a different request body")
}

// reserve runs update-with-start: it starts the saga if the cart has none and waits for the
// reservation outcome. The conflict policy USE_EXISTING attaches a retried POST to the running
// saga; the reuse policy REJECT_DUPLICATE refuses to start a second saga for a cart whose saga
// already finished, which reserve then answers from that saga's result.
func (s *Server) reserve(ctx context.Context, in workflows.Input) (workflows.ReservationResult, error) {
	start := workflows.StartOperation(s.Temporal, in)
	handle, err := s.Temporal.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: start,
		UpdateOptions:          workflows.ReservationUpdate(in),
	})
	var res workflows.ReservationResult
	if err == nil {
		err = handle.Get(ctx, &res)
	}
	switch {
	case err == nil:
		return res, nil
	// The saga refused a request with another body before it entered its history.
	case workflows.IsErrorType(err, shop.ErrTypeIdempotencyKeyReused):
		return res, keyReused(in.IdempotencyKey)
	case workflows.IsErrorType(err, shop.ErrTypeCheckoutExists):
		return res, checkoutExists(in.CheckoutID)
	case temporal.IsWorkflowExecutionAlreadyStartedError(err) || isNotFound(err):
		// The cart's saga already finished: answer with how it ended, and who created it (the
		// saga's result, or the record's), never the caller's own fingerprint.
		v, err := s.finishedView(ctx, in.CheckoutID)
		if err != nil {
			return res, err
		}
		return workflows.ReservationResult{View: v, RequestHash: v.RequestHash, IdempotencyKey: v.IdempotencyKey, Caller: v.Caller}, nil
	case isTotalUpdateLimit(err):
		// The saga takes no more updates, but a retried POST needs none: its answer is the
		// saga's view, as for a saga that already finished.
		v, err := s.view(ctx, in.CheckoutID)
		if err != nil {
			return res, err
		}
		if v.Status == shop.StatusReserving {
			return res, tooManyUpdates(in.CheckoutID)
		}
		return workflows.ReservationResult{View: v, RequestHash: v.RequestHash, IdempotencyKey: v.IdempotencyKey, Caller: v.Caller}, nil
	default:
		return res, temporalProblem(err)
	}
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cartParam reads the cart id of the path, refuses an invalid one, and names the checkout and
// its saga for the request log.
func cartParam(c echo.Context) (string, error) {
	id := c.Param("cart_id")
	if !shop.ValidID(id) {
		return "", invalid("invalid_request", FieldError{"cart_id", shop.IDRule})
	}
	c.Set(ctxCheckoutID, id)
	c.Set(ctxWorkflowID, shop.WorkflowID(id))
	return id, nil
}

// Who may read or cancel a checkout (buyerCart).
const (
	buyerOrClient      = false
	buyerClientOrAdmin = true
)

// buyerCart is cartParam for a checkout the caller may act on: an authenticated client's
// own cart, a buyer's who sends the checkout's secret (until the secret lapses, see
// secretLapsed, or support revokes it), in browser mode a buyer whose identity token names
// the checkout's customer, or (for reads, when admin is set) support's with the admin
// token. Anyone
// else gets the 404 of a cart that does not exist, so a cart id alone tells nothing, and the
// saga is never asked.
func (s *Server) buyerCart(c echo.Context, admin bool) (string, error) {
	id, err := cartParam(c)
	if err != nil {
		return "", err
	}
	if client, _ := c.Get(ctxClient).(string); client != "" {
		return id, s.checkOwner(c, id, false)
	}
	if admin && s.isAdmin(c) {
		return id, nil
	}
	switch opened, err := s.openedBySecretOrToken(c, id); {
	case err != nil:
		return "", err
	case opened:
		return id, nil
	}
	return "", noCheckout(id)
}

// noCheckout is the answer for a cart id the caller cannot see, whether it exists or not.
func noCheckout(id string) *Problem {
	return problem(http.StatusNotFound, "not_found", "no checkout "+id)
}

// MaxWaitSeconds caps GET's wait parameter: well inside DefaultRequestTimeout, so a request
// that waited in vain still has time to read the checkout's current state.
const MaxWaitSeconds = 10

// getCheckout answers for open checkouts from the saga and for finished ones from the
// saga's result, or from Postgres once Temporal no longer keeps the history. With
// ?wait=N it first waits up to N seconds for the checkout to end.
func (s *Server) getCheckout(c echo.Context) error {
	id, err := cartParam(c)
	if err != nil {
		return err
	}
	// The room first, then the caller (nothing of the room's word is answered before): the
	// read of the cart's record that checks a buyer's secret comes after the room's, so it
	// also says whether Postgres recorded a cart the room has in line, and whether it recorded
	// the end of a checkout whose saga still runs (withRecordedEnd).
	place, roomErr := s.lookupRoom(c.Request().Context(), id)
	if _, err := s.buyerCart(c, buyerClientOrAdmin); err != nil {
		return err
	}
	read, _ := c.Get(ctxRecordRead).(*recordedAsk)
	wait, err := waitParam(c)
	if err != nil {
		return err
	}
	wait, release := s.admitWait(c, wait) // past the bound on waits, no wait
	defer release()
	ctx := c.Request().Context()
	place, roomErr, answered, err := s.getFromRoom(c, id, place, roomErr, read, wait)
	if answered {
		return err
	}
	if wait > 0 {
		read = nil // made before the wait: it does not know what happened during it
	}
	if place.InLine() || place.State == shop.PlaceLeft {
		wait = 0 // it waited for the room already
	}
	if wait > 0 {
		if v, ended := s.awaitEnd(ctx, id, wait); ended {
			// The saga's result says nothing of when it ended: Postgres does.
			if rec, err := s.Records.Checkout(ctx, id); err == nil && s.secretLapsed(ctx, rec) {
				return noCheckout(id)
			}
			return c.JSON(http.StatusOK, s.present(v))
		}
	}
	v, err := s.view(ctx, id)
	if err != nil {
		return s.unknownToSaga(c, err, place, roomErr)
	}
	if place.State == shop.PlaceLeaving && v.Status == shop.StatusReserving {
		// Taken from the line, its reservation not answered yet: it has not left the room.
		return s.answerQueued(c, place, "", http.StatusOK)
	}
	return c.JSON(http.StatusOK, s.present(s.withRecordedEnd(ctx, v, read == nil || read.ended)))
}

// getFromRoom answers a GET of a cart the room speaks for: waiting for its sale or refused at
// its start (at once), or in line (once it left the line, or after wait). answered is false
// when its saga or Postgres must answer: the room does not know the cart, Postgres recorded it
// (Redis may have gone back in time and put an ended or started cart back in line), or it
// left the line for its saga. looked and lookErr are the room's first word (lookupRoom), read
// a read of the cart's record made after it (nil: none). place and roomErr are what the room
// said last.
func (s *Server) getFromRoom(c echo.Context, id string, looked shop.RoomPlace, lookErr error, read *recordedAsk, wait time.Duration) (place shop.RoomPlace, roomErr error, answered bool, err error) {
	ctx := c.Request().Context()
	place, roomErr = looked, lookErr
	if place.Waiting() {
		if place, err = s.unrecordedPlace(ctx, id, place, read); err != nil {
			return place, roomErr, true, err
		}
	}
	switch place.State {
	case shop.PlaceNone:
		return place, roomErr, false, nil
	case shop.PlaceEarly, shop.PlaceRefused:
		// Its place comes at the start: the client asks again after refresh_after_ms.
		_, err := s.answerRoomGet(c, place)
		return place, roomErr, true, err
	}
	// A waiting cart: ?wait waits for it to leave the room, not for its end.
	waited := place.State != shop.PlaceLeft
	place, roomErr = s.awaitRoom(ctx, id, place, wait)
	if answered, err := s.answerRoomGet(c, place); answered {
		return place, roomErr, true, err
	}
	// The cart left while this GET waited: the saga's answer to its start, which the replica
	// that started it kept in the room, is the saga's view of this moment.
	var v shop.View
	if waited && place.State == shop.PlaceLeft && json.Unmarshal(place.Answer, &v) == nil && v.CheckoutID == id {
		return place, roomErr, true, c.JSON(http.StatusOK, s.present(v))
	}
	return place, roomErr, false, nil
}

// waitParam reads GET's wait: whole seconds from 0 to MaxWaitSeconds, 0 when absent.
func waitParam(c echo.Context) (time.Duration, error) {
	raw := c.QueryParam("wait")
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > MaxWaitSeconds {
		return 0, invalid("invalid_request", FieldError{"wait", fmt.Sprintf("whole seconds from 0 to %d, not %q", MaxWaitSeconds, raw)})
	}
	return time.Duration(n) * time.Second, nil
}

// awaitEnd waits up to d for the saga to close and returns its result. It is the cheap way
// to learn an outcome: one long poll that the Temporal server holds, where polling GET
// would send each time a status query through the server to a worker, and one poll per
// checkout however many wait on it (endWatches). It reports false when the saga is still
// running after d, or when its result cannot answer (no saga, a terminated one, an error):
// then the caller reads the view as usual.
func (s *Server) awaitEnd(ctx context.Context, checkoutID string, d time.Duration) (shop.View, bool) {
	return s.ends.await(ctx, checkoutID, time.Now().Add(d))
}

// pollEnd is one long poll of the saga's result, until ctx ends.
func (s *Server) pollEnd(ctx context.Context, checkoutID string) (shop.View, error) {
	var v shop.View
	err := s.Temporal.GetWorkflow(ctx, shop.WorkflowID(checkoutID), "").Get(ctx, &v)
	return v, err
}

func (s *Server) view(ctx context.Context, checkoutID string) (shop.View, error) {
	id := shop.WorkflowID(checkoutID)
	// One call, not a describe and a query: the server refuses the query of a closed saga
	// (NOT_OPEN) instead of replaying its history on a worker, and the result answers then.
	resp, err := s.Temporal.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: id, QueryType: workflows.QueryStatus, QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	switch {
	case isNotFound(err):
		return s.recordedView(ctx, checkoutID)
	case err != nil:
		return shop.View{}, temporalProblem(err)
	case resp.QueryRejected.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_PAUSED:
		return s.pausedView(ctx, checkoutID)
	case resp.QueryRejected != nil:
		return s.finishedView(ctx, checkoutID)
	}
	var v shop.View
	if err := resp.QueryResult.Get(&v); err != nil {
		return shop.View{}, internalError(fmt.Errorf("decode status of %s: %w", id, err))
	}
	return v, nil
}

// withRecordedEnd answers the end Postgres recorded for a checkout whose saga still runs: a
// run that support reset to before its end waits again (until its timer, when it adopts the
// end), while Postgres recorded how the checkout ended (confirmed, with its order). An end is
// final, forever: Postgres's is the one that stands. A read that fails answers the saga's view.
// readEnded is false when a read of the cart's record made just before the view was asked
// found no end: then the view answers without a second read.
func (s *Server) withRecordedEnd(ctx context.Context, v shop.View, readEnded bool) shop.View {
	if v.Status.Final() || s.Records == nil || !readEnded {
		return v
	}
	if rec, err := s.Records.Checkout(ctx, v.CheckoutID); err == nil && rec.Status != shop.RecordOpen {
		return recordedEnd(rec, v)
	}
	return v
}

// pausedView answers a checkout whose saga support paused (the Web UI's Pause, server 1.30+
// with frontend.WorkflowPauseEnabled). A paused workflow is still running but the server
// rejects its queries (and updates) until it is unpaused, and its result would wait for it:
// the answer is Postgres's record, marked Paused, so the buyer hears what was recorded, and
// that it is held, at once.
func (s *Server) pausedView(ctx context.Context, checkoutID string) (shop.View, error) {
	rec, err := s.Records.Checkout(ctx, checkoutID)
	if errors.Is(err, shop.ErrNotFound) {
		// Paused before its first step recorded it: nothing is held or charged yet.
		return shop.View{CheckoutID: checkoutID, WorkflowID: shop.WorkflowID(checkoutID), Status: shop.StatusReserving, Items: []shop.Item{}, Paused: true}, nil
	}
	if err != nil {
		return shop.View{}, unavailable("postgres", err)
	}
	if s.secretLapsed(ctx, rec) {
		return shop.View{}, noCheckout(checkoutID)
	}
	v := shop.ViewFromRecord(rec)
	if rec.Status == shop.RecordOpen {
		// Postgres records the payment window at the end; the saga's search attributes, which
		// a describe still reads while it is paused, say how far it got.
		v.Status, v.NeedsAttention, v.Reason = shop.StatusReserving, false, nil
		if d, err := s.Temporal.DescribeWorkflow(ctx, shop.WorkflowID(checkoutID), ""); err == nil {
			if st, ok := d.TypedSearchAttributes.GetKeyword(workflows.AttrCheckoutState); ok && st != "" {
				v.Status = shop.Status(st)
			}
			if at, ok := d.TypedSearchAttributes.GetTime(workflows.AttrHoldExpiresAt); ok && v.ExpiresAt == nil {
				v.ExpiresAt = &at
			}
		}
	}
	v.Paused = true
	return v, nil
}

// finishedView reads a closed saga's result; a saga that did not return a view (terminated
// by an operator) or whose history is gone is answered from Postgres. So is one whose result
// disagrees with the end Postgres recorded: a run that support reset to before its confirm
// ends otherwise, but an end is final, forever, and Postgres's is the one that stands.
func (s *Server) finishedView(ctx context.Context, checkoutID string) (shop.View, error) {
	var v shop.View
	err := s.Temporal.GetWorkflow(ctx, shop.WorkflowID(checkoutID), "").Get(ctx, &v)
	if err != nil || v.CheckoutID == "" {
		return s.recordedView(ctx, checkoutID)
	}
	rec, err := s.Records.Checkout(ctx, checkoutID)
	if err == nil && s.secretLapsed(ctx, rec) {
		return shop.View{}, noCheckout(checkoutID)
	}
	if err != nil || rec.Status == shop.RecordOpen || rec.Status == string(v.Status) {
		return v, nil // Postgres has no other end to answer (or cannot say): the run's result
	}
	return recordedEnd(rec, v), nil
}

// recordedEnd is the view of the end Postgres recorded, with what the run knows besides: the
// creator's fingerprint, the refunds it started, and whether support must look.
func recordedEnd(rec shop.CheckoutRecord, run shop.View) shop.View {
	recorded := shop.ViewFromRecord(rec)
	recorded.RequestHash, recorded.IdempotencyKey, recorded.Refunds = run.RequestHash, run.IdempotencyKey, run.Refunds
	recorded.NeedsAttention = recorded.NeedsAttention || run.NeedsAttention
	return recorded
}

func (s *Server) recordedView(ctx context.Context, checkoutID string) (shop.View, error) {
	rec, err := s.Records.Checkout(ctx, checkoutID)
	if errors.Is(err, shop.ErrNotFound) {
		return shop.View{}, noCheckout(checkoutID)
	}
	if err != nil {
		return shop.View{}, unavailable("postgres", err)
	}
	if s.secretLapsed(ctx, rec) {
		return shop.View{}, noCheckout(checkoutID)
	}
	return shop.ViewFromRecord(rec), nil
}

// cancelCheckout ends an open checkout as cancelled. Repeating it is harmless; a paid
// checkout answers 409.
func (s *Server) cancelCheckout(c echo.Context) error {
	id, err := s.buyerCart(c, buyerOrClient)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	place, roomErr, answered, err := s.cancelInRoom(c, id, "customer")
	if answered {
		return err
	}
	handle, err := s.Temporal.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   shop.WorkflowID(id),
		UpdateName:   workflows.UpdateCancel,
		Args:         []any{workflows.CancelRequest{By: "customer"}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var v shop.View
	if err == nil {
		err = handle.Get(ctx, &v)
	}
	switch {
	case err == nil:
	case workflows.IsErrorType(err, shop.ErrTypeAlreadyPaid):
		return problem(http.StatusConflict, "already_confirmed", "checkout "+id+" is paid and cannot be cancelled")
	case isNotFound(err) && place.State == shop.PlaceLeaving:
		return checkoutStarting()
	case isNotFound(err):
		if v, err = s.finishedView(ctx, id); err != nil {
			return s.unknownToSaga(c, err, place, roomErr)
		}
	default:
		return temporalProblem(err)
	}
	if v.Status == shop.StatusConfirmed {
		return alreadyConfirmed(id)
	}
	return c.JSON(http.StatusOK, s.present(v))
}
