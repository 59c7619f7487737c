//go:build tools

// Package temporalserver records the Temporal server, its SQL tool and the Web UI server as
// build dependencies; see go.mod. The Makefile builds them into .tools/.
package temporalserver

import (
	_ "github.com/temporalio/ui-server/v2/cmd/server"
	_ "go.temporal.io/server/cmd/server"
	_ "go.temporal.io/server/cmd/tools/sql"
)
