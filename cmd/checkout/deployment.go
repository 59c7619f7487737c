package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"
)

const deploymentUsage = `usage: checkout deployment <action> [flags]

The worker deployment WORKER_DEPLOYMENT (Worker Versioning) of the checkout workers:

  describe                        the current and ramping builds, and every build's drainage
  set-current [-build-id ID]      new checkouts start on build ID (default WORKER_BUILD_ID); running
                                  ones stay on the build they started on. Waits (-wait) until a
                                  worker of ID polls: Temporal refuses a build no worker has polled
  set-ramping -build-id ID -percent P
                                  P percent of new checkouts start on ID, the rest on the current
                                  build (-percent 0 -build-id "" ends the ramp)
`

// runDeployment manages the worker deployment: the one command of a rolling deploy and of a
// rollback (docs/operations.md#a-rolling-deploy-and-a-rollback), for shops without the
// Temporal CLI.
func runDeployment(ctx context.Context, cfg config, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New(deploymentUsage)
	}
	action := args[0]
	if action == "-h" || action == "--help" || action == "help" {
		fmt.Fprint(out, deploymentUsage)
		return nil
	}
	fs := flag.NewFlagSet("deployment "+action, flag.ContinueOnError)
	buildID := fs.String("build-id", cfg.WorkerBuild.ID, "the build (WORKER_BUILD_ID by default)")
	percent := fs.Float64("percent", 0, "set-ramping: the share of new checkouts, 0 to 100")
	wait := fs.Duration("wait", 2*time.Minute, "set-current, set-ramping: how long to wait for the build's workers to poll")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	logger := newLogger(cfg)
	c, err := dialTemporal(ctx, cfg, logger, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	d := c.WorkerDeploymentClient().GetHandle(cfg.WorkerBuild.Deployment)
	switch action {
	case "describe":
		return describeDeployment(ctx, d, out)
	case "set-current":
		if *buildID == "" {
			return errors.New("set-current: name the build (-build-id or WORKER_BUILD_ID)")
		}
		err := untilPolled(ctx, *wait, logger, func() error {
			_, err := d.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: *buildID})
			return err
		})
		if err != nil {
			return fmt.Errorf("make build %s of deployment %s current: %w", *buildID, cfg.WorkerBuild.Deployment, err)
		}
		fmt.Fprintf(out, "deployment %s: build %s is current; new checkouts start on it\n", cfg.WorkerBuild.Deployment, *buildID)
		return nil
	case "set-ramping":
		if *percent < 0 || *percent > 100 {
			return fmt.Errorf("set-ramping: -percent %v is not from 0 to 100", *percent)
		}
		err := untilPolled(ctx, *wait, logger, func() error {
			_, err := d.SetRampingVersion(ctx, client.WorkerDeploymentSetRampingVersionOptions{BuildID: *buildID, Percentage: float32(*percent)})
			return err
		})
		if err != nil {
			return fmt.Errorf("ramp build %q of deployment %s to %v%%: %w", *buildID, cfg.WorkerBuild.Deployment, *percent, err)
		}
		fmt.Fprintf(out, "deployment %s: build %q ramping at %v%%\n", cfg.WorkerBuild.Deployment, *buildID, *percent)
		return nil
	}
	return fmt.Errorf("unknown action %q\n%s", action, deploymentUsage)
}

// untilPolled calls set until it succeeds, while Temporal answers that the build's workers
// have not all polled yet (notPolledYet): it knows a build only once one of its workers has
// polled, and a deploy script runs this right after starting them.
func untilPolled(ctx context.Context, wait time.Duration, logger *slog.Logger, set func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := set()
		if err == nil || !notPolledYet(err) || time.Now().After(deadline) {
			return err
		}
		logger.Info("waiting for the build's workers to poll", "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// notPolledYet reports whether err says the build's workers have not all polled yet: the
// deployment or the build is not found, or the build's workers have polled some of the task
// queues the current build serves but not every one (a worker polls its workflow and its
// activity task queue one after the other), which Temporal refuses as a failed precondition
// so that none of them would be left unversioned.
func notPolledYet(err error) bool {
	var notFound *serviceerror.NotFound
	var precondition *serviceerror.FailedPrecondition
	return errors.As(err, &notFound) ||
		errors.As(err, &precondition) && strings.Contains(precondition.Message, "is missing active task queues")
}

func describeDeployment(ctx context.Context, d client.WorkerDeploymentHandle, out io.Writer) error {
	desc, err := d.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		return fmt.Errorf("describe deployment: %w", err)
	}
	info := desc.Info
	build := func(v *sdkworker.WorkerDeploymentVersion) string {
		if v == nil {
			return "(unversioned workers)"
		}
		return v.BuildID
	}
	fmt.Fprintf(out, "deployment %s\ncurrent: %s\n", info.Name, build(info.RoutingConfig.CurrentVersion))
	if info.RoutingConfig.RampingVersion != nil || info.RoutingConfig.RampingVersionPercentage > 0 {
		fmt.Fprintf(out, "ramping: %s at %v%%\n", build(info.RoutingConfig.RampingVersion), info.RoutingConfig.RampingVersionPercentage)
	}
	for _, v := range info.VersionSummaries {
		fmt.Fprintf(out, "build %s: created %s, %s\n", v.Version.BuildID, v.CreateTime.UTC().Format(time.RFC3339), drainage(v.DrainageStatus))
	}
	return nil
}

// drainage says whether an old build may be retired: Temporal counts its open pinned
// workflows every few minutes (matching.wv.VersionDrainageStatusRefreshInterval).
func drainage(s client.WorkerDeploymentVersionDrainageStatus) string {
	switch s {
	case client.WorkerDeploymentVersionDrainageStatusDraining:
		return "draining (pinned checkouts still open on it: keep its workers)"
	case client.WorkerDeploymentVersionDrainageStatusDrained:
		return "drained (no open checkout on it: its workers may stop)"
	}
	return "current, ramping or never drained"
}
