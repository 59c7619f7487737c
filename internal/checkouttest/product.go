// Package checkouttest runs the product for tests and the benchmark, as River ships
// rivertest: the one in-process wiring of the worker and the API (as cmd/checkout wires
// them), a client that behaves as the contract asks clients to (it honours Retry-After),
// the one Stripe event builder, the one TCP proxy the fault tests cut, and the audit as the
// invariant check. Only tests and bench import it (direction_test.go).
//
// Open takes services the caller already runs and returns errors (the benchmark is a
// program); Start is Open for a test, on testenv's dev server, database and Redis.
//
// bench is a module of its own, yet it may import this internal package: Go's internal rule
// is on import paths, and bench's path (.../checkout-saga/bench) lies under this package's
// parent, as gopls imports golang.org/x/tools/internal.
package checkouttest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/internal/openapitest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// The secrets every in-process product is started with (API.Config may replace them).
const (
	AdminToken        = "checkouttest-admin-token-0123456789"
	WebhookSecret     = "whsec_checkouttest_secret_0123456789"
	CheckoutSecretKey = "checkouttest-checkout-secret-key-0123456789"
)

// Services are what the product runs on; the caller owns (and closes) them.
type Services struct {
	Temporal client.Client
	Pool     *pgxpool.Pool
	Redis    redis.UniversalClient
}

// Options change what Open and Start run. The zero value is the product as cmd/checkout
// runs it: the worker, and one API with the sold-out gate, AdminToken and WebhookSecret;
// but for MaxOpenPerCustomer.
type Options struct {
	// API is the API's configuration; empty AdminToken, StripeWebhookSecrets,
	// CheckoutSecretKeys, Namespace, TemporalUIURL and DefaultPaymentTimeoutSeconds get the
	// defaults above.
	API api.Config
	// Payments are the worker's payment providers (none: refunds fail, as without a key).
	Payments map[string]payments.Provider
	// MaxOpenPerCustomer caps a customer's open checkouts in Postgres (store's); 0, the
	// tests' default, caps none, where cmd/checkout caps them at store.DefaultMaxOpenPerCustomer.
	MaxOpenPerCustomer int
	// NoWorker starts no worker: the test starts and stops its own with StartWorker.
	NoWorker bool
	// NoAPI serves no API; ServeAPI starts one.
	NoAPI bool
	// NoWaitingRoom serves the API without its waiting room: past the admission bound a
	// request waits, then is answered 503 (the API's behaviour when Redis cannot hold the room).
	NoWaitingRoom bool
	// RoomName names the waiting room, whose keys carry it ("": "test-" and a random id, a
	// room of its own; the benchmark names it with its run id, so its clean-up finds them).
	RoomName string
	// Logger is the API's and the SDK clients' logger (Start: warnings to stderr).
	Logger *slog.Logger
	// UI serves the dev server's Web UI (Start only).
	UI bool
	// Ready are the checks the API's /readyz runs, by name (none: always ready).
	Ready map[string]func(context.Context) error
	// Wrap wraps the API's handler, e.g. with the OpenAPI check (Start does).
	Wrap func(http.Handler) http.Handler
	// RateLimits are the API's limits per address, customer and client (nil: none, as the
	// tests run; cmd/checkout always wires them, and the benchmark wires them as it does).
	RateLimits *api.RateLimits
}

// Product is the product running in this process.
type Product struct {
	Services
	Store     *store.Store
	Stock     *lua.Stock
	Inventory *inventory.Inventory
	// Catalog is the API's catalog check, cached as the product caches it (cmd/checkout):
	// an operator's Set through Inventory reaches it at once.
	Catalog *store.CatalogCache
	// URL is the base URL of the API Open started (empty with NoAPI); Client talks to it.
	URL    string
	Client *Client
	// DevServer and UIURL are set by Start: the dev server and its Web UI ("" if headless).
	DevServer *testsuite.DevServer
	UIURL     string
	// Logger is the API's and the SDK clients' logger.
	Logger *slog.Logger

	opts    Options
	mu      sync.Mutex
	closers []func()
}

// Open wires the product on svc: it loads the Lua scripts, starts the worker and serves the
// API on a loopback listener. Close stops what Open started.
func Open(ctx context.Context, svc Services, opts Options) (_ *Product, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	p := &Product{Services: svc, opts: opts, Logger: opts.Logger, Store: store.New(svc.Pool), Stock: lua.New(svc.Redis)}
	p.Store.MaxOpenPerCustomer = opts.MaxOpenPerCustomer
	p.Catalog = store.NewCatalogCache(p.Store, store.DefaultCatalogTTL, store.DefaultCatalogCacheSize)
	p.Inventory = &inventory.Inventory{Store: p.Store, Stock: p.Stock, Catalog: p.Catalog}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if err := p.Stock.Preload(ctx); err != nil {
		return nil, fmt.Errorf("load lua scripts: %w", err)
	}
	if !opts.NoWorker {
		if _, err := p.startWorker(); err != nil {
			return nil, err
		}
	}
	if !opts.NoAPI {
		o := APIOptions{Gate: true, RateLimits: opts.RateLimits}
		if !opts.NoWaitingRoom { // a room of its own: tests share one Redis
			o.Room, o.Dispatch = lua.NewRoom(svc.Redis, cmp.Or(opts.RoomName, "test-"+testenv.RandomID(""))), true
		}
		url := p.ServeAPIWith(opts.API, svc.Temporal, o)
		p.URL = url
		p.Client = NewClient(url)
		p.onClose(p.Client.HTTP.CloseIdleConnections)
	}
	return p, nil
}

// Start runs the product for a test on testenv's services: a dev server from the pinned
// CLI with the contract's search attributes, a fresh migrated database and Redis. Every
// exchange with the API is checked against api/openapi.json. It stops when the test ends.
func Start(t testing.TB, opts Options) *Product {
	t.Helper()
	srv, uiURL := testenv.DevServerWith(t, testenv.DevServerOptions{EnableUI: opts.UI, ExtraArgs: workflows.DevServerFlags()})
	_, pool := testenv.Postgres(t)
	if opts.Wrap == nil {
		opts.Wrap = func(h http.Handler) http.Handler { return openapitest.Handler(t, h) }
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	svc := Services{Pool: pool, Redis: testenv.Redis(t)}
	svc.Temporal = Dial(t, srv.FrontendHostPort(), opts.Logger)
	p, err := Open(t.Context(), svc, opts)
	if err != nil {
		t.Fatalf("start the product: %v", err)
	}
	t.Cleanup(p.Close)
	p.DevServer, p.UIURL = srv, uiURL
	return p
}

// Dial returns a Temporal client on hostPort (a dev server, or a Proxy in front of one),
// closed when the test ends.
func Dial(t testing.TB, hostPort string, logger *slog.Logger) client.Client {
	t.Helper()
	opts := client.Options{HostPort: hostPort, Namespace: "default"}
	if logger != nil {
		opts.Logger = sdklog.NewStructuredLogger(logger)
	}
	c, err := client.Dial(opts)
	if err != nil {
		t.Fatalf("dial temporal at %s: %v", hostPort, err)
	}
	t.Cleanup(c.Close)
	return c
}

// StartWorker starts another worker of the product and returns its stop function (safe to
// call twice; Close calls it too).
func (p *Product) StartWorker(t testing.TB) (stop func()) {
	t.Helper()
	stop, err := p.startWorker()
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

func (p *Product) startWorker() (stop func(), err error) {
	w := worker.New(p.Temporal, &activities.Activities{Store: p.Store, Stock: p.Stock, Temporal: p.Temporal, Payments: p.opts.Payments}, worker.Build{})
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	var once sync.Once
	stop = func() { once.Do(w.Stop) }
	p.onClose(stop)
	return stop, nil
}

// ServeAPI starts another API server that talks to Temporal through tc, with the sold-out
// gate when gate is set, and returns its base URL; Close stops it. cfg's empty fields get
// Options.API's, then the package defaults.
func (p *Product) ServeAPI(cfg api.Config, tc client.Client, gate bool) (url string) {
	return p.ServeAPIWith(cfg, tc, APIOptions{Gate: gate})
}

// APIOptions are the parts of an API replica ServeAPIWith wires beside its Config.
type APIOptions struct {
	Gate bool // the sold-out gate, as the product wires it
	// Room is the waiting room the replica puts carts in (nil: none); Dispatch runs the
	// replica's taking of carts from it (RunWaitingRoom) until Close. A replica with a room
	// and no Dispatch is one that died after it answered its 202s.
	Room     *lua.Room
	Dispatch bool
	// Took, if set, is called with each cart the replica takes from the room, in the order
	// it took them (tests watch the room's order).
	Took func(shop.RoomEntry)
	// RateLimits are the replica's limits per address and customer (nil: none, as the
	// tests' replicas run; the binary always wires them).
	RateLimits *api.RateLimits
}

// ServeAPIWith is ServeAPI with the replica's parts chosen by o.
func (p *Product) ServeAPIWith(cfg api.Config, tc client.Client, o APIOptions) (url string) {
	gate := o.Gate
	def := p.opts.API
	if cfg.AdminToken == "" {
		cfg.AdminToken = or(def.AdminToken, AdminToken)
	}
	if cfg.StripeWebhookSecrets == nil {
		cfg.StripeWebhookSecrets = def.StripeWebhookSecrets
		if cfg.StripeWebhookSecrets == nil {
			cfg.StripeWebhookSecrets = []string{WebhookSecret}
		}
	}
	if cfg.CheckoutSecretKeys == nil {
		cfg.CheckoutSecretKeys = def.CheckoutSecretKeys
		if cfg.CheckoutSecretKeys == nil {
			cfg.CheckoutSecretKeys = []string{CheckoutSecretKey}
		}
	}
	if cfg.MaxWaitsPerAddress == 0 {
		// Every buyer of the tests and the benchmark calls from loopback: one address's
		// bound on waits would be the whole crowd's, and the waits past it would poll.
		cfg.MaxWaitsPerAddress = api.DefaultMaxWaits
		if def.MaxWaitsPerAddress != 0 {
			cfg.MaxWaitsPerAddress = def.MaxWaitsPerAddress
		}
	}
	cfg.Namespace = or(cfg.Namespace, or(def.Namespace, "default"))
	cfg.TemporalUIURL = or(cfg.TemporalUIURL, or(def.TemporalUIURL, "http://localhost:8233"))
	if cfg.DefaultPaymentTimeoutSeconds == 0 {
		cfg.DefaultPaymentTimeoutSeconds = 600
		if def.DefaultPaymentTimeoutSeconds != 0 {
			cfg.DefaultPaymentTimeoutSeconds = def.DefaultPaymentTimeoutSeconds
		}
	}
	// Keys and Owners as the product wires them: every new cart claims its Idempotency-Key in
	// Postgres (a round trip the flash sale's figures must include).
	deps := api.Deps{Temporal: tc, Catalog: p.Catalog, Inventory: p.Inventory, Records: p.Store, Payments: p.Store,
		Keys: p.Store, Owners: p.Store, Logger: p.opts.Logger, Audit: p.Auditor(), Ready: p.opts.Ready}
	if gate { // the gate as the product wires it: losers of a sold-out SKU answered from memory
		deps.Gate = lua.NewSoldOutFlag(p.Stock, lua.DefaultSoldOutBound)
	}
	if o.Room != nil {
		deps.Room = o.Room
		if o.Took != nil {
			deps.Room = watchedRoom{o.Room, o.Took}
		}
	}
	deps.RateLimits = o.RateLimits
	srv := api.NewServer(cfg, deps)
	if o.Room != nil && o.Dispatch {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { srv.RunWaitingRoom(ctx); close(done) }()
		p.onClose(func() { stop(); <-done })
	}
	var h http.Handler = srv.Handler()
	if p.opts.Wrap != nil {
		h = p.opts.Wrap(h)
	}
	hs := httptest.NewServer(h)
	p.onClose(hs.Close)
	return hs.URL
}

// watchedRoom tells took of every cart taken from the room.
type watchedRoom struct {
	*lua.Room
	took func(shop.RoomEntry)
}

func (r watchedRoom) Pop(ctx context.Context) (shop.RoomEntry, bool, error) {
	e, ok, err := r.Room.Pop(ctx)
	if ok && err == nil {
		r.took(e)
	}
	return e, ok, err
}

func or(s, def string) string {
	if s != "" {
		return s
	}
	return def
}

// Auditor judges everything at once (no grace): tests audit the product at rest.
func (p *Product) Auditor() *audit.Auditor {
	return audit.New(p.Pool, p.Redis, p.Temporal, audit.Options{Grace: -1})
}

// CheckInvariants runs the audit, the product's promises across Postgres, Redis and
// Temporal, and returns one error naming every violation, nil when clean.
func CheckInvariants(ctx context.Context, a *audit.Auditor) (shop.AuditReport, error) {
	report, err := a.Run(ctx)
	if err != nil {
		return report, fmt.Errorf("run the audit: %w", err)
	}
	var errs []error
	for _, v := range report.Violations {
		errs = append(errs, fmt.Errorf("%+v", v))
	}
	return report, errors.Join(errs...)
}

// SetStock sets a SKU's stock through the operator inventory, at 1,999 cents (usd).
func (p *Product) SetStock(ctx context.Context, sku string, onHand, maxPerOrder int64) error {
	_, err := p.Inventory.Set(ctx, shop.Product{SKU: sku, OnHand: onHand, SaleTerms: shop.SaleTerms{PriceCents: UnitPrice, Currency: "usd", MaxPerOrder: maxPerOrder}})
	if err != nil {
		return fmt.Errorf("stock %s: %w", sku, err)
	}
	return nil
}

// UnitPrice is what SetStock prices every unit at, in cents.
const UnitPrice = 1_999

func (p *Product) onClose(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closers = append(p.closers, f)
}

// Close stops what Open started, last first.
func (p *Product) Close() {
	p.mu.Lock()
	closers := p.closers
	p.closers = nil
	p.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// StartProxy is NewProxy for a test, closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatalf("start a proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Close)
	return p
}
