package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/checkout-saga/checkout-saga/audit"
	"github.com/checkout-saga/checkout-saga/shop"
)

// Exit codes of `checkout audit`, as diff(1) uses them: 0 clean, 1 violations found, 2 the
// audit could not run (or not every check ran), so a script never mistakes 2 for clean.
const (
	exitViolations = 1
	exitIncomplete = 2
)

// exitError ends the process with a chosen exit code (main exits; commands return this).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

// runAudit is `checkout audit [-grace 5m] [-json]`: it checks the product's promises across
// Postgres, Redis and Temporal (package audit) and prints every violation, one line each
// with the ids to act on it, or the report as JSON.
func runAudit(ctx context.Context, cfg config, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	grace := fs.Duration("grace", audit.DefaultGrace, "leave work younger than this alone (payments being confirmed, checkouts starting); 0 judges everything now")
	asJSON := fs.Bool("json", false, "print the report as JSON (the shape of GET /v1/admin/audit)")
	if err := fs.Parse(args); err != nil {
		return exitError{exitIncomplete, err}
	}
	d, err := open(ctx, cfg, newLogger(cfg), nil) // a one-off read: not traced
	if err != nil {
		return exitError{exitIncomplete, err}
	}
	defer d.Close()
	opts := audit.Options{Grace: *grace}
	if *grace == 0 {
		opts.Grace = -1 // Options' zero means the default
	}
	rep, runErr := audit.New(d.pool, d.rdb, d.temporal, opts).Run(ctx)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitError{exitIncomplete, fmt.Errorf("write report: %w", err)}
		}
	} else {
		writeReport(stdout, rep)
	}
	switch {
	case runErr != nil:
		return exitError{exitIncomplete, runErr}
	case len(rep.Violations) > 0:
		return exitError{exitViolations, fmt.Errorf("%d violations", len(rep.Violations))}
	}
	return nil
}

// writeReport prints one line per violation, then one line per check that could not run,
// then a summary.
func writeReport(w io.Writer, rep shop.AuditReport) {
	for _, v := range rep.Violations {
		fmt.Fprintf(w, "%s: %s%s\n", v.Check, v.Detail, idList(v.AuditIDs))
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "%s: could not run: %s\n", e.Check, e.Error)
	}
	switch {
	case rep.Clean():
		fmt.Fprintf(w, "audit clean: %d checks, no violations\n", len(rep.Checks))
	default:
		fmt.Fprintf(w, "audit: %d violations, %d of %d checks could not run\n", len(rep.Violations), len(rep.Errors), len(rep.Checks))
	}
}

// idList renders the ids that are set as " [name=value ...]".
func idList(ids shop.AuditIDs) string {
	var parts []string
	add := func(name, value string) {
		if value != "" {
			parts = append(parts, name+"="+value)
		}
	}
	add("checkout_id", ids.CheckoutID)
	add("workflow_id", ids.WorkflowID)
	add("sku", ids.SKU)
	add("order_id", ids.OrderID)
	add("provider", ids.Provider)
	add("payment_ref", ids.PaymentRef)
	add("event_ids", strings.Join(ids.EventIDs, ","))
	add("refund_keys", strings.Join(ids.RefundKeys, ","))
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, " ") + "]"
}
