package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/kubeconfig"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/store/backup"
	"github.com/cloister-cc/cloister/internal/cas/store/kubestore"
)

// stateFlags reach a CAS resource's state on the API: backup and restore
// need no CAS running, only its CASStateRecord objects.
type stateFlags struct {
	cluster, kubeconfig, kubeContext string
}

func (f *stateFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.cluster, "cluster", "", "the CAS resource, NAMESPACE/NAME, whose state this is")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&f.kubeContext, "context", "", "kubeconfig context")
	_ = cmd.MarkFlagRequired("cluster")
}

func (f *stateFlags) open() (client.WithWatch, kubestore.Options, error) {
	ref, err := conn.ParseRef(f.cluster)
	if err != nil {
		return nil, kubestore.Options{}, fmt.Errorf("--cluster: %w", err)
	}
	cfg, err := kubeconfig.RESTConfig(f.kubeconfig, f.kubeContext)
	if err != nil {
		return nil, kubestore.Options{}, err
	}
	scheme, err := conn.SchemeWith(servicesv1beta1.AddToScheme)
	if err != nil {
		return nil, kubestore.Options{}, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, kubestore.Options{}, err
	}
	return c, kubestore.Options{Namespace: ref.Namespace, CAS: ref.Name}, nil
}

func newCASBackup(s Streams) *cobra.Command {
	var f stateFlags
	var out string
	cmd := &cobra.Command{
		Use:   "backup --cluster NS/NAME --out FILE",
		Short: "Export a CAS's state, sealed as stored: only its root seed (the recovery owners' shares) opens the backup",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, opts, err := f.open()
			if err != nil {
				return err
			}
			return backupCAS(cmd.Context(), s.Out, c, opts, out)
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&out, "out", "", "file the backup is written to (- for standard output)")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func backupCAS(ctx context.Context, w io.Writer, c client.WithWatch, opts kubestore.Options, out string) error {
	ref := opts.Namespace + "/" + opts.CAS
	b, err := kubestore.Export(ctx, c, opts)
	if err != nil {
		return err
	}
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if out == "-" {
		_, err := w.Write(append(data, '\n'))
		return err
	}
	if err := backup.WriteFile(out, data); err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "backed up CAS %s: %d records to %s, sealed as CAS stores them (only its root seed opens them). Keep a copy away from the cluster; cloister cas restore brings it into a new CAS, which its recovery owners then recover.\n", ref, len(b.Records), out)
	return err
}

func newCASRestore(s Streams) *cobra.Command {
	var f stateFlags
	cmd := &cobra.Command{
		Use:   "restore --cluster NS/NAME BACKUP.json",
		Short: "Restore a CAS backup as the state of a CAS that has none; its recovery owners then recover it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, opts, err := f.open()
			if err != nil {
				return err
			}
			return restoreCAS(cmd.Context(), s.Out, c, opts, args[0])
		},
	}
	f.add(cmd)
	return cmd
}

func restoreCAS(ctx context.Context, w io.Writer, c client.WithWatch, opts kubestore.Options, file string) error {
	b, err := backup.ReadFile(file)
	if err != nil {
		return err
	}
	if err := kubestore.Restore(ctx, c, opts, b); err != nil {
		return err
	}
	ref := opts.Namespace + "/" + opts.CAS
	_, err = fmt.Fprintf(w, "restored %d records of CAS %s (taken %s) as the state of CAS %s. Its replicas wait in recovery for the root seed: "+
		"the recovery owners run cloister cas recover --cluster %s --shares shares.json --key OWNER.pem (create the CAS resource first if it does not exist). "+
		"A replica that served a newer state refuses this one, naming its generation, until they accept it (--accept-generation GENERATION).\n",
		len(b.Records), b.CAS, b.Taken.Format(time.RFC3339), ref, ref)
	return err
}
