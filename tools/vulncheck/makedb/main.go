// Command makedb writes the Go vulnerability database that `govulncheck -db file://DIR`
// reads, from the golang.org/x/vulndb module pinned in this folder's go.mod. It writes the
// v1 layout of https://go.dev/security/vuln/database, the files govulncheck's file:// client
// opens (golang.org/x/vuln/internal/client):
//
//	index/db.json      {"modified": the commit time of the pinned pseudo-version}
//	index/modules.json [{"path": a module, "vulns": [{"id": ..., "modified": ...}]}], by path
//	ID/<ID>.json       each OSV entry of the module's data/osv/, byte for byte
//
// Usage, from tools/vulncheck: go run ./makedb -out DIR (DIR is replaced).
//
// Not vulndb's own cmd/indexdb, which does the same from the same files: it builds only with
// that module's dependencies (Google Cloud, gRPC, go-git: about 600 MB in the module cache and
// a 50 s build here), and it dates the database by its entries, whose checked-in times are all
// zero (the vulndb publisher fills them in from git history, which a module has none of).
//
// What is left out: the compressed copies (.json.gz), which only the https client reads, and
// modules.json's optional "fixed" (a module's latest fixed version), which only lets a client
// skip entries its module's version is past. Without it govulncheck reads every entry of each
// module it sees and judges the version ranges itself, as it does anyway for the rest.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

func main() {
	out := flag.String("out", "", "directory to write the database to; replaced")
	flag.Parse()
	if *out == "" || flag.NArg() > 0 {
		log.Fatal("usage: go run ./makedb -out DIR")
	}
	mod, err := pinnedVulndb()
	if err != nil {
		log.Fatal(err)
	}
	n, err := writeDB(filepath.Join(mod.Dir, "data", "osv"), mod.Time, *out)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("makedb: %d entries of golang.org/x/vulndb %s (%s) in %s\n",
		n, mod.Version, mod.Time.UTC().Format(time.DateOnly), *out)
}

type module struct {
	Version string
	Time    time.Time // the commit's time, from the module proxy's .info
	Dir     string    // in the module cache
}

// pinnedVulndb downloads the golang.org/x/vulndb of go.mod into the module cache (from the
// module proxy, checked against go.sum) and says where it is.
func pinnedVulndb() (module, error) {
	download := exec.Command("go", "mod", "download", "golang.org/x/vulndb")
	download.Stderr = os.Stderr
	if err := download.Run(); err != nil {
		return module{}, fmt.Errorf("go mod download golang.org/x/vulndb: %v", err)
	}
	b, err := exec.Command("go", "list", "-m", "-json", "golang.org/x/vulndb").Output()
	if err != nil {
		return module{}, fmt.Errorf("go list -m golang.org/x/vulndb: %v", err)
	}
	var m module
	if err := json.Unmarshal(b, &m); err != nil {
		return module{}, err
	}
	if m.Dir == "" || m.Time.IsZero() {
		return module{}, fmt.Errorf("go list -m golang.org/x/vulndb: no directory or time in %s", b)
	}
	return m, nil
}

// entry is the part of an OSV entry that the indexes need.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Affected []struct {
		Package struct {
			Name string `json:"name"` // a module path, or "stdlib" and "toolchain" for Go's own
		} `json:"package"`
	} `json:"affected"`
}

type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
}

type moduleVulns struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

// writeDB writes the database of the OSV files in osvDir to out, dated modified, and returns
// how many entries it holds. It writes beside out first, so an interrupted run leaves no
// half database at out.
func writeDB(osvDir string, modified time.Time, out string) (int, error) {
	files, err := filepath.Glob(filepath.Join(osvDir, "GO-*.json"))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("no OSV entries in %s", osvDir)
	}
	tmp := out + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, err
	}
	for _, dir := range []string{"index", "ID"} {
		if err := os.MkdirAll(filepath.Join(tmp, dir), 0o755); err != nil {
			return 0, err
		}
	}

	byModule := map[string]*moduleVulns{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0, err
		}
		var e entry
		if err := json.Unmarshal(b, &e); err != nil {
			return 0, fmt.Errorf("%s: %v", file, err)
		}
		if filepath.Base(file) != e.ID+".json" {
			return 0, fmt.Errorf("%s holds entry %q", file, e.ID)
		}
		listed := map[string]bool{} // an entry may name a module in several affected blocks
		for _, a := range e.Affected {
			path := a.Package.Name
			if listed[path] {
				continue
			}
			listed[path] = true
			if byModule[path] == nil {
				byModule[path] = &moduleVulns{Path: path}
			}
			byModule[path].Vulns = append(byModule[path].Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
		}
		if err := os.WriteFile(filepath.Join(tmp, "ID", e.ID+".json"), b, 0o644); err != nil {
			return 0, err
		}
	}

	modules := make([]*moduleVulns, 0, len(byModule))
	for _, m := range byModule {
		modules = append(modules, m) // each one's vulns are in ID order: files are sorted
	}
	sort.Slice(modules, func(i, j int) bool { return modules[i].Path < modules[j].Path })
	if err := writeJSON(filepath.Join(tmp, "index", "modules.json"), modules); err != nil {
		return 0, err
	}
	db := struct {
		Modified time.Time `json:"modified"`
	}{modified.UTC()}
	if err := writeJSON(filepath.Join(tmp, "index", "db.json"), db); err != nil {
		return 0, err
	}

	if err := os.RemoveAll(out); err != nil {
		return 0, err
	}
	return len(files), os.Rename(tmp, out)
}

func writeJSON(file string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}
