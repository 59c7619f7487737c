package main

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestNewRedisOpensOneRedisOrACluster(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		want    string // "single", "cluster" or an error's text
	}{
		{"redis://127.0.0.1:6379/0", false, "single"},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", false, "cluster"},
		{"redis://127.0.0.1:7000", true, "cluster"},
		{"redis://127.0.0.1:7000/8?addr=127.0.0.1:7001", false, "only database 0"},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001&bogus=1", false, "bogus"},
	} {
		rdb, err := newRedis(tc.url, tc.cluster)
		got := "error"
		switch rdb.(type) {
		case *redis.Client:
			got = "single"
		case *redis.ClusterClient:
			got = "cluster"
		}
		if err != nil {
			got = err.Error()
		}
		if !strings.Contains(got, tc.want) {
			t.Errorf("newRedis(%q, %v) = %s, want %s", tc.url, tc.cluster, got, tc.want)
		}
		if rdb != nil {
			_ = rdb.Close()
		}
	}
}
