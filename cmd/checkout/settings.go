package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/room"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/worker"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// A setting is one environment variable of the binary. The table of them, settings, is the
// one list: loadConfig reads it, `checkout check-config -list` prints it, and the repository's
// configuration_test.go compares it with docs/configuration.md.
type setting struct {
	name     string
	def      string // the value when the variable is unset or empty; "" is none
	devDef   string // the default in `checkout dev`, when it is not def
	min, max int64  // an integer's bounds
	doc      string // what it sets, in one line
	// set parses a value into the config; its error names the variable, and leaves the value
	// out where it may be a secret.
	set func(s setting, v string) error
}

// settings returns the table of every variable the binary reads, each setting its field of
// cfg. The checks that span variables (a default window within the longest, the local
// stack's secrets on loopback only, TLS and the identity mode) follow in loadConfig.
func settings(cfg *config) []setting {
	return []setting{
		{name: "TEMPORAL_ADDRESS", def: "127.0.0.1:7233", doc: "Temporal frontend (host:port)", set: hostPort(&cfg.TemporalAddress)},
		{name: "TEMPORAL_NAMESPACE", def: "default", doc: "Temporal namespace", set: text(&cfg.Namespace)},
		{name: "TEMPORAL_GRPC_COMPRESSION", def: "none", doc: "none, or gzip to compress the client's requests to Temporal", set: compression(&cfg.TemporalGzip)},
		{name: "TEMPORAL_TLS", def: "false", doc: "true: reach Temporal over TLS with the system's roots", set: boolean(&cfg.temporalTLS.on)},
		{name: "TEMPORAL_TLS_CA", doc: "a PEM file of the roots that sign Temporal's certificate", set: text(&cfg.temporalTLS.ca)},
		{name: "TEMPORAL_TLS_CERT", doc: "the client certificate (PEM) for mTLS, with TEMPORAL_TLS_KEY", set: text(&cfg.temporalTLS.cert)},
		{name: "TEMPORAL_TLS_KEY", doc: "the client certificate's private key (PEM)", set: text(&cfg.temporalTLS.key)},
		{name: "TEMPORAL_TLS_SERVER_NAME", doc: "the name to verify in Temporal's certificate", set: text(&cfg.temporalTLS.serverName)},
		{name: "TEMPORAL_API_KEY", doc: "an API key (Temporal Cloud), sent as a bearer token over TLS", set: text(&cfg.temporalTLS.apiKey)},
		{name: "TEMPORAL_UI_URL", def: "http://localhost:8233", doc: "base of the view's temporal_ui link", set: absoluteURL(&cfg.TemporalUIURL)},
		{name: "TEMPORAL_CLI", def: ".tools/temporal", doc: "the dev server binary of checkout dev", set: text(&cfg.TemporalCLI)},
		{name: "REDIS_URL", def: "redis://127.0.0.1:6379/0", doc: "stock and holds: one Redis, or a Redis Cluster's seeds", set: absoluteURL(&cfg.RedisURL)},
		{name: "REDIS_CLUSTER", def: "false", doc: "true: REDIS_URL's one seed is a Redis Cluster", set: boolean(&cfg.RedisCluster)},
		{name: "DATABASE_URL", def: defaultDatabaseURL, doc: "the Postgres of the record", set: absoluteURL(&cfg.DatabaseURL)},
		{name: "API_ADDR", def: "127.0.0.1:8080", doc: "the API's listen address", set: hostPort(&cfg.APIAddr)},
		{name: "WORKER_METRICS_ADDR", def: "127.0.0.1:9091", doc: "/metrics of checkout worker", set: hostPort(&cfg.WorkerMetricsAddr)},
		{name: "WORKER_BUILD_ID", doc: "this worker's build (Worker Versioning): set, its checkouts are pinned to it; empty: unversioned", set: buildID(&cfg.WorkerBuild.ID)},
		{name: "WORKER_DEPLOYMENT", def: worker.DefaultDeployment, doc: "the worker deployment WORKER_BUILD_ID is a version of", set: buildID(&cfg.WorkerBuild.Deployment)},
		{name: "API_METRICS_ADDR", def: "127.0.0.1:9090", doc: "/metrics of checkout api (internal, not API_ADDR)", set: hostPort(&cfg.APIMetricsAddr)},
		{name: "ADMIN_TOKEN", devDef: devAdminToken, doc: "bearer token of /v1/inventory", set: text(&cfg.AdminToken)},
		{name: "STRIPE_WEBHOOK_SECRET", devDef: devWebhookSecret, doc: "Stripe endpoint signing secrets, comma-separated during a rotation", set: commaList(&cfg.WebhookSecrets)},
		{name: "STRIPE_WEBHOOK_TOLERANCE_SECONDS", def: "300", min: 1, max: 3600, doc: "oldest Stripe signature accepted", set: duration(&cfg.WebhookTolerance, time.Second)},
		{name: "STANDARD_WEBHOOK_SECRETS", doc: "Standard Webhooks secrets: provider=whsec_...,...", set: standardSecrets(&cfg.StandardSecrets)},
		{name: "STANDARD_WEBHOOK_TOLERANCE_SECONDS", def: "300", min: 1, max: 3600, doc: "how far webhook-timestamp may be from now", set: duration(&cfg.StandardTolerance, time.Second)},
		{name: "STRIPE_TEST_MODE", def: "false", devDef: "true", doc: "true: Stripe's test-mode events count as payments", set: boolean(&cfg.StripeTestMode)},
		{name: "STRIPE_API_KEY", doc: "Stripe secret key, for refunds and reconciliation", set: text(&cfg.StripeAPIKey)},
		{name: "STRIPE_API_URL", doc: "Stripe's API base URL, for a local Stripe API", set: text(&cfg.StripeAPIURL)},
		{name: "PAYMENT_PAYLOAD_RETENTION_DAYS", def: "30", min: 1, max: 3660, doc: "how long a payment webhook's raw body is kept", set: duration(&cfg.PayloadRetention, 24*time.Hour)},
		{name: "PAYMENT_TIMEOUT_SECONDS", def: fmt.Sprint(workflows.DefaultPaymentTimeoutSeconds), min: workflows.MinPaymentTimeoutSeconds, max: workflows.MaxPaymentTimeoutSeconds,
			doc: "payment window when the request names none", set: integer(&cfg.PaymentTimeout)},
		{name: "MAX_PAYMENT_TIMEOUT_SECONDS", def: fmt.Sprint(api.DefaultMaxPaymentTimeoutSeconds), min: workflows.MinPaymentTimeoutSeconds, max: workflows.MaxPaymentTimeoutSeconds,
			doc: "the longest payment window a client may ask for", set: integer(&cfg.MaxPaymentTimeout)},
		{name: "CHECKOUT_SECRET_GRACE_DAYS", def: fmt.Sprint(int64(api.DefaultCheckoutSecretGrace / (24 * time.Hour))), min: 1, max: 3660,
			doc: "how long after its checkout ended a checkout secret still opens it", set: duration(&cfg.CheckoutSecretGrace, 24*time.Hour)},
		{name: "CHECKOUT_SECRET_KEY", devDef: devCheckoutSecretKey, doc: "keys of the buyers' checkout secrets, comma-separated to rotate (the first signs)", set: commaList(&cfg.CheckoutSecretKeys)},
		{name: "CLIENT_TOKENS", doc: "client=token pairs of the shop backends; on, the checkout endpoints need one", set: clientTokens(&cfg.ClientTokens)},
		{name: "IDENTITY_MODE", doc: "who the customer is: server or browser", set: text(&cfg.identity.mode)},
		{name: "IDENTITY_JWT_HMAC_SECRET", doc: "browser: the secret the shop's login signs its tokens with", set: text(&cfg.identity.hmacSecret)},
		{name: "IDENTITY_JWKS_FILE", doc: "browser: a JSON Web Key Set file of the login's public keys", set: text(&cfg.identity.jwksFile)},
		{name: "IDENTITY_JWT_ALGORITHMS", doc: "browser: the algorithms a token may use, comma-separated", set: text(&cfg.identity.algorithms)},
		{name: "IDENTITY_JWT_ISSUER", doc: "browser: the tokens' iss", set: text(&cfg.identity.issuer)},
		{name: "IDENTITY_JWT_AUDIENCE", doc: "browser: a value the tokens' aud must name", set: text(&cfg.identity.audience)},
		{name: "IDENTITY_JWT_MAX_AGE_SECONDS", doc: "browser: the longest life of a token (exp - iat) and its oldest age, 60 to 86400 (default 3600)", set: text(&cfg.identity.maxAge)},
		{name: "IDENTITY_JWT_TYPE", doc: "browser: the typ header the login sets on its access tokens (e.g. at+jwt); empty: not checked", set: text(&cfg.identity.typ)},
		{name: "RATE_LIMIT_PER_ADDRESS", def: fmt.Sprint(api.DefaultRatePerAddress), max: 1_000_000, doc: "buyer reads and cancels a second per client address (0: off)", set: integer(&cfg.RatePerAddress)},
		{name: "RATE_LIMIT_CHECKOUTS_PER_ADDRESS", def: fmt.Sprint(api.DefaultCheckoutsPerAddress), max: 1_000_000, doc: "checkouts a minute per client address (0: off)", set: integer(&cfg.CheckoutsPerAddress)},
		{name: "RATE_LIMIT_CHECKOUTS_PER_CLIENT", def: fmt.Sprint(api.DefaultCheckoutsPerClient), max: 10_000_000, doc: "checkouts a minute per shop backend of CLIENT_TOKENS (0: off)", set: integer(&cfg.CheckoutsPerClient)},
		{name: "RATE_LIMIT_IPV6_PREFIX", def: fmt.Sprint(api.DefaultIPv6Prefix), min: 32, max: 128, doc: "the prefix length one IPv6 client is counted by", set: integer(&cfg.IPv6Prefix)},
		{name: "RATE_LIMIT_PER_CUSTOMER", def: fmt.Sprint(api.DefaultRatePerCustomer), max: 1_000_000, doc: "checkouts a minute per customer (0: off)", set: integer(&cfg.RatePerCustomer)},
		{name: "MAX_WAITS_PER_ADDRESS", def: fmt.Sprint(api.DefaultMaxWaitsPerAddress), min: 1, max: 1_000_000, doc: "GETs with ?wait held at once per client address", set: integer(&cfg.MaxWaitsPerAddress)},
		{name: "MAX_WAITS", def: fmt.Sprint(api.DefaultMaxWaits), min: 1, max: 1_000_000, doc: "GETs with ?wait held at once by one API process", set: integer(&cfg.MaxWaits)},
		{name: "TRUSTED_PROXIES", doc: "CIDRs of the load balancers whose X-Forwarded-For names the client", set: cidrs(&cfg.TrustedProxies)},
		{name: "MAX_OPEN_CHECKOUTS_PER_CUSTOMER", def: fmt.Sprint(store.DefaultMaxOpenPerCustomer), max: 10_000, doc: "a customer's open checkouts at once (0: no cap)", set: integer(&cfg.MaxOpenPerCustomer)},
		{name: "MAX_STARTING_CHECKOUTS", def: fmt.Sprint(room.DefaultMaxStarting), min: 1, max: 100_000, doc: "the cap on checkout requests talking to Temporal at once", set: integer(&cfg.Room.MaxStarting)},
		{name: "WAITING_ROOM_SIZE", def: fmt.Sprint(room.DefaultSize), min: 1, max: 10_000_000, doc: "carts that may wait for their saga", set: integer(&cfg.Room.Size)},
		{name: "ADMISSION_TARGET_MS", def: fmt.Sprint(room.DefaultTarget.Milliseconds()), min: 10, max: 60_000, doc: "the start latency the admission bound aims under", set: duration(&cfg.Room.Target, time.Millisecond)},
		{name: "CATALOG_CACHE_MS", def: fmt.Sprint(store.DefaultCatalogTTL.Milliseconds()), max: 60_000, doc: "how long the API's catalog check answers from memory (0: off)", set: duration(&cfg.CatalogTTL, time.Millisecond)},
		{name: "CATALOG_CACHE_SIZE", def: fmt.Sprint(store.DefaultCatalogCacheSize), min: 1, max: 10_000_000, doc: "SKUs the catalog cache keeps, of each kind (known, unknown)", set: integer(&cfg.CatalogSize)},
		{name: "IDEMPOTENCY_KEY_RETENTION_HOURS", def: fmt.Sprint(int64(api.DefaultIdempotencyKeyRetention / time.Hour)), min: 24, max: 24 * 366, doc: "how long an Idempotency-Key stays bound to its request body", set: duration(&cfg.IdempotencyRetention, time.Hour)},
		// A load balancer polls /readyz every few seconds; the local stack has none, and
		// Ctrl-C should not wait for one.
		{name: "API_DRAIN_DELAY_SECONDS", def: "5", devDef: "0", max: 120, doc: "how long a stopping API keeps serving after /readyz turned 503", set: duration(&cfg.DrainDelay, time.Second)},
		{name: "LOG_LEVEL", def: "info", doc: "debug, info, warn or error", set: logLevel(cfg)},
	}
}

// defaultFor is the setting's default in `checkout dev` (dev) or in the other commands.
func (s setting) defaultFor(dev bool) string {
	if dev && s.devDef != "" {
		return s.devDef
	}
	return s.def
}

// listSettings prints the table as an environment file of the defaults, each variable under
// its doc, for `checkout check-config -list`.
func listSettings(out io.Writer) {
	for _, s := range settings(&config{}) {
		fmt.Fprintf(out, "# %s", s.doc)
		if s.min != 0 || s.max != 0 {
			fmt.Fprintf(out, " (%d to %d)", s.min, s.max)
		}
		if s.devDef != "" {
			fmt.Fprintf(out, "; checkout dev: %s", s.devDef)
		}
		fmt.Fprintf(out, "\n%s=%s\n", s.name, s.def)
	}
}

func text(p *string) func(setting, string) error {
	return func(_ setting, v string) error {
		*p = v
		return nil
	}
}

// commaList reads a comma-separated setting, its items trimmed, empty ones dropped.
func commaList(p *[]string) func(setting, string) error {
	return func(_ setting, v string) error {
		*p = list(v)
		return nil
	}
}

func integer(p *int64) func(setting, string) error {
	return func(s setting, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < s.min || n > s.max {
			return fmt.Errorf("%s=%q: must be an integer from %d to %d", s.name, v, s.min, s.max)
		}
		*p = n
		return nil
	}
}

// duration reads an integer count of unit.
func duration(p *time.Duration, unit time.Duration) func(setting, string) error {
	return func(s setting, v string) error {
		var n int64
		if err := integer(&n)(s, v); err != nil {
			return err
		}
		*p = time.Duration(n) * unit
		return nil
	}
}

// buildID reads a deployment name or a build id: Temporal keeps them in version strings
// ("<deployment>.<build id>") and search attributes, so they are short and have no spaces,
// and a deployment name has no dot.
func buildID(p *string) func(setting, string) error {
	return func(s setting, v string) error {
		*p = v
		if len(v) > 255 || strings.ContainsAny(v, " \t\n") || (s.name == "WORKER_DEPLOYMENT" && strings.Contains(v, ".")) {
			return fmt.Errorf("%s=%q: must be at most 255 characters, without spaces (a deployment name also without dots)", s.name, v)
		}
		return nil
	}
}

func boolean(p *bool) func(setting, string) error {
	return func(s setting, v string) error {
		switch v {
		case "true", "1":
			*p = true
		case "false", "0":
			*p = false
		default:
			return fmt.Errorf("%s=%q: must be true or false", s.name, v)
		}
		return nil
	}
}

func compression(gzip *bool) func(setting, string) error {
	return func(s setting, v string) error {
		switch v {
		case "gzip":
			*gzip = true
		case "none":
			*gzip = false
		default:
			return fmt.Errorf("%s=%q: must be none or gzip", s.name, v)
		}
		return nil
	}
}

func hostPort(p *string) func(setting, string) error {
	return func(s setting, v string) error {
		*p = v
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("%s=%q: must be host:port", s.name, v)
		}
		return nil
	}
}

// absoluteURL reads a URL with a scheme and a host. Its errors leave the value out: a URL
// may carry a password.
func absoluteURL(p *string) func(setting, string) error {
	return func(s setting, v string) error {
		*p = v
		if u, err := url.Parse(v); err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("%s: must be a URL with a scheme and a host", s.name)
		}
		return nil
	}
}

// cidrs reads comma-separated CIDRs, each bad one an error of its own.
func cidrs(p *[]*net.IPNet) func(setting, string) error {
	return func(s setting, v string) error {
		var errs []error
		for _, c := range list(v) {
			_, n, err := net.ParseCIDR(c)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %q is not a CIDR (like 10.0.0.0/8): %w", s.name, c, err))
				continue
			}
			*p = append(*p, n)
		}
		return errors.Join(errs...)
	}
}

func standardSecrets(p *map[string][]string) func(setting, string) error {
	return func(s setting, v string) error {
		secrets, err := api.ParseStandardWebhookSecrets(v)
		*p = secrets
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		return nil
	}
}

func clientTokens(p *map[string]string) func(setting, string) error {
	return func(s setting, v string) error {
		tokens, err := api.ParseClientTokens(v)
		*p = tokens
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		return nil
	}
}

func logLevel(cfg *config) func(setting, string) error {
	return func(s setting, v string) error {
		if err := cfg.LogLevel.UnmarshalText([]byte(v)); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		return nil
	}
}
