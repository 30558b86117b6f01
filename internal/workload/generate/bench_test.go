package generate

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// generate over 1,000 resources with every image already known (a warm
// digest cache): the goal is 2 s.
func BenchmarkRewrite1000Resources(b *testing.B) {
	var in strings.Builder
	for i := range 1000 {
		doc := strings.Replace(strings.SplitN(threeTier, "\n---\n", 2)[0], "name: web\n", fmt.Sprintf("name: web-%d\n", i), 1)
		if i > 0 {
			in.WriteString("---\n")
		}
		in.WriteString(doc)
		in.WriteString("\n")
	}
	data := []byte(in.String())
	opts := options()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_, res, err := Rewrite(context.Background(), data, opts)
		if err != nil || len(res.Workloads) != 1000 {
			b.Fatalf("%v, %d workloads", err, len(res.Workloads))
		}
	}
}
