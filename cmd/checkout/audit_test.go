package main

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/checkout-saga/checkout-saga/internal/testenv"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// `checkout audit` exits 0 on a clean state and 1 with one readable line per violation,
// naming the ids; here the violation is a checkout row no saga was started for.
func TestAuditCommandExitCodes(t *testing.T) {
	srv := testenv.DevServer(t, workflows.DevServerFlags()...)
	dbURL, pool := testenv.Postgres(t)
	cfg := config{DatabaseURL: dbURL, RedisURL: testenv.RedisURL(), TemporalAddress: srv.FrontendHostPort(),
		Namespace: "default", LogLevel: slog.LevelError}

	var out strings.Builder
	if err := runAudit(t.Context(), cfg, []string{"-grace", "0"}, &out); err != nil {
		t.Fatalf("audit of an empty product: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "audit clean") {
		t.Errorf("clean audit printed %q", out.String())
	}

	id := testenv.RandomID("c-nosaga-")
	if _, err := pool.Exec(t.Context(), `INSERT INTO checkouts (checkout_id, customer_id, status, currency, amount_cents) VALUES ($1, 'u', 'open', 'usd', 0)`, id); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err := runAudit(t.Context(), cfg, []string{"-grace", "0"}, &out)
	var exit exitError
	if !errors.As(err, &exit) || exit.code != exitViolations {
		t.Fatalf("audit with a violation: %v, want exit code %d", err, exitViolations)
	}
	if !strings.Contains(out.String(), "open_checkout_without_saga: ") || !strings.Contains(out.String(), "checkout_id="+id) {
		t.Errorf("audit printed %q, want a line naming checkout %s", out.String(), id)
	}
	// The default grace leaves the just-written checkout alone.
	out.Reset()
	if err := runAudit(t.Context(), cfg, nil, &out); err != nil {
		t.Errorf("audit with the default grace: %v\n%s", err, out.String())
	}
}
