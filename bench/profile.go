package main

// The scale profile: the same checkouts (POST, signed webhook, poll until
// confirmed) through the product's own binary run as 2 workers and 2 API replicas, on four
// shapes side by side: the dev server and the full Temporal server on Postgres with 1 and 4
// history shards, each with one Redis, and 4 shards with a 3-master Redis Cluster. Every
// process's CPU is read from /proc before and after, so the table splits CPU per checkout by
// process.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/internal/checkouttest"
	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/shop"
)

// scaleShape is one shape of the scale profile.
type scaleShape struct {
	key, name string // key names it in -scale-shapes
	shards    int    // 0: the dev server (one shard, SQLite)
	cluster   bool
	// The server's Postgres driver ("": the profile's, testenv.DefaultSQLPlugin) and whether
	// it re-reads search attributes from Postgres on every use (the profile's setting is
	// false): a shape with the other settings measures what the profile's choices bought.
	plugin    string
	saRefresh bool
}

var scaleShapes = []scaleShape{
	{key: "dev", name: "dev server (SQLite), one Redis"},
	{key: "pg1", name: "Temporal on Postgres, 1 shard, one Redis", shards: 1},
	{key: "pg4", name: "Temporal on Postgres, 4 shards, one Redis", shards: 4},
	{key: "cluster", name: "Temporal on Postgres, 4 shards, Redis Cluster (3 masters)", shards: 4, cluster: true},
	{key: "cluster-libpq", name: "the cluster shape on lib/pq (postgres12)", shards: 4, cluster: true, plugin: "postgres12"},
	{key: "cluster-refresh", name: "the cluster shape re-reading search attributes from Postgres on every use", shards: 4, cluster: true, saRefresh: true},
	{key: "cluster-libpq-refresh", name: "the cluster shape on lib/pq and re-reading search attributes (the profile until 2026-12-05)",
		shards: 4, cluster: true, plugin: "postgres12", saRefresh: true},
}

// defaultScaleShapes are the shapes `make bench` runs (-scale-shapes): each once, then the dev
// server and the production shape twice more in turn, so the scale target is the median of
// three alternated pairs (one pair's ratio moves with the machine's other load).
const defaultScaleShapes = "dev,pg1,pg4,cluster,dev,cluster,dev,cluster"

// pickShapes returns the shapes named in a comma-separated list of keys, in the list's order.
func pickShapes(keys string) ([]scaleShape, error) {
	var out []scaleShape
	for _, k := range strings.Split(keys, ",") {
		k = strings.TrimSpace(k)
		i := slices.IndexFunc(scaleShapes, func(s scaleShape) bool { return s.key == k })
		if i < 0 {
			var all []string
			for _, s := range scaleShapes {
				all = append(all, s.key)
			}
			return nil, fmt.Errorf("-scale-shapes: no shape %q (have %s)", k, strings.Join(all, ", "))
		}
		out = append(out, scaleShapes[i])
	}
	return out, nil
}

// isTheDevServer says whether a shape runs on the dev server: the scale target compares the
// others with it.
func (s scaleShape) isTheDevServer() bool { return s.shards == 0 }

// shapeResult is one shape's run.
type shapeResult struct {
	shape     scaleShape
	checkouts int
	elapsed   time.Duration
	post      latencies
	shed      int
	cpu       map[string]time.Duration // by process group, over the measured checkouts
	cpuOrder  []string
	// Temporal's persistence per checkout (Postgres shapes only): the server's own
	// persistence_requests counter (all operations, and those that write), and the rows
	// Postgres saw inserted, updated or deleted in Temporal's main database.
	persistence, persistenceWrites, rowWrites float64
	// Losers: sold-out POSTs answered 409 by the two replicas, and the replicas' CPU for them.
	losers    int
	losersCPU time.Duration
	losersFor time.Duration
	losersPG  time.Duration  // Postgres's CPU meanwhile: each POST reads the catalog there first
	notLosers map[string]int // answers other than 409, by code and problem
}

func (r shapeResult) rate() float64 { return float64(r.checkouts) / r.elapsed.Seconds() }

// scaleRun is everything one shape started; close stops it in reverse order.
type scaleRun struct {
	dir        string
	pids       map[string][]int // "temporal", "workers", "apis", "redis"
	closers    []func()
	apiURLs    []string
	temporal   string
	redisURL   string
	dbURL      string
	metrics    string // the Postgres-backed server's Prometheus endpoint
	temporalDB string
}

func (r *scaleRun) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// spawn starts a process with its output in dir/name.log, stopped (SIGINT, then SIGKILL) on close.
func (r *scaleRun) spawn(group, name string, env []string, bin string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.Create(filepath.Join(r.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(done) }()
	r.closers = append(r.closers, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	r.pids[group] = append(r.pids[group], cmd.Process.Pid)
	return cmd, nil
}

func waitUntil(ctx context.Context, within time.Duration, what string, ok func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := ok()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready within %s: %v", what, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort() string {
	base, _ := testenv.FreePortBase(1)
	return strconv.Itoa(base)
}

// benchScaleProfile runs every shape in turn with the same load.
func benchScaleProfile(ctx context.Context, o options, e *env) ([]shapeResult, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	server, sqlTool := testenv.TemporalServerBinaries(root)
	for _, p := range []string{server, sqlTool, o.temporalCLI} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s is missing: run `make tools`", p)
		}
	}
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "checkout")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/checkout")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build cmd/checkout: %v\n%s", err, out)
	}
	shapes, err := pickShapes(o.scaleShapes)
	if err != nil {
		return nil, err
	}
	var results []shapeResult
	for i, shape := range shapes {
		progress("   scale profile %d/%d: %s", i+1, len(shapes), shape.name)
		r, err := runShape(ctx, o, e, root, bin, filepath.Join(dir, strconv.Itoa(i)), shape)
		if err != nil {
			return results, fmt.Errorf("%s: %w", shape.name, err)
		}
		results = append(results, r)
	}
	return results, nil
}

func runShape(ctx context.Context, o options, e *env, root, bin, dir string, shape scaleShape) (shapeResult, error) {
	res := shapeResult{shape: shape, checkouts: o.sizes.e2eCheckouts}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	run := &scaleRun{dir: dir, pids: map[string][]int{}}
	defer run.close()
	if err := run.startTemporal(ctx, o, e, root, shape); err != nil {
		return res, err
	}
	if err := run.startRedis(ctx, e, shape); err != nil {
		return res, err
	}
	db := "bench_scale_" + strings.ToLower(e.runID) + "_" + filepath.Base(dir)
	if err := adminExec(ctx, e.adminURL, "CREATE DATABASE "+db); err != nil {
		return res, err
	}
	run.closers = append(run.closers, func() { _ = adminExec(context.Background(), e.adminURL, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") })
	run.dbURL = strings.Replace(e.dbURL, e.dbName, db, 1)
	if err := run.startProduct(ctx, bin); err != nil {
		return res, err
	}

	// Two clients, one per replica: checkout i goes through replica i%2, its webhook and
	// polls through the other one.
	backend := checkouttest.ShopBackend(clientToken)
	replicas := []*stack{{env: e, url: run.apiURLs[0], http: newHTTPClient(), client: backend}, {env: e, url: run.apiURLs[1], http: newHTTPClient(), client: backend}}
	sku := e.sku("SCALE" + filepath.Base(dir))
	stock := fmt.Sprintf(`{"on_hand": %d, "price_cents": 1999, "currency": "usd", "max_per_order": 2}`, res.checkouts*10)
	if a, err := do(ctx, replicas[0].http, http.MethodPut, run.apiURLs[0]+"/v1/inventory/"+sku, []byte(stock), map[string]string{"Authorization": "Bearer " + adminToken}, nil); err != nil || a.code != http.StatusOK {
		return res, fmt.Errorf("stock %s: %d %v", sku, a.code, err)
	}
	var post recorder
	var shed atomic.Int64
	checkout := func(cartID string, i int) error {
		in, out := replicas[i%2], replicas[(i+1)%2]
		p := in.postCheckout(ctx, cartID, "u-"+cartID, sku, 30)
		if !p.held() {
			return fmt.Errorf("POST checkout %s: %d %v", cartID, p.code, p.err)
		}
		shed.Add(int64(p.shed))
		post.add(p.holdLatency())
		if err := out.pay(ctx, cartID, p.view.AmountCents); err != nil {
			return err
		}
		return waitUntil(ctx, 60*time.Second, "checkout "+cartID+" confirmed", func() error {
			var v struct {
				Status shop.Status `json:"status"`
			}
			a, err := do(ctx, out.http, http.MethodGet, out.url+"/v1/checkouts/"+cartID, nil, out.client, &v)
			if err == nil && (a.code != http.StatusOK || v.Status != shop.StatusConfirmed) {
				err = fmt.Errorf("%d %q", a.code, v.Status)
			}
			return err
		})
	}
	for i := range 5 { // warm-up, outside the measurement
		if err := checkout(fmt.Sprintf("w%d-%s-%s", i, e.runID, filepath.Base(dir)), i); err != nil {
			return res, err
		}
	}
	post = recorder{}
	shed.Store(0)
	before, pBefore := run.cpu(ctx, e), run.persistence(ctx, e)
	elapsed, err := pool(ctx, res.checkouts, o.sizes.e2eConcurrency, func(i int) error {
		return checkout(fmt.Sprintf("s%d-%s-%s", i, e.runID, filepath.Base(dir)), i)
	})
	if err != nil {
		return res, err
	}
	after := run.cpu(ctx, e)
	time.Sleep(1500 * time.Millisecond) // Postgres flushes its table statistics about once a second
	pAfter := run.persistence(ctx, e)
	n := float64(res.checkouts)
	res.persistence, res.persistenceWrites, res.rowWrites = (pAfter[0]-pBefore[0])/n, (pAfter[1]-pBefore[1])/n, (pAfter[2]-pBefore[2])/n
	if err := run.losers(ctx, e, replicas, &res, o.sizes); err != nil {
		return res, err
	}
	res.elapsed, res.post, res.shed = elapsed, post.sorted(), int(shed.Load())
	res.cpu = map[string]time.Duration{}
	for _, k := range []string{"temporal", "workers", "apis", "redis", "postgres", "load generator"} {
		res.cpu[k] = after[k] - before[k]
		res.cpuOrder = append(res.cpuOrder, k)
	}
	progress("   %d checkouts in %s = %.1f/s; POST p50 %s p99 %s; CPU per checkout %s",
		res.checkouts, elapsed.Round(time.Millisecond), res.rate(), fmtDur(res.post.pct(50)), fmtDur(res.post.pct(99)), fmtDur(res.cpuPer("")))
	return res, nil
}

// cpuPer is the CPU per checkout of one process group, or of all of them for "".
func (r shapeResult) cpuPer(group string) time.Duration {
	var total time.Duration
	for k, d := range r.cpu {
		if group == "" || k == group {
			total += d
		}
	}
	return total / time.Duration(max(r.checkouts, 1))
}

func (r *scaleRun) startTemporal(ctx context.Context, o options, e *env, root string, shape scaleShape) error {
	if shape.shards == 0 {
		port := freePort()
		args := append([]string{"server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", port, "--log-level", "error"}, e.devServerArgs()...)
		if _, err := r.spawn("temporal", "temporal", nil, o.temporalCLI, args...); err != nil {
			return err
		}
		r.temporal = "127.0.0.1:" + port
		return waitUntil(ctx, 60*time.Second, "temporal dev server", func() error { return testenv.SetupTemporal(ctx, root, r.temporal) })
	}
	base, err := testenv.FreePortBase(testenv.TemporalServerPorts)
	if err != nil {
		return err
	}
	name := "temporal_bench_" + strings.ToLower(e.runID) + "_" + filepath.Base(r.dir)
	r.closers = append(r.closers, func() { _ = testenv.DropTemporalDatabases(e.adminURL, name) })
	server, sqlTool := testenv.TemporalServerBinaries(root)
	opts := testenv.TemporalServerOptions{
		Root: root, Server: server, SQLTool: sqlTool, PortBase: base, Shards: shape.shards,
		Database: name, AdminURL: e.adminURL, Dir: r.dir, SQLPlugin: shape.plugin,
	}
	if shape.saRefresh {
		if opts.DynamicConfig, err = refreshingDynamicConfig(root, r.dir); err != nil {
			return err
		}
	}
	p, err := testenv.StartTemporalServer(ctx, opts)
	if err != nil {
		return err
	}
	r.closers = append(r.closers, func() { _ = p.Stop() })
	r.pids["temporal"] = append(r.pids["temporal"], p.Pid())
	r.temporal, r.metrics, r.temporalDB = p.HostPort, p.MetricsURL, name
	return testenv.SetupTemporal(ctx, root, r.temporal)
}

// refreshingDynamicConfig writes the profile's dynamic config with
// system.forceSearchAttributesCacheRefreshOnRead turned on into dir, and returns its path.
func refreshingDynamicConfig(root, dir string) (string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "tools", "scale", "config", "dynamicconfig", "scale.yaml"))
	if err != nil {
		return "", err
	}
	const off = "system.forceSearchAttributesCacheRefreshOnRead:\n  - value: false\n"
	if !strings.Contains(string(raw), off) {
		return "", fmt.Errorf("the scale profile's dynamic config no longer has %q", off)
	}
	path := filepath.Join(dir, "dynamicconfig-refresh.yaml")
	on := strings.Replace(string(raw), off, strings.Replace(off, "false", "true", 1), 1)
	return path, os.WriteFile(path, []byte(on), 0o644)
}

// startRedis uses the benchmark's own Redis DB, or starts a Redis Cluster of 3 masters.
func (r *scaleRun) startRedis(ctx context.Context, e *env, shape scaleShape) error {
	if !shape.cluster {
		r.redisURL = e.redisURL
		return nil
	}
	var addrs []string
	for i := range 3 {
		port, err := testenv.FreeClusterPort()
		if err != nil {
			return err
		}
		nodeDir := filepath.Join(r.dir, "redis-"+port)
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return err
		}
		if _, err := r.spawn("redis", fmt.Sprintf("redis-%d", i), nil, "redis-server", "--port", port, "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--dir", nodeDir, "--save", "", "--appendonly", "no"); err != nil {
			return err
		}
		addrs = append(addrs, "127.0.0.1:"+port)
		if err := waitUntil(ctx, 10*time.Second, "redis "+port, func() error {
			return exec.CommandContext(ctx, "redis-cli", "-p", port, "ping").Run()
		}); err != nil {
			return fmt.Errorf("%w; its log ends:\n%s", err, testenv.LastLines(filepath.Join(r.dir, fmt.Sprintf("redis-%d.log", i)), 5))
		}
	}
	out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	r.redisURL = "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
	return waitUntil(ctx, 30*time.Second, "redis cluster", func() error {
		for _, a := range addrs {
			_, port, _ := strings.Cut(a, ":")
			info, _ := exec.CommandContext(ctx, "redis-cli", "-p", port, "cluster", "info").Output()
			if !strings.Contains(string(info), "cluster_state:ok") {
				return errors.New(a + " not ok yet")
			}
		}
		return nil
	})
}

// startProduct starts 2 workers and 2 API replicas of the product's binary.
func (r *scaleRun) startProduct(ctx context.Context, bin string) error {
	env := []string{"TEMPORAL_ADDRESS=" + r.temporal, "TEMPORAL_NAMESPACE=default", "REDIS_URL=" + r.redisURL,
		"DATABASE_URL=" + r.dbURL, "ADMIN_TOKEN=" + adminToken, "STRIPE_WEBHOOK_SECRET=" + webhookSecret,
		"CHECKOUT_SECRET_KEY=" + checkouttest.CheckoutSecretKey,
		// The load generator is the shop's backend: server to server.
		"IDENTITY_MODE=server", "CLIENT_TOKENS=bench=" + clientToken,
		"STRIPE_API_KEY=", "STRIPE_API_URL=", "LOG_LEVEL=error", "API_DRAIN_DELAY_SECONDS=0",
		// The load generator is one address, and reuses customer ids: no limits.
		"RATE_LIMIT_PER_ADDRESS=0", "RATE_LIMIT_CHECKOUTS_PER_ADDRESS=0", "RATE_LIMIT_PER_CUSTOMER=0", "RATE_LIMIT_CHECKOUTS_PER_CLIENT=0",
		"STRIPE_TEST_MODE=true"}
	for i := range 2 { // one after the other: the first applies the migrations
		name, metrics := fmt.Sprintf("worker-%d", i+1), "127.0.0.1:"+freePort()
		if _, err := r.spawn("workers", name, append(env, "WORKER_METRICS_ADDR="+metrics), bin, "worker"); err != nil {
			return err
		}
		hc := newHTTPClient()
		if err := waitUntil(ctx, 60*time.Second, name, func() error { // its metrics answer once it runs
			_, err := do(ctx, hc, http.MethodGet, "http://"+metrics+"/metrics", nil, nil, nil)
			return err
		}); err != nil {
			return err
		}
	}
	for i := range 2 {
		addr := "127.0.0.1:" + freePort()
		if _, err := r.spawn("apis", fmt.Sprintf("api-%d", i+1), append(env, "API_ADDR="+addr, "API_METRICS_ADDR=127.0.0.1:"+freePort()), bin, "api"); err != nil {
			return err
		}
		url := "http://" + addr
		hc := newHTTPClient()
		if err := waitUntil(ctx, 60*time.Second, "api "+addr, func() error {
			a, err := do(ctx, hc, http.MethodGet, url+"/readyz", nil, nil, nil)
			if err == nil && a.code != http.StatusOK {
				err = fmt.Errorf("/readyz %d", a.code)
			}
			return err
		}); err != nil {
			return err
		}
		r.apiURLs = append(r.apiURLs, url)
	}
	return nil
}

// cpu reads every process group's CPU so far; the single Redis from INFO (shared with the
// rest of the benchmark, which is idle meanwhile), Postgres from every postgres process.
func (r *scaleRun) cpu(ctx context.Context, e *env) map[string]time.Duration {
	m := map[string]time.Duration{}
	for group, pids := range r.pids {
		for _, pid := range pids {
			if d, err := processCPU(pid); err == nil {
				m[group] += d
			}
		}
	}
	if len(r.pids["redis"]) == 0 {
		m["redis"], _ = e.redisCPU(ctx)
	}
	m["postgres"] = postgresCPU()
	m["load generator"], _ = processCPU(os.Getpid())
	return m
}

// persistence reads the server's persistence_requests (all, and the writing operations) and
// the row writes of Temporal's main database; zeros on the dev server.
func (r *scaleRun) persistence(ctx context.Context, e *env) [3]float64 {
	var v [3]float64
	if r.metrics == "" {
		return v
	}
	if a, err := http.Get(r.metrics); err == nil {
		raw, _ := io.ReadAll(a.Body)
		_ = a.Body.Close()
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(line, "persistence_requests{") {
				continue
			}
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				continue
			}
			v[0] += n
			if writeOperation.MatchString(line) {
				v[1] += n
			}
		}
	}
	if conn, err := pgx.Connect(ctx, e.adminURL); err == nil {
		_ = conn.QueryRow(ctx, "SELECT tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = $1", r.temporalDB).Scan(&v[2])
		_ = conn.Close(ctx)
	}
	return v
}

// writeOperation matches the persistence operations that write (by the server's names).
var writeOperation = regexp.MustCompile(`operation="(Create|Update|Append|Delete|Put|Insert|Set|Complete|Conditional|Lock|Range|Add|Upsert|Record)`)

// losers sends sold-out POSTs to both replicas for gateDuration at gateConcurrency and
// counts the replicas' CPU for them: the losers a flash sale's API answers per core.
func (r *scaleRun) losers(ctx context.Context, e *env, replicas []*stack, res *shapeResult, sz sizes) error {
	sku := e.sku("SOLDOUT" + filepath.Base(r.dir))
	stock := `{"on_hand": 0, "price_cents": 1999, "currency": "usd", "max_per_order": 2}`
	if a, err := do(ctx, replicas[0].http, http.MethodPut, replicas[0].url+"/v1/inventory/"+sku, []byte(stock), map[string]string{"Authorization": "Bearer " + adminToken}, nil); err != nil || a.code != http.StatusOK {
		return fmt.Errorf("stock %s: %d %v", sku, a.code, err)
	}
	body := []byte(fmt.Sprintf(`{"cart_id": "l-%s", "customer_id": "u-l", "items": [{"sku": %q, "quantity": 1}]}`, e.runID, sku))
	var answered atomic.Int64
	var mu sync.Mutex
	res.notLosers = map[string]int{}
	apiCPU := func() time.Duration { return r.cpu(ctx, e)["apis"] }
	before, pgBefore, t0 := apiCPU(), postgresCPU(), time.Now()
	stop := t0.Add(sz.gateDuration)
	var wg sync.WaitGroup
	for w := range sz.gateConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := replicas[w%2]
			for time.Now().Before(stop) && ctx.Err() == nil {
				a, err := do(ctx, c.http, http.MethodPost, c.url+"/v1/checkouts", body, c.client, nil)
				if err == nil && a.code == http.StatusConflict {
					answered.Add(1)
					continue
				}
				key := strings.TrimSpace(strconv.Itoa(a.code) + " " + a.problem)
				if err != nil {
					key = "transport error"
				}
				mu.Lock()
				res.notLosers[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.losersFor, res.losersCPU, res.losersPG, res.losers = time.Since(t0), apiCPU()-before, postgresCPU()-pgBefore, int(answered.Load())
	if len(res.notLosers) > 0 {
		progress("   sold-out POSTs: answers other than 409: %v", res.notLosers)
	}
	return nil
}

func adminExec(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// scaleMarkdown is the scale profile's section of BENCHMARKS.md: the shapes side by side.
func scaleMarkdown(rs []shapeResult, sz sizes) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Scale profile: the production shape side by side\n\n")
	fmt.Fprintf(&b, "The product's own binary as 2 workers and 2 API replicas (separate processes), %d checkouts at concurrency %d\n", sz.e2eCheckouts, sz.e2eConcurrency)
	b.WriteString("(POST through one replica, signed webhook and polls through the other, until confirmed), after 5 warm-up checkouts,\n")
	b.WriteString("on each shape in turn. CPU is per confirmed checkout, by process, from /proc (Redis: INFO cpu for the one Redis).\n\n")
	b.WriteString("| shape | checkouts/s | x dev server | POST p50 | POST p99 | 503s retried | CPU ms per checkout: Temporal / workers / APIs / Redis / Postgres / load generator = total |\n|---|---|---|---|---|---|---|\n")
	for i, r := range rs {
		var parts []string
		for _, k := range r.cpuOrder {
			parts = append(parts, fmt.Sprintf("%.1f", ms(r.cpuPer(k))))
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.2f | %s | %s | %d | %s = **%.1f** |\n", r.shape.name, r.rate(), ratio(r.rate(), devRateBefore(rs, i)),
			fmtDur(r.post.pct(50)), fmtDur(r.post.pct(99)), r.shed, strings.Join(parts, " / "), ms(r.cpuPer("")))
	}
	b.WriteString("\n| shape | Temporal persistence requests per checkout (writes) | rows written in Temporal's database per checkout | sold-out 409s/s (both replicas) | 409s per API CPU-second | Postgres CPU ms per 1,000 409s (the catalog read) | other answers to sold-out POSTs |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		pers, rows := "- (SQLite, not counted)", "-"
		if r.shape.shards > 0 {
			pers, rows = fmt.Sprintf("%.0f (%.0f)", r.persistence, r.persistenceWrites), fmt.Sprintf("%.0f", r.rowWrites)
		}
		other := "none"
		if len(r.notLosers) > 0 {
			other = answersLine(r.notLosers)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.0f | %s |\n", r.shape.name, pers, rows,
			float64(r.losers)/r.losersFor.Seconds(), float64(r.losers)/max(r.losersCPU.Seconds(), 0.001),
			ms(r.losersPG)*1000/float64(max(r.losers, 1)), other)
	}
	b.WriteString("\nAll shapes share the machine's 2 cores: on a real deployment each process group has its own cores, so these rates are\n")
	b.WriteString("the whole system's on one small box, and the CPU split (not the rate) is what carries over to capacity planning (docs/capacity.md).\n")
	return b.String()
}

// devRateBefore is the checkouts/s of the dev server's run nearest before rs[i] (of the first
// one when none ran before it), 0 when it did not run.
func devRateBefore(rs []shapeResult, i int) float64 {
	for j := i; j >= 0; j-- {
		if rs[j].shape.isTheDevServer() {
			return rs[j].rate()
		}
	}
	for _, r := range rs {
		if r.shape.isTheDevServer() {
			return r.rate()
		}
	}
	return 0
}

// scaleTarget is the scale profile's target: the production shape (Temporal on Postgres, 4
// shards, a Redis Cluster, 2 + 2 processes) confirms at least 0.8 x the dev server's
// checkouts/s, each run of it against the dev server's run before it; the median of those
// ratios, with their spread. ok is false when either shape did not run.
func scaleTarget(rs []shapeResult) (target, bool) {
	type pair struct {
		r   shapeResult
		dev float64
		q   float64
	}
	var pairs []pair
	for i, r := range rs {
		if dev := devRateBefore(rs, i); r.shape.key == "cluster" && dev > 0 {
			pairs = append(pairs, pair{r, dev, ratio(r.rate(), dev)})
		}
	}
	if len(pairs) == 0 {
		return target{}, false
	}
	qs := make([]float64, len(pairs))
	for i, p := range pairs {
		qs[i] = p.q
	}
	sorted := slices.Clone(pairs)
	slices.SortFunc(sorted, func(a, b pair) int { return cmp.Compare(a.q, b.q) })
	m := sorted[len(sorted)/2]
	spread := ""
	if len(pairs) > 1 {
		spread = fmt.Sprintf("; spread %.2f-%.2f x", sorted[0].q, sorted[len(sorted)-1].q)
	}
	return target{
		name: "Scale profile: checkouts/s of Temporal on Postgres (4 shards) with a Redis Cluster, 2 workers and 2 APIs >= 0.8 x " +
			"the dev server's (each run against the dev server's run before it; the median of the runs)",
		measured: fmt.Sprintf("%.1f vs %.1f per s; Postgres %.1f ms of CPU per checkout", m.r.rate(), m.dev, ms(m.r.cpuPer("postgres"))) +
			roundsNote(qs, "%.2f") + spread,
		ratio: fmt.Sprintf("%.2f x", m.q), met: m.q >= 0.8,
		why: "every step the dev server keeps in one SQLite file in its own memory is a Postgres transaction over loopback " +
			"(history events, mutable state, timer and transfer tasks, visibility rows), and Postgres shares the 2 cores with " +
			"the server, both workers, both APIs, Redis and the load generator; the table below splits the CPU by process.",
	}, true
}
