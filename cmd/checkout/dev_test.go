package main

import (
	"log/slog"
	"strings"
	"testing"
)

// `checkout dev` says where the stack is, but never its admin token: an ADMIN_TOKEN set for a
// stack that listens beyond loopback is a real secret, and logs and terminals are copied into
// tickets and chats. Neither the log line nor the banner carries the token, set or default.
func TestDevNeverShowsTheAdminToken(t *testing.T) {
	for _, token := range []string{realSecrets["ADMIN_TOKEN"], devAdminToken} {
		t.Run(token, func(t *testing.T) {
			var log, banner strings.Builder
			cfg := config{APIAddr: "127.0.0.1:8080", TemporalUIURL: "http://localhost:8233", AdminToken: token}
			announceDev(&banner, slog.New(slog.NewJSONHandler(&log, nil)), cfg)
			if !strings.Contains(banner.String(), "http://127.0.0.1:8080") || !strings.Contains(log.String(), "local stack ready") {
				t.Fatalf("the stack was not announced:\nlog: %s\nbanner: %s", log.String(), banner.String())
			}
			if strings.Contains(log.String(), token) {
				t.Errorf("the log names the admin token: %s", log.String())
			}
			if strings.Contains(banner.String(), token) {
				t.Errorf("the banner names the admin token: %s", banner.String())
			}
		})
	}
}
