package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Stuck steps: a step that must not be dropped (confirm, commit, every ending step) is run by
// persist, which flags the checkout for support when the step's retry policy gives up and
// tries it again, by itself or on support's retry update, until it succeeds.

// persist runs a step that must not be dropped. When its retry policy gives up, the
// checkout is flagged for support with what is wrong and what to do, and the step is tried
// again when support sends the retry update, or by itself after stuckRetryInterval, a wait
// that doubles each round up to stuckRetryMax, so a long outage adds few events a day. Only
// a non-retryable error (a definite "no") is returned.
func (c *checkout) persist(ctx workflow.Context, summary string, step func(workflow.Context) error) error {
	wait := stuckRetryInterval
	for {
		err := step(ctx)
		var appErr *temporal.ApplicationError
		if err == nil || errors.As(err, &appErr) && appErr.NonRetryable() || temporal.IsCanceledError(err) {
			if c.stuck != "" {
				c.stuck, c.view.Attention = "", ""
				c.refreshAttention(ctx)
			}
			return err
		}
		c.stuck = summary
		c.view.Attention = fmt.Sprintf("%s keeps failing: %s. Fix the cause (Redis, Postgres or the payment provider); the step is retried by itself in %s, or at once with the retry action (POST /v1/admin/checkouts/%s/retry).",
			summary, errorText(err), wait, c.in.CheckoutID)
		c.refreshAttention(ctx)
		workflow.SetCurrentDetails(ctx, "NEEDS ATTENTION: "+c.view.Attention)
		workflow.GetLogger(ctx).Error("step stuck", "step", summary, "error", err)
		_, _ = workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
			Timeout:      wait,
			TimerOptions: workflow.TimerOptions{Summary: "Retry " + summary},
		}, func() bool { return c.retryRequested })
		c.retryRequested = false
		wait = min(2*wait, stuckRetryMax)
	}
}

// flag marks the checkout for support.
func (c *checkout) flag(ctx workflow.Context) {
	c.flagged = true
	c.refreshAttention(ctx)
}

// refreshAttention keeps NeedsAttention (view and search attribute) equal to "flagged or stuck".
func (c *checkout) refreshAttention(ctx workflow.Context) {
	needs := c.flagged || c.stuck != ""
	if needs != c.view.NeedsAttention {
		c.view.NeedsAttention = needs
		c.upsert(ctx, AttrNeedsAttention.ValueSet(needs))
	}
}

// errorText is an error as support reads it (attention, logs): the innermost application
// error's message, raw.
func errorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Error()
	}
	return err.Error()
}
