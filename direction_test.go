package checkoutsaga

import (
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/checkout-saga/checkout-saga"

// The import direction (README, "Layout"), read from `go list -deps -json` of every package:
// a forbidden import fails the test, naming the package, the import and the rule. Direct
// imports are judged by forbidden; a product package's whole dependency closure is searched
// for test-support packages, which must not reach the product even through another package,
// and the API's and the saga's for stores (storeReached). There are no exceptions: a rule
// that does not hold is changed here, with its reason.
func TestImportsFollowTheLayoutsDirection(t *testing.T) {
	pkgs, all := modulePackages(t)
	for _, p := range pkgs {
		if chain := storeReached(rel(p.ImportPath), all); chain != nil {
			t.Errorf("%s depends on %s: %s (%s)", rel(p.ImportPath), chain[len(chain)-1],
				"its whole dependency closure reaches no store: no pgx, go-redis, store or lua", strings.Join(chain, " -> "))
		}
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if rule := forbidden(rel(p.ImportPath), imp); rule != "" {
				t.Errorf("%s imports %s: %s", rel(p.ImportPath), imp, rule)
			}
		}
		if slices.Contains(testOnly, rel(p.ImportPath)) {
			continue
		}
		for _, dep := range p.Deps {
			if slices.Contains(testSupport, rel(dep)) {
				t.Errorf("%s depends on %s: a product package must not import a test-support package", rel(p.ImportPath), dep)
			}
		}
	}
}

type goPackage struct {
	ImportPath, Name string
	Imports, Deps    []string
	Standard         bool
}

// modulePackages lists the module's own packages, with their imports and dependencies, and
// every package of the build by import path.
func modulePackages(t *testing.T) ([]goPackage, map[string]goPackage) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps,Name,Standard", "./...").Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("go list: %v\n%s", err, exit.Stderr) // an import cycle, say
	}
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []goPackage
	all := map[string]goPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		all[p.ImportPath] = p
		if p.ImportPath == module || strings.HasPrefix(p.ImportPath, module+"/") {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; the test reads the wrong module", len(pkgs))
	}
	return pkgs, all
}

// storeFree are the packages whose whole dependency closure (`go list -deps`, not only their
// own imports) must reach no store: the saga's code is deterministic and the API talks to
// Postgres and Redis only through the interfaces it declares, so neither links a driver.
var storeFree = []string{"/api", "/room", "/workflows"}

// isStore reports whether a package opens or drives a store: pgx, go-redis, the product's
// Postgres store or its Redis scripts.
func isStore(imp string) bool {
	return strings.HasPrefix(imp, "github.com/jackc/pgx/") || strings.HasPrefix(imp, "github.com/redis/go-redis/") ||
		imp == module+"/store" || imp == module+"/lua"
}

// storeReached returns, for a store-free package whose closure reaches a store, one import
// chain from it to the store (shortest first); nil when none does.
func storeReached(from string, all map[string]goPackage) []string {
	if !slices.Contains(storeFree, from) {
		return nil
	}
	start := module + from
	parent := map[string]string{start: ""}
	queue := []string{start}
	for len(queue) > 0 {
		imp := queue[0]
		queue = queue[1:]
		if isStore(imp) {
			var chain []string
			for p := imp; p != ""; p = parent[p] {
				chain = append(chain, rel(p))
			}
			slices.Reverse(chain)
			return chain
		}
		for _, next := range all[imp].Imports {
			if _, seen := parent[next]; seen {
				continue
			}
			parent[next] = imp
			queue = append(queue, next)
		}
	}
	return nil
}

// testSupport are the packages only tests may import.
var testSupport = []string{"/internal/checkouttest", "/internal/testenv", "/internal/openapitest", "/payments/stripetest"}

// testOnly are the packages that are tests, tools or test support, not the product: they may
// import anything of the module.
var testOnly = []string{"", "/bench", "/e2e", "/e2e/console", "/faults", "/internal/checkouttest", "/internal/testenv", "/internal/openapitest", "/payments/stripetest"}

// mayImport is, for each product package, all of the product it may import (README,
// "Layout"). A package missing here fails the test until its place is decided: add it here
// and to the README.
var mayImport = map[string][]string{
	"/shop":         {}, // the vocabulary: every package may import it
	"/batch":        {}, // a mechanism of the standard library only, beside the vocabulary
	"/lua":          {"/shop", "/batch"},
	"/payments":     {"/shop"},
	"/metrics":      {"/shop"},
	"/migrations":   {"/shop"},
	"/tracing":      {"/shop"},
	"/store":        {"/shop", "/lua"},
	"/inventory":    {"/shop", "/store", "/lua"},
	"/steps":        {"/shop"},
	"/activities":   {"/shop", "/steps", "/store", "/lua", "/payments", "/metrics"},
	"/workflows":    {"/shop", "/steps"},
	"/worker":       {"/shop", "/steps", "/workflows", "/activities", "/store"},
	"/audit":        {"/shop", "/lua", "/workflows"},
	"/ops":          {"/shop", "/audit", "/metrics"},
	"/room":         {"/shop"},
	"/api":          {"/shop", "/batch", "/room", "/workflows", "/metrics"},
	"/cmd/checkout": nil, // the wiring: anything of the product
}

// why says, for a package, why its imports are bounded so.
var why = map[string]string{
	"/shop":       "the vocabulary imports nothing of the product",
	"/batch":      "batch is beside the vocabulary, below lua and api: it imports nothing of the product",
	"/steps":      "the saga's step vocabulary is below the saga and its activities: it imports only the vocabulary",
	"/store":      "the store is below the activities, the saga and the API",
	"/inventory":  "the operators' inventory is beside the saga, never in it",
	"/activities": "activities are below workflows and the API, and never use the operators' inventory",
	"/workflows":  "workflows call activities by their names in steps and never link them: no store is in the saga's build",
	"/room":       "the waiting room knows its line and the saga only through its interfaces: it imports only the vocabulary",
	"/api":        "the API imports only the vocabulary (shop), batch, the waiting room, workflows and metrics: its interfaces are typed in shop, and cmd/checkout wires them to store, inventory and lua",
}

func forbidden(from, imp string) string {
	to := rel(imp)
	switch {
	case from == "/shop" && strings.Contains(strings.Split(imp, "/")[0], "."):
		return "the vocabulary is a leaf of the standard library: every package may import it"
	case from == "/workflows" && (strings.HasPrefix(imp, "github.com/jackc/") || strings.HasPrefix(imp, "github.com/redis/") || imp == "net/http" || imp == "os"):
		return "workflow code reaches no database, Redis, network or OS directly: that is what activities are for"
	case from == "/api" && (strings.HasPrefix(imp, "github.com/jackc/") || strings.HasPrefix(imp, "github.com/redis/")):
		return "the API talks to Postgres and Redis only through the interfaces it declares"
	case !strings.HasPrefix(imp, module) || slices.Contains(testOnly, from):
		return ""
	}
	allowed, known := mayImport[from]
	switch {
	case !known:
		return "a product package with no place in the layout: add it to mayImport (direction_test.go) and to the README's Layout"
	case allowed == nil || slices.Contains(allowed, to):
		return ""
	case why[from] != "":
		return why[from]
	}
	return "a leaf package imports nothing of the product but the vocabulary"
}

func rel(imp string) string {
	if imp == module {
		return ""
	}
	if r, ok := strings.CutPrefix(imp, module); ok {
		return r
	}
	return imp
}
