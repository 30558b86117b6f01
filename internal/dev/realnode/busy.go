package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cloister-cc/cloister/internal/base/proc"
)

// HostBusy says whether a real node already holds this host: a kubelet
// runs, or the node bridge exists. One real node fits a host (two kubelets
// delete each other's pod cgroups), so a second one, a test's or a demo's,
// must wait until `cloister dev down` removed the first. nil means free.
func HostBusy() error {
	var held []string
	for _, pid := range otherKubelets("") {
		held = append(held, fmt.Sprintf("a kubelet (pid %d%s)", pid, configOf(pid)))
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", DefaultNetwork.Bridge)); err == nil {
		held = append(held, "the bridge "+DefaultNetwork.Bridge)
	}
	if len(held) == 0 {
		return nil
	}
	return errors.New("a real node already holds this host: " + strings.Join(held, " and "))
}

// configOf names the kubelet's config file, which tells whose node it is.
func configOf(pid int) string {
	for _, argv := range proc.Argv(pid) {
		if cfg, ok := strings.CutPrefix(argv, "--config="); ok {
			return ", " + cfg
		}
	}
	return ""
}

// SkipBusy is what a real-node test says when it skips because the host is
// busy: what holds it and how to include the test.
func SkipBusy(busy error) string {
	return busy.Error() + " (a running `make demo`?): the real-node tests need the host to themselves; " +
		"`make demo-down` (or `cloister dev down`) and run them again to include them"
}
