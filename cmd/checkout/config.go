package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/room"
	"github.com/checkout-saga/checkout-saga/worker"
)

// Local-stack secrets. The dev command sets them for itself; `checkout api` refuses them.
const (
	devAdminToken        = "dev-admin-token"
	devWebhookSecret     = "whsec_local_dev_secret"
	devCheckoutSecretKey = api.DevCheckoutSecretKey
)

// defaultDatabaseURL is the local Postgres, without TLS: on loopback TLS only costs CPU
// (about 0.5 ms of Postgres CPU per checkout, see docs/performance.md). A
// Postgres on another host wants sslmode=verify-full in DATABASE_URL.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// config is everything the binary reads from the environment.
type config struct {
	TemporalAddress string // TEMPORAL_ADDRESS
	Namespace       string // TEMPORAL_NAMESPACE
	// TemporalGzip: TEMPORAL_GRPC_COMPRESSION=gzip compresses the client's gRPC requests (the
	// SDK's default); none, the product's default, sends them as they are (docs/configuration.md)
	TemporalGzip bool
	// TemporalSecurity: TLS, mTLS and an API key for a secured Temporal (temporaltls.go).
	TemporalSecurity temporalSecurity
	// RatePerAddress: RATE_LIMIT_PER_ADDRESS, buyer reads and cancels a second per client
	// address (and its checkouts when RATE_LIMIT_CHECKOUTS_PER_ADDRESS is 0);
	// CheckoutsPerAddress: RATE_LIMIT_CHECKOUTS_PER_ADDRESS, checkouts a minute per address;
	// RatePerCustomer: RATE_LIMIT_PER_CUSTOMER, checkouts a minute per customer;
	// CheckoutsPerClient: RATE_LIMIT_CHECKOUTS_PER_CLIENT, checkouts a minute per shop backend
	// (server mode), counted in place of its own address's. 0 turns one off. A shop whose
	// buyers share one address (a carrier's NAT, a kiosk) raises CheckoutsPerAddress; a shop
	// backend calling server to server is counted per client, and its buyers by the address
	// it forwards (the backend in TrustedProxies). TrustedProxies: TRUSTED_PROXIES, the CIDRs
	// of the load balancers (and shop backends) whose X-Forwarded-For names the client.
	RatePerAddress, CheckoutsPerAddress, RatePerCustomer, CheckoutsPerClient int64
	// IPv6Prefix: RATE_LIMIT_IPV6_PREFIX, the prefix length one IPv6 client is counted by
	IPv6Prefix int64
	// MaxWaitsPerAddress: MAX_WAITS_PER_ADDRESS, GETs with ?wait held at once per client
	// address; MaxWaits: MAX_WAITS, in one API process. Past either, a GET answers at once.
	MaxWaitsPerAddress, MaxWaits int64
	// PayloadRetention: PAYMENT_PAYLOAD_RETENTION_DAYS, how long a webhook's raw body is kept.
	PayloadRetention time.Duration
	// StripeTestMode: STRIPE_TEST_MODE, take Stripe test-mode events as payments (dev: true).
	StripeTestMode    bool
	TrustedProxies    []*net.IPNet
	TemporalUIURL     string // TEMPORAL_UI_URL: base of the view's temporal_ui link
	RedisURL          string // REDIS_URL
	RedisCluster      bool   // REDIS_CLUSTER: REDIS_URL's one seed is a Redis Cluster
	DatabaseURL       string // DATABASE_URL
	APIAddr           string // API_ADDR
	WorkerMetricsAddr string // WORKER_METRICS_ADDR: /metrics of a standalone worker
	// WorkerBuild: WORKER_DEPLOYMENT and WORKER_BUILD_ID, the worker's version for Worker
	// Versioning; without a build id the worker is unversioned (worker.Build)
	WorkerBuild      worker.Build
	APIMetricsAddr   string        // API_METRICS_ADDR: /metrics of the API (internal, not API_ADDR)
	AdminToken       string        // ADMIN_TOKEN
	WebhookSecrets   []string      // STRIPE_WEBHOOK_SECRET: comma-separated during a rotation
	WebhookTolerance time.Duration // STRIPE_WEBHOOK_TOLERANCE_SECONDS
	// StandardSecrets: STANDARD_WEBHOOK_SECRETS, provider=whsec_... pairs (Standard Webhooks)
	StandardSecrets   map[string][]string
	StandardTolerance time.Duration // STANDARD_WEBHOOK_TOLERANCE_SECONDS
	PaymentTimeout    int64         // PAYMENT_TIMEOUT_SECONDS: default hold for payment
	// MaxPaymentTimeout: MAX_PAYMENT_TIMEOUT_SECONDS, the longest window a client may ask for
	MaxPaymentTimeout int64
	// ClientTokens: CLIENT_TOKENS, client=token pairs; on, the checkout endpoints need a
	// client's bearer token and a client sees only its own carts (token -> client)
	ClientTokens map[string]string
	// IdentityMode: IDENTITY_MODE, who the customer is: "server" (the client's customer_id),
	// "browser" (the subject of IdentityTokens), or "" (the body's, the local stack only)
	IdentityMode   string
	IdentityTokens *api.IdentityVerifier
	// CheckoutSecretKeys: CHECKOUT_SECRET_KEY, the keys of the buyers' checkout secrets,
	// comma-separated during a rotation (the first signs, any verifies)
	CheckoutSecretKeys []string
	// CheckoutSecretGrace: CHECKOUT_SECRET_GRACE_DAYS, how long after its checkout ended a
	// checkout secret still opens it
	CheckoutSecretGrace time.Duration
	// MaxOpenPerCustomer: MAX_OPEN_CHECKOUTS_PER_CUSTOMER, a customer's open checkouts (0: no cap)
	MaxOpenPerCustomer int64
	TemporalCLI        string // TEMPORAL_CLI: the dev server binary (dev only)
	StripeAPIKey       string // STRIPE_API_KEY: refunds and reconciliation (optional)
	StripeAPIURL       string // STRIPE_API_URL: Stripe's API base, for a local Stripe API
	// Room: WAITING_ROOM_SIZE, MAX_STARTING_CHECKOUTS and ADMISSION_TARGET_MS, the waiting
	// room's line and bound (its PerCustomer follows MaxOpenPerCustomer)
	Room room.Config
	// CatalogTTL: CATALOG_CACHE_MS, how long the API's catalog check answers from memory (0: off)
	CatalogTTL time.Duration
	// CatalogSize: CATALOG_CACHE_SIZE, the most SKUs that cache remembers of each kind
	// (known, unknown): callers may name any SKU, so memory needs a bound
	CatalogSize int64
	// IdempotencyRetention: IDEMPOTENCY_KEY_RETENTION_HOURS, how long an Idempotency-Key
	// stays bound to its request body (the contract asks for at least 24 h)
	IdempotencyRetention time.Duration
	// DrainDelay: API_DRAIN_DELAY_SECONDS, how long a stopping API keeps serving after
	// /readyz turned 503, for load balancers to notice (default 5 s; 0 for dev)
	DrainDelay time.Duration
	LogLevel   slog.Level // LOG_LEVEL

	// The variables of TemporalSecurity and of the identity mode, as set: loadConfig builds
	// those from them once every variable is read.
	temporalTLS temporalTLSEnv
	identity    identityEnv
}

// loadConfig reads the environment, every variable of the settings table. Every value has a
// working local default except the secrets, which only the local stack (dev) may default; a
// bad value is an error naming it.
func loadConfig(dev bool) (config, error) {
	var cfg config
	var errs []error // errors.Join drops the nil ones
	for _, s := range settings(&cfg) {
		// The default first: a bad value leaves it for the checks across variables below.
		errs = append(errs, s.set(s, s.defaultFor(dev)))
		if v, ok := os.LookupEnv(s.name); ok && v != "" {
			errs = append(errs, s.set(s, v))
		}
	}
	if cfg.PaymentTimeout > cfg.MaxPaymentTimeout {
		errs = append(errs, fmt.Errorf("PAYMENT_TIMEOUT_SECONDS=%d: must not exceed MAX_PAYMENT_TIMEOUT_SECONDS=%d", cfg.PaymentTimeout, cfg.MaxPaymentTimeout))
	}
	if dev && cfg.usesDevSecrets() && !isLoopback(cfg.APIAddr) {
		errs = append(errs, fmt.Errorf("API_ADDR=%q is reachable beyond this machine, and the local stack's admin token, webhook secret or checkout secret key (all public) would let anyone set stock, forge payments and read or cancel any checkout there: listen on 127.0.0.1, or set ADMIN_TOKEN, STRIPE_WEBHOOK_SECRET and CHECKOUT_SECRET_KEY", cfg.APIAddr))
	}
	if dev && cfg.WorkerBuild.Versioned() {
		// A versioned worker takes no saga until its build is made current, which the local
		// stack never does: every checkout would wait.
		errs = append(errs, fmt.Errorf("WORKER_BUILD_ID=%q: the local stack runs an unversioned worker; unset it (Worker Versioning is for checkout worker, docs/operations.md)", cfg.WorkerBuild.ID))
	}
	var err error
	cfg.TemporalSecurity, err = readTemporalSecurity(cfg.temporalTLS)
	errs = append(errs, err)
	cfg.IdentityMode, cfg.IdentityTokens, err = readIdentity(cfg.identity, len(cfg.ClientTokens) > 0)
	errs = append(errs, err)
	return cfg, errors.Join(errs...)
}

// list reads a comma-separated setting, its items trimmed, empty ones dropped.
func list(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// usesDevSecrets reports whether the admin token, a webhook secret or a checkout secret key
// is the local stack's.
func (cfg config) usesDevSecrets() bool {
	return cfg.AdminToken == devAdminToken || slices.Contains(cfg.WebhookSecrets, devWebhookSecret) ||
		slices.Contains(cfg.CheckoutSecretKeys, devCheckoutSecretKey)
}

// isLoopback reports whether addr (host:port) listens on this machine only. An empty host
// (":8080") listens on every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Secrets published with the project (README, tools/scale/run): anyone can read them, so
// `checkout api` refuses them as it refuses the local stack's.
var (
	publishedAdminTokens    = []string{devAdminToken, "scale-local-admin-token"}
	publishedWebhookSecrets = []string{devWebhookSecret, "whsec_scale_local_secret"}
)

// minStripeSecretLen is the shortest Stripe endpoint signing secret taken: "whsec_" and at
// least 24 characters (Stripe's own have 32 or more), so a typo or a placeholder is caught.
const minStripeSecretLen = len("whsec_") + 24

// requireSecrets refuses to serve the API with missing, published or weak secrets.
func (cfg config) requireSecrets() error {
	var errs []error
	switch {
	case cfg.AdminToken == "":
		errs = append(errs, errors.New("ADMIN_TOKEN is not set"))
	case slices.Contains(publishedAdminTokens, cfg.AdminToken):
		errs = append(errs, errors.New("ADMIN_TOKEN is a published token (local or scale stack); set a real one"))
	case len(cfg.AdminToken) < 16:
		errs = append(errs, errors.New("ADMIN_TOKEN must be at least 16 characters"))
	}
	if len(cfg.WebhookSecrets) == 0 {
		errs = append(errs, errors.New("STRIPE_WEBHOOK_SECRET is not set"))
	}
	for i, s := range cfg.WebhookSecrets {
		switch {
		case slices.Contains(publishedWebhookSecrets, s):
			errs = append(errs, fmt.Errorf("STRIPE_WEBHOOK_SECRET secret %d is a published secret (local or scale stack); set the endpoint's real signing secret", i+1))
		case !strings.HasPrefix(s, "whsec_") || len(s) < minStripeSecretLen:
			errs = append(errs, fmt.Errorf("STRIPE_WEBHOOK_SECRET secret %d is not an endpoint signing secret: want whsec_ and at least %d characters after it", i+1, minStripeSecretLen-len("whsec_")))
		}
	}
	if len(cfg.CheckoutSecretKeys) == 0 {
		errs = append(errs, errors.New("CHECKOUT_SECRET_KEY is not set (it signs the buyers' checkout secrets; e.g. openssl rand -hex 32)"))
	}
	for i, k := range cfg.CheckoutSecretKeys {
		switch {
		case k == devCheckoutSecretKey:
			errs = append(errs, fmt.Errorf("CHECKOUT_SECRET_KEY key %d is the local stack's key; set a real one", i+1))
		case len(k) < api.MinCheckoutSecretKeyLen:
			errs = append(errs, fmt.Errorf("CHECKOUT_SECRET_KEY key %d must be at least %d bytes", i+1, api.MinCheckoutSecretKeyLen))
		}
	}
	return errors.Join(errs...)
}
