package main

import (
	"path/filepath"
	"slices"
	"testing"

	"go.temporal.io/server/common/config"
)

// indexesOf names the indexes of the visibility table in the store conf names, opened by
// that name as the trim opens it (the same name is the same in-memory database).
func indexesOf(t *testing.T, conf *config.SQL) []string {
	t.Helper()
	db, err := openStore(conf)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	names, err := visibilityIndexes(db)
	if err != nil {
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
// --all-visibility-indexes. The server's schema has many; a name that reached another,
// empty database (a wrong DSN) would list none, and fail the test as a missed trim does.
func TestTheStoreKeepsOneVisibilityIndex(t *testing.T) {
	memory, err := sqliteConfig(startOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := indexesOf(t, memory); !slices.Equal(got, []string{keptVisibilityIndex}) {
		t.Errorf("in memory: visibility indexes %q, want only %s", got, keptVisibilityIndex)
	}

	file := filepath.Join(t.TempDir(), "temporal.db")
	for start := range 2 {
		conf, err := sqliteConfig(startOptions(t, "--db-filename", file))
		if err != nil {
			t.Fatalf("start %d: %v", start+1, err)
		}
		if got := indexesOf(t, conf); !slices.Equal(got, []string{keptVisibilityIndex}) {
			t.Errorf("file, start %d: visibility indexes %q, want only %s", start+1, got, keptVisibilityIndex)
		}
	}

	all, err := sqliteConfig(startOptions(t, "--all-visibility-indexes", "--db-filename", filepath.Join(t.TempDir(), "all.db")))
	if err != nil {
		t.Fatal(err)
	}
	if got := indexesOf(t, all); len(got) < 10 || !slices.Contains(got, keptVisibilityIndex) {
		t.Errorf("--all-visibility-indexes: %d indexes %q, want the schema's own", len(got), got)
	}
}
