package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newRedis opens REDIS_URL: one Redis (redis://host:port/db), or a Redis Cluster when the URL
// names more seed nodes with addr= (redis://host:7000?addr=host:7001&addr=host:7002, go-redis'
// ParseClusterURL form) or cluster is set (REDIS_CLUSTER=true, for a cluster behind one seed).
// The stock scripts run unchanged on both: every key of a script carries its SKU's {sku} hash
// tag, so no script touches two slots; lua.Stock.Preload loads the scripts on every node, and
// again on the first NOSCRIPT (a failover to a replica that never had them).
func newRedis(rawURL string, cluster bool) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	if !cluster && !u.Query().Has("addr") {
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("REDIS_URL: %w", err)
		}
		return redis.NewClient(opts), nil
	}
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return nil, fmt.Errorf("REDIS_URL: a Redis Cluster has only database 0; drop /%s from the URL", db)
	}
	u.Path = ""
	opts, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL (cluster): %w", err)
	}
	return redis.NewClusterClient(opts), nil
}

// checkAllRedisSettings runs checkRedisSettings on the Redis, or on every master of a cluster.
func checkAllRedisSettings(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger) error {
	check := func(ctx context.Context, c *redis.Client) error {
		return checkRedisSettings(ctx, c, logger.With("redis", c.Options().Addr))
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, check)
	case *redis.Client:
		return check(ctx, c)
	default:
		return fmt.Errorf("unexpected redis client %T", rdb)
	}
}
