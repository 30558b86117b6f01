// Command enclaveapp is the e2e tests' user plugin for simulated enclaves
// (built into a test image beside cloister-enclave): `serve` prints
// $MODE and runs until stopped, with --listen answering each connection
// with its mode and, with --egress, what that address says; `answer
// --listen A --text T` answers T (a pod outside the enclave); `exit
// --after D --code N` ends after D with code N.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
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
	listen := fs.String("listen", "", "serve, answer: where to answer connections")
	egress := fs.String("egress", "", "serve: an address whose answer each connection gets too")
	text := fs.String("text", "", "answer: what to answer")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "answer":
		answer(*listen, func() string { return *text + "\n" })
	case "serve":
		fmt.Printf("enclaveapp serving in mode %s\n", os.Getenv("MODE"))
		if *listen != "" {
			go answer(*listen, func() string {
				reply := "mode " + os.Getenv("MODE")
				if *egress != "" {
					reply += "; egress: " + ask(*egress)
				}
				return reply + "\n"
			})
		}
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

// answer serves addr, writing what says gives to each connection.
func answer(addr string, says func() string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			_, _ = c.Write([]byte(says()))
		}()
	}
}

// ask is what addr answers, on one line.
func ask(addr string) string {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}
