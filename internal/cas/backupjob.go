package cas

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/cloister-cc/cloister/internal/cas/store/backup"
	"github.com/cloister-cc/cloister/internal/cas/store/kubestore"
)

// BackupConfig is the scheduled backup's (cloister-cas backup): it reads
// CAS's state on the API with a service account that may only read it,
// and writes it, sealed as stored, into a folder.
type BackupConfig struct {
	Store string
	Dir   string
	Keep  int
	// KubeConfig reaches the API; nil: the pod's service account.
	KubeConfig *rest.Config
}

// AddFlags registers the backup's flags.
func (c *BackupConfig) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Store, "store", "", "the state to back up: kubernetes:NAMESPACE/NAME (the CAS resource NAME's)")
	fs.StringVar(&c.Dir, "dir", "", "folder the backup is written to (a volume that outlives the CAS)")
	fs.IntVar(&c.Keep, "keep", 7, "how many of this CAS's backups stay in --dir; older ones are removed")
}

// Backup exports CAS's state once into cfg.Dir.
func Backup(ctx context.Context, cfg BackupConfig, log *slog.Logger) error {
	if cfg.Dir == "" {
		return errors.New("--dir is required: the folder the backup is written to")
	}
	ns, name, err := parseKubeStore(cfg.Store)
	if err != nil {
		return err
	}
	c, err := kubeClient(cfg.KubeConfig)
	if err != nil {
		return fmt.Errorf("--store %s: %w", cfg.Store, err)
	}
	b, err := kubestore.Export(ctx, c, kubestore.Options{Namespace: ns, CAS: name, Log: log})
	if err != nil {
		return err
	}
	path, err := backup.Save(cfg.Dir, b, cfg.Keep)
	if err != nil {
		return err
	}
	log.Info("backed up CAS's state, sealed as stored: only its root seed opens it", "cas", ns+"/"+name, "records", len(b.Records), "file", path, "keep", cfg.Keep)
	return nil
}
