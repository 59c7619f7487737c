package checkoutsaga

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/checkout-saga/checkout-saga"

// The import direction (README, "Layout"), read from `go list -json` of every package: a
// forbidden import fails the test, naming the package, the import and the rule.
//
// Two imports of api still break the intended direction (api -> workflows, vocabulary
// only): api names activities' and lua's types in its interfaces. They are listed in
// knownExceptions until a leaf vocabulary package takes those types (issue 11); the list may
// only shrink, so a new one fails like any other violation.
func TestImportDirection(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Name", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath, Name string
		Imports          []string
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages; the test reads the wrong module", len(pkgs))
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if rule := forbidden(rel(p.ImportPath), imp); rule != "" && !slices.Contains(knownExceptions, rel(p.ImportPath)+" -> "+rel(imp)) {
				t.Errorf("%s imports %s: %s", rel(p.ImportPath), imp, rule)
			}
		}
	}
}

var knownExceptions = []string{
	"/api -> /activities", // CheckoutRecord, Product, Item... in api's interfaces (issue 11)
	"/api -> /lua",        // lua.Precheck in the Gate interface (issue 11)
}

// testSupport are the packages only tests may import.
var testSupport = []string{"/internal/checkouttest", "/internal/testenv", "/payments/stripetest"}

// testOnly are the packages that are tests or tools, not the product.
var testOnly = []string{"", "/bench", "/e2e", "/e2e/console", "/faults", "/internal/checkouttest", "/internal/testenv", "/payments/stripetest"}

func forbidden(from, imp string) string {
	to := rel(imp)
	switch {
	case !slices.Contains(testOnly, from) && slices.Contains(testSupport, to):
		return "a product package must not import a test-support package"
	case from == "/workflows" && (strings.HasPrefix(imp, "github.com/jackc/") || strings.HasPrefix(imp, "github.com/redis/") || imp == "net/http" || imp == "os"):
		return "workflow code reaches no database, Redis, network or OS directly: that is what activities are for"
	case from == "/api" && (strings.HasPrefix(imp, "github.com/jackc/") || strings.HasPrefix(imp, "github.com/redis/")):
		return "the API talks to Postgres and Redis only through the interfaces it declares"
	case from == "/api" && (to == "/activities" || to == "/lua"):
		return "the API imports only workflows and its own interfaces' vocabulary"
	case (from == "/lua" || from == "/payments" || from == "/metrics" || from == "/migrations" || from == "/tracing") && strings.HasPrefix(imp, module):
		return "a leaf package imports nothing of the product"
	case from == "/activities" && (to == "/workflows" || to == "/api" || to == "/worker"):
		return "activities are below workflows and the API"
	case from == "/workflows" && (to == "/api" || to == "/worker" || to == "/audit"):
		return "workflows are below the API and the worker"
	}
	return ""
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
