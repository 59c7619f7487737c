package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/checkout-saga/checkout-saga/api"
	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/migrations"
	"github.com/checkout-saga/checkout-saga/steps"
	"github.com/checkout-saga/checkout-saga/store"
	"github.com/checkout-saga/checkout-saga/workflows"
)

const (
	webhookSecret = "whsec_faults_suite_secret"
	adminToken    = "faults-suite-admin-token-0123456789"
	// requestTimeout bounds every API request, so a request stuck behind a fault answers
	// 503 (and the client retries) well within the suite's deadlines.
	requestTimeout = 8 * time.Second
)

// stack is the product on the suite's own services.
type stack struct {
	t        *testing.T
	dir      string
	redis    *redisServer
	pg       *postgresCluster
	temporal *temporalServer
	proxy    *checkouttest.Proxy
	bin      string // the built cmd/checkout
	worker   *workerProcess
	pool     *pgxpool.Pool
	rdb      redis.UniversalClient
	redisURL string        // REDIS_URL of the product's processes
	tc       client.Client // direct to Temporal: the suite's own checks
	url      string
	http     *http.Client
}

// quietRedisLog drops go-redis's own log lines (dial failures while Redis is down on purpose).
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// go-redis's logger is global: set once, before the tests run their stacks at once.
func init() { redis.SetLogger(quietRedisLog{}) }

// newStack starts a stack of the test's own: its own Redis, Postgres cluster, Temporal server,
// worker process and API. The suite's tests share nothing, so each runs in parallel with the
// others (t.Parallel): the suite takes about as long as its longest test.
// Every stack's API puts a crowd in its waiting room, as the product does.
func newStack(t *testing.T) *stack { return newStackOn(t, nil) }

// newStackOn is newStack on a Redis Cluster instead of the suite's own Redis (nil: that one);
// s.redis is then nil.
func newStackOn(t *testing.T, cluster *redis.ClusterClient) *stack {
	started := time.Now()
	dir := t.TempDir()
	keep := os.Getenv("FAULTS_KEEP") // debugging: keep logs and db files
	if keep != "" {
		var err error
		if dir, err = os.MkdirTemp(keep, "stack-"); err != nil {
			t.Fatal(err)
		}
	}
	s := &stack{t: t, dir: dir, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}

	bin := filepath.Join(dir, "checkout")
	built := make(chan error, 1)
	go func() {
		out, err := exec.Command("go", "build", "-o", bin, "github.com/checkout-saga/checkout-saga/cmd/checkout").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, out)
		}
		built <- err
	}()

	if cluster == nil {
		s.redis = startRedis(t, dir)
	}
	s.pg = startPostgres(t)
	s.temporal = startTemporal(t, dir, "temporal")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := migrations.Apply(ctx, s.pg.url()); err != nil {
		t.Fatalf("migrate: %v", err)
	}

	var err error
	if s.pool, err = pgxpool.New(ctx, s.pg.url()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.pool.Close)
	if cluster == nil {
		ropts, _ := redis.ParseURL(s.redis.url())
		s.rdb, s.redisURL = redis.NewClient(ropts), s.redis.url()
		t.Cleanup(func() { _ = s.rdb.Close() })
	} else {
		s.rdb, s.redisURL = cluster, clusterURL(cluster)
	}
	if s.tc, err = client.Dial(client.Options{HostPort: s.temporal.addr, Namespace: "default", Logger: testenv.QuietLogger}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.tc.Close)

	if err := <-built; err != nil {
		t.Fatalf("build cmd/checkout: %v", err)
	}
	s.bin = bin
	s.worker = s.newWorker("worker")
	s.worker.start()

	// The API runs here, with its own Temporal client through a proxy the suite can cut.
	s.proxy = checkouttest.StartProxy(t, s.temporal.addr)
	logFile, err := os.Create(filepath.Join(dir, "api.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = logFile.Close()
		if t.Failed() { // the services' own words explain a failed fault run
			t.Logf("last API log lines:\n%s", lastLines(logFile.Name(), 20, nil))
			workers, _ := filepath.Glob(filepath.Join(dir, "worker*.log"))
			for _, w := range workers {
				t.Logf("last warnings and errors of %s:\n%s", filepath.Base(w), lastLines(w, 30, notInfo))
			}
			temporals, _ := filepath.Glob(filepath.Join(dir, "temporal*.log"))
			for _, l := range temporals {
				t.Logf("last lines of %s:\n%s", filepath.Base(l), lastLines(l, 30, nil))
			}
			if keep == "" {
				t.Logf("FAULTS_KEEP=DIR keeps the whole stack (logs and Temporal's db file) for a rerun")
			} else {
				t.Logf("the stack's logs and Temporal's db file are kept in %s", dir)
			}
		}
	})
	logger := slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelWarn}))
	apiClient, err := client.Dial(client.Options{HostPort: s.proxy.Addr(), Namespace: "default", Logger: testenv.QuietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(apiClient.Close)
	p, err := checkouttest.Open(ctx, checkouttest.Services{Temporal: apiClient, Pool: s.pool, Redis: s.rdb}, checkouttest.Options{
		NoWorker: true, Logger: logger,
		API: api.Config{
			AdminToken: adminToken, StripeWebhookSecrets: []string{webhookSecret}, RequestTimeout: requestTimeout,
		},
		Ready: map[string]func(context.Context) error{
			"postgres": store.New(s.pool).Ping,
			"redis":    func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() },
			"temporal": func(ctx context.Context) error {
				_, err := apiClient.CheckHealth(ctx, &client.CheckHealthRequest{})
				return err
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s.url = p.URL
	t.Logf("stack up in %s: redis %s, postgres :%s, temporal %s (API via proxy %s), worker pid %d",
		time.Since(started).Round(time.Millisecond), s.redisURL, s.pg.port, s.temporal.addr, s.proxy.Addr(), s.worker.cmd.Process.Pid)
	return s
}

// lastLines returns the last n lines of a log file that keep accepts (every line if nil).
func lastLines(path string, n int, keep func(string) bool) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if keep == nil || keep(l) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// notInfo keeps a worker's log lines above info (and any line that is not its JSON).
func notInfo(line string) bool { return !strings.Contains(line, `"level":"INFO"`) }

// newWorker prepares a worker process of the product on the stack's services (not started),
// stopped when the test ends.
func (s *stack) newWorker(name string) *workerProcess {
	w := &workerProcess{t: s.t, name: name, bin: s.bin, dir: s.dir, env: []string{
		"TEMPORAL_ADDRESS=" + s.temporal.addr, "TEMPORAL_NAMESPACE=default",
		"REDIS_URL=" + s.redisURL, "DATABASE_URL=" + s.pg.url(),
		"LOG_LEVEL=info", "STRIPE_API_KEY=", "STRIPE_API_URL=",
	}}
	s.t.Cleanup(w.stop)
	return w
}

// useTemporal moves the whole product onto another Temporal server: the worker is restarted
// against it, the API's proxy forwards to it, and the suite's own checks read it.
func (s *stack) useTemporal(ts *temporalServer) {
	s.t.Helper()
	s.worker.stop()
	s.temporal = ts
	s.worker = s.newWorker(fmt.Sprintf("worker-on-%s", strings.ReplaceAll(ts.addr, ":", "-")))
	s.worker.start()
	s.proxy.Retarget(ts.addr)
	tc, err := client.Dial(client.Options{HostPort: ts.addr, Namespace: "default", Logger: testenv.QuietLogger})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(tc.Close)
	s.tc = tc
}

// do sends a request once and decodes a 2xx JSON answer into out (if not nil); the sale
// retries as its clients would.
func (s *stack) do(method, path string, body []byte, header map[string]string, out any) (int, http.Header, error) {
	a, err := (&checkouttest.Client{BaseURL: s.url, HTTP: s.http}).Do(context.Background(), method, path, body, header, out)
	return a.Code, a.Header, err
}

// checkout POSTs a cart and follows it through the waiting room (checkouttest.Client.Checkout).
func (s *stack) checkout(body []byte, out *api.CheckoutView) (int, http.Header, bool, error) {
	a, err := (&checkouttest.Client{BaseURL: s.url, HTTP: s.http}).Checkout(context.Background(), body, nil, out)
	return a.Code, a.Header, a.Queued, err
}

// readyz returns /readyz's status and checks.
func (s *stack) readyz() (int, map[string]string) {
	var body struct {
		Checks map[string]string `json:"checks"`
	}
	req, _ := http.NewRequest(http.MethodGet, s.url+"/readyz", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Checks
}

// reconcileStock runs the stock reconciler once, as its Schedule would, and returns what it did.
func (s *stack) reconcileStock(graceSeconds int64) (steps.ReconcileStockResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run, err := s.tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: fmt.Sprintf("faults-reconcile-stock-%d", time.Now().UnixNano()), TaskQueue: workflows.TaskQueue,
	}, workflows.ReconcileStock, steps.ReconcileStockInput{GraceSeconds: graceSeconds})
	if err != nil {
		return steps.ReconcileStockResult{}, err
	}
	var res steps.ReconcileStockResult
	err = run.Get(ctx, &res)
	return res, err
}
