package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
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
	return awaitSearchAttributes(ctx, ws, cfg.Namespace)
}

// awaitSearchAttributes returns once the server answers a visibility query naming every
// search attribute of the contract. On SQL visibility a new attribute is an alias in the
// namespace's record, which each service serves from a namespace cache refreshed every few
// seconds (system.namespaceCacheRefreshInterval, 2 s by default): until then a saga's start
// with the attribute is refused ("no mapping defined"), so a worker and API started right
// after setup would refuse their first buyers.
func awaitSearchAttributes(ctx context.Context, ws workflowservice.WorkflowServiceClient, namespace string) error {
	var terms []string
	for _, k := range workflows.SearchAttributes {
		terms = append(terms, k.GetName()+" = "+probeValue(k.GetValueType()))
	}
	query := strings.Join(terms, " AND ")
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := ws.CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: namespace, Query: query})
		if err == nil {
			return nil
		}
		if !errors.As(err, new(*serviceerror.InvalidArgument)) || time.Now().After(deadline) {
			return fmt.Errorf("search attributes registered but not usable: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// probeValue is a literal of the type, for a query that only has to be understood.
func probeValue(t enumspb.IndexedValueType) string {
	switch t {
	case enumspb.INDEXED_VALUE_TYPE_INT, enumspb.INDEXED_VALUE_TYPE_DOUBLE:
		return "0"
	case enumspb.INDEXED_VALUE_TYPE_BOOL:
		return "true"
	case enumspb.INDEXED_VALUE_TYPE_DATETIME:
		return "'2000-01-01T00:00:00Z'"
	default: // keyword, keyword list, text
		return "'probe'"
	}
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
