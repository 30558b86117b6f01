package cli

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/api/common"
	"github.com/cloister-cc/cloister/internal/dev/cluster"
	"github.com/cloister-cc/cloister/internal/dev/devcmd"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// newDevConfidentialRuntime prints the ConfidentialRuntime of the real
// node: its containerd keeps its configuration and socket in the node's
// folder, not where a real node's are.
// newDev is `cloister dev`: the dev cluster's commands, and the real
// node's ConfidentialRuntime, which needs the workload subsystem.
func newDev(s Streams) *cobra.Command {
	dev := devcmd.New(devcmd.Streams{Out: s.Out, Err: s.Err})
	dev.AddCommand(newDevConfidentialRuntime(s))
	return dev
}

func newDevConfidentialRuntime(s Streams) *cobra.Command {
	var f devcmd.ClusterFlags
	cmd := &cobra.Command{
		Use:   "confidential-runtime",
		Short: "Print the sim ConfidentialRuntime for the dev cluster's real node",
		Long: "confidential-runtime prints a ConfidentialRuntime (platform sim: insecure, for development only)\n" +
			"that installs the runtime handler into the real node's containerd, whose configuration and\n" +
			"socket are in the node's folder.",
		Example: "  cloister dev confidential-runtime | kubectl apply -f -",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, err := f.Cluster(devcmd.Streams{Out: s.Out, Err: s.Err})
			if err != nil {
				return err
			}
			n, err := c.RealNode(cluster.RealNodeTools{})
			if err != nil {
				return err
			}
			if !n.Exists() {
				return errors.New("the dev cluster has no real node: a confidential runtime needs a containerd (cloister dev up --real-node, as root)")
			}
			data, err := runtimeclass.SimRuntimeYAML(common.NodeSelector{cluster.LabelRealNode: "true"}, n.ContainerdConfig(), n.ContainerdSocket())
			if err != nil {
				return err
			}
			_, err = s.Out.Write(data)
			return err
		},
	}
	f.Register(cmd)
	return cmd
}
