package main

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
)

// A dependency that fails to open closes the ones opened before it: a Redis that does not
// answer leaves no connection open to Postgres.
func TestOpenClosesWhatItOpenedWhenALaterStepFails(t *testing.T) {
	url := testenv.EmptyPostgres(t, "checkout_open_")
	t.Setenv("DATABASE_URL", url)
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0") // nothing listens here
	cfg, err := loadConfig(true)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := open(t.Context(), cfg, slog.New(slog.DiscardHandler), nil); err == nil || !strings.Contains(err.Error(), "open redis") {
		if d != nil {
			d.Close()
		}
		t.Fatalf("open with no Redis: %v, want an error naming Redis", err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	testenv.Eventually(t, "the pool's connections closed", func() bool {
		var others int
		err := conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()").Scan(&others)
		return err == nil && others == 0
	})
}
