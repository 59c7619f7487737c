package api

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/activities"
)

// Bounds on what an operator may set; beyond them a typo is likelier than a real stock level.
const (
	maxOnHand      = 1_000_000_000
	maxPriceCents  = 100_000_000_00
	maxMaxPerOrder = 1_000_000
)

var currencyPattern = regexp.MustCompile(`^[a-z]{3}$`)

// InventoryRequest is the body of PUT /v1/inventory/{sku}. Every field is required.
type InventoryRequest struct {
	OnHand      *int64  `json:"on_hand"`
	PriceCents  *int64  `json:"price_cents"`
	Currency    *string `json:"currency"`
	MaxPerOrder *int64  `json:"max_per_order"`
}

// requireAdmin lets a request through only with the admin bearer token, compared in
// constant time so response timing reveals nothing about the token.
func (s *Server) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		scheme, token, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
		if !strings.EqualFold(scheme, "Bearer") || s.cfg.AdminToken == "" || subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.AdminToken)) != 1 {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="checkout-admin"`)
			return problem(http.StatusUnauthorized, "unauthorized", "a valid admin bearer token is required")
		}
		return next(c)
	}
}

// putInventory sets a SKU's stock and price and publishes availability to Redis.
func (s *Server) putInventory(c echo.Context) error {
	sku := c.Param("sku")
	var req InventoryRequest
	if err := decodeStrict(c.Request().Body, &req); err != nil {
		return err
	}
	var errs []FieldError
	bad := func(field, detail string) { errs = append(errs, FieldError{field, detail}) }
	if !idPattern.MatchString(sku) {
		bad("sku", "must be 1 to 64 letters, digits, '-', '_' or '.'")
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
	if len(errs) > 0 {
		return invalid("invalid_request", errs...)
	}
	view, err := s.Inventory.Set(c.Request().Context(), activities.Product{
		SKU: sku, OnHand: *req.OnHand, PriceCents: *req.PriceCents,
		Currency: strings.ToLower(*req.Currency), MaxPerOrder: *req.MaxPerOrder,
	})
	switch {
	case errors.Is(err, activities.ErrOnHandBelowHeld):
		return problem(http.StatusConflict, "on_hand_below_held",
			"on_hand is lower than the units open checkouts hold; wait for them to end or set a higher value")
	case err != nil:
		return unavailable("inventory store", err)
	}
	return c.JSON(http.StatusOK, view)
}

// getInventory shows a SKU's stock in Postgres and Redis side by side.
func (s *Server) getInventory(c echo.Context) error {
	sku := c.Param("sku")
	if !idPattern.MatchString(sku) {
		return invalid("invalid_request", FieldError{"sku", "must be 1 to 64 letters, digits, '-', '_' or '.'"})
	}
	view, err := s.Inventory.Get(c.Request().Context(), sku)
	switch {
	case activities.IsNotFound(err):
		return problem(http.StatusNotFound, "not_found", "no SKU "+sku)
	case err != nil:
		return unavailable("inventory store", err)
	}
	return c.JSON(http.StatusOK, view)
}
