// Command checkout is the product's one binary.
//
//	checkout api             serve the HTTP API
//	checkout worker          run the Temporal worker (applies migrations first)
//	checkout migrate         apply the Postgres migrations
//	checkout dev             the whole product locally: Temporal dev server with its Web UI,
//	                         migrations, demo stock, API and worker, until Ctrl-C
//	checkout setup-temporal  register the contract's search attributes on a Temporal cluster
//	checkout deployment      the workers' deployment (Worker Versioning): describe, set-current,
//	                         set-ramping: a rolling deploy and a rollback
//	checkout sign-webhook    send a correctly signed Stripe test event to the API
//	checkout audit           check the promises across Postgres, Redis and Temporal; exit 1
//	                         when it finds violations, 2 when it could not check everything
//	checkout check-config C  judge the environment as command C would at start, and exit
//	                         (-list: every variable with its default)
//
// Configuration comes only from environment variables, one table of them (settings.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

const usage = `usage: checkout <command> [flags]

commands:
  api             serve the HTTP API
  worker          run the Temporal worker (applies migrations first)
  migrate         apply the Postgres migrations
  dev             run the whole product locally until Ctrl-C
  setup-temporal  register the search attributes on a Temporal cluster
  deployment      the workers' builds: describe, set-current, set-ramping (checkout deployment -h)
  sign-webhook    send a signed Stripe test event (checkout sign-webhook -h)
  audit           check the promises across the stores (checkout audit -h); exit 1 on violations
  check-config C  judge the environment as command C (api, worker, ...) would at start; connect to nothing
                  (check-config -list: every variable with its doc and default)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "checkout "+os.Args[1]+": "+err.Error())
		stop()
		var exit exitError
		if errors.As(err, &exit) {
			os.Exit(exit.code)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, command string, args []string) error {
	if command == "sign-webhook" {
		return signWebhook(ctx, args)
	}
	if command == "check-config" {
		return checkConfig(args, os.Stdout)
	}
	if command == "-h" || command == "--help" || command == "help" {
		fmt.Print(usage)
		return nil
	}
	cfg, err := loadConfig(command == "dev")
	if err != nil {
		return err
	}
	switch command {
	case "api":
		return runAPI(ctx, cfg)
	case "worker":
		return runWorker(ctx, cfg)
	case "migrate":
		return runMigrate(ctx, cfg)
	case "dev":
		return runDev(ctx, cfg)
	case "setup-temporal":
		return setupTemporal(ctx, cfg)
	case "deployment":
		return runDeployment(ctx, cfg, args, os.Stdout)
	case "audit":
		return runAudit(ctx, cfg, args, os.Stdout)
	}
	fmt.Fprint(os.Stderr, usage)
	return errors.New("unknown command " + command)
}

// checkConfig judges the environment the way `checkout <command>` does before it connects to
// anything (loadConfig, and for api the secrets and the identity mode), so a deployment's settings can be checked
// where its services do not run: docker-compose.yml's test runs it with the file's environment.
// With -list it prints every variable, its doc, bounds and default, as an environment file.
func checkConfig(args []string, out io.Writer) error {
	if slices.Equal(args, []string{"-list"}) {
		listSettings(out)
		return nil
	}
	if len(args) != 1 || !slices.Contains([]string{"api", "worker", "migrate", "dev", "setup-temporal", "audit", "deployment"}, args[0]) {
		return errors.New("usage: checkout check-config api|worker|migrate|dev|setup-temporal|audit|deployment|-list")
	}
	command := args[0]
	cfg, err := loadConfig(command == "dev")
	if err != nil {
		return err
	}
	if command == "api" {
		if err := errors.Join(cfg.requireSecrets(), cfg.requireIdentity()); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "the environment is valid for checkout %s\n", command)
	return nil
}
