package plugin

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletSocket is the name of kubelet's Registration socket in the plugin
// directory.
const KubeletSocket = "kubelet.sock"

// register announces s to the kubelet serving in dir.
func register(ctx context.Context, dir string, s *server) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := dial(filepath.Join(dir, KubeletSocket))
	if err != nil {
		return fmt.Errorf("connecting to kubelet: %w", err)
	}
	defer func() { _ = conn.Close() }()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(s.socket),
		ResourceName: s.resource,
		Options:      s.options(),
	})
	if err != nil {
		return fmt.Errorf("registering %s with kubelet: %w", s.resource, err)
	}
	return nil
}
