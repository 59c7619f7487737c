// Package api is the HTTP face of the product (Echo v4): checkouts, payment webhooks,
// inventory administration and operations endpoints, as docs/contract.md describes them.
//
// The API does no stock or order work itself: it validates input, starts or talks to the
// checkout saga in Temporal, and reads Postgres through the small interfaces below, which
// the binary wires to package activities. Every error leaves as RFC 9457 problem+json with a
// stable code, through one error handler.
package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/room"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Catalog reads SKUs' prices and limits.
type Catalog interface {
	Products(ctx context.Context, skus []string) (map[string]shop.Product, error)
}

// Inventory sets and reads stock (Postgres and Redis together).
type Inventory interface {
	Set(ctx context.Context, p shop.Product) (shop.InventoryView, error)
	Get(ctx context.Context, sku string) (shop.InventoryView, error)
}

// CheckoutRecords reads checkouts from Postgres, for those whose saga is no longer in Temporal.
type CheckoutRecords interface {
	Checkout(ctx context.Context, checkoutID string) (shop.CheckoutRecord, error)
	// RecordedCheckouts reports which of ids are recorded, with the fingerprint of the
	// request that created each, the secret versions of ids, and the standing of each of
	// customers (their open checkouts, and their units of skus held or bought), in one round
	// trip.
	RecordedCheckouts(ctx context.Context, ids, customers, skus []string) (shop.Recorded, error)
	// OrderPaymentRef is the payment reference recorded on the checkout's order.
	OrderPaymentRef(ctx context.Context, checkoutID string) (string, error)
	// RevokeSecret moves the checkout's secret to the next version and returns it.
	RevokeSecret(ctx context.Context, checkoutID string) (int64, error)
	// RecordEnd records the end of a cart that ended in the waiting room, without a saga, and
	// returns the status Postgres holds for it (an end recorded before stands).
	RecordEnd(ctx context.Context, c shop.CheckoutRecord) (string, error)
}

// PaymentEvents records verified webhook events once and remembers their delivery.
type PaymentEvents interface {
	RecordPaymentEvent(ctx context.Context, ev shop.PaymentEvent) (shop.RecordedEvent, error)
	MarkPaymentEventDelivered(ctx context.Context, provider, eventID, disposition string) error
}

// Gate answers, from Redis and without starting a saga, whether a cart can be refused as sold
// out right now (see lua.Stock.Precheck).
type Gate interface {
	Precheck(ctx context.Context, checkoutID string, items map[string]int64) (shop.Precheck, error)
	// MarkStarted lets later retries of the checkout's request through the gate.
	MarkStarted(ctx context.Context, checkoutID string) error
}

// IdempotencyKeys binds each Idempotency-Key to the first request body its caller used it
// with, across carts (Postgres, see store.Store.ClaimIdempotencyKeys): many claims in one
// round trip, each answered the binding that holds afterwards.
type IdempotencyKeys interface {
	ClaimIdempotencyKeys(ctx context.Context, claims []shop.IdempotencyClaim, retention time.Duration) ([]shop.IdempotencyClaim, error)
}

// Config is the API's behaviour, from the environment (see cmd/checkout).
type Config struct {
	AdminToken string
	// TrustedProxies are the networks of the load balancers whose X-Forwarded-For names the
	// client's address; without any, the connection's peer is the client (a header anyone
	// can write must not pick the address the rate limits count).
	TrustedProxies []*net.IPNet
	// IPv6Prefix is how many leading bits of an IPv6 client address the per-address limits
	// count as one client (see addressKey); DefaultIPv6Prefix when 0.
	IPv6Prefix             int
	StripeWebhookSecrets   []string      // several during a secret rotation
	StripeWebhookTolerance time.Duration // max age of a signature
	// StripeLiveOnly refuses Stripe's test-mode events (livemode false): a test card costs
	// nothing. `checkout api` sets it unless STRIPE_TEST_MODE; tests and the local stack
	// take test events.
	StripeLiveOnly bool
	// StandardWebhookSecrets are the whsec_ secrets of each Standard Webhooks provider, by
	// provider name (several during a rotation); see ParseStandardWebhookSecrets.
	StandardWebhookSecrets       map[string][]string
	StandardWebhookTolerance     time.Duration // max distance of webhook-timestamp from now
	DefaultPaymentTimeoutSeconds int64
	// ClientTokens turns client authentication on for the checkout endpoints: token ->
	// client (see ParseClientTokens). A client then reads and cancels only its own carts.
	// Server to server: the client's customer_id is trusted.
	ClientTokens map[string]string
	// IdentityTokens turns buyer identity on (browser direct): POST /v1/checkouts needs a
	// token the shop's login signed, and its subject is the customer (identity.go). Not with
	// ClientTokens: both are bearer tokens of the Authorization header.
	IdentityTokens *IdentityVerifier
	// MaxPaymentTimeoutSeconds caps the window a client may ask for (payment_timeout_seconds);
	// DefaultMaxPaymentTimeoutSeconds when 0. Longer holds only through support's extend.
	MaxPaymentTimeoutSeconds int64
	TemporalUIURL            string // for the view's temporal_ui link
	Namespace                string
	RequestTimeout           time.Duration
	// Room is the waiting room's configuration: the line's size, a customer's carts in it,
	// and the bound on the sagas this replica starts at once (room.Config).
	Room room.Config
	// IdempotencyKeyRetention is how long a key stays bound to its body (the contract asks
	// for at least 24 h); DefaultIdempotencyKeyRetention when 0.
	IdempotencyKeyRetention time.Duration
	// MaxWaitsPerAddress and MaxWaits bound the GETs that wait (?wait=N) at once, per client
	// address (addressKey) and in this process; a wait past either is answered at once with
	// the current state. DefaultMaxWaitsPerAddress and DefaultMaxWaits when 0.
	MaxWaitsPerAddress, MaxWaits int
	// CheckoutSecretKeys sign and check the checkout secrets a buyer's GET and cancel need
	// (see CheckoutSecret): the first signs, any verifies, so a key can be rotated. Empty:
	// DevCheckoutSecretKey, which only the local stack and tests may use.
	CheckoutSecretKeys []string
	// CheckoutSecretGrace is how long after its checkout ended a checkout secret still opens
	// it; 0 is DefaultCheckoutSecretGrace.
	CheckoutSecretGrace time.Duration
}

// DefaultMaxPaymentTimeoutSeconds is one hour: a client cannot hold a flash sale's units for a
// day (50 carts of 2 units with a 24 h window would hold 100 units; now they are back within
// the hour).
const DefaultMaxPaymentTimeoutSeconds = 3600

// DefaultIdempotencyKeyRetention is 7 days: as long as a hold's tombstone, well past the
// contract's 24 hours and Temporal's retention (1 to 3 days), so a key outlives any answer
// the saga itself could still give about it.
const DefaultIdempotencyKeyRetention = 7 * 24 * time.Hour

// Deps are the API's collaborators.
type Deps struct {
	Temporal  client.Client
	Catalog   Catalog
	Inventory Inventory
	Records   CheckoutRecords
	Payments  PaymentEvents
	// Gate is the sold-out gate; nil turns it off.
	Gate Gate
	// Keys indexes Idempotency-Keys across carts; nil leaves only the saga's own check
	// (within one cart), as tests that need no Postgres index do.
	Keys IdempotencyKeys
	// Workers reads the workers' heartbeats: while none polls, POST /v1/checkouts answers
	// 503 without starting a saga and /readyz names the task queue. nil turns the check off
	// (tests that run their worker without a heartbeat).
	Workers Workers
	// Readiness turns /readyz to 503 while the server drains (see Serve); nil never drains.
	Readiness *Readiness
	// Ready are the checks /readyz runs, by name (redis, postgres, temporal).
	Ready  map[string]func(context.Context) error
	Logger *slog.Logger
	Audit  Auditor // GET /v1/admin/audit; nil answers 503
	// Owners binds carts to clients when Config.ClientTokens is set.
	Owners CheckoutOwners
	// Trace starts each request's span (tracing.EchoMiddleware); it runs first, so the
	// request log and the handlers see the span. nil traces nothing.
	Trace echo.MiddlewareFunc
	// RateLimits bound requests per client address and checkouts per customer; nil is off.
	RateLimits *RateLimits
	// Room is the line that carts enter when they cannot start their saga at once
	// (lua.Room); nil answers those 503 after the room's Wait, as before the room.
	Room room.Line
}

// Server holds the handlers.
type Server struct {
	cfg Config
	Deps
	admission *room.Bound    // one place per checkout request talking to Temporal
	runner    *room.Runner   // takes carts from Deps.Room's line; nil without one
	recorded  *recordedCheck // Postgres reads of carts' records and secret versions, many per query
	workers   *workerCheck   // nil without Deps.Workers
	standard  standardVerifiers
	secrets   checkoutSecrets
	keyClaims *keyClaims  // the Idempotency-Key claims of many POSTs at once; nil without Keys
	waits     *waitPlaces // the GETs that wait (?wait=N) at once
	ends      *endWatches // their long polls, one per checkout
	e         *echo.Echo
	// readyCache answers /readyz from one round of checks a second (ops.go)
	readyCache readyCache
}

// Body limits: a 50-line cart is about 4 KiB of JSON; Stripe events are larger but stay well
// under 256 KiB.
const (
	checkoutBodyLimit = "64K"
	webhookBodyLimit  = "256K"
)

// withDefaults is cfg with each setting left unset given its default. A timeout, a bound or
// a retention of zero or less is unset, except RequestTimeout, which only zero leaves unset.
func (cfg Config) withDefaults() Config {
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if len(cfg.CheckoutSecretKeys) == 0 {
		cfg.CheckoutSecretKeys = []string{DevCheckoutSecretKey}
	}
	cfg.Room = cfg.Room.WithDefaults()
	positiveOr(&cfg.IPv6Prefix, DefaultIPv6Prefix)
	positiveOr(&cfg.IdempotencyKeyRetention, DefaultIdempotencyKeyRetention)
	positiveOr(&cfg.CheckoutSecretGrace, DefaultCheckoutSecretGrace)
	positiveOr(&cfg.MaxWaitsPerAddress, DefaultMaxWaitsPerAddress)
	positiveOr(&cfg.MaxWaits, DefaultMaxWaits)
	return cfg
}

// positiveOr sets *v to def unless it is above zero.
func positiveOr[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// New builds the Echo server with every route of the contract.
func New(cfg Config, deps Deps) *echo.Echo { return NewServer(cfg, deps).Handler() }

// Handler is the server's Echo instance, every route of the contract.
func (s *Server) Handler() *echo.Echo { return s.e }

// NewServer builds the server; Handler serves it, and RunWaitingRoom starts the sagas of the
// carts that wait in its room (Deps.Room).
func NewServer(cfg Config, deps Deps) *Server {
	cfg = cfg.withDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	cfg.IdentityTokens.useLogger(deps.Logger)
	s := &Server{cfg: cfg, Deps: deps, admission: room.NewBound(int(cfg.Room.MaxStarting), cfg.Room.Target),
		standard: newStandardVerifiers(cfg.StandardWebhookSecrets), secrets: checkoutSecrets(cfg.CheckoutSecretKeys)}
	if deps.Room != nil {
		s.runner = room.NewRunner(deps.Room, s.admission, s.startFromLine, deps.Logger)
	}
	if deps.Workers != nil {
		s.workers = &workerCheck{workers: deps.Workers}
	}
	s.waits = newWaitPlaces(cfg.MaxWaitsPerAddress, cfg.MaxWaits)
	s.ends = newEndWatches(s.pollEnd)
	if deps.RateLimits != nil && deps.RateLimits.local == nil {
		deps.RateLimits.local = newLocalLimits()
	}
	if deps.Keys != nil {
		s.keyClaims = newKeyClaims(deps.Keys, cfg.IdempotencyKeyRetention)
	}
	if deps.Records != nil {
		s.recorded = newRecordedCheck(deps.Records.RecordedCheckouts)
	}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = echo.ExtractIPDirect()
	if len(cfg.TrustedProxies) > 0 {
		// Only the named proxies: Echo would also believe every loopback, link-local and
		// private hop, so a client inside a private network could name any address.
		trust := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
		for _, n := range cfg.TrustedProxies {
			trust = append(trust, echo.TrustIPRange(n))
		}
		e.IPExtractor = echo.ExtractIPFromXFFHeader(trust...)
	}
	e.HTTPErrorHandler = s.handleError
	if deps.Trace != nil {
		e.Use(deps.Trace)
	}
	e.Use(middleware.Recover())
	e.Use(s.requestLog())

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.json", s.openAPI)
	// No /metrics here: it shows sales velocity per SKU and SDK internals, so the binary
	// serves MetricsHandler on an internal address (API_METRICS_ADDR) instead.

	v1 := e.Group("/v1", middleware.ContextTimeout(cfg.RequestTimeout), boundBodyRead(cfg.RequestTimeout))
	// Every body but a webhook's is JSON (requireJSON); a webhook's is verified as the raw
	// bytes its sender signed, whatever it is labelled. The buyer's routes count against the
	// caller first (limitCheckouts, limitAddress), before anything else costs. The client
	// token (server mode) is read before: comparing it costs nothing, and it says whether
	// the caller is a shop backend, counted per client, or a buyer, counted per address.
	v1.POST("/checkouts", s.startCheckout, s.requireClient, s.limitCheckouts, middleware.BodyLimit(checkoutBodyLimit), s.requireIdentity, requireJSON)
	v1.GET("/checkouts/:cart_id", s.getCheckout, s.requireClient, s.limitAddress)
	v1.POST("/checkouts/:cart_id/cancel", s.cancelCheckout, s.requireClient, s.limitAddress, requireJSON)
	// The webhooks are not counted per address: a provider sends every shop's events from a
	// few addresses, so a budget sized for a buyer would refuse payments during a sale (and
	// Stripe then backs off for hours, past the checkouts' payment timeouts), and one sized
	// for a provider bounds nothing that one HMAC per secret over at most webhookBodyLimit
	// costs. docs/security.md says to allow only the providers' addresses at the edge.
	v1.POST("/webhooks/stripe", s.stripeWebhook, middleware.BodyLimit(webhookBodyLimit))
	v1.POST("/webhooks/standard/:provider", s.standardWebhook, middleware.BodyLimit(webhookBodyLimit))

	inventory := v1.Group("/inventory", s.requireAdmin)
	inventory.PUT("/:sku", s.putInventory, middleware.BodyLimit(checkoutBodyLimit), requireJSON)
	inventory.GET("/:sku", s.getInventory)
	inventory.POST("/:sku/adjustments", s.adjustInventory, middleware.BodyLimit(checkoutBodyLimit), requireJSON)

	support := v1.Group("/admin", s.requireAdmin, middleware.BodyLimit(checkoutBodyLimit))
	support.POST("/checkouts/:cart_id/extend", s.supportExtend, requireJSON)
	support.POST("/checkouts/:cart_id/cancel", s.supportCancel, requireJSON)
	support.POST("/checkouts/:cart_id/retry", s.supportRetry, requireJSON)
	support.POST("/checkouts/:cart_id/acknowledge", s.supportAcknowledge, requireJSON)
	support.POST("/checkouts/:cart_id/revoke-secret", s.supportRevokeSecret, requireJSON)
	support.POST("/refunds/:provider/:payment_ref/retry", s.supportRetryRefund, requireJSON)
	support.GET("/audit", s.getAudit)
	support.GET("/waiting-room", s.roomStatus)
	support.POST("/waiting-room/hold", s.holdRoom)
	support.POST("/waiting-room/resume", s.resumeRoom)
	support.PUT("/waiting-room/pace", s.setRoomPace, requireJSON)
	s.e = e
	return s
}

// boundBodyRead gives the body the request's own deadline. ContextTimeout cannot reach a
// handler blocked reading the body (io.ReadAll knows no context), and the server's
// ReadTimeout is longer than a request may take.
//
// Only a request with a body gets one. Once a body is read to its end, net/http clears the
// connection's read deadline and waits in the background for the client's next byte; for a
// request without a body it does so before the handler runs. A deadline set then would
// expire under that wait while the handler still works, and net/http takes a failed
// background read for a client gone: it cancels the connection's context, and every later
// request on that keep-alive connection would start cancelled and answer at once.
func boundBodyRead(timeout time.Duration) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if c.Request().Body == http.NoBody {
				return next(c)
			}
			// Not every ResponseWriter can (httptest's cannot); the server's ReadTimeout
			// still bounds those.
			_ = http.NewResponseController(c.Response().Writer).SetReadDeadline(time.Now().Add(timeout))
			return next(c)
		}
	}
}

// requireJSON refuses a request body that is not labelled application/json (parameters such
// as charset allowed), with 415, before any of it is parsed. A web page may make its
// visitors' browsers POST text/plain, form and multipart bodies to any site without a CORS
// preflight; a JSON body needs one, which the API never grants, so a page cannot spend its
// visitors' addresses on checkouts. A request without a body needs no Content-Type: a
// browser can send a bare POST anyway, so refusing it would protect nothing (a buyer's
// cancel is guarded by its Checkout-Secret header instead).
func requireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if isJSON(req.Header.Get(echo.HeaderContentType)) {
			return next(c)
		}
		empty, err := emptyBody(req)
		if err != nil {
			return readError(err)
		}
		if !empty {
			return problem(http.StatusUnsupportedMediaType, "unsupported_media_type",
				"the body must be JSON, sent with Content-Type: application/json")
		}
		return next(c)
	}
}

// isJSON reports whether a Content-Type names application/json.
func isJSON(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == echo.MIMEApplicationJSON
}

// emptyBody reports whether the request has no body. A body of unknown length (chunked) is
// peeked at for one byte, which is put back.
func emptyBody(req *http.Request) (bool, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0:
		return true, nil
	case req.ContentLength > 0:
		return false, nil
	}
	var first [1]byte
	n, err := io.ReadFull(req.Body, first[:])
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	req.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(first[:n]), req.Body), req.Body}
	return false, nil
}

// requestLog writes one structured line per request (Echo's RequestLogger), with the checkout
// and workflow ids when the handler set them. The error handler answers first (HandleError),
// so the line has the final status and problem code. The answered error is not passed on, so
// the middleware above (tracing) sees an answered request, not a second error to handle.
func (s *Server) requestLog() echo.MiddlewareFunc {
	logged := middleware.RequestLoggerWithConfig(middleware.RequestLoggerConfig{
		HandleError: true, LogMethod: true, LogURIPath: true, LogStatus: true, LogLatency: true,
		LogValuesFunc: s.logRequest,
	})
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		h := logged(next)
		return func(c echo.Context) error {
			_ = h(c)
			return nil
		}
	}
}

// logRequest is the request log's line. It names who asked: the client's address (RealIP,
// as the limits see it before addressKey), the caller (its client, or a hash of the customer
// an identity token named: the log must not list customers, but one customer's requests
// must be countable) and, when the request carried it, the admin token.
func (s *Server) logRequest(c echo.Context, v middleware.RequestLoggerValues) error {
	attrs := []any{"method", v.Method, "path", v.URIPath, "status", v.Status, "duration_ms", v.Latency.Milliseconds(),
		"client_address", c.RealIP()}
	if caller := logCaller(c); caller != "" {
		attrs = append(attrs, "caller", caller)
	}
	if s.isAdmin(c) {
		attrs = append(attrs, "admin", true)
	}
	if id, ok := c.Get(ctxCheckoutID).(string); ok {
		attrs = append(attrs, "checkout_id", id, "workflow_id", c.Get(ctxWorkflowID))
	}
	if code, ok := c.Get(ctxProblemCode).(string); ok {
		attrs = append(attrs, "code", code)
	}
	level := slog.LevelInfo
	if v.Status >= 500 {
		level = slog.LevelError
	}
	s.Logger.Log(c.Request().Context(), level, "http request", attrs...)
	return nil
}

// logCaller is the request log's name of the caller: client/<name> for a client token,
// customer/<the first 12 hex digits of the customer's SHA-256> for an identity token, ""
// for neither.
func logCaller(c echo.Context) string {
	if client, _ := c.Get(ctxClient).(string); client != "" {
		return "client/" + client
	}
	if customer, _ := c.Get(ctxCustomer).(string); customer != "" {
		sum := sha256.Sum256([]byte(customer))
		return "customer/" + hex.EncodeToString(sum[:6])
	}
	return ""
}

// Keys of values handlers leave on the echo.Context for the request log.
const (
	ctxCheckoutID  = "checkout_id"
	ctxWorkflowID  = "workflow_id"
	ctxProblemCode = "problem_code"
)

// RunWaitingRoom runs the room's runner (room.Runner.Run) until ctx ends: it starts the
// sagas of the carts in Deps.Room's line. Without a line it returns at once.
func (s *Server) RunWaitingRoom(ctx context.Context) {
	if s.runner != nil {
		s.runner.Run(ctx)
	}
}
