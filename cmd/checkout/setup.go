package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/checkout-saga/checkout-saga/workflows"
)

// namespaceRetention is how long a new namespace keeps closed workflows: long enough for
// support to look at last week's sagas; Postgres keeps every end after that.
const namespaceRetention = 7 * 24 * time.Hour

// setupTemporal creates the namespace when the cluster has none of that name (a fresh
// server has no "default"), then registers the contract's search attributes in it.
// Attributes that exist with the right type are left alone; one that exists with another
// type is an error, because the saga's upserts would fail on it.
func setupTemporal(ctx context.Context, cfg config) error {
	logger := newLogger(cfg)
	c, err := dialTemporal(ctx, cfg, logger, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	ws := c.WorkflowService()
	_, err = ws.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: cfg.Namespace})
	var notFound *serviceerror.NamespaceNotFound
	switch {
	case errors.As(err, &notFound):
		if _, err := ws.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
			Namespace: cfg.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(namespaceRetention),
			Description: "checkout-saga",
		}); err != nil && !errors.As(err, new(*serviceerror.NamespaceAlreadyExists)) {
			return fmt.Errorf("create namespace %s: %w", cfg.Namespace, err)
		}
		logger.Info("namespace created", "namespace", cfg.Namespace, "retention", namespaceRetention)
	case err != nil:
		return fmt.Errorf("describe namespace %s: %w", cfg.Namespace, err)
	}
	ops := c.OperatorService()
	// A new namespace reaches every frontend's cache within seconds (10 s by default).
	var have *operatorservice.ListSearchAttributesResponse
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		have, err = ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: cfg.Namespace})
		if err == nil || !errors.As(err, &notFound) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, k := range workflows.SearchAttributes {
		name, want := k.GetName(), k.GetValueType()
		got, ok := have.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = want
		case got != want:
			return fmt.Errorf("search attribute %s exists as %s, the product needs %s", name, got, want)
		}
	}
	if len(missing) == 0 {
		logger.Info("search attributes already registered", "namespace", cfg.Namespace)
		return nil
	}
	if _, err := ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace: cfg.Namespace, SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("add search attributes: %w", err)
	}
	logger.Info("search attributes registered", "namespace", cfg.Namespace, "count", len(missing))
	return nil
}

// hostPortOf returns the host:port of a URL, with the scheme's default port if none is given.
func hostPortOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return u.Host + ":443"
	}
	return u.Host + ":80"
}
