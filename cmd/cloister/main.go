// Command cloister is Cloister's CLI; see internal/cli.
package main

import (
	"os"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/cli"
)

func main() {
	startup.Main("cloister", cli.NewRoot(cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}).ExecuteContext)
}
