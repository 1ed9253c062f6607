package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// fakeFlexrun writes an executable flexrun at path that prints its own
// path and arguments.
func fakeFlexrun(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho \"$0 $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestPrefixCommand runs the command an agent is started with (through sh,
// as the remote login shell would, and as srun would run it directly) for
// a --prefix naming the install directory or the directory of flexrun.
func TestPrefixCommand(t *testing.T) {
	root := t.TempDir()
	withBin := filepath.Join(root, "with bin")
	fakeFlexrun(t, filepath.Join(withBin, "bin", "flexrun"))
	direct := filepath.Join(root, "direct")
	fakeFlexrun(t, filepath.Join(direct, "flexrun"))
	tests := []struct{ prefix, want string }{
		{withBin, filepath.Join(withBin, "bin", "flexrun")},
		{withBin + "/", filepath.Join(withBin, "bin", "flexrun")},
		{filepath.Join(withBin, "bin"), filepath.Join(withBin, "bin", "flexrun")},
		{direct, filepath.Join(direct, "flexrun")},
	}
	for _, tc := range tests {
		r := Remote{Prefix: tc.prefix}.withDefaults()
		want := tc.want + " agent --node 3\n"
		ssh := r.sshCommand("node7", 3)
		out, err := exec.Command("sh", "-c", ssh[len(ssh)-1]).Output()
		if err != nil || string(out) != want {
			t.Errorf("prefix %q over ssh: %q, %v; want %q", tc.prefix, out, err, want)
		}
		argv := r.srunCommand([]string{"n1"}, "/unused")
		argv = argv[len(argv)-3:]
		out, err = exec.Command(argv[0], argv[1:]...).Output()
		if want := tc.want + " agent --node -1\n"; err != nil || string(out) != want {
			t.Errorf("prefix %q under srun: %q, %v; want %q", tc.prefix, out, err, want)
		}
	}
}

func TestNotFoundHint(t *testing.T) {
	tests := []struct {
		status int
		stderr string
		hint   bool
	}{
		{127, "bash: line 1: flexrun: command not found", true},
		{127, "", true},
		{1, "sh: 1: exec: /opt/x/flexrun: not found", false},
		{2, "exec: /opt/x/flexrun: No such file or directory", true},
		{255, "ssh: connect to host n1 port 22: Connection refused", false},
		{1, "", false},
	}
	for _, tc := range tests {
		h := notFoundHint(tc.status, tc.stderr)
		if (h != "") != tc.hint || (tc.hint && !strings.Contains(h, "--prefix DIR")) {
			t.Errorf("notFoundHint(%d, %q) = %q", tc.status, tc.stderr, h)
		}
	}
}
