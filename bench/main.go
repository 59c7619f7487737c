// Command bench measures the checkout saga against its alternatives in one run, on this
// machine: the seed's GET-check-DECR race beside the reserve script, hot-SKU hold throughput
// (DECRBY, the script, the Postgres hot-row UPDATE, redis-benchmark EVALSHA), end-to-end
// checkouts over HTTP beside an empty workflow on the same dev server, a flash sale scaled to
// two cores, and the sold-out gate beside a bare Echo handler. It prints a table, writes
// BENCHMARKS.md and PNG charts.
//
//	make bench     (= cd bench && go run . -out ../BENCHMARKS.md -charts ../docs/bench)
//
// It needs Redis at 127.0.0.1:6379 (it uses DB 14 and random SKU names), Postgres at
// 127.0.0.1:5432 (it creates and drops its own database) and the pinned Temporal dev server at
// .tools/temporal (make tools), which it starts as a dev server on free ports. Everything it
// creates is removed when it ends, on error and on Ctrl-C too.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

// sizes are the counts and durations of every phase; -quick shrinks them for a smoke run.
type sizes struct {
	raceUnits, raceBuyers int
	holdConcurrency       []int
	holdDuration          time.Duration
	redisBenchRequests    int
	emptyWorkflows        int
	e2eCheckouts          int
	e2eConcurrency        int
	e2eRounds             int // phase 3 runs this many times; the targets take the median
	flashUnits            int
	flashRequests         int
	flashConcurrency      int
	flashRetries          int // 503 retries per request, after Retry-After
	dropUnits, dropBuyers int
	dropSpread, dropLead  time.Duration // the drop's arrivals span dropSpread; its sale starts dropLead after the first
	gateDuration          time.Duration
	gateConcurrency       int
}

func defaultSizes() sizes {
	return sizes{
		raceUnits: 100, raceBuyers: 2000,
		holdConcurrency: []int{1, 8, 64}, holdDuration: 3 * time.Second,
		redisBenchRequests: 200_000,
		emptyWorkflows:     400,
		e2eCheckouts:       300, e2eConcurrency: 32, e2eRounds: 3,
		flashUnits: 1000, flashRequests: 7000, flashConcurrency: 500, flashRetries: 20,
		// 500 buyers for 100 units: over 500 pairs in a random order the rank correlation has a
		// standard deviation of about 1/sqrt(499) = 0.045, so a shuffle stays well within 0.2 and
		// a figure past it is no accident. The start comes 1.5 s after the last arrival: room for
		// POSTs slowed by a loaded machine.
		dropUnits: 100, dropBuyers: 500, dropSpread: 2500 * time.Millisecond, dropLead: 4 * time.Second,
		gateDuration: 3 * time.Second, gateConcurrency: 64,
	}
}

func quickSizes() sizes {
	s := defaultSizes()
	s.holdDuration = 500 * time.Millisecond
	s.redisBenchRequests = 20_000
	s.emptyWorkflows = 60
	s.e2eCheckouts, s.e2eRounds = 40, 1
	s.flashUnits, s.flashRequests, s.flashConcurrency = 100, 700, 100
	s.gateDuration = time.Second
	return s
}

type options struct {
	out, charts, temporalCLI, redisURL, postgresURL      string
	quick, scale, scaleOnly                              bool
	scaleShapes                                          string
	e2eOnly, gateOnly, flashOnly, grpcGzip, devSARefresh bool
	dropOnly, doorOnly, doorWarm                         bool
	poll                                                 time.Duration
	partitions, e2eRounds                                int
	cpuProfile                                           string
	sizes                                                sizes
	command                                              string
}

func main() {
	var o options
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "where to write the report")
	flag.StringVar(&o.charts, "charts", "docs/bench", "folder for the PNG charts")
	flag.StringVar(&o.temporalCLI, "temporal", envOr("TEMPORAL_CLI", ".tools/temporal"), "the pinned Temporal dev server (make tools)")
	flag.StringVar(&o.redisURL, "redis", "redis://127.0.0.1:6379/14", "Redis to use; never DB 0 (the local stack's)")
	flag.StringVar(&o.postgresURL, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres admin URL (no TLS on loopback, as the product's default DATABASE_URL); the benchmark creates and drops its own database")
	flag.BoolVar(&o.quick, "quick", false, "small counts, for checking the program itself (figures are meaningless)")
	flag.BoolVar(&o.e2eOnly, "e2e-only", false, "run only phase 3 (empty workflows, then checkouts) and print its figures, for trying a change; writes no report")
	flag.BoolVar(&o.gateOnly, "gate-only", false, "run only phase 5 (the sold-out gate beside a bare Echo handler, with the rate limiter off and on) and print its figures, for trying a change; writes no report")
	flag.BoolVar(&o.flashOnly, "flash-only", false, "run only phase 4 (the flash sale) and print its figures, for trying a change to the waiting room or the admission; writes no report")
	flag.BoolVar(&o.doorOnly, "door-only", false, "run only the door: bursts of new carts, as many as the flash sale's clients, sent at once to a replica whose waiting room is held, so each is answered 202 and no saga starts; prints each burst's POST latency and CPU per POST, writes no report")
	flag.BoolVar(&o.doorWarm, "door-warm", false, "with -door-only: the clients open their connections before the first burst")
	flag.BoolVar(&o.dropOnly, "drop-only", false, "run only the scheduled drop (buyers who come before a SKU's sale starts, and the rank correlation of their arrival and serving orders) and print its figures, for trying a change to the drop's shuffle; writes no report")
	flag.BoolVar(&o.grpcGzip, "grpc-gzip", false, "gzip the in-process clients' requests to Temporal (the SDK's default; the product's is TEMPORAL_GRPC_COMPRESSION=none), to measure what that costs")
	flag.BoolVar(&o.devSARefresh, "dev-sa-refresh", false, "keep the dev CLI's system.forceSearchAttributesCacheRefreshOnRead=true (a read of cluster metadata per search-attribute read, which no production server does)")
	flag.IntVar(&o.e2eRounds, "e2e-rounds", 0, "how many times phase 3 (empty workflows, then checkouts) runs, its targets taking each ratio's median round (0: 3, or 1 with -quick)")
	flag.IntVar(&o.partitions, "tq-partitions", 0, "task-queue partitions of the dev servers (0: the product's workflows.TaskQueuePartitions; Temporal's default is 4), to measure what partitions cost")
	flag.DurationVar(&o.poll, "poll", 0, "make the end-to-end client poll GET /v1/checkouts/{id} this often (50ms was the client before ?wait) instead of one GET ?wait=10, to measure what polling costs")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (load generator, API and worker) to this file, for go tool pprof")
	flag.BoolVar(&o.scale, "scale", true, "also run the scale profile (bench/profile.go): dev server vs Temporal on Postgres, one Redis vs a cluster")
	flag.BoolVar(&o.scaleOnly, "scale-only", false, "run only the scale profile and print its table, for trying a change to its settings; writes no report")
	flag.StringVar(&o.scaleShapes, "scale-shapes", defaultScaleShapes, "the scale profile's shapes, in order (a key may repeat): dev, pg1, pg4, cluster, and the cluster shape with the settings the profile turned away from: cluster-libpq, cluster-refresh, cluster-libpq-refresh")
	flag.Parse()
	o.sizes = defaultSizes()
	if o.quick {
		o.sizes = quickSizes()
	}
	if o.e2eRounds < 0 {
		fmt.Fprintln(os.Stderr, "bench: -e2e-rounds must be 0 or more")
		os.Exit(2)
	}
	if o.e2eRounds > 0 {
		o.sizes.e2eRounds = o.e2eRounds
	}
	o.command = "make bench (cd bench && go run . " + strings.Join(os.Args[1:], " ") + ")"
	if root, err := filepath.Abs(".."); err == nil { // the report names no path of this machine
		o.command = strings.ReplaceAll(o.command, root+string(filepath.Separator), "../")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// A hard bound on the whole run: a stuck phase must not hold the machine.
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: cpu profile:", err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		cancel()
		stop()
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// run opens every dependency, runs the phases in order and writes the report. Each
// dependency's clean-up is deferred on the line after it is opened.
func run(ctx context.Context, o options) error {
	started := time.Now()
	facts := machineFacts(ctx)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	e, err := openEnv(ctx, o, logger)
	if err != nil {
		return err
	}
	defer e.close()
	facts.add("Redis", e.redisVersion(ctx))
	facts.add("PostgreSQL", e.postgresFacts(ctx))
	facts.add("Temporal dev server", e.temporalFacts())

	var r results
	r.sizes = o.sizes

	if o.e2eOnly {
		return runE2EOnly(ctx, e, logger, o.sizes)
	}
	if o.gateOnly {
		return runGateOnly(ctx, e, logger, o.sizes)
	}
	if o.flashOnly {
		return runFlashOnly(ctx, e, logger, o.sizes)
	}
	if o.dropOnly {
		return runDropOnly(ctx, e, logger, o.sizes)
	}
	if o.doorOnly {
		return runDoorOnly(ctx, e, logger, o.sizes, o.doorWarm)
	}
	if o.scaleOnly {
		progress("scale profile: %s, %d checkouts each", o.scaleShapes, o.sizes.e2eCheckouts)
		scale, err := benchScaleProfile(ctx, o, e)
		if err != nil {
			return fmt.Errorf("scale profile: %w", err)
		}
		fmt.Print(scaleMarkdown(scale, o.sizes))
		if t, ok := scaleTarget(scale); ok {
			fmt.Printf("\n%s: %s, %s: %s\n", t.name, t.measured, t.ratio, yes(t.met))
		}
		return nil
	}

	progress("1/5 the seed's race: %d buyers, %d units", o.sizes.raceBuyers, o.sizes.raceUnits)
	if r.race, err = e.benchRace(ctx, o.sizes); err != nil {
		return fmt.Errorf("race: %w", err)
	}

	progress("2/5 hot-SKU hold throughput")
	if r.holds, err = e.benchHolds(ctx, o.sizes); err != nil {
		return fmt.Errorf("hold throughput: %w", err)
	}

	st, err := e.openStack(ctx, logger, quietAPILogger())
	if err != nil {
		return fmt.Errorf("start api and worker: %w", err)
	}
	defer st.close()

	progress("3/5 end to end: empty workflows, then checkouts over HTTP")
	if r.rounds, err = st.benchEnd2End(ctx, o.sizes); err != nil {
		return err
	}
	k, _ := medianRound(r.rounds, e2eRound.cpuFloorRatio)
	r.empty, r.floor, r.saga, r.e2e = k.empty, k.floor, k.saga, k.e2e

	progress("4/5 flash sale: %d units, %d requests, %d clients", o.sizes.flashUnits, o.sizes.flashRequests, o.sizes.flashConcurrency)
	if r.flash, err = st.benchFlashSale(ctx, o.sizes); err != nil {
		return fmt.Errorf("flash sale: %w", err)
	}

	progress("4/5 a scheduled drop: %d units, %d buyers before the start", o.sizes.dropUnits, o.sizes.dropBuyers)
	if r.drop, err = st.benchDrop(ctx, o.sizes); err != nil {
		return fmt.Errorf("scheduled drop: %w", err)
	}

	// The flash sale's and the drop's workflow tasks leave timers too; the gate's two sides run one after the
	// other, so without the wait they would fire into the second one only.
	if err := st.settle(ctx); err != nil {
		return err
	}
	progress("5/5 sold-out gate beside a bare Echo handler")
	if r.gate, err = st.benchGate(ctx, o.sizes); err != nil {
		return fmt.Errorf("sold-out gate: %w", err)
	}

	if o.scale {
		progress("6/6 scale profile: %s, %d checkouts each", o.scaleShapes, o.sizes.e2eCheckouts)
		if r.scale, err = benchScaleProfile(ctx, o, e); err != nil {
			return fmt.Errorf("scale profile: %w", err)
		}
	}

	r.elapsed = time.Since(started)
	facts.add("load average at end", loadAverage())
	r.facts = facts
	fmt.Println(r.table())

	if err := os.MkdirAll(o.charts, 0o755); err != nil {
		return fmt.Errorf("create chart folder: %w", err)
	}
	charts, err := r.drawCharts(o.charts)
	if err != nil {
		return fmt.Errorf("draw charts: %w", err)
	}
	rel := func(p string) string {
		if q, err := filepath.Rel(filepath.Dir(o.out), p); err == nil {
			return filepath.ToSlash(q)
		}
		return p
	}
	for i := range charts {
		charts[i].path = rel(charts[i].path)
	}
	if err := os.WriteFile(o.out, []byte(r.markdown(o, charts)+scaleMarkdown(r.scale, o.sizes)), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.out, err)
	}
	progress("wrote %s and %d charts in %s (run took %s)", o.out, len(charts), o.charts, r.elapsed.Round(time.Second))
	return nil
}

// runE2EOnly is phase 3 alone, for trying a change to the saga or the API: the empty
// workflows, the checkouts, and the ratios the targets compare, on stderr.
func runE2EOnly(ctx context.Context, e *env, logger *slog.Logger, sz sizes) error {
	st, err := e.openStack(ctx, logger, quietAPILogger())
	if err != nil {
		return fmt.Errorf("start api and worker: %w", err)
	}
	defer st.close()
	rounds, err := st.benchEnd2End(ctx, sz)
	if err != nil {
		return err
	}
	perK := func(c cpuSnapshot, n int) string {
		k := float64(n) / 1000
		return fmt.Sprintf("dev server %.2f / API + worker + load generator %.2f / Redis %.2f / Postgres %.2f = %.2f",
			c.devServer.Seconds()/k, c.self.Seconds()/k, c.redis.Seconds()/k, c.postgres.Seconds()/k, c.total().Seconds()/k)
	}
	for i, k := range rounds {
		progress("round %d: CPU s per 1,000 empty workflows: %s", i+1, perK(k.empty.cpu, k.empty.workflows))
		progress("round %d: CPU s per 1,000 floor workflows: %s (%.2f x empty)", i+1, perK(k.floor.cpu, k.floor.workflows), k.floorRatio())
		progress("round %d: CPU s per 1,000 sagas with nothing behind their activities: %s (%.2f x floor)", i+1, perK(k.saga.cpu, k.saga.workflows), k.sagaFloorRatio())
		progress("round %d: CPU s per 1,000 confirmed checkouts: %s (%.2f x floor, %.2f x the saga with nothing behind it)", i+1, perK(k.e2e.cpu, k.e2e.checkouts), k.cpuFloorRatio(), k.cpuSagaRatio())
	}
	cpu, cpus := medianRound(rounds, e2eRound.cpuFloorRatio)
	post, posts := medianRound(rounds, e2eRound.postFloorRatio)
	progress("targets: CPU per checkout %.2f x the floor's (target <= 1.3)%s. POST p99 %.2f x the floor's update-with-start p99 (target <= 1.1)%s",
		cpu.cpuFloorRatio(), roundsNote(cpus, "%.2f"), post.postFloorRatio(), roundsNote(posts, "%.2f"))
	cpu, cpus = medianRound(rounds, e2eRound.cpuRatio)
	rate, rates := medianRound(rounds, e2eRound.rateRatio)
	post, posts = medianRound(rounds, e2eRound.postRatio)
	res, ress := medianRound(rounds, e2eRound.postResultRatio)
	progress("information: CPU per checkout %.2f x empty (old bound 2)%s. Checkouts/s %.2f x empty (old bound 0.5)%s. POST p99 %.1f x StartWorkflow p99 (old bound 3)%s, %.1f x the empty workflow's start to result p99%s",
		cpu.cpuRatio(), roundsNote(cpus, "%.2f"), rate.rateRatio(), roundsNote(rates, "%.2f"), post.postRatio(), roundsNote(posts, "%.1f"),
		res.postResultRatio(), roundsNote(ress, "%.1f"))
	return nil
}

// runFlashOnly is phase 4 alone, for trying a change to the waiting room or the admission:
// its figures are the progress lines on stderr.
func runFlashOnly(ctx context.Context, e *env, logger *slog.Logger, sz sizes) error {
	st, err := e.openStack(ctx, logger, quietAPILogger())
	if err != nil {
		return fmt.Errorf("start api and worker: %w", err)
	}
	defer st.close()
	if _, err := st.benchFlashSale(ctx, sz); err != nil {
		return fmt.Errorf("flash sale: %w", err)
	}
	return nil
}

// runDoorOnly is the door alone (benchDoor): its figures are the progress lines on stderr.
func runDoorOnly(ctx context.Context, e *env, logger *slog.Logger, sz sizes, warm bool) error {
	st, err := e.openStack(ctx, logger, quietAPILogger())
	if err != nil {
		return fmt.Errorf("start api and worker: %w", err)
	}
	defer st.close()
	return st.benchDoor(ctx, sz, warm)
}

// runDropOnly is the scheduled drop alone, for trying a change to the drop's shuffle: its
// figures are the progress lines on stderr.
func runDropOnly(ctx context.Context, e *env, logger *slog.Logger, sz sizes) error {
	st, err := e.openStack(ctx, logger, quietAPILogger())
	if err != nil {
		return fmt.Errorf("start api and worker: %w", err)
	}
	defer st.close()
	if _, err := st.benchDrop(ctx, sz); err != nil {
		return fmt.Errorf("scheduled drop: %w", err)
	}
	return nil
}

// runGateOnly is phase 5 alone, for trying a change to the refused path: the bare handler,
// then the sold-out path with the rate limiter off and on, and the targets' ratios on stderr.
func runGateOnly(ctx context.Context, e *env, logger *slog.Logger, sz sizes) error {
	st, err := e.openStack(ctx, logger, quietAPILogger())
	if err != nil {
		return fmt.Errorf("start api and worker: %w", err)
	}
	defer st.close()
	g, err := st.benchGate(ctx, sz)
	if err != nil {
		return err
	}
	for _, t := range append(gateTargets(g), limiterComparison(g)) {
		progress("%s: %s, %s: %s", t.name, t.measured, t.ratio, yes(t.met))
		if !t.met {
			progress("   why: %s", t.why)
		}
	}
	return nil
}

// quietAPILogger is the API's logger in the benchmark: the API logs every request, which at
// flash-sale rates drowns the progress lines, and the benchmark counts every answer itself.
func quietAPILogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}
