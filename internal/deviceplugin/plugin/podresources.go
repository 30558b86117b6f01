package plugin

import (
	"context"
	"fmt"
	"time"

	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPodResourcesSocket is where kubelet serves its pod-resources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// InUse asks kubelet's pod-resources API which devices of each resource are
// assigned to containers now.
func InUse(ctx context.Context, socket string) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := dial(socket)
	if err != nil {
		return nil, fmt.Errorf("connecting to kubelet's pod-resources API: %w", err)
	}
	defer func() { _ = conn.Close() }()
	resp, err := podresourcesapi.NewPodResourcesListerClient(conn).List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("listing pod resources: %w", err)
	}
	inUse := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				inUse[d.GetResourceName()] = append(inUse[d.GetResourceName()], d.GetDeviceIds()...)
			}
		}
	}
	return inUse, nil
}
