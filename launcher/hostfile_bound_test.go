package launcher

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexlink/flexlink/internal/bounded"
)

// TestReadHostfileEndless: a hostfile that never ends is refused once it
// passes the hostfile limit, with an error naming it (not read forever).
func TestReadHostfileEndless(t *testing.T) {
	for _, path := range []string{"/dev/zero", "/dev/urandom"} {
		_, err := ReadHostfile(path)
		if !errors.Is(err, bounded.ErrTooLarge) || !strings.Contains(err.Error(), "hostfile: "+path+": more than 4 MiB") {
			t.Errorf("ReadHostfile(%s) = %v, want the hostfile limit's error", path, err)
		}
	}
}
