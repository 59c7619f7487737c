// Package scale runs the product in its production shape: the full Temporal server on
// Postgres (several history shards), a Redis Cluster, and the product's own binary as two
// worker processes and two API replicas, the way `make run-scale` runs it.
package scale

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

const (
	adminToken        = "scale-suite-admin-token-0123456789"
	webhookSecret     = "whsec_scale_suite_secret_0123456789"
	checkoutSecretKey = "scale-suite-checkout-secret-key-0123456789"
	// clientToken is the shop backend's: the replicas run server to server (IDENTITY_MODE).
	clientToken = "scale-suite-client-token-0123456789"
)

// product is one process of the product's binary: `checkout worker` or `checkout api`.
type product struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	log    string
	url    string // an API's base URL
	client *checkouttest.Client
	exited chan struct{}
}

// shape is the production shape: its services and the built product binary.
type shape struct {
	t        *testing.T
	dir      string
	bin      string
	temporal *testenv.TemporalServerProcess
	redisURL string
	rdb      *redis.ClusterClient
	dbURL    string
}

func newShape(t *testing.T, shards, masters int) *shape {
	dir := t.TempDir()
	s := &shape{t: t, dir: dir, bin: filepath.Join(dir, "checkout")}
	built := make(chan error, 1)
	go func() {
		out, err := exec.Command("go", "build", "-o", s.bin, "github.com/checkout-saga/checkout-saga/cmd/checkout").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("build cmd/checkout: %w\n%s", err, out)
		}
		built <- err
	}()
	s.temporal = testenv.TemporalServer(t, shards)
	s.rdb = testenv.RedisCluster(t, masters)
	addrs := s.rdb.Options().Addrs
	s.redisURL = "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		s.redisURL += map[bool]string{true: "?", false: "&"}[i == 0] + "addr=" + a
	}
	s.dbURL, _ = testenv.Postgres(t)
	if err := <-built; err != nil {
		t.Fatal(err)
	}
	return s
}

// productPoolConns sizes each product process's Postgres pool (pool_max_conns). Four processes
// at the default 32 could open 128 connections beside the Temporal server's 32, on a Postgres
// of 100 (max_connections): a deployment sizes its pools to its database. At 8 the shape stays
// under 70 connections (about 45 seen), so make test runs it beside the other packages.
const productPoolConns = 8

// env is what every process of the product gets: the shape's services and secrets.
func (s *shape) env() []string {
	return []string{
		"TEMPORAL_ADDRESS=" + s.temporal.HostPort, "TEMPORAL_NAMESPACE=default",
		"REDIS_URL=" + s.redisURL, "DATABASE_URL=" + s.dbURL + "?pool_max_conns=" + strconv.Itoa(productPoolConns),
		"ADMIN_TOKEN=" + adminToken, "STRIPE_WEBHOOK_SECRET=" + webhookSecret, "CHECKOUT_SECRET_KEY=" + checkoutSecretKey,
		"IDENTITY_MODE=server", "CLIENT_TOKENS=scale=" + clientToken,
		"STRIPE_API_KEY=", "STRIPE_API_URL=", "LOG_LEVEL=info", "API_DRAIN_DELAY_SECONDS=0",
		"WORKER_METRICS_ADDR=127.0.0.1:" + testenv.FreePort(s.t),
		"API_METRICS_ADDR=127.0.0.1:" + testenv.FreePort(s.t),
		// The suite is the buyers' load balancer: each buyer's requests name its own address
		// in X-Forwarded-For, and the rate limits are the product's defaults.
		"TRUSTED_PROXIES=127.0.0.1/32",
		"STRIPE_TEST_MODE=true", // the buyers pay with test-mode events
	}
}

// start runs `checkout command` and waits until ready answers nil.
func (s *shape) start(command, name string, extraEnv []string, ready func(p *product) error) *product {
	s.t.Helper()
	p := &product{t: s.t, name: name, log: filepath.Join(s.dir, name+".log"), exited: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		s.t.Fatal(err)
	}
	p.cmd = exec.Command(s.bin, command)
	p.cmd.Env = append(append(os.Environ(), s.env()...), extraEnv...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); _ = logFile.Close(); close(p.exited) }()
	s.t.Cleanup(func() {
		p.stop()
		if s.t.Failed() {
			s.t.Logf("%s log (last lines):\n%s", name, testenv.LastLines(p.log, 15))
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := ready(p)
		if err == nil {
			return p
		}
		select {
		case <-p.exited:
			s.t.Fatalf("%s exited at start:\n%s", name, testenv.LastLines(p.log, 20))
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s not ready in 90s: %v\n%s", name, err, testenv.LastLines(p.log, 20))
		}
	}
}

func (s *shape) worker(name string) *product {
	return s.startWorker(name, nil)
}

// startWorker starts `checkout worker` with extraEnv and waits until it polls.
func (s *shape) startWorker(name string, extraEnv []string) *product {
	return s.start("worker", name, extraEnv, func(p *product) error {
		if raw, _ := os.ReadFile(p.log); !bytes.Contains(raw, []byte(`"worker started"`)) {
			return fmt.Errorf("no \"worker started\" in its log yet")
		}
		return nil
	})
}

// api starts an API replica and waits for its /readyz (which needs a live worker).
func (s *shape) api(name string) *product {
	addr := "127.0.0.1:" + testenv.FreePort(s.t)
	return s.start("api", name, []string{"API_ADDR=" + addr}, func(p *product) error {
		p.url = "http://" + addr
		p.client = checkouttest.NewClient(p.url)
		p.client.MaxRetries = 0 // callers that want retries say how many
		p.client.Header = checkouttest.ShopBackend(clientToken)
		code, err := s.do(p, http.MethodGet, "/readyz", nil, nil)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("/readyz answered %d", code)
		}
		return err
	})
}

// kill sends SIGKILL: no graceful stop, whatever the process held is lost with it.
func (p *product) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

func (p *product) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		p.kill()
	}
}

// do sends a JSON request to an API replica once, with header given as name, value pairs,
// and decodes a 2xx answer into out (if not nil).
func (s *shape) do(p *product, method, path string, body []byte, out any, header ...string) (int, error) {
	h := map[string]string{}
	for i := 0; i+1 < len(header); i += 2 {
		h[header[i]] = header[i+1]
	}
	a, err := p.client.Do(s.t.Context(), method, path, body, h, out)
	return a.Code, err
}

// ctx is a context for the suite's own reads.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}
