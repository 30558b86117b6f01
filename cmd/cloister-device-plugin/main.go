// Command cloister-device-plugin is the kubelet device plugin for SGX,
// IBM CryptoExpress and AWS Nitro Enclaves; see internal/deviceplugin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cloister-cc/cloister/internal/deviceplugin/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.NewCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "cloister-device-plugin: %v\n", err)
		os.Exit(1)
	}
}
