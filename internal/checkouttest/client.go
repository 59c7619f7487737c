package checkouttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Client is a well-behaved client of the API: it retries a 503 or 429 after its
// Retry-After (1 s when the answer names none), at most MaxRetries times. Every request
// of the contract is safe to repeat (the cart id, the event id or the Idempotency-Key
// make the second one a no-op), so the retry is too.
type Client struct {
	BaseURL string
	HTTP    *http.Client
	// MaxRetries bounds the retries of one request; 0 never retries.
	MaxRetries int
	// Header is sent with every request, under the request's own (which win): a shop
	// backend's client token, say.
	Header map[string]string
}

// NewClient returns a Client on baseURL with keep-alive connections for a wide burst and
// 30 retries.
func NewClient(baseURL string) *Client {
	return &Client{BaseURL: baseURL, MaxRetries: 30, HTTP: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second,
	}}}
}

// Answer is the last answer to a request, with every attempt's.
type Answer struct {
	Code       int
	Header     http.Header
	Body       []byte
	Problem    string        // the problem+json code of an error answer
	RetryAfter time.Duration // of the last answer
	Attempts   []string      // every answer: "201", "409 out_of_stock", "503 overloaded", "transport error"
	Retried    int           // answers retried after their Retry-After
	Latency    time.Duration // of the last attempt
	Answered   time.Time     // when the last answer arrived
	Queued     bool          // the cart waited in the waiting room (Checkout)
	// PostLatency is the latency of the POST attempt that was answered (201, 202, 409...)
	// when Checkout followed a 202 with GETs; Latency is then the last GET's.
	PostLatency time.Duration
}

// JSON is the answer's body decoded as an object (nil if it is not one).
func (a Answer) JSON() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(a.Body, &m)
	return m
}

// Do sends a request to BaseURL+path, retrying as the type says, and decodes a 2xx JSON
// answer into out (if not nil). body is sent as it is when it is a []byte, as JSON
// otherwise (nil: no body).
func (c *Client) Do(ctx context.Context, method, path string, body any, header map[string]string, out any) (Answer, error) {
	var raw []byte
	switch b := body.(type) {
	case nil:
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return Answer{}, fmt.Errorf("encode %s %s body: %w", method, path, err)
		}
	}
	var a Answer
	for {
		err := c.once(ctx, method, path, raw, header, &a)
		if err != nil {
			a.Attempts = append(a.Attempts, "transport error")
		} else {
			a.Attempts = append(a.Attempts, strings.TrimSpace(strconv.Itoa(a.Code)+" "+a.Problem))
		}
		if err != nil || (a.Code != http.StatusServiceUnavailable && a.Code != http.StatusTooManyRequests) || a.Retried == c.MaxRetries {
			if err == nil && out != nil && len(a.Body) > 0 && a.Code < 300 {
				if err := json.Unmarshal(a.Body, out); err != nil {
					return a, fmt.Errorf("decode %s %s answer %q: %w", method, path, a.Body, err)
				}
			}
			return a, err
		}
		a.Retried++
		wait := a.RetryAfter
		if wait <= 0 {
			wait = time.Second
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return a, ctx.Err()
		}
	}
}

func (c *Client) once(ctx context.Context, method, path string, body []byte, header map[string]string, a *Answer) error {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.Header {
		req.Header.Set(k, v)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	started := time.Now()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	a.Body, err = io.ReadAll(resp.Body)
	a.Code, a.Header, a.Latency, a.Answered = resp.StatusCode, resp.Header, time.Since(started), time.Now()
	a.RetryAfter, a.Problem = 0, ""
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		a.RetryAfter = time.Duration(secs) * time.Second
	}
	if resp.StatusCode >= 400 {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(a.Body, &p)
		a.Problem = p.Code
	}
	if err != nil {
		return fmt.Errorf("read %s %s answer: %w", method, path, err)
	}
	return nil
}

// Checkout POSTs a cart as a browser does: when the cart waits in the waiting room (202),
// it asks GET ?wait=10 with the 202's checkout_secret until the cart has left the room. A
// waiting cart that the room lost (Redis lost its writes: GET answers 404) is POSTed again,
// as docs/api.md asks. The answer is the final one: the view (201, or 200 for a cart that
// left the room or a retry), a 409, or an error; Queued says the cart waited. out, if not
// nil, gets the view, with the secret of the 202 kept.
func (c *Client) Checkout(ctx context.Context, body any, header map[string]string, out *api.CheckoutView) (Answer, error) {
	var v api.CheckoutView
	a, err := c.Do(ctx, http.MethodPost, "/v1/checkouts", body, header, &v)
	postLatency := a.Latency
	secret, queued, cart, reposts := v.CheckoutSecret, false, cartOf(body), 0
	for err == nil {
		attempts, retried := a.Attempts, a.Retried
		switch {
		case a.Code == http.StatusAccepted || a.Code == http.StatusOK && (v.Status == "queued" || queued && v.Status == shop.StatusReserving):
			// Still waiting: in line, or its saga's reservation not answered yet.
			queued = true
			if v.CheckoutSecret != "" {
				secret = v.CheckoutSecret
			}
			get := map[string]string{api.CheckoutSecretHeader: secret}
			for k, val := range header {
				get[k] = val
			}
			v = api.CheckoutView{}
			a, err = c.Do(ctx, http.MethodGet, "/v1/checkouts/"+cart+"?wait=10", nil, get, &v)
		case queued && a.Code == http.StatusNotFound && reposts < 5:
			reposts++
			v = api.CheckoutView{}
			a, err = c.Do(ctx, http.MethodPost, "/v1/checkouts", body, header, &v)
			postLatency = a.Latency
		default:
			a.Queued, a.PostLatency = queued, postLatency
			if v.CheckoutSecret == "" {
				v.CheckoutSecret = secret
			}
			if out != nil {
				*out = v
			}
			return a, nil
		}
		a.Attempts, a.Retried = append(attempts, a.Attempts...), retried+a.Retried
	}
	a.Queued, a.PostLatency = queued, postLatency
	return a, err
}

// cartOf is the cart id of a checkout request body (a CheckoutRequest or its JSON).
func cartOf(body any) string {
	switch b := body.(type) {
	case api.CheckoutRequest:
		return b.CartID
	case *api.CheckoutRequest:
		return b.CartID
	case []byte:
		var r api.CheckoutRequest
		_ = json.Unmarshal(b, &r)
		return r.CartID
	}
	raw, _ := json.Marshal(body)
	var r api.CheckoutRequest
	_ = json.Unmarshal(raw, &r)
	return r.CartID
}

// ShopBackend is the Authorization header of a shop backend whose client token is token
// (CLIENT_TOKENS, IDENTITY_MODE=server).
func ShopBackend(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// Admin is the Authorization header of the operator and support endpoints.
func Admin(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// Buyer is the header a buyer reads and cancels its checkout with: the checkout_secret of
// the answer to the POST that created it.
func Buyer(secret string) map[string]string {
	return map[string]string{api.CheckoutSecretHeader: secret}
}

// BuyerOf is Buyer with the secret an in-process product (signing with CheckoutSecretKey)
// gave cartID's creator: for a test that reads a checkout whose creating answer it does not
// have, or that carried none (a 409 out_of_stock whose saga went on).
func BuyerOf(cartID string) map[string]string {
	return Buyer(api.CheckoutSecret(CheckoutSecretKey, cartID))
}
