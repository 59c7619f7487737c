package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/checkout-saga/checkout-saga/activities"
	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/lua"
	"github.com/checkout-saga/checkout-saga/metrics"
	"github.com/checkout-saga/checkout-saga/migrations"
	"github.com/checkout-saga/checkout-saga/ops"
	"github.com/checkout-saga/checkout-saga/payments"
	"github.com/checkout-saga/checkout-saga/room"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/tracing"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// deps are the open connections a command works with.
type deps struct {
	logger   *slog.Logger
	tracing  *tracing.Tracing // nil: tracing off
	pool     *pgxpool.Pool
	rdb      redis.UniversalClient
	temporal client.Client
	store    *store.Store
	stock    *lua.Stock
	closers  []func()
}

func (d *deps) Close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// newLogger writes JSON lines to stderr; a line logged inside a span carries its trace_id.
func newLogger(cfg config) *slog.Logger {
	return slog.New(tracing.LogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel})))
}

// open connects to Postgres, Redis and Temporal, in that order, and checks each answers.
// With tr (nil: tracing off) every Postgres query, Redis command and Temporal call is traced.
// Each connection registers its close as it opens; a step that fails closes what opened
// before it, last first.
func open(ctx context.Context, cfg config, logger *slog.Logger, tr *tracing.Tracing) (_ *deps, err error) {
	d := &deps{logger: logger, tracing: tr}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.openPostgres(ctx, cfg); err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	if err := d.openRedis(ctx, cfg); err != nil {
		return nil, err
	}
	if d.temporal, err = dialTemporal(ctx, cfg, logger, tr); err != nil {
		return nil, err
	}
	d.closers = append(d.closers, d.temporal.Close)
	return d, nil
}

// openPostgres opens the pool and checks it answers.
func (d *deps) openPostgres(ctx context.Context, cfg config) error {
	pool, err := store.NewPool(ctx, cfg.DatabaseURL, d.tracing.PgxTracer())
	if err != nil {
		return err
	}
	d.closers = append(d.closers, pool.Close)
	if err := pool.Ping(ctx); err != nil {
		return err
	}
	d.pool, d.store = pool, store.New(pool)
	d.store.MaxOpenPerCustomer = int(cfg.MaxOpenPerCustomer)
	return nil
}

// openRedis connects, checks Redis answers and keeps stock keys, and loads the stock scripts.
func (d *deps) openRedis(ctx context.Context, cfg config) error {
	rdb, err := newRedis(cfg.RedisURL, cfg.RedisCluster)
	if err != nil {
		return fmt.Errorf("open redis: %w", err)
	}
	d.rdb = rdb
	d.closers = append(d.closers, func() { _ = rdb.Close() })
	if err := d.tracing.InstrumentRedis(rdb); err != nil {
		return fmt.Errorf("open redis: %w", err)
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("open redis: %w", err)
	}
	if err := checkAllRedisSettings(ctx, rdb, d.logger); err != nil {
		return err
	}
	d.stock = lua.New(rdb)
	if err := d.stock.Preload(ctx); err != nil {
		return fmt.Errorf("open redis: load scripts: %w", err)
	}
	return nil
}

// dialTemporal connects the client that the API and the worker share the wiring of; its
// interceptors (the tracing one, when on) apply to workers built from it too.
func dialTemporal(ctx context.Context, cfg config, logger *slog.Logger, tr *tracing.Tracing) (client.Client, error) {
	interceptors, err := tr.TemporalInterceptors()
	if err != nil {
		return nil, err
	}
	opts := client.Options{
		HostPort:       cfg.TemporalAddress,
		Namespace:      cfg.Namespace,
		Logger:         sdklog.NewStructuredLogger(logger),
		MetricsHandler: sdkMetrics(),
		Interceptors:   interceptors,
	}
	// The SDK gzips every request by default. A checkout's requests are a few hundred
	// bytes, sent to a frontend on the same network: compressing them costs both sides CPU
	// and saves little bandwidth. A link that pays per byte (Temporal Cloud over the
	// internet) may want TEMPORAL_GRPC_COMPRESSION=gzip.
	if !cfg.TemporalGzip {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	}
	cfg.TemporalSecurity.apply(&opts)
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("open temporal at %s: %w", cfg.TemporalAddress, err)
	}
	return c, nil
}

// checkRedisSettings refuses a Redis that may silently drop stock keys, and warns where a
// restart would lose them. An allkeys-* eviction policy can evict stock:{sku} or holds:{sku}
// under memory pressure: a lost holds hash makes held units look available (oversell). A
// volatile-* policy can evict hold-end tombstones (they have a TTL), which lets a late retry
// hold units again after its checkout ended. Without persistence a restart loses everything;
// the product rebuilds from Postgres (see lua/rebuild.lua) but warns.
func checkRedisSettings(ctx context.Context, rdb *redis.Client, logger *slog.Logger) error {
	conf, err := rdb.ConfigGet(ctx, "*").Result()
	if err != nil {
		logger.Warn("cannot read the redis configuration (CONFIG may be disabled); make sure maxmemory-policy is noeviction", "error", err)
		return nil
	}
	switch p := conf["maxmemory-policy"]; {
	case strings.HasPrefix(p, "allkeys-"):
		return fmt.Errorf("redis maxmemory-policy is %s: it can evict stock and hold keys under memory pressure and oversell; set it to noeviction", p)
	case p != "" && p != "noeviction":
		logger.Warn("REDIS MAXMEMORY-POLICY IS NOT noeviction: hold tombstones can be evicted; set it to noeviction", "policy", p)
	}
	if conf["appendonly"] != "yes" && conf["save"] == "" {
		logger.Warn("redis keeps nothing on disk: after a restart stock is rebuilt from Postgres and open checkouts (safe, but undersells until reconciled)")
	} else if conf["appendonly"] != "yes" {
		logger.Warn("REDIS PERSISTS BY SNAPSHOT ONLY (save, no appendonly): a restart brings back an older copy that lacks the latest holds; the product detects it and resyncs from Postgres, but set appendonly yes", "save", conf["save"])
	}
	return nil
}

var sdkHandler client.MetricsHandler

// sdkMetrics exposes the Temporal SDK's metrics in the default Prometheus registry, beside
// the product's own counters (package metrics), so one /metrics serves both. Its timers are
// histograms (metrics.TimerBuckets), which ops/prometheus/alerts.yml reads across workers.
func sdkMetrics() client.MetricsHandler {
	if sdkHandler == nil {
		sdkHandler, _ = metrics.NewTemporalHandler(prometheus.DefaultRegisterer)
	}
	return sdkHandler
}

func runMigrate(ctx context.Context, cfg config) error {
	if err := migrations.Apply(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	newLogger(cfg).Info("migrations applied")
	return nil
}

// startTracing sets up tracing from the OTEL_* environment (off unless asked for, see
// tracing.Enabled) and returns the function that flushes the last spans on the way out.
func startTracing(ctx context.Context, service string, logger *slog.Logger) (*tracing.Tracing, func(), error) {
	tr, err := tracing.Setup(ctx, service, logger)
	if err != nil {
		return nil, nil, err
	}
	if tr != nil {
		logger.Info("tracing on", "service", service)
	}
	return tr, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			logger.Warn("flush traces", "error", err)
		}
	}, nil
}

// Whether openService applies the migrations: the worker and the dev stack own the schema and
// bring it up to date before they serve; the API only reads and writes it.
const (
	withMigrations    = true
	withoutMigrations = false
)

// openService brings up what one of the product's processes needs, in order: tracing as service,
// the migrations when migrate is set, then Postgres, Redis and Temporal (open). stop closes
// them in reverse; on an error nothing is left open.
func openService(ctx context.Context, cfg config, logger *slog.Logger, service string, migrate bool) (_ *deps, stop func(), _ error) {
	tr, stopTracing, err := startTracing(ctx, service, logger)
	if err != nil {
		return nil, nil, err
	}
	if migrate {
		if err := migrations.Apply(ctx, cfg.DatabaseURL); err != nil {
			stopTracing()
			return nil, nil, err
		}
	}
	d, err := open(ctx, cfg, logger, tr)
	if err != nil {
		stopTracing()
		return nil, nil, err
	}
	return d, func() { d.Close(); stopTracing() }, nil
}

func runWorker(ctx context.Context, cfg config) error {
	logger := newLogger(cfg)
	d, stop, err := openService(ctx, cfg, logger, "checkout-worker", withMigrations)
	if err != nil {
		return err
	}
	defer stop()
	defer serveMetrics(cfg.WorkerMetricsAddr, "worker", logger)()
	return serveWorker(ctx, cfg, d)
}

// serveMetrics serves /metrics on addr, an internal address, until the returned function
// is called. A metrics address that cannot be bound is logged, not fatal: the product works
// without its metrics.
func serveMetrics(addr, who string, logger *slog.Logger) (stop func()) {
	srv := api.NewMetricsServer(addr)
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("serve "+who+" metrics on "+addr, "error", err)
		}
	}()
	logger.Info(who+" metrics listening", "addr", "http://"+addr+"/metrics")
	return func() { _ = srv.Close() }
}

func serveWorker(ctx context.Context, cfg config, d *deps) error {
	acts := &activities.Activities{Store: d.store, Stock: d.stock, Temporal: d.temporal, Payments: map[string]payments.Provider{}}
	if cfg.StripeAPIKey != "" {
		var opts []payments.StripeOption
		if cfg.StripeAPIURL != "" {
			opts = append(opts, payments.WithStripeAPIURL(cfg.StripeAPIURL))
		}
		acts.Payments["stripe"] = payments.NewStripe(cfg.StripeAPIKey, opts...)
		if err := ensureSchedule(ctx, d.temporal, workflows.ReconcileScheduleID, workflows.ReconcileEvery, workflows.ReconcilePayments, workflows.ReconcileInput{}); err != nil {
			return err
		}
	}
	if err := ensureSchedule(ctx, d.temporal, workflows.StockScheduleID, workflows.StockReconcileEvery, workflows.ReconcileStock, steps.ReconcileStockInput{}); err != nil {
		return err
	}
	if err := ensureSchedule(ctx, d.temporal, workflows.OrphanScheduleID, workflows.OrphanSweepEvery, workflows.RefundOrphans, workflows.RefundOrphansInput{}); err != nil {
		return err
	}
	if cfg.StripeAPIKey == "" {
		d.logger.Warn("STRIPE_API_KEY is not set: late or wrong payments cannot be refunded (their refunds wait for support) and missed webhooks are not reconciled")
	}
	w := worker.New(d.temporal, acts, cfg.WorkerBuild)
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	// The heartbeat is what the API reads before it starts a saga (Temporal keeps dead
	// pollers listed for minutes). It beats only while this worker's Temporal connection
	// answers, and it ends before the worker stops, so no saga is started for a worker
	// that is going away.
	hb := worker.NewHeartbeat(d.rdb, workflows.TaskQueue, func(ctx context.Context) error {
		_, err := d.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
		return err
	}, d.logger)
	beating := make(chan struct{})
	go func() { hb.Run(ctx); close(beating) }()
	d.logger.Info("worker started", "task_queue", workflows.TaskQueue, "identity", hb.Identity(),
		"deployment", cfg.WorkerBuild.Deployment, "build_id", cfg.WorkerBuild.ID)
	<-ctx.Done()
	<-beating
	w.Stop()
	return nil
}

func runAPI(ctx context.Context, cfg config) error {
	if err := errors.Join(cfg.requireSecrets(), cfg.requireIdentity()); err != nil {
		return err
	}
	logger := newLogger(cfg)
	d, stop, err := openService(ctx, cfg, logger, "checkout-api", withoutMigrations)
	if err != nil {
		return err
	}
	defer stop()
	return serveAPI(ctx, cfg, d)
}

func serveAPI(ctx context.Context, cfg config, d *deps) error {
	ready := &api.Readiness{}
	auditor := audit.New(d.pool, d.rdb, d.temporal, audit.Options{})
	cat, inv := catalogAndInventory(d.store, d.stock, cfg.CatalogTTL, int(cfg.CatalogSize))
	srv := api.NewServer(api.Config{
		AdminToken:                   cfg.AdminToken,
		StripeWebhookSecrets:         cfg.WebhookSecrets,
		StripeWebhookTolerance:       cfg.WebhookTolerance,
		StripeLiveOnly:               !cfg.StripeTestMode,
		StandardWebhookSecrets:       cfg.StandardSecrets,
		StandardWebhookTolerance:     cfg.StandardTolerance,
		DefaultPaymentTimeoutSeconds: cfg.PaymentTimeout,
		MaxPaymentTimeoutSeconds:     cfg.MaxPaymentTimeout,
		ClientTokens:                 cfg.ClientTokens,
		IdentityTokens:               cfg.IdentityTokens,
		TemporalUIURL:                cfg.TemporalUIURL,
		Namespace:                    cfg.Namespace,
		Room:                         roomConfig(cfg),
		IdempotencyKeyRetention:      cfg.IdempotencyRetention,
		TrustedProxies:               cfg.TrustedProxies,
		IPv6Prefix:                   int(cfg.IPv6Prefix),
		MaxWaitsPerAddress:           int(cfg.MaxWaitsPerAddress),
		MaxWaits:                     int(cfg.MaxWaits),
		CheckoutSecretKeys:           cfg.CheckoutSecretKeys,
		CheckoutSecretGrace:          cfg.CheckoutSecretGrace,
	}, api.Deps{
		// The limiter's script calls of concurrent requests share round trips.
		RateLimits: &api.RateLimits{Limiter: lua.NewRateLimiter(lua.NewCoalescedScripts(d.rdb)),
			PerAddress:          rateLimit(cfg.RatePerAddress, 2*cfg.RatePerAddress, time.Second),
			CheckoutsPerAddress: rateLimit(cfg.CheckoutsPerAddress, cfg.CheckoutsPerAddress, time.Minute),
			PerCustomer:         rateLimit(cfg.RatePerCustomer, cfg.RatePerCustomer, time.Minute),
			CheckoutsPerClient:  rateLimit(cfg.CheckoutsPerClient, cfg.CheckoutsPerClient, time.Minute)},
		Temporal:  d.temporal,
		Catalog:   cat,
		Inventory: inv,
		Records:   d.store,
		Owners:    d.store,
		Payments:  d.store,
		Gate:      lua.NewSoldOutFlag(d.stock, lua.DefaultSoldOutBound), // losers of a sold-out SKU answered from memory
		Keys:      d.store,
		Room:      lua.NewRoom(d.rdb, lua.DefaultRoomName),
		Workers:   worker.Presence{RDB: d.rdb, TaskQueue: workflows.TaskQueue},
		Readiness: ready,
		Ready: map[string]func(context.Context) error{
			"postgres": d.store.Ping,
			"redis":    func(ctx context.Context) error { return d.rdb.Ping(ctx).Err() },
			"temporal": func(ctx context.Context) error {
				_, err := d.temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
				return err
			},
		},
		Logger: d.logger,
		Audit:  auditor,
		Trace:  d.tracing.EchoMiddleware(),
	})
	e := srv.Handler()
	go srv.RunWaitingRoom(ctx)
	// In `checkout dev` the worker runs in this process too: its metrics are in the same
	// registry, so this one address serves both.
	defer serveMetrics(cfg.APIMetricsAddr, "api", d.logger)()
	go pruneIdempotencyKeys(ctx, d.store, cfg.IdempotencyRetention, cfg.PayloadRetention, d.logger)
	// The operator alerts' gauges: workflows needing attention, the periodic audit (ops/).
	go (&ops.Monitor{Temporal: d.temporal, Audit: auditor, Logger: d.logger}).Run(ctx)
	d.logger.Info("api listening", "addr", "http://"+cfg.APIAddr)
	return api.Serve(ctx, e, api.NewHTTPServer(cfg.APIAddr, e), ready, cfg.DrainDelay, d.logger)
}

// roomConfig is the room's settings, with a customer's carts in line capped as their open
// checkouts are (MAX_OPEN_CHECKOUTS_PER_CUSTOMER; 0 there is no cap, -1 here).
func roomConfig(cfg config) room.Config {
	r := cfg.Room
	r.PerCustomer = cfg.MaxOpenPerCustomer
	if r.PerCustomer == 0 {
		r.PerCustomer = -1
	}
	return r
}

// pruneEvery is how often the API deletes expired Idempotency-Keys. Expiry itself is exact
// (an expired key is free at once, see ClaimIdempotencyKeys); pruning only bounds the table,
// so hourly is plenty. Every API process prunes; two doing it at once is harmless.
const pruneEvery = time.Hour

// pruneIdempotencyKeys deletes keys older than retention, and empties the raw bodies of
// payment events older than payloads (personal data the product no longer needs), now and
// every pruneEvery, until ctx ends.
func pruneIdempotencyKeys(ctx context.Context, store *store.Store, retention, payloads time.Duration, logger *slog.Logger) {
	ticker := time.NewTicker(pruneEvery)
	defer ticker.Stop()
	for {
		n, err := store.PruneIdempotencyKeys(ctx, retention)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("prune idempotency keys", "error", err)
		case n > 0:
			logger.Info("pruned idempotency keys", "deleted", n, "older_than", retention.String())
		}
		n, err = store.PurgePaymentPayloads(ctx, payloads)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Warn("purge payment payloads", "error", err)
		case n > 0:
			logger.Info("purged payment payloads", "emptied", n, "older_than", payloads.String())
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// ensureSchedule makes the Temporal Schedule id run a reconciliation workflow every interval.
// Overlapping runs are skipped: a slow run is never doubled. A Schedule that exists already is
// brought to this interval and action, so a release that changes either reaches it (it was
// left as first created); its state (paused, notes) is kept.
func ensureSchedule(ctx context.Context, c client.Client, id string, every time.Duration, wf any, arg any) error {
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}}
	action := &client.ScheduleWorkflowAction{ID: id, Workflow: wf, Args: []any{arg}, TaskQueue: workflows.TaskQueue}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID: id, Spec: spec, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, Action: action,
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		err = c.ScheduleClient().GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
			DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
				s := in.Description.Schedule
				s.Spec, s.Action = &spec, action
				if s.Policy == nil {
					s.Policy = &client.SchedulePolicies{}
				}
				s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
				return &client.ScheduleUpdate{Schedule: &s}, nil
			},
		})
		if err != nil {
			return fmt.Errorf("update schedule %s: %w", id, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("create schedule %s: %w", id, err)
	}
	return nil
}

// catalogAndInventory are the API's catalog check and the operators' inventory. The catalog
// answers from memory for ttl (a sale's losers read Postgres once per ttl, not once per
// request; 0: straight from Postgres), remembering at most size SKUs of each kind, and a SKU
// set through this API is forgotten at once.
func catalogAndInventory(s *store.Store, stock *lua.Stock, ttl time.Duration, size int) (api.Catalog, api.Inventory) {
	inv := &inventory.Inventory{Store: s, Stock: stock}
	if ttl <= 0 {
		return s, inv
	}
	cache := store.NewCatalogCache(s, ttl, size)
	inv.Catalog = cache
	return cache, inv
}

// rateLimit is n events a period, in bursts of at most burst; 0 is off.
func rateLimit(n, burst int64, period time.Duration) shop.RateLimit {
	if n <= 0 {
		return shop.RateLimit{}
	}
	return shop.RateLimit{Rate: int(n), Burst: int(burst), Period: period}
}
