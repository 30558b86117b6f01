// Command cloister-pause is the pod sandbox's process for the dev cluster's real
// node, built locally instead of pulled: it holds the pod's namespaces,
// reaps the zombies it inherits as PID 1 of a shared PID namespace, and
// exits on SIGINT or SIGTERM.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 {
		// It takes no arguments; any, --help included, gets the usage.
		fmt.Fprintln(os.Stderr, "usage: cloister-pause\n\nHolds a pod sandbox's namespaces and reaps its zombies until SIGINT or SIGTERM.")
		os.Exit(0)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
