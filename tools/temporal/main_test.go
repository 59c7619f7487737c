package main

import (
	"database/sql"
	"net/url"
	"path/filepath"
	"slices"
	"testing"

	"go.temporal.io/server/common/config"
)

// visibilityIndexes lists the indexes of the visibility table in the store conf names, as a
// connection of the server's SQLite plugin sees it.
func visibilityIndexes(t *testing.T, conf *config.SQL) []string {
	t.Helper()
	attrs := url.Values{}
	for k, v := range conf.ConnectAttributes {
		attrs.Set(k, v)
	}
	db, err := sql.Open("sqlite", "file:"+conf.DatabaseName+"?"+attrs.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'executions_visibility' AND sql IS NOT NULL`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func startOptions(t *testing.T, args ...string) startDevOptions {
	t.Helper()
	o, err := parseStartDev(args)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The store the server opens keeps only the list's index of the visibility table, in memory
// (the tests' dev servers) and in a file (make run's, opened again at every start), unless
// --all-visibility-indexes. The server's schema has many; a count of zero would mean the
// trim reached another database than the server's.
func TestTheStoreKeepsOneVisibilityIndex(t *testing.T) {
	memory, err := sqliteConfig(startOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := visibilityIndexes(t, memory); !slices.Equal(got, []string{keptVisibilityIndex}) {
		t.Errorf("in memory: visibility indexes %q, want only %s", got, keptVisibilityIndex)
	}

	file := filepath.Join(t.TempDir(), "temporal.db")
	for start := range 2 {
		conf, err := sqliteConfig(startOptions(t, "--db-filename", file))
		if err != nil {
			t.Fatalf("start %d: %v", start+1, err)
		}
		if got := visibilityIndexes(t, conf); !slices.Equal(got, []string{keptVisibilityIndex}) {
			t.Errorf("file, start %d: visibility indexes %q, want only %s", start+1, got, keptVisibilityIndex)
		}
	}

	all, err := sqliteConfig(startOptions(t, "--all-visibility-indexes", "--db-filename", filepath.Join(t.TempDir(), "all.db")))
	if err != nil {
		t.Fatal(err)
	}
	if got := visibilityIndexes(t, all); len(got) < 10 || !slices.Contains(got, keptVisibilityIndex) {
		t.Errorf("--all-visibility-indexes: %d indexes %q, want the schema's own", len(got), got)
	}
}
