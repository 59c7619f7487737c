// Command temporal is the local Temporal of checkout-saga: `temporal server start-dev` runs the
// pinned Temporal server (go.temporal.io/server, see go.mod) with its SQLite store in one
// process, and the pinned Web UI server beside it unless --headless. It stands in for the
// Temporal CLI's dev server, whose builds from the module proxy stop at server 1.29 (see
// go.mod), and takes the CLI's flags that this repository passes:
//
//	temporal server start-dev [--ip 127.0.0.1] [--port 7233] [--ui-port N] [--headless]
//	    [--http-port N] [--metrics-port N] [--db-filename FILE] [--namespace NS]...
//	    [--search-attribute NAME=TYPE]... [--dynamic-config-value KEY=JSON]...
//	    [--log-level debug|info|warn|error] [--log-format json|pretty]
//	    [--all-visibility-indexes]
//	temporal --version
//
// Like the CLI it creates the `default` namespace (and every --namespace) with the search
// attributes registered, keeps its state in memory unless --db-filename names a file, and
// stops cleanly on SIGINT or SIGTERM. It is no Temporal client: tests use the Go SDK, and
// support installs the Temporal CLI of their choice (docs/runbook.md).
//
// Unlike the CLI, it keeps one index of the visibility table (trimVisibilityIndexes), unless
// --all-visibility-indexes.
package main

import (
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/metrics"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "temporal:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	switch {
	case len(args) == 1 && (args[0] == "--version" || args[0] == "-v" || args[0] == "version"):
		fmt.Println(version())
		return nil
	case len(args) >= 2 && args[0] == "server" && args[1] == "start-dev":
		o, err := parseStartDev(args[2:])
		if err != nil {
			return err
		}
		return startDev(o)
	}
	return errors.New("usage: temporal server start-dev [flags] | temporal --version (this build is a dev server only; see tools/temporal/main.go)")
}

// version names the server and UI this binary was built with, from its build information.
func version() string {
	server, ui := "unknown", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			switch m.Path {
			case "go.temporal.io/server":
				server = strings.TrimPrefix(m.Version, "v")
			case "github.com/temporalio/ui-server/v2":
				ui = strings.TrimPrefix(m.Version, "v")
			}
		}
	}
	return fmt.Sprintf("temporal version %s (server %s) (ui %s), the dev server of checkout-saga", server, server, ui)
}

type startDevOptions struct {
	ip, logLevel, logFormat, dbFile string
	port, uiPort, httpPort          int
	metricsPort                     int
	headless                        bool
	allVisibilityIndexes            bool
	namespaces                      []string
	searchAttributes                map[string]enumspb.IndexedValueType
	dynamicConfig                   map[string]any
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func parseStartDev(args []string) (startDevOptions, error) {
	o := startDevOptions{}
	fs := flag.NewFlagSet("temporal server start-dev", flag.ContinueOnError)
	fs.StringVar(&o.ip, "ip", "127.0.0.1", "IPv4 address the frontend (and the UI) bind to")
	fs.IntVar(&o.port, "port", 7233, "frontend gRPC port")
	fs.IntVar(&o.uiPort, "ui-port", 0, "Web UI port (default: --port + 1000)")
	fs.IntVar(&o.httpPort, "http-port", 0, "frontend HTTP API port (default: none)")
	fs.IntVar(&o.metricsPort, "metrics-port", 0, "Prometheus /metrics port (default: none)")
	fs.BoolVar(&o.headless, "headless", false, "do not serve the Web UI")
	fs.BoolVar(&o.allVisibilityIndexes, "all-visibility-indexes", false, "keep every index of the SQLite visibility table (default: only the list's own, trimVisibilityIndexes)")
	fs.StringVar(&o.dbFile, "db-filename", "", "SQLite file to keep the state in (default: in memory, lost on exit)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "server log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "json", "json or pretty")
	var namespaces, searchAttributes, dynamicConfig listFlag
	fs.Var(&namespaces, "namespace", "another namespace to create (repeatable; default is always created)")
	fs.Var(&searchAttributes, "search-attribute", "NAME=TYPE registered in every namespace (repeatable)")
	fs.Var(&dynamicConfig, "dynamic-config-value", "KEY=JSON_VALUE (repeatable; the last value of a key wins)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.ip == "localhost" {
		o.ip = "127.0.0.1"
	}
	if o.uiPort == 0 {
		o.uiPort = o.port + 1000
	}
	o.namespaces = []string{"default"}
	for _, ns := range namespaces {
		if ns != "default" {
			o.namespaces = append(o.namespaces, ns)
		}
	}
	o.searchAttributes = map[string]enumspb.IndexedValueType{}
	for _, kv := range searchAttributes {
		name, typ, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return o, fmt.Errorf("--search-attribute %q: want NAME=TYPE", kv)
		}
		t, ok := indexedValueType(typ)
		if !ok {
			return o, fmt.Errorf("--search-attribute %q: unknown type %q", kv, typ)
		}
		o.searchAttributes[name] = t
	}
	// The CLI's defaults, which a --dynamic-config-value overrides: search attributes seen at
	// once (a test setting: every read goes to SQLite; the product's flags turn it off), the
	// persistence rate limits raised to pay for that, a larger mutable-state cache and more
	// visibility RPS than a production default.
	o.dynamicConfig = map[string]any{
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key().String():      true,
		dynamicconfig.FrontendPersistenceMaxQPS.Key().String():                    10000,
		dynamicconfig.HistoryPersistenceMaxQPS.Key().String():                     45000,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key().String():                 8096,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key().String(): 100,
	}
	for _, kv := range dynamicConfig {
		k, raw, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, fmt.Errorf("--dynamic-config-value %q: want KEY=JSON_VALUE", kv)
		}
		v, err := jsonValue(raw)
		if err != nil {
			return o, fmt.Errorf("--dynamic-config-value %q: %w", kv, err)
		}
		o.dynamicConfig[strings.ToLower(k)] = v // keys are case-insensitive
	}
	return o, nil
}

// indexedValueType reads a search attribute type by its short name (Keyword, Int, ...),
// in any case.
func indexedValueType(s string) (enumspb.IndexedValueType, bool) {
	for name, v := range enumspb.IndexedValueType_shorthandValue {
		if strings.EqualFold(name, s) && v != 0 {
			return enumspb.IndexedValueType(v), true
		}
	}
	return 0, false
}

// jsonValue decodes a dynamic-config value. Numbers become int when they are whole, since
// the server's integer settings do not take float64.
func jsonValue(raw string) (any, error) {
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return int(i), nil
		}
		return n.Float64()
	}
	return v, nil
}

func startDev(o startDevOptions) error {
	logger := log.NewZapLogger(log.BuildZapLogger(log.Config{Level: o.logLevel, Format: map[bool]string{true: "console", false: "json"}[o.logFormat == "pretty"]}))
	sqlConf, err := sqliteConfig(o)
	if err != nil {
		return err
	}
	conf, ports, err := serverConfig(o, sqlConf)
	if err != nil {
		return err
	}
	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return err
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return err
	}
	dc := dynamicconfig.StaticClient{}
	for k, v := range o.dynamicConfig {
		dc[dynamicconfig.MakeKey(k)] = v
	}
	hosts := map[primitives.ServiceName]static.Hosts{}
	for svc, port := range ports {
		hosts[svc] = static.SingleLocalHost(net.JoinHostPort(o.ip, strconv.Itoa(port)))
	}
	server, err := temporal.NewServer(
		temporal.WithConfig(conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dc),
	)
	if err != nil {
		return fmt.Errorf("create server: %w", err)
	}
	var ui *uiserver.Server
	if !o.headless {
		ui = uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
			Host:                o.ip,
			Port:                o.uiPort,
			TemporalGRPCAddress: net.JoinHostPort(o.ip, strconv.Itoa(o.port)),
			EnableUI:            true,
			CORS:                uiconfig.CORS{CookieInsecure: true},
			HideLogs:            true,
			DisableNewsFetch:    true,
		}))
		uiErr := make(chan error, 1)
		go func() { uiErr <- ui.Start() }()
		// The UI's Start blocks while it serves; an early return is a failure (its port taken).
		select {
		case err := <-uiErr:
			return fmt.Errorf("web UI on port %d: %v", o.uiPort, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := server.Start(); err != nil {
		if ui != nil {
			ui.Stop()
		}
		return fmt.Errorf("start server: %w", err)
	}
	fmt.Println(version())
	fmt.Printf("Server:  %s\n", net.JoinHostPort(o.ip, strconv.Itoa(o.port)))
	if ui != nil {
		fmt.Printf("UI:      http://%s\n", net.JoinHostPort(o.ip, strconv.Itoa(o.uiPort)))
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	fmt.Println("Stopping server...")
	if ui != nil {
		ui.Stop()
	}
	return server.Stop()
}

// sqliteConfig is the server's SQLite store: in memory (shared cache, a random name) or the
// --db-filename file, whose schema is created when the file does not exist yet. The
// namespaces are written into it before the server starts, with the search attributes.
func sqliteConfig(o startDevOptions) (*config.SQL, error) {
	conf := &config.SQL{PluginName: sqliteplugin.PluginName}
	if o.dbFile == "" {
		conf.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		conf.DatabaseName = strconv.Itoa(rand.IntN(1 << 30))
	} else {
		conf.ConnectAttributes = map[string]string{"mode": "rwc"}
		conf.DatabaseName = o.dbFile
		if _, err := os.Stat(o.dbFile); errors.Is(err, os.ErrNotExist) {
			if _, err := os.Stat(filepath.Dir(o.dbFile)); err != nil {
				return nil, fmt.Errorf("--db-filename: %w", err)
			}
			if err := sqliteschema.SetupSchema(conf); err != nil {
				return nil, fmt.Errorf("create the SQLite schema in %s: %w", o.dbFile, err)
			}
		}
	}
	var nss []*sqliteschema.NamespaceConfig
	for _, ns := range o.namespaces {
		c, err := sqliteschema.NewNamespaceConfig(clusterName, ns, false, o.searchAttributes)
		if err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns, err)
		}
		nss = append(nss, c)
	}
	if err := sqliteschema.CreateNamespaces(conf, nss...); err != nil {
		return nil, fmt.Errorf("create namespaces: %w", err)
	}
	if !o.allVisibilityIndexes {
		if err := trimVisibilityIndexes(conf); err != nil {
			return nil, err
		}
	}
	return conf, nil
}

// keptVisibilityIndex is the one index of the visibility table the dev server keeps: the
// order of the Web UI's list, and of every list and count without a filter.
const keptVisibilityIndex = "default_idx"

// trimVisibilityIndexes drops every index of the SQLite visibility table but
// keptVisibilityIndex. Server 1.32's schema has 58, one per searchable column, each ending
// with an expression of close_time; every visibility write (a start, each search-attribute
// upsert, a close) rewrites all of them. In a flash sale on 2 cores that was half of the dev
// server's CPU (docs/performance.md). A query by any other column reads the whole table
// instead and answers the same: an index never changes a result. (The e2e suite, whose
// runbook queries filter by search attributes, took 132 s with or without the indexes.) The scale profile and compose run the full server and its schema.
func trimVisibilityIndexes(conf *config.SQL) error {
	db, err := openStore(conf)
	if err != nil {
		return err
	}
	defer db.Close()
	names, err := visibilityIndexes(db)
	if err != nil {
		return err
	}
	for _, name := range names {
		if name == keptVisibilityIndex {
			continue
		}
		if _, err := db.Exec(`DROP INDEX IF EXISTS "` + name + `"`); err != nil {
			return fmt.Errorf("drop visibility index %s: %w", name, err)
		}
	}
	return nil
}

// openStore opens the store's database as the server's SQLite plugin names it: with
// mode=memory and cache=shared, this connection and the plugin's share the one in-memory
// database, which the plugin keeps open from CreateNamespaces on.
func openStore(conf *config.SQL) (*sql.DB, error) {
	attrs := url.Values{}
	for k, v := range conf.ConnectAttributes {
		attrs.Set(k, v)
	}
	db, err := sql.Open("sqlite", "file:"+conf.DatabaseName+"?"+attrs.Encode())
	if err != nil {
		return nil, fmt.Errorf("open the dev server's store: %w", err)
	}
	return db, nil
}

// visibilityIndexes names the indexes of the visibility table (those of its own schema, not
// the primary key's).
func visibilityIndexes(db *sql.DB) ([]string, error) {
	rows, err := db.Query(`SELECT name FROM sqlite_master
		WHERE type = 'index' AND tbl_name = 'executions_visibility' AND sql IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("list the visibility indexes: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list the visibility indexes: %w", err)
		}
		names = append(names, name)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the visibility indexes: %w", err)
	}
	return names, nil
}

const clusterName = "active"

// serverConfig is one cluster of the four services on o.ip: the frontend on --port, the
// others on ports picked now.
func serverConfig(o startDevOptions, sqlConf *config.SQL) (*config.Config, map[primitives.ServiceName]int, error) {
	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = o.ip
	if o.metricsPort > 0 {
		conf.Global.Metrics = &metrics.Config{Prometheus: &metrics.PrometheusConfig{
			ListenAddress: net.JoinHostPort(o.ip, strconv.Itoa(o.metricsPort)),
			HandlerPath:   "/metrics",
		}}
	}
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = "sqlite-default"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite-default": {SQL: sqlConf}}
	frontend := net.JoinHostPort(o.ip, strconv.Itoa(o.port))
	info := cluster.ClusterInformation{
		Enabled:                true,
		InitialFailoverVersion: 1,
		RPCAddress:             frontend,
		ClusterID:              primitives.NewUUID().String(),
	}
	if o.httpPort > 0 {
		info.HTTPAddress = net.JoinHostPort(o.ip, strconv.Itoa(o.httpPort))
	}
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation:       map[string]cluster.ClusterInformation{clusterName: info},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	ports := map[primitives.ServiceName]int{primitives.FrontendService: o.port}
	conf.Services = map[string]config.Service{}
	for _, svc := range []primitives.ServiceName{primitives.FrontendService, primitives.HistoryService, primitives.MatchingService, primitives.WorkerService} {
		var s config.Service
		s.RPC.BindOnIP = o.ip
		if svc == primitives.FrontendService {
			s.RPC.GRPCPort = o.port
			s.RPC.HTTPPort = o.httpPort
		} else {
			p, err := freePort(o.ip)
			if err != nil {
				return nil, nil, err
			}
			s.RPC.GRPCPort = p
			ports[svc] = p
		}
		conf.Services[string(svc)] = s
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = frontend
	return &conf, ports, nil
}

// freePort picks a port for a service and leaves it in TIME_WAIT, as the Temporal CLI's dev
// server does: a port merely closed again may be handed at once to another process asking for
// port 0 (the tests start several dev servers at the same time), and the service's bind then
// fails with "address already in use". The kernel hands no port in TIME_WAIT to a bind of port
// 0, while the service's listener (SO_REUSEADDR, as Go sets it) may still take it.
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	client, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer client.Close()
	server, err := l.Accept()
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	server.Close() // the side that closes first is the one left in TIME_WAIT: the port's own
	return l.Addr().(*net.TCPAddr).Port, nil
}
