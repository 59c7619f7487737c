package e2e

import (
	"log/slog"
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
	"github.com/checkout-saga/checkout-saga/internal/openapitest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// product is the product running in this test binary on real services, wired as
// cmd/checkout wires it: a dev server from the pinned CLI on free ports, a fresh Postgres
// database, Redis, the worker, and API servers started with serveAPI.
type product struct {
	t      *testing.T
	srv    *testsuite.DevServer
	tc     client.Client
	pool   *pgxpool.Pool
	rdb    *redis.Client
	store  *store.Store
	stock  *lua.Stock
	inv    *inventory.Inventory
	logger *slog.Logger
	uiURL  string // base URL of the Web UI; empty when headless

	payments map[string]payments.Provider
}

type productOptions struct {
	UI       bool                         // serve the Web UI
	LogLevel slog.Level                   // of the API's and SDK's logs (default: warn)
	Payments map[string]payments.Provider // the worker's payment providers
	NoWorker bool                         // start no worker: the test starts and stops its own with startWorker
}

func startProduct(t *testing.T, opts productOptions) *product {
	if opts.LogLevel == 0 {
		opts.LogLevel = slog.LevelWarn
	}
	p := &product{t: t}
	p.srv, p.uiURL = testenv.DevServerWith(t, testenv.DevServerOptions{EnableUI: opts.UI, SearchAttributes: workflows.SearchAttributeTypes})
	_, p.pool = testenv.Postgres(t)
	p.rdb = testenv.Redis(t)
	p.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: opts.LogLevel}))
	p.tc = p.dial(p.srv.FrontendHostPort())
	p.store, p.stock = store.New(p.pool), lua.New(p.rdb)
	p.inv = &inventory.Inventory{Store: p.store, Stock: p.stock}
	p.payments = opts.Payments
	if !opts.NoWorker {
		t.Cleanup(p.startWorker())
	}
	return p
}

// startWorker starts a worker of the product and returns its stop function.
func (p *product) startWorker() (stop func()) {
	w := worker.New(p.tc, &activities.Activities{Store: p.store, Stock: p.stock, Temporal: p.tc, Payments: p.payments})
	if err := w.Start(); err != nil {
		p.t.Fatalf("start worker: %v", err)
	}
	var once sync.Once
	return func() { once.Do(w.Stop) }
}

// dial returns a Temporal client on hostPort (the dev server, or a proxy in front of it).
func (p *product) dial(hostPort string) client.Client {
	c, err := client.Dial(client.Options{HostPort: hostPort, Namespace: "default", Logger: sdklog.NewStructuredLogger(p.logger)})
	if err != nil {
		p.t.Fatalf("dial temporal at %s: %v", hostPort, err)
	}
	p.t.Cleanup(c.Close)
	return c
}

// serveAPI starts an API server talking to Temporal through tc, with the sold-out gate when
// gate is set, and returns its base URL. cfg's Namespace and TemporalUIURL get defaults.
func (p *product) serveAPI(cfg api.Config, tc client.Client, gate bool) string {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.TemporalUIURL == "" {
		cfg.TemporalUIURL = "http://localhost:8233"
	}
	deps := api.Deps{Temporal: tc, Catalog: p.store, Inventory: p.inv, Records: p.store, Payments: p.store, Logger: p.logger}
	if gate {
		deps.Gate = p.stock
	}
	// Every exchange is checked against api/openapi.json: an answer it does not describe
	// fails the test.
	hs := httptest.NewServer(openapitest.Handler(p.t, api.New(cfg, deps)))
	p.t.Cleanup(hs.Close)
	return hs.URL
}
