//go:build tools

// The scale profile's binaries, built from this module by the Makefile after the dev server
// (main.go), so their packages come from the build cache: the full Temporal server, its SQL
// schema tool and the Web UI server.
package main

import (
	_ "github.com/temporalio/ui-server/v2/cmd/server"
	_ "go.temporal.io/server/cmd/server"
	_ "go.temporal.io/server/cmd/tools/sql"
)
