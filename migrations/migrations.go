// Package migrations holds the Postgres schema as numbered SQL files (NNN_verb_noun.sql),
// embedded in the binary and applied with tern under its advisory lock, so a worker and a
// `checkout migrate` started at the same time never apply a migration twice.
package migrations

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed *.sql
var files embed.FS

// versionTable is where tern records the applied version.
const versionTable = "schema_version"

// Apply brings the database at databaseURL to the newest schema. It is safe to call from
// several processes at once: tern holds a Postgres advisory lock while it migrates.
func Apply(ctx context.Context, databaseURL string) error {
	// Parsed as a pool's URL, so that the pool's settings docs/configuration.md has operators
	// put there (pool_max_conns, ...) are taken out instead of reaching Postgres as server
	// parameters, which it refuses.
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse the database URL: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(ctx)

	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return fmt.Errorf("prepare migrator: %w", err)
	}
	if err := m.LoadMigrations(files); err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}
