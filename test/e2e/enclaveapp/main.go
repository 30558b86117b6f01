// Command enclaveapp is the e2e tests' user plugin for simulated enclaves
// (built into a test image beside cloister-enclave): `serve` prints
// $MODE and runs until stopped; `exit --after D --code N` ends after D
// with code N.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: enclaveapp serve|exit [--after D] [--code N]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	after := fs.Duration("after", time.Second, "exit: how long to run")
	code := fs.Int("code", 0, "exit: the exit code")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "serve":
		fmt.Printf("enclaveapp serving in mode %s\n", os.Getenv("MODE"))
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
		<-stop
	case "exit":
		fmt.Printf("enclaveapp exiting with %d after %s\n", *code, *after)
		time.Sleep(*after)
		os.Exit(*code)
	default:
		fmt.Fprintln(os.Stderr, "usage: enclaveapp serve|exit [--after D] [--code N]")
		os.Exit(2)
	}
}
