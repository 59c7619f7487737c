package main

import (
	"context"
	"fmt"
	"net/url"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"

	"github.com/checkout-saga/checkout-saga/workflows"
)

var indexedTypes = map[string]enumspb.IndexedValueType{
	"Keyword":     enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	"KeywordList": enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
	"Int":         enumspb.INDEXED_VALUE_TYPE_INT,
	"Datetime":    enumspb.INDEXED_VALUE_TYPE_DATETIME,
	"Bool":        enumspb.INDEXED_VALUE_TYPE_BOOL,
}

// setupTemporal registers the contract's search attributes in the namespace of a real
// cluster. Attributes that exist with the right type are left alone; one that exists with
// another type is an error, because the saga's upserts would fail on it.
func setupTemporal(ctx context.Context, cfg config) error {
	logger := newLogger(cfg)
	c, err := dialTemporal(cfg, logger)
	if err != nil {
		return err
	}
	defer c.Close()
	ops := c.OperatorService()
	have, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: cfg.Namespace})
	if err != nil {
		return fmt.Errorf("list search attributes: %w", err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range workflows.SearchAttributeTypes {
		want := indexedTypes[typ]
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
