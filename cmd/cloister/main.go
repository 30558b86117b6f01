// Command cloister is Cloister's CLI; see internal/cli.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cloister-cc/cloister/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.NewRoot(cli.Streams{Out: os.Stdout, Err: os.Stderr}).ExecuteContext(ctx)
	stop()
	var exit *cli.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.Code) // the command said why
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
