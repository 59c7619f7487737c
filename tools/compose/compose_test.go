package compose

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

// composeFile is the stack validated here. No Docker engine runs on the dev machines, so this
// test is what stands between the file and a broken `docker compose up`.
const composeFile = "docker-compose.yml"

// searchAttributeJob is the one-shot service that registers the contract's search attributes.
const searchAttributeJob = "temporal-create-namespace"

// deploymentJob is the one-shot service that makes the workers' build current.
const deploymentJob = "worker-deployment"

// redisClusterJob is the one-shot service that joins the Redis nodes into a cluster.
const redisClusterJob = "redis-cluster-create"

// The production shape's replicated services.
var (
	apis       = []string{"api-1", "api-2"}
	workers    = []string{"worker-1", "worker-2"}
	redisNodes = []string{"redis-1", "redis-2", "redis-3", "redis-4", "redis-5", "redis-6"}
)

// contractSearchAttributes are the search attributes docs/contract.md names ("Every checkout
// workflow carries search attributes ..."), read from the page itself so the compose file is
// checked against the specification, with the type names of
// `temporal operator search-attribute create --type`.
func contractSearchAttributes(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "contract.md"))
	if err != nil {
		t.Fatalf("read the contract: %v", err)
	}
	doc := string(raw)
	start := strings.Index(doc, "Every checkout workflow carries search attributes")
	if start < 0 {
		t.Fatal("docs/contract.md no longer says which search attributes every checkout carries")
	}
	paragraph, _, _ := strings.Cut(doc[start:], "\n\n")
	attrs := map[string]string{}
	for _, m := range regexp.MustCompile("`(\\w+)`\\s+\\((\\w+)\\)").FindAllStringSubmatch(paragraph, -1) {
		attrs[m[1]] = m[2]
	}
	if len(attrs) == 0 {
		t.Fatalf("no `Name` (Type) search attributes in the contract's paragraph: %q", paragraph)
	}
	return attrs
}

// composeEnv is the only environment the loader sees: the test never depends on the caller's.
func composeEnv() map[string]string {
	return map[string]string{
		"ADMIN_TOKEN":           "test-admin-token",
		"STRIPE_WEBHOOK_SECRET": "whsec_test_secret",
		"CHECKOUT_SECRET_KEY":   "test-checkout-secret-key-0123456789abcdef",
		"CLIENT_TOKENS":         "shop=test-client-token-0123456789",
		"POSTGRES_PASSWORD":     "test-postgres-password",
	}
}

// loadCompose loads the compose file the way `docker compose` does: schema validation,
// interpolation from env, normalisation and the consistency check (which also rejects
// depends_on targets that do not exist).
func loadCompose(t *testing.T, env map[string]string) (*types.Project, error) {
	t.Helper()
	dir, err := filepath.Abs("../..") // the repository's root, where docker-compose.yml is
	if err != nil {
		t.Fatalf("resolve the repository root: %v", err)
	}
	content, err := os.ReadFile(filepath.Join(dir, composeFile))
	if err != nil {
		t.Fatalf("read %s: %v", composeFile, err)
	}
	details := types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, composeFile), Content: content}},
		Environment: env,
	}
	return loader.LoadWithContext(context.Background(), details, func(o *loader.Options) {
		o.SkipValidation = false
		o.SkipInterpolation = false
		o.SkipConsistencyCheck = false
		o.ResolvePaths = true
	})
}

func TestComposeFileWiresTheProductionShape(t *testing.T) {
	project, err := loadCompose(t, composeEnv())
	if err != nil {
		t.Fatalf("load %s: %v", composeFile, err)
	}

	t.Run("services", func(t *testing.T) {
		for _, name := range []string{
			"postgresql", "temporal-admin-tools", "temporal", searchAttributeJob,
			"temporal-ui", "migrate", redisClusterJob,
		} {
			if _, ok := project.Services[name]; !ok {
				t.Errorf("service %q missing; have %v", name, project.ServiceNames())
			}
		}
		// The production shape (docs/scale.md): 2 API replicas, 2 workers, 6 Redis Cluster nodes.
		for _, name := range append(append(slices.Clone(apis), workers...), redisNodes...) {
			if _, ok := project.Services[name]; !ok {
				t.Errorf("service %q missing; have %v", name, project.ServiceNames())
			}
		}
	})

	t.Run("depends_on", func(t *testing.T) {
		for name, svc := range project.Services {
			for target, dep := range svc.DependsOn {
				targetSvc, ok := project.Services[target]
				if !ok {
					t.Errorf("%s depends on %q, which is not a service", name, target)
					continue
				}
				switch dep.Condition {
				case types.ServiceConditionHealthy:
					// Waiting for health on a service without a healthcheck never ends.
					if targetSvc.HealthCheck == nil || targetSvc.HealthCheck.Disable || len(targetSvc.HealthCheck.Test) == 0 {
						t.Errorf("%s waits for %s to be healthy, but %s has no healthcheck", name, target, target)
					}
				case types.ServiceConditionCompletedSuccessfully:
					// A job that restarts forever never completes.
					if targetSvc.Restart == types.RestartPolicyAlways || targetSvc.Restart == types.RestartPolicyUnlessStopped {
						t.Errorf("%s waits for %s to complete, but %s restarts %s", name, target, target, targetSvc.Restart)
					}
				default:
					t.Errorf("%s depends on %s with condition %q; want service_healthy or service_completed_successfully", name, target, dep.Condition)
				}
			}
		}
		want := map[string]map[string]string{
			"temporal-admin-tools": {"postgresql": types.ServiceConditionHealthy},
			"temporal":             {"temporal-admin-tools": types.ServiceConditionCompletedSuccessfully},
			searchAttributeJob:     {"temporal": types.ServiceConditionHealthy},
			"migrate":              {"postgresql": types.ServiceConditionHealthy},
		}
		for _, app := range append(slices.Clone(apis), workers...) {
			want[app] = map[string]string{
				"postgresql":       types.ServiceConditionHealthy,
				redisClusterJob:    types.ServiceConditionCompletedSuccessfully,
				"migrate":          types.ServiceConditionCompletedSuccessfully,
				searchAttributeJob: types.ServiceConditionCompletedSuccessfully,
			}
		}
		want[redisClusterJob] = map[string]string{}
		for _, node := range redisNodes {
			want[redisClusterJob][node] = types.ServiceConditionHealthy
		}
		for name, deps := range want {
			for target, condition := range deps {
				got, ok := project.Services[name].DependsOn[target]
				if !ok {
					t.Errorf("%s does not depend on %s", name, target)
					continue
				}
				if got.Condition != condition {
					t.Errorf("%s depends on %s with condition %q, want %q", name, target, got.Condition, condition)
				}
			}
		}
	})

	t.Run("ports", func(t *testing.T) {
		for name, want := range map[string]struct {
			published string
			target    uint32
		}{
			"api-1":       {"8080", 8080},
			"api-2":       {"8081", 8080},
			"temporal-ui": {"8233", 8080},
			"temporal":    {"7233", 7233},
		} {
			if !publishes(project.Services[name], want.published, want.target) {
				t.Errorf("%s does not publish %s -> %d; ports %+v", name, want.published, want.target, project.Services[name].Ports)
			}
		}
		if got := env(t, project.Services["temporal-ui"], "TEMPORAL_ADDRESS"); got != "temporal:7233" {
			t.Errorf("temporal-ui TEMPORAL_ADDRESS = %q, want temporal:7233", got)
		}
	})

	t.Run("redis cluster", func(t *testing.T) {
		for _, node := range redisNodes {
			cmd := strings.Join(project.Services[node].Command, " ")
			for _, flag := range []string{"--maxmemory-policy noeviction", "--appendonly yes", "--cluster-enabled yes"} {
				if !strings.Contains(cmd, flag) {
					t.Errorf("%s command %q lacks %q", node, cmd, flag)
				}
			}
		}
		job := project.Services[redisClusterJob]
		script := strings.Join(append(slices.Clone(job.Entrypoint), job.Command...), "\n")
		for _, want := range []string{"redis-cli --cluster create", "--cluster-replicas 1", "cluster_state:ok"} {
			if !strings.Contains(script, want) {
				t.Errorf("%s never runs %q:\n%s", redisClusterJob, want, script)
			}
		}
	})

	t.Run("search attributes", func(t *testing.T) {
		job := project.Services[searchAttributeJob]
		script := strings.Join(append(slices.Clone(job.Entrypoint), job.Command...), "\n")
		createLine := regexp.MustCompile(`(?m)^\s*sa --name (\S+) --type (\S+)\s*$`)
		if !strings.Contains(script, "temporal operator search-attribute create") {
			t.Fatalf("%s never runs `temporal operator search-attribute create`:\n%s", searchAttributeJob, script)
		}
		got := map[string]string{}
		for _, m := range createLine.FindAllStringSubmatch(script, -1) {
			if prev, dup := got[m[1]]; dup {
				t.Errorf("search attribute %s registered twice (%s, %s)", m[1], prev, m[2])
			}
			got[m[1]] = m[2]
		}
		contract := contractSearchAttributes(t)
		for name, typ := range contract {
			if got[name] != typ {
				t.Errorf("search attribute %s: registered as %q, want %q", name, got[name], typ)
			}
		}
		for name := range got {
			if _, ok := contract[name]; !ok {
				t.Errorf("search attribute %s is registered but not in the contract", name)
			}
		}
		if got := env(t, job, "TEMPORAL_ADDRESS"); got != "temporal:7233" {
			t.Errorf("%s TEMPORAL_ADDRESS = %q, want temporal:7233", searchAttributeJob, got)
		}
	})

	// The product runs its task queue on one partition (workflows.TaskQueuePartitions).
	t.Run("task queue partitions", func(t *testing.T) {
		cfg, ok := project.Configs["temporal-dynamic-config"]
		if !ok {
			t.Fatal("no temporal-dynamic-config")
		}
		var dc map[string][]struct {
			Value       any               `yaml:"value"`
			Constraints map[string]string `yaml:"constraints"`
		}
		if err := yaml.Unmarshal([]byte(cfg.Content), &dc); err != nil {
			t.Fatalf("temporal-dynamic-config is not YAML: %v", err)
		}
		for _, key := range []string{"matching.numTaskqueueReadPartitions", "matching.numTaskqueueWritePartitions"} {
			vs := dc[key]
			if len(vs) != 1 || vs[0].Value != 1 || vs[0].Constraints["taskQueueName"] != "checkout" {
				t.Errorf("%s = %+v, want 1 for task queue checkout", key, vs)
			}
		}
		// The steps that end a checkout unpaid start in the workflow task's answer
		// (workflows.DevServerFlags).
		if vs := dc["system.enableActivityEagerExecution"]; len(vs) != 1 || vs[0].Value != true {
			t.Errorf("system.enableActivityEagerExecution = %+v, want true", vs)
		}
		// Support's workflow Pause in the Web UI (workflows.DevServerFlags).
		if vs := dc["frontend.WorkflowPauseEnabled"]; len(vs) != 1 || vs[0].Value != true {
			t.Errorf("frontend.WorkflowPauseEnabled = %+v, want true", vs)
		}
	})

	t.Run("app environment", func(t *testing.T) {
		for _, name := range append(append([]string{"migrate"}, apis...), workers...) {
			svc := project.Services[name]
			if svc.Build == nil {
				t.Errorf("%s has no build section", name)
			} else if _, err := os.Stat(filepath.Join(svc.Build.Context, svc.Build.Dockerfile)); err != nil {
				t.Errorf("%s builds from a missing Dockerfile: %v", name, err)
			}
			if got := env(t, svc, "TEMPORAL_ADDRESS"); got != "temporal:7233" {
				t.Errorf("%s TEMPORAL_ADDRESS = %q, want temporal:7233", name, got)
			}
			checkURLHost(t, project, name, "REDIS_URL", "redis", "redis-1", "6379")
			if seeds := env(t, project.Services[name], "REDIS_URL"); !strings.Contains(seeds, "addr=redis-2:6379") || !strings.Contains(seeds, "addr=redis-3:6379") {
				t.Errorf("%s REDIS_URL = %q, want the three masters' seeds (addr=redis-2:6379&addr=redis-3:6379)", name, seeds)
			}
			checkURLHost(t, project, name, "DATABASE_URL", "postgres", "postgresql", "5432")
		}
		for _, name := range apis {
			checkAPI(t, project.Services[name])
		}
		for name, atLeast := range map[string]time.Duration{"api-1": 25 * time.Second, "api-2": 25 * time.Second, "worker-1": 15 * time.Second, "worker-2": 15 * time.Second} {
			if g := project.Services[name].StopGracePeriod; g == nil || time.Duration(*g) <= atLeast {
				t.Errorf("%s stop_grace_period = %v, want more than %s", name, g, atLeast)
			}
		}
		for _, name := range workers {
			if got := env(t, project.Services[name], "WORKER_METRICS_ADDR"); got != "0.0.0.0:9091" {
				t.Errorf("%s WORKER_METRICS_ADDR = %q, want 0.0.0.0:9091", name, got)
			}
		}
		// Worker Versioning: the job makes current the very build the workers poll as.
		job, ok := project.Services[deploymentJob]
		if !ok {
			t.Fatalf("service %s missing: nothing would make the workers' build current, and every saga would wait", deploymentJob)
		}
		if got := strings.Join(job.Command, " "); !strings.HasPrefix(got, "deployment set-current") {
			t.Errorf("%s command = %q, want deployment set-current", deploymentJob, got)
		}
		build := env(t, job, "WORKER_BUILD_ID")
		for _, name := range workers {
			if got := env(t, project.Services[name], "WORKER_BUILD_ID"); got == "" || got != build {
				t.Errorf("%s WORKER_BUILD_ID = %q, want the build %s makes current (%q)", name, got, deploymentJob, build)
			}
		}
		if got := strings.Join(project.Services["migrate"].Command, " "); got != "migrate" {
			t.Errorf("migrate command = %q, want migrate", got)
		}
	})
}

// checkAPI checks an API replica's listen addresses and secrets.
func checkAPI(t *testing.T, api types.ServiceConfig) {
	t.Helper()
	if got := env(t, api, "API_ADDR"); got != "0.0.0.0:8080" {
		t.Errorf("%s API_ADDR = %q, want 0.0.0.0:8080 (a container must listen beyond loopback)", api.Name, got)
	}
	// The secrets come from the caller's environment, never from the file.
	for key, want := range composeEnv() {
		if key == "POSTGRES_PASSWORD" {
			continue // the binary gets it inside DATABASE_URL
		}
		if got := env(t, api, key); got != want {
			t.Errorf("%s %s = %q, want the caller's value %q", api.Name, key, got, want)
		}
	}
	if got, want := env(t, api, "DATABASE_URL"), "postgres://postgres:"+composeEnv()["POSTGRES_PASSWORD"]+"@"; !strings.HasPrefix(got, want) {
		t.Errorf("%s DATABASE_URL = %q, want it to begin %q (the caller's password)", api.Name, got, want)
	}
	if got := env(t, api, "API_METRICS_ADDR"); got != "0.0.0.0:9090" {
		t.Errorf("%s API_METRICS_ADDR = %q, want 0.0.0.0:9090 (metrics are off the public port)", api.Name, got)
	}
}

// Every secret has no default: a template copied into production with a default password
// runs with it. POSTGRES_PASSWORD is one too.
func TestComposeRequiresSecrets(t *testing.T) {
	for _, secret := range []string{"ADMIN_TOKEN", "STRIPE_WEBHOOK_SECRET", "CHECKOUT_SECRET_KEY", "POSTGRES_PASSWORD"} {
		for _, value := range []string{"unset", "empty"} {
			t.Run(secret+" "+value, func(t *testing.T) {
				environment := composeEnv()
				if value == "unset" {
					delete(environment, secret)
				} else {
					environment[secret] = ""
				}
				_, err := loadCompose(t, environment)
				if err == nil {
					t.Fatalf("loading with %s %s succeeded; want an error naming it", secret, value)
				}
				var missing *template.MissingRequiredError
				if !errors.As(err, &missing) || missing.Variable != secret {
					t.Fatalf("loading with %s %s: got %v; want a missing-required-variable error for %s", secret, value, err, secret)
				}
				if !strings.Contains(err.Error(), "required variable "+secret) {
					t.Errorf("error %q does not name %s", err, secret)
				}
			})
		}
	}
}

// publishes reports whether svc publishes the host port published to the container port target.
func publishes(svc types.ServiceConfig, published string, target uint32) bool {
	for _, p := range svc.Ports {
		if p.Published == published && p.Target == target {
			return true
		}
	}
	return false
}

// env returns the resolved value of key in svc's environment, failing the test when unset.
func env(t *testing.T, svc types.ServiceConfig, key string) string {
	t.Helper()
	v, ok := svc.Environment[key]
	if !ok || v == nil {
		t.Errorf("%s: environment variable %s is not set", svc.Name, key)
		return ""
	}
	return *v
}

// checkURLHost checks that svc's URL in key has the scheme and points at the compose service
// host on port.
func checkURLHost(t *testing.T, project *types.Project, name, key, scheme, host, port string) {
	t.Helper()
	raw := env(t, project.Services[name], key)
	u, err := url.Parse(raw)
	if err != nil {
		t.Errorf("%s %s = %q: %v", name, key, raw, err)
		return
	}
	if u.Scheme != scheme || u.Host != net.JoinHostPort(host, port) {
		t.Errorf("%s %s = %q, want %s://%s:%s/...", name, key, raw, scheme, host, port)
	}
	if _, ok := project.Services[u.Hostname()]; !ok {
		t.Errorf("%s %s points at %q, which is not a service", name, key, u.Hostname())
	}
}
