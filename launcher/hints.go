package launcher

import "strings"

// notFoundHint is what to add to the end of an agent's ssh or srun when
// its flexrun was not found on the host: exit status 127 (the shell's
// "command not found") or 126, or such a message in its stderr. "" when
// the end does not look like that.
func notFoundHint(status int, stderr string) string {
	low := strings.ToLower(stderr)
	missing := status == 127 || status == 126 ||
		strings.Contains(low, "command not found") ||
		(strings.Contains(low, "flexrun") && strings.Contains(low, "no such file or directory"))
	if !missing {
		return ""
	}
	return " (flexrun is not on that host's PATH for non-interactive ssh: install it there, or use --prefix DIR where DIR/bin/flexrun or DIR/flexrun exists on that host)"
}
