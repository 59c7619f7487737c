// Command gate reads govulncheck's JSON output (-format json) on standard input and prints
// one line per vulnerability the scanned code calls (ID, module, fix, summary) with one call
// path, then those only imported or only required. Then it decides:
//
//	gate < scan.json                       print only; exit 0
//	gate -accepted accepted.txt < scan.json
//
// With -accepted it exits 1 if a called vulnerability is not listed in the file, or if a
// listed one is no longer called (its line is stale: remove it). A line of the file is
// "<ID> <module> <why it is accepted, and what lifts it>", the module named as govulncheck
// names it ("stdlib" for Go's standard library); # starts a comment.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sort"
	"strings"
)

// The parts of govulncheck's JSON stream (golang.org/x/vuln/internal/govulncheck) read here.
type message struct {
	Config *struct {
		ScannerVersion string `json:"scanner_version"`
		DB             string `json:"db"`
		DBLastModified string `json:"db_last_modified"`
		GoVersion      string `json:"go_version"`
	} `json:"config"`
	OSV     *struct{ ID, Summary string } `json:"osv"`
	Finding *finding                      `json:"finding"`
}

type finding struct {
	OSV          string  `json:"osv"`
	FixedVersion string  `json:"fixed_version"`
	Trace        []frame `json:"trace"` // from the vulnerable symbol to the scanned code
}

type frame struct {
	Module, Version, Package, Function, Receiver string
	Position                                     *struct {
		Filename string
		Line     int
	}
}

// key names a vulnerability in one module: one ID can be in a module and in the standard
// library (golang.org/x/net's http2 and net/http's copy of it), each fixed on its own.
type key struct{ id, module string }

// scan is what one govulncheck run found, each vulnerability at its deepest level: called
// (a finding whose first frame names a function), imported (names a package only) or
// required (names a module only).
type scan struct {
	header             string
	called             map[key]finding // the shortest call path of each
	imported, required map[key]bool
	summaries          map[string]string
}

func main() {
	acceptedFile := flag.String("accepted", "", "file of accepted called vulnerabilities; fail on any other, and on a stale line")
	flag.Parse()

	s, err := read(os.Stdin)
	if err != nil {
		log.Fatalf("gate: reading govulncheck's JSON: %v", err)
	}
	var accepted map[key]string
	if *acceptedFile != "" {
		if accepted, err = readAccepted(*acceptedFile); err != nil {
			log.Fatalf("gate: %v", err)
		}
	}

	fmt.Println(s.header)
	var failed []string
	fmt.Printf("called (%d):\n", len(s.called))
	for _, k := range sorted(s.called) {
		f := s.called[k]
		fix := "no fix"
		if f.FixedVersion != "" {
			fix = "fixed in " + f.FixedVersion
		}
		fmt.Printf("  %s %s@%s, %s: %s\n", k.id, k.module, f.Trace[0].Version, fix, s.summaries[k.id])
		fmt.Printf("      e.g. %s\n", callPath(f.Trace))
		if accepted == nil {
			continue
		}
		if why, ok := accepted[k]; ok {
			fmt.Printf("      accepted: %s\n", why)
			delete(accepted, k)
		} else {
			failed = append(failed, fmt.Sprintf("%s %s is called and not accepted", k.id, k.module))
		}
	}
	fmt.Printf("imported, not called (%d): %s\n", len(s.imported), list(s.imported))
	fmt.Printf("required, not imported (%d): %s\n", len(s.required), list(s.required))
	for k := range accepted {
		failed = append(failed, fmt.Sprintf("%s %s is listed in %s and no longer called: remove its line", k.id, k.module, *acceptedFile))
	}
	if len(failed) > 0 {
		sort.Strings(failed)
		fmt.Println("FAIL:\n  " + strings.Join(failed, "\n  "))
		os.Exit(1)
	}
}

func read(r io.Reader) (*scan, error) {
	s := &scan{called: map[key]finding{}, imported: map[key]bool{}, required: map[key]bool{}, summaries: map[string]string{}}
	dec := json.NewDecoder(bufio.NewReader(r))
	for {
		var m message
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		if c := m.Config; c != nil {
			s.header = fmt.Sprintf("govulncheck %s, database %s of %.10s", c.ScannerVersion, c.DB, c.DBLastModified)
			if c.GoVersion != "" { // source mode: the Go whose standard library is checked
				s.header += ", " + c.GoVersion
			}
		}
		if m.OSV != nil {
			s.summaries[m.OSV.ID] = m.OSV.Summary
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		k := key{f.OSV, f.Trace[0].Module}
		switch {
		case f.Trace[0].Function != "":
			if seen, ok := s.called[k]; !ok || len(f.Trace) < len(seen.Trace) {
				s.called[k] = *f
			}
		case f.Trace[0].Package != "":
			s.imported[k] = true
		default:
			s.required[k] = true
		}
	}
	if s.header == "" {
		return nil, fmt.Errorf("no config message: not govulncheck -format json output")
	}
	for k := range s.called {
		delete(s.imported, k)
		delete(s.required, k)
	}
	for k := range s.imported {
		delete(s.required, k)
	}
	return s, nil
}

// sorted lists the newest IDs first, and an ID's modules by path.
func sorted(called map[key]finding) []key {
	keys := make([]key, 0, len(called))
	for k := range called {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].id > keys[j].id || keys[i].id == keys[j].id && keys[i].module < keys[j].module
	})
	return keys
}

// callPath shows a call path from the scanned code to the vulnerable symbol.
func callPath(trace []frame) string {
	entry := trace[len(trace)-1]
	if len(trace) == 1 { // binary mode: the symbol is in the binary, no path
		return "in the binary: " + entry.symbol()
	}
	at := ""
	if entry.Position != nil {
		at = fmt.Sprintf("%s:%d ", entry.Position.Filename, entry.Position.Line)
	}
	via := " -> "
	if len(trace) > 2 {
		via = " -> ... -> "
	}
	return at + entry.symbol() + via + trace[0].symbol()
}

func (f frame) symbol() string {
	elems := strings.Split(f.Package, "/")
	pkg := elems[len(elems)-1]
	if len(elems) > 1 && len(pkg) > 1 && pkg[0] == 'v' && strings.Trim(pkg[1:], "0123456789") == "" {
		pkg = elems[len(elems)-2] // echo/v4's package is echo
	}
	if f.Receiver != "" {
		return pkg + "." + strings.TrimPrefix(f.Receiver, "*") + "." + f.Function
	}
	return pkg + "." + f.Function
}

func list(ks map[key]bool) string {
	var s []string
	for k := range ks {
		s = append(s, k.id+" "+k.module)
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

func readAccepted(file string) (map[key]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	accepted := map[key]string{}
	for n, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want <ID> <module> <why it is accepted>", file, n+1)
		}
		accepted[key{fields[0], fields[1]}] = strings.Join(fields[2:], " ")
	}
	return accepted, nil
}
