package generate

import (
	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"
)

// merge makes dst hold src's data while keeping what it can of dst: key
// order, comments and scalar style where a value did not change, list
// items of the same name where a list was reordered or grew.
func merge(dst, src *kyaml.Node) {
	if dst.Kind != src.Kind {
		replace(dst, src)
		return
	}
	switch dst.Kind {
	case kyaml.ScalarNode:
		if dst.Value != src.Value || dst.ShortTag() != src.ShortTag() {
			dst.Value, dst.Tag, dst.Style = src.Value, src.Tag, 0
		}
	case kyaml.MappingNode:
		mergeMap(dst, src)
	case kyaml.SequenceNode:
		mergeSeq(dst, src)
	default:
		replace(dst, src)
	}
}

func mergeMap(dst, src *kyaml.Node) {
	want := map[string]*kyaml.Node{}
	for i := 0; i+1 < len(src.Content); i += 2 {
		want[src.Content[i].Value] = src.Content[i+1]
	}
	var content []*kyaml.Node
	seen := map[string]bool{}
	for i := 0; i+1 < len(dst.Content); i += 2 {
		k, v := dst.Content[i], dst.Content[i+1]
		s, ok := want[k.Value]
		if !ok {
			// A field the data leaves out is its zero value; a user's
			// explicit "false" or "{}" says the same and stays.
			if isZero(v) {
				content = append(content, k, v)
			}
			continue
		}
		seen[k.Value] = true
		merge(v, s)
		content = append(content, k, v)
	}
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		if seen[k.Value] || isEmptyCollection(v) {
			continue
		}
		content = append(content, plain(k), plain(v))
	}
	dst.Content = content
}

// mergeSeq matches items by name when they have one (containers,
// volumes, env), by position otherwise.
func mergeSeq(dst, src *kyaml.Node) {
	byName := map[string]*kyaml.Node{}
	for _, n := range dst.Content {
		if name := itemName(n); name != "" {
			byName[name] = n
		}
	}
	var content []*kyaml.Node
	for i, s := range src.Content {
		var d *kyaml.Node
		if name := itemName(s); name != "" {
			d = byName[name]
		} else if len(dst.Content) == len(src.Content) {
			d = dst.Content[i]
		}
		if d == nil {
			content = append(content, plain(s))
			continue
		}
		merge(d, s)
		content = append(content, d)
	}
	dst.Content = content
}

func itemName(n *kyaml.Node) string {
	if n.Kind != kyaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" && n.Content[i+1].Kind == kyaml.ScalarNode {
			return n.Content[i+1].Value
		}
	}
	return ""
}

func replace(dst, src *kyaml.Node) {
	head, line, foot := dst.HeadComment, dst.LineComment, dst.FootComment
	*dst = *plain(src)
	dst.HeadComment, dst.LineComment, dst.FootComment = head, line, foot
}

// plain drops the JSON styles (quotes, flow) of a node made from JSON, so
// it prints as block YAML; the encoder still quotes strings that need it.
func plain(n *kyaml.Node) *kyaml.Node {
	c := *n
	c.Style = 0
	c.Content = nil
	for i := 0; i < len(n.Content); i++ {
		// Drop empty "resources: {}" and the like the API types print.
		if n.Kind == kyaml.MappingNode && i+1 < len(n.Content) && isEmptyCollection(n.Content[i+1]) && n.Content[i].Value == "resources" {
			i++
			continue
		}
		c.Content = append(c.Content, plain(n.Content[i]))
	}
	return &c
}

func isEmptyCollection(n *kyaml.Node) bool {
	return (n.Kind == kyaml.MappingNode || n.Kind == kyaml.SequenceNode) && len(n.Content) == 0
}

func isZero(n *kyaml.Node) bool {
	if isEmptyCollection(n) {
		return true
	}
	if n.Kind != kyaml.ScalarNode {
		return false
	}
	switch n.ShortTag() {
	case "!!null":
		return true
	case "!!bool":
		return n.Value == "false"
	case "!!int", "!!float":
		return n.Value == "0"
	case "!!str":
		return n.Value == ""
	}
	return false
}
