package kubestore

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/internal/cas/store/backup"
)

// Export reads the state of the CAS opts names, as stored (sealed under
// keys from its root seed), into a backup taken now.
func Export(ctx context.Context, c client.WithWatch, opts Options) (*backup.Backup, error) {
	s, err := Open(ctx, c, opts)
	if err != nil {
		return nil, err
	}
	return backup.Export(s, opts.Namespace+"/"+opts.CAS, time.Now())
}
