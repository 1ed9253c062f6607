package flog

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/flexlink/flexlink/internal/settings"
)

func TestParseSubsys(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Subsys
		bad  bool
	}{
		{"", Default, false},
		{"  ", Default, false},
		{"INIT", Init, false},
		{"coll", Coll, false},
		{"INIT,COLL", Init | Coll, false},
		{" init , Net ,", Init | Net, false},
		{"ALL", All, false},
		{"^COLL", All &^ Coll, false},
		{"^COLL,P2P", All &^ (Coll | P2P), false},
		{"^", All, false},
		{"TOPO", Graph, false},
		{"GRAPH", Graph, false},
		{"LINK", Net | SHM, false},
		{"BALANCE", Net, false},
		{"LAUNCH", Bootstrap, false},
		{"COLLS", 0, true},
		{"INIT;NET", 0, true},
		{"^BOGUS", 0, true},
	} {
		got, err := ParseSubsys(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("ParseSubsys(%q): error %v, want error %v", tc.in, err, tc.bad)
			continue
		}
		if !tc.bad && got != tc.want {
			t.Errorf("ParseSubsys(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestWordsMatchRegistry: the settings registry accepts every name
// ParseSubsys does, and refuses what it refuses.
func TestWordsMatchRegistry(t *testing.T) {
	for _, w := range append(Words(), "^COLL,P2P", "init,coll") {
		if err := settings.Validate(settings.Map(map[string]string{"FLEXLINK_DEBUG_SUBSYS": w})); err != nil {
			t.Errorf("registry refuses %q: %v", w, err)
		}
		if _, err := ParseSubsys(w); err != nil {
			t.Errorf("ParseSubsys refuses %q: %v", w, err)
		}
	}
	if settings.Validate(settings.Map(map[string]string{"FLEXLINK_DEBUG_SUBSYS": "COLLS"})) == nil {
		t.Error("registry accepts COLLS")
	}
}

func TestExpandPath(t *testing.T) {
	for _, tc := range []struct{ pattern, want string }{
		{"/tmp/flexlink.log", "/tmp/flexlink.log"},
		{"/tmp/%h.%p", "/tmp/node7.4242"},
		{"/tmp/%h-%r.log", "/tmp/node7-3.log"},
		{"log.%r.%r", "log.3.3"},
		{"100%%.%p", "100%.4242"},
		{"odd%x", "odd%x"},
		{"trailing%", "trailing%"},
		{"", ""},
	} {
		if got := ExpandPath(tc.pattern, "node7", 4242, 3); got != tc.want {
			t.Errorf("ExpandPath(%q) = %q, want %q", tc.pattern, got, tc.want)
		}
	}
}

// TestFilter: lines below WARN are written when their subsystem is
// selected or the logger has none; warnings always.
func TestFilter(t *testing.T) {
	var out strings.Builder
	lg := New(&hclog.LoggerOptions{Name: "flexlink", Level: hclog.Debug, Output: &out}, Init|Net).With("rank", 0)
	lg.Info("plain")                        // no subsystem: written
	lg.Named("shm").Debug("shm line")       // SHM not selected
	lg.Named("tcp").Debug("tcp line")       // NET selected
	lg.Named("bootstrap").Info("boot line") // BOOTSTRAP not selected
	lg.Named("bootstrap").Warn("boot warn") // warnings always
	Sub(lg, Coll).Info("coll line")
	Sub(lg, Init).Trace("init trace") // level off
	Sub(lg, Net).With("peer", 1).Info("net with")
	got := out.String()
	for _, want := range []string{"plain", "tcp line", "boot warn", "net with"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, not := range []string{"shm line", "boot line", "coll line", "init trace"} {
		if strings.Contains(got, not) {
			t.Errorf("%q written in\n%s", not, got)
		}
	}
	if Sub(lg, Coll).IsInfo() || !Sub(lg, Net).IsInfo() || !lg.IsDebug() {
		t.Error("Is* guards do not follow the selection")
	}
}

// TestNoDuplicateKeys: a key the logger carries is dropped from a line
// with the same value and renamed peer_<key> with another.
func TestNoDuplicateKeys(t *testing.T) {
	var out strings.Builder
	lg := New(&hclog.LoggerOptions{Level: hclog.Info, Output: &out}, All).With("host", "h", "rank", 2)
	lg.Info("connected", "rank", 2, "peer", 1)
	lg.Warn("rank joined", "rank", 5, "host", "h")
	lg.With("rank", 2, "comm", "w").Info("with")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines, got\n%s", out.String())
	}
	for _, l := range lines {
		if n := strings.Count(l, " rank="); n != 1 {
			t.Errorf("rank= %d times in %q", n, l)
		}
		if n := strings.Count(l, " host="); n != 1 {
			t.Errorf("host= %d times in %q", n, l)
		}
	}
	if !strings.Contains(lines[0], "peer=1") || !strings.Contains(lines[1], "peer_rank=5") || !strings.Contains(lines[2], "comm=w") {
		t.Errorf("lines lost their keys:\n%s", out.String())
	}
}

// TestEnabledNoAlloc: the hot-path check allocates nothing, on or off.
func TestEnabledNoAlloc(t *testing.T) {
	lg := New(&hclog.LoggerOptions{Level: hclog.Info, Output: new(strings.Builder)}, Default).With("rank", 0)
	for _, tc := range []struct {
		s     Subsys
		level hclog.Level
		want  bool
	}{{Coll, hclog.Info, false}, {Net, hclog.Info, true}, {Net, hclog.Debug, false}, {Coll, hclog.Warn, false}} {
		var got bool
		if a := testing.AllocsPerRun(100, func() { got = Enabled(lg, tc.s, tc.level) }); a != 0 {
			t.Errorf("Enabled(%s, %s) allocates %v times", tc.s, tc.level, a)
		}
		if got != tc.want {
			t.Errorf("Enabled(%s, %s) = %v, want %v", tc.s, tc.level, got, tc.want)
		}
	}
	plain := hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: new(strings.Builder)})
	if Enabled(plain, Coll, hclog.Info) || !Enabled(plain, Init, hclog.Info) {
		t.Error("a plain hclog logger should get the default subsystems")
	}
	// A line that is off costs no allocation either.
	coll := Sub(lg, Coll)
	if a := testing.AllocsPerRun(100, func() { coll.Info("allreduce") }); a != 0 {
		t.Errorf("a COLL line that is off allocates %v times", a)
	}
}
