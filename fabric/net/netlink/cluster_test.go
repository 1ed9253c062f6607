package netlink_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/flexlink/flexlink/internal/testenv"
)

// railsUp builds flexrun and flexbench into prefix/bin and brings up
// scripts/testcluster name on subnet: two emulated hosts with two rails
// each (more testcluster arguments in extra), taken down when the test
// ends. Root only (network namespaces); skipped through testenv elsewhere.
func railsUp(t *testing.T, name, subnet string, extra ...string) (prefix, bin string, c testenv.Testcluster) {
	t.Helper()
	testenv.EmulatedHosts(t)
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	prefix = t.TempDir()
	os.Chmod(prefix, 0o755)
	bin = filepath.Join(prefix, "bin")
	if out, err := exec.Command("go", "build", "-C", repo, "-o", bin+"/", "./cmd/flexrun", "./cmd/flexbench").CombinedOutput(); err != nil {
		t.Fatalf("build flexrun, flexbench: %v\n%s", err, out)
	}
	script := filepath.Join(repo, "scripts", "testcluster")
	t.Cleanup(func() { exec.Command(script, "down", "--name", name).Run() })
	args := append(append([]string{"up", "2", "--rails", "2"}, extra...), "--name", name, "--net", subnet)
	out, err := exec.Command(script, args...).Output()
	if err != nil {
		t.Fatalf("testcluster up: %v\n%s", err, out)
	}
	if c, err = testenv.ParseTestcluster(string(out), 2); err != nil {
		t.Fatal(err)
	}
	return prefix, bin, c
}
