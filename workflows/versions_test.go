package workflows

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// recordedChangeIDs are the change ids sagas may already carry in their histories: each
// value is written into every history that met its change, so it can never be renamed, and a
// retired one is never reused. A new change adds its constant to versions.go and its line here.
var recordedChangeIDs = map[string]string{
	"endStepsChange":              "end-steps-as-activities",
	"pendingPaymentsChange":       "pending-payments-before-an-end",
	"adoptRefundsOrphansChange":   "adopt-refunds-orphans",
	"paymentKeysChange":           "payment-keys-by-provider",
	"refundsChange":               "refunds-outlive-cancellation",
	"verifiedPaymentsChange":      "verified-payment-events",
	"refundBoundedHistory":        "refund-bounded-history",
	"reconcilePages":              "reconcile-pages",
	"reconcileEveryPayment":       "reconcile-every-payment",
	"reconcileKeepsOrderPayments": "reconcile-keeps-order-payments",
	"reconcileSkipsRefunding":     "reconcile-skips-refunding",
	"reconcileStockRefunds":       "reconcile-stock-starts-refunds",
	"refundWhileEndingChange":     "refund-while-ending",
}

// TestChangeIDsAreListedOnceAndKeepTheirValues reads versions.go: every constant it declares
// is a change id with a comment saying what it guards, and the ids are exactly the recorded
// ones, with their recorded values.
func TestChangeIDsAreListedOnceAndKeepTheirValues(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "versions.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("versions.go lists the change ids: %v", err)
	}
	declared := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			if v.Doc == nil && g.Doc == nil || v.Doc == nil && len(g.Specs) > 1 {
				t.Errorf("versions.go: %s has no comment saying what its change guards", v.Names[0].Name)
			}
			for i, n := range v.Names {
				lit, ok := v.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("versions.go: %s is not a string literal", n.Name)
					continue
				}
				declared[n.Name], _ = strconv.Unquote(lit.Value)
			}
		}
	}
	for name, want := range recordedChangeIDs {
		switch got, ok := declared[name]; {
		case !ok:
			t.Errorf("versions.go does not declare %s (%q): sagas running since its change replay with it", name, want)
		case got != want:
			t.Errorf("%s = %q, want %q: histories already carry %q, so the id never changes (add a new change instead)", name, got, want, want)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(declared)) {
		if _, ok := recordedChangeIDs[name]; !ok {
			t.Errorf("versions.go declares %s = %q, not in recordedChangeIDs: add it there once it may be in a history", name, declared[name])
		}
	}
}

// TestEveryGetVersionNamesAChangeOfVersionsGo reads the package's code: every
// workflow.GetVersion call names its change by a constant of versions.go (or by a parameter
// its callers fill with one), never by a string written in place.
func TestEveryGetVersionNamesAChangeOfVersionsGo(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			params := map[string]bool{}
			for _, p := range fn.Type.Params.List {
				for _, n := range p.Names {
					params[n.Name] = true
				}
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "GetVersion" || len(call.Args) < 2 {
					return true
				}
				calls++
				id, ok := call.Args[1].(*ast.Ident)
				switch {
				case !ok:
					t.Errorf("%s: GetVersion names its change by %s; use a constant of versions.go", fset.Position(call.Pos()), src[fset.Position(call.Args[1].Pos()).Offset:fset.Position(call.Args[1].End()).Offset])
				case params[id.Name]:
				case recordedChangeIDs[id.Name] == "":
					t.Errorf("%s: GetVersion names its change by %s, not a constant of versions.go", fset.Position(call.Pos()), id.Name)
				}
				return true
			})
		}
	}
	if calls == 0 {
		t.Fatal("found no workflow.GetVersion call: the test reads the wrong files")
	}
}
