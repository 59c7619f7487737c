package ops_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/workflow"
	"go.yaml.in/yaml/v3"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/metrics"
)

const (
	rulesDir  = "prometheus"
	rules     = "alerts.yml"
	ruleTests = "alerts_test.yml"
	dashboard = "grafana/checkout-saga.json"
)

// promtool checks the rules and runs their unit tests. Without promtool on PATH the test
// skips, except in CI (CI=1 or PROMTOOL_REQUIRED=1, which .ci/run sets after installing
// Debian's prometheus package), where a missing promtool fails it.
func TestAlertRulesPassPromtoolAndTheirUnitTests(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "1" || os.Getenv("PROMTOOL_REQUIRED") == "1" {
			t.Fatalf("promtool is not on PATH, and CI=1 or PROMTOOL_REQUIRED=1 requires it: apt-get install -y --no-install-recommends prometheus")
		}
		t.Skip("promtool is not on PATH (apt-get install -y --no-install-recommends prometheus); CI requires it")
	}
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", ruleTests}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = rulesDir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// Every expression of the dashboard and of the alerts names only metrics the product really
// exports, so neither can drift from the code: the product's own, as package metrics
// registers them, and the Temporal SDK's, scraped from a real worker that exports them the
// way the binary does (metrics.NewTemporalHandler).
func TestDashboardAndAlertsUseExportedMetrics(t *testing.T) {
	exported := productMetrics(t)
	for name := range sdkMetrics(t) {
		exported[name] = true
	}

	exprs := map[string]string{} // where -> expression
	for title, e := range dashboardExprs(t) {
		exprs["dashboard panel "+strconv.Quote(title)] = e
	}
	for alert, e := range alertExprs(t) {
		exprs["alert "+alert] = e
	}
	for where, e := range exprs {
		names := metricNames(e)
		if len(names) == 0 {
			t.Errorf("%s: expression names no checkout_ or temporal_ metric: %s", where, e)
		}
		for _, name := range names {
			if !exported[name] {
				t.Errorf("%s: %s is not exported by the product (expression %s)", where, name, e)
			}
		}
	}
	if t.Failed() {
		var all []string
		for name := range exported {
			all = append(all, name)
		}
		sort.Strings(all)
		t.Logf("exported: %s", strings.Join(all, " "))
	}
}

// The dashboard shows the key metrics, and every panel reads the dashboard's
// Prometheus datasource variable.
func TestDashboardShowsTheKeyMetricsFromItsDatasource(t *testing.T) {
	uses := map[string]bool{}
	for _, p := range dashboardPanels(t) {
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q reads datasource %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		for _, tg := range p.Targets {
			for _, name := range metricNames(tg.Expr) {
				uses[name] = true
			}
		}
	}
	for _, name := range []string{
		"checkout_outcomes_total", "checkout_stock_holds_units_total", "checkout_sold_out_answers_total",
		"checkout_orphan_payments_total", "checkout_workflows_needing_attention", "checkout_requests_shed_total",
		"checkout_unavailable_answers_total", "checkout_audit_violations",
		"temporal_workflow_task_schedule_to_start_latency_seconds_bucket",
		"temporal_workflow_task_queue_poll_succeed_total", "temporal_activity_execution_latency_seconds_bucket",
	} {
		if !uses[name] {
			t.Errorf("no dashboard panel shows %s", name)
		}
	}
}

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// dashboardPanels is every panel of the dashboard, nested ones included, rows left out.
func dashboardPanels(t *testing.T) []panel {
	var d struct {
		Panels []panel `json:"panels"`
	}
	readJSON(t, dashboard, &d)
	var out []panel
	for _, p := range flatten(d.Panels) {
		if p.Type != "row" {
			out = append(out, p)
		}
	}
	return out
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

// dashboardExprs is every query of every panel, by panel title; a panel without one fails.
func dashboardExprs(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, p := range dashboardPanels(t) {
		if len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("dashboard panel %q: query %d is empty", p.Title, i)
			}
			out[p.Title+" #"+strconv.Itoa(i+1)] = tg.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no queries", dashboard)
	}
	return out
}

// alertExprs is every alerting rule's expression, by alert name.
func alertExprs(t *testing.T) map[string]string {
	raw, err := os.ReadFile(filepath.Join(rulesDir, rules))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse %s: %v", rules, err)
	}
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no rules", rules)
	}
	return out
}

// The product's and the SDK's metric names all start with checkout_ or temporal_, and no
// label name does, so a token with either prefix is a metric name.
var metricName = regexp.MustCompile(`\b(?:checkout|temporal)_[a-zA-Z0-9_]+\b`)

func metricNames(expr string) []string {
	// Label values in quotes ("checkout") are not names: drop quoted strings first.
	expr = regexp.MustCompile(`"[^"]*"`).ReplaceAllString(expr, `""`)
	return metricName.FindAllString(expr, -1)
}

// productMetrics is every series name package metrics registers: the Name of each
// promauto.New* call in its source, with a histogram's _bucket, _sum and _count.
func productMetrics(t *testing.T) map[string]bool {
	dir := filepath.Join("..", "metrics")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if fn, ok := call.Fun.(*ast.Ident); ok && metricsConstructors[fn.Name] {
				if name := literalArg(call); name != "" {
					out[name] = true
				} else {
					t.Errorf("%s: %s without a literal name", fset.Position(call.Pos()), fn.Name)
				}
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasPrefix(sel.Sel.Name, "New") {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "promauto" {
				return true
			}
			name := optsName(call)
			if name == "" && optsNameIs(call, "name") && enclosingConstructor(f, call) {
				return true // the constructor itself: its callers' names are read above
			}
			if name == "" {
				t.Errorf("%s: %s without a literal Name", fset.Position(call.Pos()), sel.Sel.Name)
				return true
			}
			out[name] = true
			if strings.HasPrefix(sel.Sel.Name, "NewHistogram") {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					out[name+suffix] = true
				}
			}
			return true
		})
	}
	if len(out) == 0 {
		t.Fatalf("found no metrics in %s", dir)
	}
	return out
}

// metricsConstructors are the metrics package's helpers (counter, counterVec, gaugeVec):
// each registers one metric through promauto, its name the first argument.
var metricsConstructors = map[string]bool{"counter": true, "counterVec": true, "gaugeVec": true}

func literalArg(call *ast.CallExpr) string {
	if len(call.Args) == 0 {
		return ""
	}
	s, ok := call.Args[0].(*ast.BasicLit)
	if !ok || s.Kind != token.STRING {
		return ""
	}
	name, _ := strconv.Unquote(s.Value)
	return name
}

// optsNameIs tells whether the call's options set Name to the identifier ident.
func optsNameIs(call *ast.CallExpr, ident string) bool {
	if len(call.Args) == 0 {
		return false
	}
	lit, ok := call.Args[0].(*ast.CompositeLit)
	if !ok {
		return false
	}
	for _, el := range lit.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
				v, ok := kv.Value.(*ast.Ident)
				return ok && v.Name == ident
			}
		}
	}
	return false
}

// enclosingConstructor tells whether call is inside one of metricsConstructors.
func enclosingConstructor(f *ast.File, call *ast.CallExpr) bool {
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && metricsConstructors[fd.Name.Name] && fd.Pos() <= call.Pos() && call.End() <= fd.End() {
			return true
		}
	}
	return false
}

func optsName(call *ast.CallExpr) string {
	if len(call.Args) == 0 {
		return ""
	}
	lit, ok := call.Args[0].(*ast.CompositeLit)
	if !ok {
		return ""
	}
	for _, el := range lit.Elts {
		kv, ok := el.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
			if s, ok := kv.Value.(*ast.BasicLit); ok {
				name, err := strconv.Unquote(s.Value)
				if err == nil {
					return name
				}
			}
		}
	}
	return ""
}

func sdkWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteActivity(ctx, sdkActivity).Get(ctx, nil); err != nil {
		return err
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteLocalActivity(lctx, sdkActivity).Get(ctx, nil)
}

func sdkActivity(context.Context) error { return nil }

// sdkMetrics runs a workflow with an activity and a local activity on a real worker whose
// client exports metrics as the binary does, lets its polls come back empty (the dev server's
// long polls last 2 s here instead of a minute), then stops the server so its polls fail,
// and returns every series name the worker exported.
func sdkMetrics(t *testing.T) map[string]bool {
	srv, _ := testenv.DevServerWith(t, testenv.DevServerOptions{ExtraArgs: []string{
		"--dynamic-config-value", `matching.longPollExpirationInterval="2s"`,
	}})
	reg := prometheus.NewRegistry()
	handler, closer := metrics.NewTemporalHandler(reg)
	defer closer.Close()
	testenv.RunWorkflowOnce(t, srv.FrontendHostPort(), handler, sdkWorkflow, sdkActivity)

	waitFor(t, reg, "temporal_workflow_task_queue_poll_empty_total")
	if err := srv.Stop(); err != nil {
		t.Logf("stop dev server: %v", err)
	}
	return waitFor(t, reg, "temporal_long_request_failure_total")
}

// waitFor gathers reg until family has a non-zero sample, and returns every series name.
func waitFor(t *testing.T, reg *prometheus.Registry, family string) map[string]bool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		names, seen := map[string]bool{}, false
		for _, mf := range mfs {
			name := mf.GetName()
			names[name] = true
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
			}
			if name == family {
				for _, m := range mf.GetMetric() {
					if m.GetCounter().GetValue() > 0 {
						seen = true
					}
				}
			}
		}
		if seen {
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never exported %s", family)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
