package compose

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The run command the file's header documents starts a stack the binary accepts: with the
// environment that command sets, each product service's environment (as compose interpolates
// it) passes `checkout check-config` for the service's command. Compose alone accepts any
// value, so a header that set the local stack's secrets would start APIs that refuse them
// and restart forever.
func TestTheDocumentedRunCommandPassesTheBinarysChecks(t *testing.T) {
	env := documentedEnvironment(t)
	project, err := loadCompose(t, env)
	if err != nil {
		t.Fatalf("load %s with the documented environment: %v", composeFile, err)
	}
	bin := buildCheckout(t)
	for _, name := range slices.Concat(apis, workers, []string{"migrate"}) {
		svc, ok := project.Services[name]
		if !ok || len(svc.Command) != 1 {
			t.Errorf("service %s: missing, or its command %q is not one checkout command", name, svc.Command)
			continue
		}
		cmd := exec.Command(bin, "check-config", svc.Command[0])
		cmd.Env = []string{} // the service's environment only, as in its container
		for k, v := range svc.Environment {
			if v != nil {
				cmd.Env = append(cmd.Env, k+"="+*v)
			}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("service %s (checkout %s) refuses the documented environment: %v\n%s", name, svc.Command[0], err, out)
		}
	}
}

// documentedEnvironment runs the header's run command (the indented lines under "Run it") in
// a clean shell whose docker prints its environment instead, and returns that environment:
// what `docker compose` would see.
func documentedEnvironment(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", composeFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var command []string
	inRun := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if !strings.HasPrefix(line, "#") {
			break // the header is over
		}
		switch {
		case strings.HasPrefix(line, "# Run it"):
			inRun = true
		case inRun && strings.HasPrefix(line, "#   "):
			command = append(command, strings.TrimPrefix(line, "#   "))
		case inRun && len(command) > 0:
			inRun = false
		}
	}
	script := strings.Join(command, "\n")
	if !strings.Contains(script, "docker compose up") {
		t.Fatalf("the header documents no `docker compose up` under \"Run it\": %q", script)
	}
	if strings.Contains(script, "openssl") {
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("the documented command needs openssl, which this machine lacks")
		}
	}
	cmd := exec.Command("sh", "-c", "docker() { env; }\n"+script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // nothing of the caller's own secrets
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("run the documented command %q: %v", script, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// buildCheckout builds the product's binary (cmd/checkout, in the repository's own module)
// into the test's temporary directory.
func buildCheckout(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "checkout")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/checkout")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cmd/checkout: %v\n%s", err, out)
	}
	return bin
}
