//go:build tools

// Package temporal records the Temporal CLI as a build dependency; see go.mod.
package temporal

import _ "github.com/temporalio/cli/cmd/temporal"
