// Package nodelabel sets and removes labels on the plugin's own node, so a
// user never labels TEE nodes by hand (the "Insufficient nitro_enclaves"
// trap of the Nitro plugin), and the extended resources of its status a
// device plugin cannot count in devices (SGX's EPC, in bytes).
package nodelabel

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Node is the plugin's node in the API server.
type Node struct {
	Client kubernetes.Interface
	Name   string // NODE_NAME, from the downward API
}

// SetLabel sets key to *value, or removes it when value is nil. Only the
// one key is patched: other labels, and concurrent writers of them, are
// left alone.
func (n *Node) SetLabel(ctx context.Context, key string, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]*string{key: value}}})
	if err != nil {
		return err
	}
	if _, err := n.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling node %s with %s: %w", n.Name, key, err)
	}
	return nil
}

// MaxPods is the node's pod capacity.
func (n *Node) MaxPods(ctx context.Context) (int64, error) {
	node, err := n.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("reading node %s: %w", n.Name, err)
	}
	q, ok := node.Status.Capacity["pods"]
	if !ok {
		return 0, fmt.Errorf("node %s reports no pod capacity", n.Name)
	}
	return q.Value(), nil
}

// Labeler sets (value non-nil) or removes a label on the plugin's node.
type Labeler interface {
	SetLabel(ctx context.Context, key string, value *string) error
}

// Presence keeps Key=true on the node while a device is present and
// removes it when it is gone. A failed patch is retried on the next Sync.
type Presence struct {
	Labeler Labeler // nil: do nothing
	Key     string
	Log     *slog.Logger

	mu      sync.Mutex
	labeled *bool // what the node's label is known to be
}

// Sync brings the label in line with present.
func (p *Presence) Sync(ctx context.Context, present bool) {
	if p == nil || p.Labeler == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.labeled != nil && *p.labeled == present {
		return
	}
	var value *string
	if present {
		v := "true"
		value = &v
	}
	log := p.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := p.Labeler.SetLabel(ctx, p.Key, value); err != nil {
		log.Warn("labelling the node; retrying on the next scan", "label", p.Key, "present", present, "error", err)
		return
	}
	p.labeled = &present
	log.Info("node label set", "label", p.Key, "present", present)
}

// SetCapacity sets the extended resource name of the node's status
// capacity to value, or removes it when value is nil; the kubelet makes
// its allocatable the same. Only the one resource is patched.
func (n *Node) SetCapacity(ctx context.Context, name string, value *resource.Quantity) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": map[string]*resource.Quantity{name: value}}})
	if err != nil {
		return err
	}
	if _, err := n.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("setting %s of node %s: %w", name, n.Name, err)
	}
	return nil
}

// CapacitySetter sets (value non-nil) or removes an extended resource of
// the plugin's node.
type CapacitySetter interface {
	SetCapacity(ctx context.Context, name string, value *resource.Quantity) error
}

// Capacity keeps an extended resource of the node at what the last Sync
// found (0 removes it); a failed patch is retried on the next Sync.
type Capacity struct {
	Setter CapacitySetter // nil: do nothing
	Name   string
	Log    *slog.Logger

	mu    sync.Mutex
	known *int64 // what the node's status is known to say
}

// Sync brings the resource in line with value; err (value unknown)
// leaves it as it is and says so.
func (c *Capacity) Sync(ctx context.Context, value int64, err error) {
	if c == nil || c.Setter == nil {
		return
	}
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err != nil {
		log.Warn("reading the node's capacity; it is left as it was", "resource", c.Name, "error", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known != nil && *c.known == value {
		return
	}
	var q *resource.Quantity
	if value > 0 {
		q = resource.NewQuantity(value, resource.BinarySI)
	}
	if err := c.Setter.SetCapacity(ctx, c.Name, q); err != nil {
		log.Warn("setting the node's capacity; retrying on the next scan", "resource", c.Name, "value", value, "error", err)
		return
	}
	c.known = &value
	log.Info("node capacity set", "resource", c.Name, "value", value)
}
