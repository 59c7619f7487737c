package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
)

// Bounds on what an operator may set; beyond them a typo is likelier than a real stock level.
const (
	maxOnHand      = 1_000_000_000
	maxPriceCents  = 100_000_000_00
	maxMaxPerOrder = 1_000_000
)

var currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)

// InventoryRequest is the body of PUT /v1/inventory/{sku}. Every field but max_per_customer is
// required.
type InventoryRequest struct {
	OnHand      *int64  `json:"on_hand"`
	PriceCents  *int64  `json:"price_cents"`
	Currency    *string `json:"currency"`
	MaxPerOrder *int64  `json:"max_per_order"`
	// MaxPerCustomer is optional: absent or 0 means no per-customer limit.
	MaxPerCustomer *int64 `json:"max_per_customer"`
	// SaleStartsAt is optional (RFC 3339): the SKU's scheduled drop; absent or null: on sale.
	SaleStartsAt *time.Time `json:"sale_starts_at"`
}

// InventoryChanges are the safe forms of an operator's change of stock (docs/contract.md,
// "Inventory"). *shop.Inventory implements them; an Inventory that does not answers
// 501 on If-Match and adjustments.
type InventoryChanges interface {
	// SetIfMatch is Set as a compare-and-set on the SKU's ETag (shop.ErrVersionMismatch).
	SetIfMatch(ctx context.Context, p shop.Product, ifMatch string) (shop.InventoryView, error)
	// Adjust changes on_hand by a delta in one step.
	Adjust(ctx context.Context, a shop.Adjustment) (shop.InventoryView, error)
}

// AdjustmentRequest is the body of POST /v1/inventory/{sku}/adjustments.
type AdjustmentRequest struct {
	Delta  *int64  `json:"delta"`
	Reason *string `json:"reason"`
}

// maxReasonLen bounds an adjustment's reason, which goes into the ledger.
const maxReasonLen = 200

// requireAdmin lets a request through only with the admin bearer token, compared in
// constant time so response timing reveals nothing about the token.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.isAdmin(c) {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="checkout-admin"`)
			return problem(http.StatusUnauthorized, "unauthorized", "a valid admin bearer token is required")
		}
		return next(c)
	}
}

// isAdmin reports whether the request carries the admin bearer token.
func (s *Server) isAdmin(c echo.Context) bool {
	scheme, token, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
	return strings.EqualFold(scheme, "Bearer") && s.cfg.AdminToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.AdminToken)) == 1
}

// putInventory sets a SKU's stock and price and publishes availability to Redis.
func (s *Server) putInventory(c echo.Context) error {
	sku := c.Param("sku")
	var req InventoryRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	if errs := req.fieldErrors(sku); len(errs) > 0 {
		return invalid("invalid_request", errs...)
	}
	p := shop.Product{
		SKU: sku, OnHand: *req.OnHand, SaleTerms: shop.SaleTerms{PriceCents: *req.PriceCents, Currency: strings.ToLower(*req.Currency), MaxPerOrder: *req.MaxPerOrder},
	}
	if req.MaxPerCustomer != nil {
		p.MaxPerCustomer = *req.MaxPerCustomer
	}
	if req.SaleStartsAt != nil {
		p.SaleStartsAt = new(req.SaleStartsAt.UTC().Truncate(time.Millisecond))
	}
	ctx := c.Request().Context()
	var view shop.InventoryView
	var err error
	if ifMatch := c.Request().Header.Get("If-Match"); ifMatch != "" {
		changes, ok := s.Inventory.(InventoryChanges)
		if !ok {
			return problem(http.StatusNotImplemented, "not_implemented", "this inventory cannot compare and set")
		}
		view, err = changes.SetIfMatch(ctx, p, ifMatch)
	} else {
		view, err = s.Inventory.Set(ctx, p)
	}
	switch {
	case errors.Is(err, shop.ErrVersionMismatch):
		return problem(http.StatusPreconditionFailed, "version_mismatch",
			"the SKU changed since the ETag in If-Match was read (a sale changes on_hand too); GET it again and decide anew, or use POST /v1/inventory/"+sku+"/adjustments")
	case errors.Is(err, shop.ErrOnHandBelowHeld):
		return problem(http.StatusConflict, "on_hand_below_held",
			"on_hand is lower than the units open checkouts hold; wait for them to end or set a higher value")
	case err != nil:
		return unavailable("inventory store", err)
	}
	if err := s.tellRoomTheStart(ctx, sku, p.SaleStartsAt); err != nil {
		return err
	}
	return inventoryView(c, view)
}

// tellRoomTheStart tells the waiting room a SKU's sale start, as an operator set it: a cart
// in line for the SKU is not taken before its start. If Redis cannot be told, the PUT is 503
// and the operator retries it.
func (s *Server) tellRoomTheStart(ctx context.Context, sku string, startsAt *time.Time) error {
	if s.Room == nil {
		return nil
	}
	if err := s.Room.SetSaleStart(ctx, sku, startsAt); err != nil {
		return unavailable("redis", err)
	}
	return nil
}

// fieldErrors names each field of a PUT of sku's inventory that is missing or out of bounds.
func (req InventoryRequest) fieldErrors(sku string) []FieldError {
	var errs []FieldError
	bad := func(field, detail string) { errs = append(errs, FieldError{field, detail}) }
	if !shop.ValidID(sku) {
		bad("sku", shop.IDRule)
	}
	if req.OnHand == nil || *req.OnHand < 0 || *req.OnHand > maxOnHand {
		bad("on_hand", "is required, between 0 and 1000000000")
	}
	if req.PriceCents == nil || *req.PriceCents < 0 || *req.PriceCents > maxPriceCents {
		bad("price_cents", "is required, between 0 and 10000000000")
	}
	if req.Currency == nil || !currencyPattern.MatchString(strings.ToLower(*req.Currency)) {
		bad("currency", "is required, a three-letter ISO 4217 code such as usd")
	}
	if req.MaxPerOrder == nil || *req.MaxPerOrder < 1 || *req.MaxPerOrder > maxMaxPerOrder {
		bad("max_per_order", "is required, between 1 and 1000000")
	}
	if m := req.MaxPerCustomer; m != nil && (*m < 0 || *m > maxMaxPerOrder) {
		bad("max_per_customer", "is optional, between 0 (no limit) and 1000000")
	}
	return errs
}

// inventoryView answers a SKU's view with its ETag.
func inventoryView(c echo.Context, view shop.InventoryView) error {
	if view.ETag != "" {
		c.Response().Header().Set("ETag", view.ETag)
	}
	return c.JSON(http.StatusOK, view)
}

// adjustInventory changes a SKU's on_hand by delta in one step (docs/contract.md, "Inventory").
func (s *Server) adjustInventory(c echo.Context) error {
	sku := c.Param("sku")
	var req AdjustmentRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	key := c.Request().Header.Get("Idempotency-Key")
	var errs []FieldError
	bad := func(field, detail string) { errs = append(errs, FieldError{field, detail}) }
	if !shop.ValidID(sku) {
		bad("sku", shop.IDRule)
	}
	if req.Delta == nil || *req.Delta == 0 || *req.Delta < -maxOnHand || *req.Delta > maxOnHand {
		bad("delta", "is required, a non-zero whole number between -1000000000 and 1000000000")
	}
	if req.Reason == nil || strings.TrimSpace(*req.Reason) == "" || utf8.RuneCountInString(*req.Reason) > maxReasonLen || !utf8.ValidString(*req.Reason) {
		bad("reason", "is required, 1 to 200 characters")
	}
	if len(key) > maxIdempotencyKeyLen {
		bad("Idempotency-Key", "must be at most 255 characters")
	}
	if len(errs) > 0 {
		return invalid("invalid_request", errs...)
	}
	changes, ok := s.Inventory.(InventoryChanges)
	if !ok {
		return problem(http.StatusNotImplemented, "not_implemented", "this inventory cannot adjust stock")
	}
	view, err := changes.Adjust(c.Request().Context(), shop.Adjustment{SKU: sku, Delta: *req.Delta, Reason: *req.Reason, IdempotencyKey: key})
	switch {
	case errors.Is(err, shop.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no SKU "+sku)
	case errors.Is(err, shop.ErrIdempotencyKeyReused):
		return problem(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"Idempotency-Key "+key+" was already used with a different request body")
	case errors.Is(err, shop.ErrInsufficientStock):
		return problem(http.StatusConflict, "insufficient_stock",
			"the delta takes more units than are on hand and not held by open checkouts; nothing changed")
	case err != nil:
		return unavailable("inventory store", err)
	}
	return inventoryView(c, view)
}

// getInventory shows a SKU's stock in Postgres and Redis side by side.
func (s *Server) getInventory(c echo.Context) error {
	sku := c.Param("sku")
	if !shop.ValidID(sku) {
		return invalid("invalid_request", FieldError{"sku", shop.IDRule})
	}
	view, err := s.Inventory.Get(c.Request().Context(), sku)
	switch {
	case errors.Is(err, shop.ErrNotFound):
		return problem(http.StatusNotFound, "not_found", "no SKU "+sku)
	case err != nil:
		return unavailable("inventory store", err)
	}
	return inventoryView(c, view)
}
