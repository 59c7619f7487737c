package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// Contract limits on checkout requests.
const (
	maxCartLines         = 50
	maxIdempotencyKeyLen = 255
)

// CheckoutRequest is the body of POST /v1/checkouts.
type CheckoutRequest struct {
	CartID                string        `json:"cart_id"`
	CustomerID            string        `json:"customer_id"`
	Items                 []RequestItem `json:"items"`
	PaymentTimeoutSeconds *int64        `json:"payment_timeout_seconds"`
}

// RequestItem is one cart line as the client sends it.
type RequestItem struct {
	SKU      string `json:"sku"`
	Quantity int64  `json:"quantity"`
}

// CheckoutView is the checkout as the API returns it (the contract's view).
type CheckoutView struct {
	CheckoutID  string      `json:"checkout_id"`
	WorkflowID  string      `json:"workflow_id"`
	Status      shop.Status `json:"status"`
	CustomerID  string      `json:"customer_id"`
	Currency    string      `json:"currency"`
	AmountCents int64       `json:"amount_cents"`
	Items       []shop.Item `json:"items"`
	ExpiresAt   *time.Time  `json:"expires_at"`
	OrderID     *string     `json:"order_id"`
	// Reason is human text for the buyer; ReasonCode is its stable code (see publicReason).
	Reason         *string `json:"reason"`
	ReasonCode     *string `json:"reason_code,omitempty"`
	NeedsAttention bool    `json:"needs_attention"`
	// Attention is a fixed sentence in the public view; support reads the step and its error
	// in the saga (Temporal UI, status query).
	Attention string          `json:"attention,omitempty"`
	Refunds   []string        `json:"refunds,omitempty"`
	Shortages []shop.Shortage `json:"shortages,omitempty"`
	Links     Links           `json:"links"`
	// CheckoutSecret is in the answers to the POST that created the checkout and to its
	// retries, only: the buyer sends it back as the Checkout-Secret header to read or cancel.
	CheckoutSecret string `json:"checkout_secret,omitempty"`
}

// Links point at the checkout in the API and in the Temporal Web UI.
type Links struct {
	Self       string `json:"self"`
	TemporalUI string `json:"temporal_ui"`
}

func (s *Server) present(v shop.View) CheckoutView {
	if v.Items == nil {
		v.Items = []shop.Item{}
	}
	code, reason := publicReason(v)
	attention := ""
	if v.NeedsAttention {
		attention = "support has been told and is looking into this checkout"
	}
	return CheckoutView{
		CheckoutID: v.CheckoutID, WorkflowID: v.WorkflowID, Status: v.Status, CustomerID: v.CustomerID,
		Currency: v.Currency, AmountCents: v.AmountCents, Items: v.Items, ExpiresAt: v.ExpiresAt,
		OrderID: v.OrderID, Reason: reason, ReasonCode: code, NeedsAttention: v.NeedsAttention, Attention: attention,
		Refunds: v.Refunds, Shortages: v.Shortages,
		Links: Links{
			Self:       "/v1/checkouts/" + v.CheckoutID,
			TemporalUI: fmt.Sprintf("%s/namespaces/%s/workflows/%s", strings.TrimRight(s.cfg.TemporalUIURL, "/"), s.cfg.Namespace, v.WorkflowID),
		}}
}

// startCheckout starts the saga of a cart with update-with-start and answers with the
// reservation outcome, so the client never polls to learn whether its items are held.
func (s *Server) startCheckout(c echo.Context) error {
	var req CheckoutRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	if p := identify(c, &req); p != nil {
		return p
	}
	key := c.Request().Header.Get("Idempotency-Key")
	if p := validateCheckout(req, key, s.maxPaymentTimeout()); p != nil {
		return p
	}
	if key == "" {
		key = req.CartID
	}
	c.Set(ctxCheckoutID, req.CartID)
	c.Set(ctxWorkflowID, shop.WorkflowID(req.CartID))
	if err := s.limitCheckouts(c, req.CustomerID); err != nil {
		return err
	}
	ctx := c.Request().Context()
	timeout := s.cfg.DefaultPaymentTimeoutSeconds
	if req.PaymentTimeoutSeconds != nil {
		timeout = *req.PaymentTimeoutSeconds
	}
	hash := requestHash(req, timeout)
	// A cart waiting in the room (or ended there) is answered by the room: a retried POST
	// keeps its place.
	if place := s.roomPlace(ctx, req.CartID); place.InRoom() {
		if err := s.checkOwner(c, req.CartID, true); err != nil { // another client's cart
			return err
		}
		if err := s.answerRoom(c, place, hash, key); err != nil || place.End != nil || place.Entry != nil {
			return err
		}
	}

	if p := s.gate(ctx, req); p != nil {
		return p
	}
	if p := s.requireWorker(ctx); p != nil {
		return p
	}
	// The cart and the key are claimed only once the request is about to start a saga: a body
	// refused as bad input or sold out writes nothing, and leaves its key free, so the client
	// may fix the body and reuse it.
	if err := s.checkOwner(c, req.CartID, true); err != nil {
		return err
	}
	if p := s.claimKey(ctx, callerScope(c), key, req.CartID, hash); p != nil {
		return p
	}
	in := workflows.Input{
		CheckoutID: req.CartID, CustomerID: req.CustomerID,
		PaymentTimeoutSeconds: timeout, RequestID: newRequestID(),
		RequestHash: hash, IdempotencyKey: key,
	}
	for _, it := range req.Items {
		in.Items = append(in.Items, shop.CartLine{SKU: it.SKU, Quantity: it.Quantity})
	}
	release, answered, err := s.enterRoom(c, shop.RoomEntry{
		CartID: req.CartID, CustomerID: req.CustomerID, Items: in.Items,
		TimeoutSeconds: timeout, IdempotencyKey: key, RequestHash: hash,
	})
	if answered {
		return err
	}
	defer release()
	if s.Gate != nil {
		if err := s.Gate.MarkStarted(ctx, req.CartID); err != nil {
			// Best effort: without the mark a retry may be refused by the gate while this
			// saga goes on, which can undersell, never oversell.
			s.Logger.Warn("mark checkout started", "checkout_id", req.CartID, "error", err)
		}
	}

	res, err := s.reserve(ctx, in)
	if err != nil {
		return err
	}
	if res.RequestHash != in.RequestHash {
		if res.IdempotencyKey == key {
			return keyReused(key)
		}
		return checkoutExists(req.CartID)
	}
	return s.answerReservation(c, res, key)
}

// claimKey binds the caller's Idempotency-Key to this body, for any cart, and refuses the
// request when the key already belongs to another body of the same caller (scope, see
// callerScope). The saga checks again within its cart; this index is what catches a key
// reused for another cart, and it outlives Temporal's retention.
func (s *Server) claimKey(ctx context.Context, scope, key, cartID, hash string) *Problem {
	if s.Keys == nil {
		return nil
	}
	held, err := s.Keys.ClaimIdempotencyKey(ctx, shop.IdempotencyClaim{Scope: scope, Key: key, CartID: cartID, RequestHash: hash}, s.cfg.IdempotencyKeyRetention)
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
	start := s.Temporal.NewWithStartWorkflowOperation(workflows.StartOptions(in), workflows.Checkout, in)
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
		// The cart's saga already finished: answer with how it ended.
		v, err := s.finishedView(ctx, in.CheckoutID)
		if err != nil {
			return res, err
		}
		if v.RequestHash == "" { // answered from Postgres, which keeps no fingerprint
			v.RequestHash, v.IdempotencyKey = in.RequestHash, in.IdempotencyKey
		}
		return workflows.ReservationResult{View: v, RequestHash: v.RequestHash, IdempotencyKey: v.IdempotencyKey}, nil
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
		return workflows.ReservationResult{View: v, RequestHash: v.RequestHash, IdempotencyKey: v.IdempotencyKey}, nil
	default:
		return res, temporalProblem(err)
	}
}

// rejections are the answers to a checkout refused at reservation, by the saga's reject
// code, but for out of stock (answerReservation adds the shortages).
var rejections = map[string]struct {
	status       int
	code, detail string
}{
	shop.RejectOverLimit:     {http.StatusUnprocessableEntity, "quantity_over_limit", "a quantity is over its SKU's per-order limit"},
	shop.RejectUnknownSKU:    {http.StatusUnprocessableEntity, "unknown_sku", "the cart names a SKU that does not exist"},
	shop.RejectMixedCurrency: {http.StatusUnprocessableEntity, "mixed_currency", "the cart's SKUs are priced in different currencies"},
	shop.RejectCustomerLimit: {http.StatusConflict, "customer_limit", "the cart would take this customer over a SKU's per-customer limit; nothing was held"},
	// No Retry-After: this cart stays refused. The customer pays for or cancels an open
	// checkout, then starts again with a new cart_id.
	shop.RejectTooManyOpen: {http.StatusTooManyRequests, "too_many_open_checkouts",
		"this customer already has the most open checkouts allowed; pay for or cancel one, then start again with a new cart_id"},
}

// answerReservation maps the saga's reservation outcome to the contract's responses. The
// checkout's secret goes to the request that created it and to retries under its
// Idempotency-Key: the same body under another key knows the cart, which is not enough.
func (s *Server) answerReservation(c echo.Context, res workflows.ReservationResult, key string) error {
	v := res.View
	if res.RejectCode == "" && v.Status == shop.StatusOutOfStock {
		// A retry of a cart whose saga already ended refused: the same answer as the first time.
		res.RejectCode = shop.RejectOutOfStock
		if v.Reason != nil && (*v.Reason == shop.RejectCustomerLimit || *v.Reason == shop.RejectTooManyOpen) {
			res.RejectCode = *v.Reason
		}
	}
	if res.RejectCode == shop.RejectOutOfStock {
		metrics.SoldOut.Inc()
		p := problem(http.StatusConflict, "out_of_stock", "some items cannot be held; nothing was held")
		p.Shortages = v.Shortages
		return p
	}
	if r, ok := rejections[res.RejectCode]; ok {
		return problem(r.status, r.code, r.detail)
	}
	if v.Status == shop.StatusFailed {
		p := problem(http.StatusInternalServerError, "checkout_failed",
			"the checkout could not be completed and nothing is held; start again with a new cart_id")
		if v.Reason != nil {
			p.cause = errors.New(*v.Reason) // for the log; clients get the stable code
		}
		return p
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/checkouts/"+v.CheckoutID)
	status := http.StatusOK
	if res.Created {
		status = http.StatusCreated
	}
	view := s.present(v)
	if res.Created || res.IdempotencyKey == key {
		view.CheckoutSecret = s.secrets.sign(v.CheckoutID)
	}
	return c.JSON(status, view)
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
// own cart, a buyer's who sends the checkout's secret, or (for reads, when admin is set)
// support's with the admin token. Anyone else gets the 404 of a cart that does not exist, so
// a cart id alone tells nothing, and the saga is never asked.
func (s *Server) buyerCart(c echo.Context, admin bool) (string, error) {
	id, err := cartParam(c)
	if err != nil {
		return "", err
	}
	if client, _ := c.Get(ctxClient).(string); client != "" {
		return id, s.checkOwner(c, id, false)
	}
	if s.secrets.verify(id, c.Request().Header.Get(CheckoutSecretHeader)) || admin && s.isAdmin(c) {
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
	id, err := s.buyerCart(c, buyerClientOrAdmin)
	if err != nil {
		return err
	}
	wait, err := waitParam(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	place, roomErr := s.lookupRoom(ctx, id)
	if place.InRoom() || place.Left {
		// A waiting cart: ?wait waits for it to leave the room, not for its end.
		place = s.awaitRoom(ctx, id, place, wait)
		if answered, err := s.answerRoomGet(c, place); answered {
			return err
		}
		wait = 0
	}
	if wait > 0 {
		if v, ended := s.awaitEnd(ctx, id, wait); ended {
			return c.JSON(http.StatusOK, s.present(v))
		}
	}
	v, err := s.view(ctx, id)
	if err != nil {
		return s.unknownToSaga(c, err, place, roomErr)
	}
	return c.JSON(http.StatusOK, s.present(v))
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
// would send each time a status query through the server to a worker. It reports false when
// the saga is still running after d, or when its result cannot answer (no saga, a
// terminated one, an error): then the caller reads the view as usual.
func (s *Server) awaitEnd(ctx context.Context, checkoutID string, d time.Duration) (shop.View, bool) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var v shop.View
	err := s.Temporal.GetWorkflow(wctx, shop.WorkflowID(checkoutID), "").Get(wctx, &v)
	return v, err == nil && v.CheckoutID != ""
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
	case resp.QueryRejected != nil:
		return s.finishedView(ctx, checkoutID)
	}
	var v shop.View
	if err := resp.QueryResult.Get(&v); err != nil {
		return shop.View{}, internalError(fmt.Errorf("decode status of %s: %w", id, err))
	}
	return v, nil
}

// finishedView reads a closed saga's result; a saga that did not return a view (terminated
// by an operator) or whose history is gone is answered from Postgres.
func (s *Server) finishedView(ctx context.Context, checkoutID string) (shop.View, error) {
	var v shop.View
	err := s.Temporal.GetWorkflow(ctx, shop.WorkflowID(checkoutID), "").Get(ctx, &v)
	if err == nil && v.CheckoutID != "" {
		return v, nil
	}
	return s.recordedView(ctx, checkoutID)
}

func (s *Server) recordedView(ctx context.Context, checkoutID string) (shop.View, error) {
	rec, err := s.Records.Checkout(ctx, checkoutID)
	if errors.Is(err, shop.ErrNotFound) {
		return shop.View{}, noCheckout(checkoutID)
	}
	if err != nil {
		return shop.View{}, unavailable("postgres", err)
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
	place, roomErr, answered, err := s.cancelInRoom(c, id)
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
	case isNotFound(err) && place.Leaving:
		return checkoutStarting()
	case isNotFound(err):
		if v, err = s.finishedView(ctx, id); err != nil {
			return s.unknownToSaga(c, err, place, roomErr)
		}
	default:
		return temporalProblem(err)
	}
	if v.Status == shop.StatusConfirmed {
		return problem(http.StatusConflict, "already_confirmed", "checkout "+id+" is confirmed and cannot be cancelled")
	}
	return c.JSON(http.StatusOK, s.present(v))
}

// decodeStrict reads a JSON body strictly: unknown fields and trailing data are refused, so
// a misspelt field never silently falls back to a default.
func decodeStrict(body io.Reader, v any) error {
	raw, err := io.ReadAll(body)
	if err != nil {
		return readError(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err)
	}
	if dec.More() {
		return problem(http.StatusBadRequest, "invalid_json", "body must be one JSON object")
	}
	return nil
}

func readError(err error) error {
	var he *echo.HTTPError
	if errors.As(err, &he) {
		return he
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return problem(http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time")
	}
	return problem(http.StatusBadRequest, "unreadable_body", "request body could not be read")
}

// jsonProblem names the field of a JSON decoding error where the decoder knows it.
func jsonProblem(err error) *Problem {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return problem(http.StatusBadRequest, "invalid_json", "body must be a JSON object")
	case errors.As(err, &typeErr):
		detail := "must be " + jsonKind(typeErr.Type)
		p := problem(http.StatusBadRequest, "invalid_json", typeErr.Field+": "+detail)
		p.Errors = []FieldError{{Field: typeErr.Field, Detail: detail}}
		return p
	case errors.As(err, &syntaxErr):
		return problem(http.StatusBadRequest, "invalid_json", fmt.Sprintf("malformed JSON at byte %d", syntaxErr.Offset))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		p := problem(http.StatusBadRequest, "invalid_json", field+": unknown field")
		p.Errors = []FieldError{{Field: field, Detail: "unknown field"}}
		return p
	case errors.Is(err, io.EOF):
		return problem(http.StatusBadRequest, "invalid_json", "request body is empty")
	}
	return problem(http.StatusBadRequest, "invalid_json", "malformed JSON")
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "an object"
}

// validateCheckout checks everything that needs no lookup, naming each bad field.
func validateCheckout(req CheckoutRequest, key string, maxTimeout int64) *Problem {
	var errs []FieldError
	bad := func(field, detail string) { errs = append(errs, FieldError{field, detail}) }
	if !shop.ValidID(req.CartID) {
		bad("cart_id", shop.IDRule)
	}
	if !shop.ValidID(req.CustomerID) {
		bad("customer_id", shop.IDRule)
	}
	switch {
	case len(req.Items) == 0:
		bad("items", "must have at least one line")
	case len(req.Items) > maxCartLines:
		bad("items", fmt.Sprintf("must have at most %d lines, has %d", maxCartLines, len(req.Items)))
	}
	seen := map[string]int{}
	for i, it := range req.Items {
		field := fmt.Sprintf("items[%d]", i)
		if !shop.ValidID(it.SKU) {
			bad(field+".sku", shop.IDRule)
		} else if j, dup := seen[it.SKU]; dup {
			bad(field+".sku", fmt.Sprintf("duplicates items[%d]: one line per SKU", j))
		}
		seen[it.SKU] = i
		if it.Quantity < 1 {
			bad(field+".quantity", "must be at least 1")
		}
	}
	if t := req.PaymentTimeoutSeconds; t != nil && (*t < workflows.MinPaymentTimeoutSeconds || *t > maxTimeout) {
		bad("payment_timeout_seconds", fmt.Sprintf("must be between %d and %d (longer holds only through support's extend)", workflows.MinPaymentTimeoutSeconds, maxTimeout))
	}
	if key != "" && len(key) > maxIdempotencyKeyLen || strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		bad("Idempotency-Key", fmt.Sprintf("must be 1 to %d visible ASCII characters", maxIdempotencyKeyLen))
	}
	if len(errs) > 0 {
		return invalid("invalid_request", errs...)
	}
	return nil
}

// soldOut is the sold-out gate: a cart that cannot be held right now is answered 409 from one
// Redis round trip, without a saga. A retry of a cart that already holds (or held) stock, a SKU
// Redis does not know, or a Redis error all pass through to the saga, which decides.
func (s *Server) soldOut(ctx context.Context, req CheckoutRequest) *Problem {
	if s.Gate == nil {
		return nil
	}
	items := make(map[string]int64, len(req.Items))
	for _, it := range req.Items {
		items[it.SKU] = it.Quantity
	}
	pre, err := s.Gate.Precheck(ctx, req.CartID, items)
	if err != nil {
		s.Logger.Warn("sold-out gate skipped", "checkout_id", req.CartID, "error", err)
		return nil
	}
	if !pre.SoldOut() {
		return nil
	}
	metrics.SoldOut.Inc()
	return outOfStock(pre.Shortages)
}

// gate refuses a new cart before any saga: bad input first (a quantity over its SKU's limit
// is 422 whatever the stock, so the catalog answers before the sold-out gate can call the
// same cart 409), then the sold-out gate. Both judge from memory and Redis, which forget: a
// cart Postgres already recorded (a retry, perhaps long after its end, after Redis lost its
// markers or the operator changed the SKU) goes on to its saga, which answers its recorded
// end. Only refused carts cost the Postgres read; if Postgres cannot answer, the refusal
// stands.
func (s *Server) gate(ctx context.Context, req CheckoutRequest) *Problem {
	p := s.checkCatalog(ctx, req)
	if p == nil {
		p = s.soldOut(ctx, req)
	}
	if p == nil {
		return nil
	}
	if _, err := s.Records.Checkout(ctx, req.CartID); err == nil {
		return nil
	}
	return p
}

// checkCatalog refuses unknown SKUs and quantities over a SKU's limit before any saga starts.
// The saga checks again (the Lua script is the judge); this only answers bad carts early.
func (s *Server) checkCatalog(ctx context.Context, req CheckoutRequest) *Problem {
	skus := make([]string, len(req.Items))
	for i, it := range req.Items {
		skus[i] = it.SKU
	}
	products, err := s.Catalog.Products(ctx, skus)
	if err != nil {
		return unavailable("postgres", err)
	}
	// Every problem is collected; the code names the most basic one (unknown SKU first).
	var unknown, mixed, over []FieldError
	currency := ""
	for i, it := range req.Items {
		p, ok := products[it.SKU]
		field := fmt.Sprintf("items[%d]", i)
		if !ok {
			unknown = append(unknown, FieldError{field + ".sku", "unknown SKU " + it.SKU})
			continue
		}
		if currency == "" {
			currency = p.Currency
		} else if p.Currency != currency {
			mixed = append(mixed, FieldError{field + ".sku", fmt.Sprintf("%s is priced in %s, the cart in %s", it.SKU, p.Currency, currency)})
		}
		if it.Quantity > p.MaxPerOrder {
			over = append(over, FieldError{field + ".quantity", fmt.Sprintf("at most %d of %s per order", p.MaxPerOrder, it.SKU)})
		}
	}
	switch all := append(append(append([]FieldError(nil), unknown...), mixed...), over...); {
	case len(unknown) > 0:
		return invalid("unknown_sku", all...)
	case len(mixed) > 0:
		return invalid("mixed_currency", all...)
	case len(over) > 0:
		return invalid("quantity_over_limit", all...)
	}
	return nil
}

// requestHash fingerprints what a checkout was started with: the same cart sent again (in
// any line order) hashes the same.
func requestHash(req CheckoutRequest, timeout int64) string {
	items := append([]RequestItem(nil), req.Items...)
	sort.Slice(items, func(i, j int) bool { return items[i].SKU < items[j].SKU })
	b, _ := json.Marshal(struct {
		CartID, CustomerID string
		Items              []RequestItem
		Timeout            int64
	}{req.CartID, req.CustomerID, items, timeout})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// reasonText is the message of the innermost application error (a validator's refusal).
func reasonText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	return err.Error()
}

// temporalProblem maps an error talking to Temporal: a deadline or an unreachable server is a
// 503 the client may retry (a retry never starts a second saga); Temporal's limits on a
// workflow's updates are 429 with Retry-After.
func temporalProblem(err error) *Problem {
	var unavailableErr *serviceerror.Unavailable
	var deadline *serviceerror.DeadlineExceeded
	var exhausted *serviceerror.ResourceExhausted
	// Passing states of one workflow: its workflow task is being retried (not ready for an
	// update), or the server aborted an update while it moved or reloaded the workflow.
	var notReady *serviceerror.WorkflowNotReady
	var aborted *serviceerror.Aborted
	// A namespace the frontend does not know (yet): a server that has just started, or whose
	// namespace cache is refreshing, says so for a moment. Either way the client can only
	// come back later; a namespace that never appears is a misconfiguration for the operator,
	// and every such 503 logs its cause.
	var noNamespace *serviceerror.NamespaceNotFound
	// A call that ended Canceled (a gRPC status, or the SDK's error for an update's wait that
	// timed out or was cancelled): nothing was decided that a retry would repeat, so the
	// client may come back, as after any deadline.
	var serverCancelled *serviceerror.Canceled
	var updateWait *client.WorkflowUpdateServiceTimeoutOrCanceledError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.As(err, &unavailableErr), errors.As(err, &deadline),
		errors.As(err, &notReady), errors.As(err, &aborted), errors.As(err, &noNamespace),
		errors.As(err, &serverCancelled), errors.As(err, &updateWait), status.Code(err) == codes.Canceled,
		// The workflow was cancelled (the Web UI's Cancel) while an update waited on it.
		temporal.IsCanceledError(err):
		return unavailable("temporal", err)
	case errors.As(err, &exhausted) && exhausted.Cause == enumspb.RESOURCE_EXHAUSTED_CAUSE_CONCURRENT_LIMIT:
		// More than history.maxInFlightUpdates (10) requests on one checkout at once: its
		// client is retrying faster than the saga answers. (The SDK retries this itself
		// until the request's deadline, so it mostly surfaces as the 503 above.)
		p := problem(http.StatusTooManyRequests, "too_many_requests", "too many requests for this checkout at once; retry shortly")
		p.retryAfter = 1
		p.cause = err
		return p
	case errors.As(err, &exhausted):
		// A namespace or server rate limit: the service sheds load.
		p := problem(http.StatusServiceUnavailable, "overloaded", "the service is overloaded; retry shortly")
		p.retryAfter = 1
		p.cause = err
		return p
	case isTotalUpdateLimit(err):
		p := tooManyUpdates("")
		p.cause = err
		return p
	}
	return internalError(err)
}

// isTotalUpdateLimit reports Temporal's refusal of any further update on a workflow
// (history.maxTotalUpdates, 2,000 by default): a FailedPrecondition, which is what an update
// to a running workflow gets for it.
func isTotalUpdateLimit(err error) bool {
	var fp *serviceerror.FailedPrecondition
	return errors.As(err, &fp)
}

// tooManyUpdateRetryAfter: past the total, only a saga-side change (support acting in
// Temporal, or the saga ending on its timer) makes room, so a client should not hurry.
const tooManyUpdateRetryAfter = 60

func tooManyUpdates(checkoutID string) *Problem {
	detail := "this checkout takes no more changes (Temporal's limit on updates per workflow); support can still end it in the Temporal Web UI"
	if checkoutID != "" {
		detail = "checkout " + checkoutID + " takes no more changes (Temporal's limit on updates per workflow); support can still end it in the Temporal Web UI"
	}
	p := problem(http.StatusTooManyRequests, "too_many_updates", detail)
	p.retryAfter = tooManyUpdateRetryAfter
	return p
}

// maxPaymentTimeout is the longest payment window a client may ask for.
func (s *Server) maxPaymentTimeout() int64 {
	if m := s.cfg.MaxPaymentTimeoutSeconds; m > 0 {
		return min(m, workflows.MaxPaymentTimeoutSeconds)
	}
	return DefaultMaxPaymentTimeoutSeconds
}

// publicReason is the view's reason as a client may read it: a stable code, and human text
// that never carries an internal error (a failed step's error goes to support, in the saga).
// The saga's own texts for the ordinary ends (who cancelled, until when the buyer could pay,
// which payment failed or did not match) are kept.
func publicReason(v shop.View) (code, text *string) {
	if v.Reason == nil {
		return nil, nil
	}
	c, t := "", *v.Reason
	switch v.Status {
	case shop.StatusOutOfStock:
		switch t {
		case shop.RejectCustomerLimit:
			c, t = t, "the cart would take this customer over a SKU's per-customer limit"
		case shop.RejectTooManyOpen:
			c, t = t, "this customer already had the most open checkouts allowed"
		default:
			c, t = "out_of_stock", "some items could not be held"
		}
	case shop.StatusExpired:
		c = "payment_window_expired"
	case shop.StatusCancelled:
		c = "cancelled"
	case shop.StatusPaymentFailed:
		c = "payment_failed"
	case shop.StatusFailed:
		c, t = "checkout_failed", "the checkout could not be completed; nothing is held and support has been told"
	case shop.StatusConfirmed:
		c = "confirmed"
	default: // open: a payment that did not match, being refunded
		c = "payment_mismatch"
	}
	return &c, &t
}
