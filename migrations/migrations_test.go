package migrations_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/migrations"
)

// latestVersion is the number of migration files beside this test: tern numbers them from 1.
func latestVersion(t *testing.T) int32 {
	t.Helper()
	files, err := filepath.Glob("*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("list migrations: %v (%d files)", err, len(files))
	}
	return int32(len(files))
}

// schema is what a migrated database looks like from the catalog: its tables with their
// oids (a table dropped and recreated gets a new oid), the ledger trigger count, and the
// version tern recorded.
type schema struct {
	tables   map[string]uint32
	triggers int
	version  int32
	versions int
}

func readSchema(t *testing.T, conn *pgx.Conn) schema {
	t.Helper()
	ctx := t.Context()
	s := schema{tables: map[string]uint32{}}
	rows, err := conn.Query(ctx, `SELECT relname, oid FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace`)
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	for rows.Next() {
		var name string
		var oid uint32
		if err := rows.Scan(&name, &oid); err != nil {
			t.Fatalf("scan table: %v", err)
		}
		s.tables[name] = oid
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list tables: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_trigger WHERE tgname = 'inventory_ledger_no_update_or_delete'`).
		Scan(&s.triggers); err != nil {
		t.Fatalf("count triggers: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT max(version), count(*) FROM schema_version`).Scan(&s.version, &s.versions); err != nil {
		t.Fatalf("read schema_version: %v", err)
	}
	return s
}

func (s schema) check(t *testing.T, want int32) {
	t.Helper()
	for _, table := range []string{"skus", "checkouts", "checkout_items", "orders", "order_lines", "payment_events", "inventory_ledger", "schema_version"} {
		if _, ok := s.tables[table]; !ok {
			t.Errorf("table %s is missing; tables: %v", table, s.tables)
		}
	}
	if s.triggers != 1 {
		t.Errorf("%d ledger triggers, want 1", s.triggers)
	}
	if s.version != want || s.versions != 1 {
		t.Errorf("schema_version holds %d rows, version %d; want 1 row, version %d", s.versions, s.version, want)
	}
}

func TestApplyTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	url, pool := testenv.Postgres(t) // migrated once already
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	before := readSchema(t, conn)
	before.check(t, latestVersion(t))
	if _, err := pool.Exec(ctx, `INSERT INTO skus (sku, on_hand, price_cents, currency, max_per_order) VALUES ('KEEP-1', 3, 100, 'usd', 1)`); err != nil {
		t.Fatalf("insert a row: %v", err)
	}

	if err := migrations.Apply(ctx, url); err != nil {
		t.Fatalf("apply again: %v", err)
	}

	after := readSchema(t, conn)
	after.check(t, latestVersion(t))
	if fmt.Sprint(after.tables) != fmt.Sprint(before.tables) {
		t.Errorf("tables changed on a second apply:\nbefore %v\nafter  %v", before.tables, after.tables)
	}
	var onHand int64
	if err := pool.QueryRow(ctx, `SELECT on_hand FROM skus WHERE sku = 'KEEP-1'`).Scan(&onHand); err != nil || onHand != 3 {
		t.Errorf("row written before the second apply: on_hand %d, %v; want 3", onHand, err)
	}
}

func TestConcurrentApplyMigratesOnce(t *testing.T) {
	t.Parallel()
	url := testenv.EmptyPostgres(t, "checkout_mig_")
	ctx := t.Context()

	// Several processes starting together (workers and `checkout migrate`): without the
	// advisory lock, all but one would fail on CREATE TABLE or a duplicate version row.
	const appliers = 4
	start := make(chan struct{})
	errs := make([]error, appliers)
	var wg sync.WaitGroup
	for i := range appliers {
		wg.Go(func() {
			<-start
			errs[i] = migrations.Apply(ctx, url)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("apply %d: %v", i, err)
		}
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	readSchema(t, conn).check(t, latestVersion(t))
}

// Operators size the pool with pool_max_conns in DATABASE_URL (docs/configuration.md), and the
// binary migrates with that same URL: the pool's own settings must not reach Postgres as
// server parameters (it refuses them: unrecognized configuration parameter).
func TestApplyTakesTheURLThatSizesThePool(t *testing.T) {
	t.Parallel()
	url := testenv.EmptyPostgres(t, "mig_pool_")
	if err := migrations.Apply(t.Context(), url+"?pool_max_conns=7&pool_min_conns=1&sslmode=disable"); err != nil {
		t.Fatalf("apply with pool settings in the URL: %v", err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(t.Context())
	readSchema(t, conn).check(t, latestVersion(t))
}
