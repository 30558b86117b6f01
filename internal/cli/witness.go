package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/cas/witness"
)

func newWitness(s Streams) *cobra.Command {
	cmd := &cobra.Command{Use: "witness", Short: "Run a transparency-log witness: cosign CAS's checkpoints only while its log never forks or rolls back"}
	cmd.AddCommand(newWitnessKey(s), newWitnessServe(s))
	return cmd
}

func newWitnessKey(s Streams) *cobra.Command {
	var dir, name string
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Print the witness's verifier key (made in --dir when there is none), for CAS resources and policies to name",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if dir == "" || name == "" {
				return errors.New("--dir and --name are required")
			}
			_, vkey, err := witness.Key(dir, name)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(s.Out, vkey)
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the witness's folder: its key and the checkpoints it cosigned")
	cmd.Flags().StringVar(&name, "name", "", "the witness's name, as its cosignatures carry it (a host name of yours, e.g. witness.example.com)")
	return cmd
}

func newWitnessServe(s Streams) *cobra.Command {
	var dir, name, listen string
	var logs []string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the C2SP tlog-witness protocol (POST /add-checkpoint) for the logs named by --log",
		Long: "serve cosigns a checkpoint of a log named by --log (its key, as CAS's GET /v1/log/key\n" +
			"serves it) only when it extends the last one the witness cosigned for that\n" +
			"log, kept in --dir and synced to disk before it answers. A log that rolls back or shows\n" +
			"another history is refused; both checkpoints are kept in --dir/conflicts.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || name == "" || len(logs) == 0 {
				return errors.New("--dir, --name and at least one --log are required")
			}
			signer, vkey, err := witness.Key(dir, name)
			if err != nil {
				return err
			}
			var known []witness.Log
			for _, k := range logs {
				l, err := witness.ParseLog(k)
				if err != nil {
					return fmt.Errorf("--log: %w", err)
				}
				known = append(known, l)
			}
			log := slog.New(slog.NewJSONHandler(s.Err, nil))
			w, err := witness.New(dir, signer, known, log)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			log.Info("witness serving", "address", ln.Addr().String(), "key", vkey, "logs", len(known))
			return serveUntilDone(cmd.Context(), ln, w.Handler())
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "the witness's folder: its key and the checkpoints it cosigned")
	cmd.Flags().StringVar(&name, "name", "", "the witness's name, as its cosignatures carry it")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7380", "address to serve on")
	cmd.Flags().StringArrayVar(&logs, "log", nil, "a log to cosign for: its verifier key (repeatable)")
	return cmd
}

// serveUntilDone serves h on ln until ctx ends, then lets requests in
// flight finish.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shut)
}
