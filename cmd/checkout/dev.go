package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/checkout-saga/checkout-saga/inventory"
	"github.com/checkout-saga/checkout-saga/shop"
	"github.com/checkout-saga/checkout-saga/workflows"
)

// demoStock is what a fresh local stack sells. SKUs that already exist keep their stock, so
// restarting the stack never resets what was sold.
var demoStock = []shop.Product{
	{SKU: "PHONE-X", OnHand: 100, SaleTerms: shop.SaleTerms{PriceCents: 99_900, Currency: "usd", MaxPerOrder: 2}},
	{SKU: "CASE-X", OnHand: 500, SaleTerms: shop.SaleTerms{PriceCents: 2_900, Currency: "usd", MaxPerOrder: 5}},
	{SKU: "CHARGER-X", OnHand: 250, SaleTerms: shop.SaleTerms{PriceCents: 3_900, Currency: "usd", MaxPerOrder: 3}},
}

// runDev runs the whole product on this machine: the pinned Temporal dev server (with its
// Web UI and the contract's search attributes, persisted in .local/), migrations, demo stock,
// and the API and worker in this process, until Ctrl-C stops everything.
func runDev(ctx context.Context, cfg config) error {
	logger := newLogger(cfg)
	stopTemporal, err := startDevServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer stopTemporal()
	d, stop, err := openService(ctx, cfg, logger, "checkout-dev", withMigrations)
	if err != nil {
		return err
	}
	defer stop()
	if err := stockDemo(ctx, d); err != nil {
		return err
	}

	errc := make(chan error, 2)
	go func() { errc <- serveWorker(ctx, cfg, d) }()
	go func() { errc <- serveAPI(ctx, cfg, d) }()
	announceDev(os.Stderr, logger, cfg)
	err = <-errc
	if ctx.Err() == nil {
		return err // one half stopped on its own
	}
	<-errc
	return nil
}

// announceDev logs that the local stack is ready, and prints where to reach it to w. It names
// where the admin token comes from, never the token: one set in ADMIN_TOKEN (required when
// the stack listens beyond loopback) is a real secret, and logs and terminals get copied.
func announceDev(w io.Writer, logger *slog.Logger, cfg config) {
	token := "ADMIN_TOKEN (set in the environment)"
	if cfg.AdminToken == devAdminToken {
		token = "the local stack's (README, \"make run\")"
	}
	logger.Info("local stack ready", "api", "http://"+cfg.APIAddr, "temporal_ui", cfg.TemporalUIURL, "admin_token", token)
	fmt.Fprintf(w, "\n  API          http://%s\n  Temporal UI  %s\n  Admin token  %s\n  Press Ctrl-C to stop.\n\n",
		cfg.APIAddr, cfg.TemporalUIURL, token)
}

// startDevServer starts `temporal server start-dev` from the pinned build, unless a Temporal
// server already answers at TEMPORAL_ADDRESS (then that one is used). It returns a function
// that stops the server it started.
func startDevServer(ctx context.Context, cfg config, logger *slog.Logger) (func(), error) {
	if temporalAnswers(ctx, cfg) {
		logger.Info("using the Temporal server already running", "address", cfg.TemporalAddress)
		return func() {}, nil
	}
	if _, err := os.Stat(cfg.TemporalCLI); err != nil {
		return nil, fmt.Errorf("temporal dev server not found at %s: run `make tools` (or set TEMPORAL_CLI)", cfg.TemporalCLI)
	}
	host, port, _ := net.SplitHostPort(cfg.TemporalAddress)
	uiPort := "8233"
	if _, p, err := net.SplitHostPort(hostPortOf(cfg.TemporalUIURL)); err == nil {
		uiPort = p
	}
	if err := os.MkdirAll(".local", 0o755); err != nil {
		return nil, fmt.Errorf("create .local: %w", err)
	}
	args := append([]string{"server", "start-dev",
		"--ip", host, "--port", port, "--ui-port", uiPort, "--namespace", cfg.Namespace,
		"--db-filename", filepath.Join(".local", "temporal.db"), "--log-level", "warn",
	}, workflows.DevServerFlags()...)
	cmd := exec.Command(cfg.TemporalCLI, args...)
	logFile, err := os.Create(filepath.Join(".local", "temporal.log"))
	if err != nil {
		return nil, fmt.Errorf("create temporal log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Ctrl-C reaches us; we stop it cleanly
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start temporal dev server: %w", err)
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		_ = logFile.Close()
	}
	deadline := time.Now().Add(30 * time.Second)
	for !temporalAnswers(ctx, cfg) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			stop()
			return nil, errors.New("temporal dev server did not become healthy in 30s; see .local/temporal.log")
		}
		time.Sleep(200 * time.Millisecond)
	}
	logger.Info("temporal dev server started", "address", cfg.TemporalAddress, "ui", cfg.TemporalUIURL, "log", ".local/temporal.log")
	return stop, nil
}

func temporalAnswers(ctx context.Context, cfg config) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.Namespace, Logger: quietLogger})
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
	return err == nil
}

func stockDemo(ctx context.Context, d *deps) error {
	inv := &inventory.Inventory{Store: d.store, Stock: d.stock}
	for _, p := range demoStock {
		if _, err := inv.Get(ctx, p.SKU); err == nil {
			continue
		} else if !errors.Is(err, shop.ErrNotFound) {
			return fmt.Errorf("read demo sku %s: %w", p.SKU, err)
		}
		if _, err := inv.Set(ctx, p); err != nil {
			return fmt.Errorf("stock demo sku %s: %w", p.SKU, err)
		}
		d.logger.Info("demo stock", "sku", p.SKU, "on_hand", p.OnHand)
	}
	return nil
}

// quietLogger drops the SDK's dial logs while probing for a server.
var quietLogger = sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
