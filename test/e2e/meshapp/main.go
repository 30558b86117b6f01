// Command meshapp is the end-to-end tests' app for the service mesh: an
// HTTP server that knows nothing of TLS, and a client.
//
//	meshapp serve --name NAME --port P [--port P...]
//	    answers "NAME PORT" on every port; /call?addr=HOST:PORT answers
//	    what http://HOST:PORT/ answers (the app's own outbound call)
//	meshapp get [--ca FILE] [--cert FILE --key FILE] [--servername NAME] [--insecure] URL
//	    prints the body and, over TLS, the server certificate's subject
//	meshapp secret --file FILE --env NAME
//	    prints the SHA-256 of FILE and of $NAME (never the values) and
//	    waits: the app an SGX premain becomes, showing what it was given
package main

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type ports []string

func (p *ports) String() string     { return strings.Join(*p, ",") }
func (p *ports) Set(s string) error { *p = append(*p, s); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: meshapp serve|get|secret ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "get":
		err = get(os.Args[2:])
	case "secret":
		err = secret(os.Args[2:])
	default:
		err = errors.New("usage: meshapp serve|get|secret [flags]")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "meshapp:", err)
		os.Exit(1)
	}
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	name := fs.String("name", "app", "what the app answers")
	var ps ports
	fs.Var(&ps, "port", "a port to serve (repeat)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := &http.Client{Timeout: 10 * time.Second}
	errc := make(chan error, len(ps))
	for _, p := range ps {
		mux := http.NewServeMux()
		mux.HandleFunc("/call", func(w http.ResponseWriter, r *http.Request) {
			resp, err := client.Get("http://" + r.URL.Query().Get("addr") + "/")
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer func() { _ = resp.Body.Close() }()
			_, _ = io.Copy(w, resp.Body)
		})
		mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, "%s %s\n", *name, p)
		})
		go func() {
			errc <- (&http.Server{Addr: ":" + p, Handler: mux, ReadHeaderTimeout: 5 * time.Second}).ListenAndServe()
		}()
	}
	fmt.Println("serving", *name, "on", ps.String())
	return <-errc
}

func get(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	ca := fs.String("ca", "", "PEM roots to verify the server with")
	cert := fs.String("cert", "", "client certificate chain (PEM)")
	key := fs.String("key", "", "client key (PEM)")
	serverName := fs.String("servername", "", "the server's name to verify")
	insecure := fs.Bool("insecure", false, "do not verify the server")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg := &tls.Config{ServerName: *serverName, InsecureSkipVerify: *insecure, MinVersion: tls.VersionTLS13} //nolint:gosec // the test app's own flag, to check the mesh refuses such clients
	if *ca != "" {
		pem, err := os.ReadFile(*ca)
		if err != nil {
			return err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no certificate", *ca)
		}
	}
	if *cert != "" {
		c, err := tls.LoadX509KeyPair(*cert, *key)
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := client.Get(fs.Arg(0))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Print(string(body))
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		fmt.Printf("server certificate: %s serial %s\n", resp.TLS.PeerCertificates[0].Subject.CommonName, resp.TLS.PeerCertificates[0].SerialNumber)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

func secret(args []string) error {
	fs := flag.NewFlagSet("secret", flag.ContinueOnError)
	file := fs.String("file", "", "the file to show the digest of")
	env := fs.String("env", "", "the variable to show the digest of")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return err
	}
	value, ok := os.LookupEnv(*env)
	if !ok {
		return fmt.Errorf("no variable %s", *env)
	}
	fmt.Printf("file %s: %d bytes, sha256 %x\nenv %s: %d bytes, sha256 %x\n", *file, len(data), sha256.Sum256(data), *env, len(value), sha256.Sum256([]byte(value)))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	return nil
}
