package api

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/checkout-saga/checkout-saga/shop"
)

// CheckoutOwners binds each cart id to the client (a shop backend) that started it, when
// client authentication is on (Config.ClientTokens).
type CheckoutOwners interface {
	// ClaimCheckout binds cartID to client unless another client has it, and returns the
	// owner either way.
	ClaimCheckout(ctx context.Context, cartID, client string) (owner string, err error)
	// CheckoutOwner returns the client that started cartID, or "" if none did.
	CheckoutOwner(ctx context.Context, cartID string) (string, error)
}

const ctxClient = "client"

// ParseClientTokens reads CLIENT_TOKENS: comma-separated client=token pairs, one per shop
// backend allowed to call the checkout endpoints. It returns token -> client.
func ParseClientTokens(s string) (map[string]string, error) {
	out := map[string]string{}
	clients := map[string]bool{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		client, token, ok := strings.Cut(pair, "=")
		switch {
		case !ok || !shop.ValidID(client):
			return nil, fmt.Errorf("%q: want client=token, the client 1 to 64 letters, digits, '-', '_' or '.'", pair)
		case len(token) < 16:
			return nil, fmt.Errorf("the token of client %s must be at least 16 characters", client)
		case out[token] != "":
			return nil, fmt.Errorf("clients %s and %s have the same token", out[token], client)
		case clients[client]:
			return nil, fmt.Errorf("client %s is named twice", client)
		}
		out[token], clients[client] = client, true
	}
	return out, nil
}

// requireClient admits a checkout request only with a known client's bearer token, when
// client authentication is on; it does nothing otherwise.
func (s *Server) requireClient(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if len(s.cfg.ClientTokens) == 0 {
			return next(c)
		}
		scheme, token, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
		client := ""
		for known, name := range s.cfg.ClientTokens { // every token compared: no early exit to time
			if strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(token), []byte(known)) == 1 {
				client = name
			}
		}
		if client == "" {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="checkout"`)
			return problem(http.StatusUnauthorized, "unauthorized", "a valid client bearer token is required")
		}
		c.Set(ctxClient, client)
		return next(c)
	}
}

// errNotYours: the cart belongs to another client. GET and cancel answer 404, as for a cart
// that does not exist, so a client learns nothing of another's carts.
var errNotYours = errors.New("cart of another client")

// checkOwner refuses a cart another client started, or (claim) binds a new one to the caller.
func (s *Server) checkOwner(c echo.Context, cartID string, claim bool) error {
	client, _ := c.Get(ctxClient).(string)
	if client == "" || s.Owners == nil {
		return nil
	}
	ctx := c.Request().Context()
	var owner string
	var err error
	if claim {
		owner, err = s.Owners.ClaimCheckout(ctx, cartID, client)
	} else {
		owner, err = s.Owners.CheckoutOwner(ctx, cartID)
	}
	switch {
	case err != nil:
		return unavailable("postgres", err)
	case owner == client:
		return nil
	case claim:
		return problem(http.StatusConflict, "cart_id_taken", "another client uses this cart_id; choose another")
	default:
		p := noCheckout(cartID)
		p.cause = errNotYours
		return p
	}
}
