package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/policy/policyres"
)

// linkFlags say which place in its policy's chain a document is signed
// for: stated outright, taken from the SignedPolicy of the current
// version, or asked of CAS.
type linkFlags struct {
	version     int
	predecessor string
	after       string
}

func (l *linkFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.IntVar(&l.version, "version", 0, "the version to sign the policy as: 1 for a new policy, else one more than CAS's current (with --predecessor)")
	fl.StringVar(&l.predecessor, "predecessor", "", "with --version N > 1: the digest of version N-1 (status.hash of its SignedPolicy)")
	fl.StringVar(&l.after, "after", "", "the SignedPolicy of the current version (as applied): sign the policy as the version after it")
}

func (l *linkFlags) given() bool { return l.version != 0 || l.predecessor != "" || l.after != "" }

// resolve is the link doc is signed with; cas is asked only when no
// link flag is set and its own flags say where CAS is.
func (l *linkFlags) resolve(ctx context.Context, s Streams, doc *policy.Document, cas *conn.Flags) (policy.Link, error) {
	switch {
	case l.after != "" && (l.version != 0 || l.predecessor != ""):
		return policy.Link{}, errors.New("--after and --version/--predecessor: choose one")
	case l.after != "":
		return linkAfter(l.after, doc.Name)
	case l.given():
		link := policy.Link{Version: l.version, Predecessor: l.predecessor}
		if err := link.Validate(); err != nil {
			return link, fmt.Errorf("--version/--predecessor: %w", err)
		}
		return link, nil
	case cas != nil && (cas.URL != "" || cas.Cluster != ""):
		c, done, err := cas.Client(ctx, s.Err)
		if err != nil {
			return policy.Link{}, err
		}
		defer done()
		link, err := c.LinkFor(ctx, doc.Name, doc.Digest())
		if err != nil {
			return link, fmt.Errorf("asking CAS for the current version of %s: %w", doc.Name, err)
		}
		return link, nil
	}
	return policy.Link{}, errors.New("say which version this is: --version 1 for a new policy, --after CURRENT.yaml (the current version's SignedPolicy), or --cas/--cluster to ask CAS")
}

// linkAfter is the link of the version after the SignedPolicy in file.
func linkAfter(file, name string) (policy.Link, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return policy.Link{}, fmt.Errorf("--after: %w", err)
	}
	sp, err := policyres.ParseSignedPolicy(data)
	if err != nil {
		return policy.Link{}, fmt.Errorf("--after %s: %w", file, err)
	}
	link, err := policyres.LinkAfter(sp, name)
	if err != nil {
		return link, fmt.Errorf("--after %s: %w", file, err)
	}
	return link, nil
}
