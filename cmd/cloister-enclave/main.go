// Command cloister-enclave runs Nitro Enclaves for a NitroEnclaveDeployment's
// pods: `supervise` boots and watches the enclave, `orchestrator` runs the
// user plugins inside it; see internal/enclave.
package main

import (
	"context"
	"os"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/enclave"
)

func main() {
	startup.Main("cloister-enclave", func(ctx context.Context) error {
		return enclave.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	})
}
