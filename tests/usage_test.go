package tests

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestUsageMistakes calls gpuctk wrongly as a user might: each mistake is
// exit status 2, nothing on stdout (a redirect gets no half spec), and on
// stderr one line saying what is wrong plus where the usage is.
func TestUsageMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cdi", "generate", "--simulat", "dgx-a100"}, `unknown flag "simulat": did you mean --simulate?`},
		{[]string{"cdi", "genrate"}, `"genrate" is not a command of gpuctk cdi: did you mean "generate"?`},
		{[]string{"mps", "stauts"}, `did you mean "status"?`},
		{[]string{"cdi", "generate", "--simulate", "l40s", "extra"}, `unexpected argument "extra"`},
		{[]string{"labels", "--simulate", "l40s", "x"}, `unexpected argument "x"`},
		{[]string{"config", "import-device-plugin"}, "want one FILE"},
		{[]string{"--no-such-flag"}, `unknown flag "no-such-flag"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			cmd := exec.Command(bin("gpuctk"), tc.args...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Errorf("exit: %v, want status 2", err)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout is not empty:\n%s", stdout.String())
			}
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if len(lines) != 2 || !strings.Contains(lines[0], tc.want) || !strings.HasSuffix(lines[1], "--help' for usage.") {
				t.Errorf("stderr:\n%s\nwant %q and where the usage is", stderr.String(), tc.want)
			}
		})
	}
}
