package attest

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
)

// This file implements inclusive Canonical XML (1.0 and 1.1, without
// comments) for the subset of XML that signed SWID tags use: UTF-8, no
// DOCTYPE, no processing instructions other than the XML declaration, no
// xml:* attributes, no literal whitespace characters other than spaces in
// attribute values. Documents outside that subset return ErrRIMUnsupported
// (reported not-checked), never a guess. Within it the two canonical forms
// coincide: C14N 1.1 differs from 1.0 only in how xml:* attributes are
// inherited.
//
// Safety argument: RIM verification hashes the bytes this canonicalizer
// produces and then reads the golden measurements by parsing those same
// bytes. A canonicalization bug can therefore only make a genuine manifest
// fail to verify; it cannot make unsigned content be used.

const (
	nsXMLNS        = "http://www.w3.org/2000/xmlns/"
	nsXML          = "http://www.w3.org/XML/1998/namespace"
	maxXMLDepth    = 64
	maxXMLElements = 1 << 16
	maxXMLInScope  = 64 // namespace bindings in scope at once
)

type xnode struct {
	// element fields (text nodes have elem == false)
	elem     bool
	prefix   string
	local    string
	decls    []xml.Attr // namespace declarations as written (Name.Space "xmlns" or Name.Local "xmlns")
	attrs    []xml.Attr // other attributes, Name.Space holding the prefix
	children []*xnode
	parent   *xnode
	ns       map[string]string // in-scope prefix → URI ("" = default namespace)
	// text
	text string
}

// uri returns the namespace URI of the element's name.
func (n *xnode) uri() string { return n.ns[n.prefix] }

func (n *xnode) is(uri, local string) bool { return n.elem && n.local == local && n.uri() == uri }

func (n *xnode) child(uri, local string) *xnode {
	for _, c := range n.children {
		if c.is(uri, local) {
			return c
		}
	}
	return nil
}

func (n *xnode) childrenNamed(uri, local string) []*xnode {
	var out []*xnode
	for _, c := range n.children {
		if c.is(uri, local) {
			out = append(out, c)
		}
	}
	return out
}

func (n *xnode) attr(local string) (string, bool) {
	for _, a := range n.attrs {
		if a.Name.Space == "" && a.Name.Local == local {
			return a.Value, true
		}
	}
	return "", false
}

// textContent concatenates the node's descendant text.
func (n *xnode) textContent() string {
	if !n.elem {
		return n.text
	}
	var b strings.Builder
	for _, c := range n.children {
		b.WriteString(c.textContent())
	}
	return b.String()
}

var errC14NUnsupported = errors.New("outside the supported XML subset")

// parseXMLTree builds the document element's tree. Errors wrap
// errC14NUnsupported for well-formed XML this canonicalizer does not handle.
func parseXMLTree(doc []byte) (*xnode, error) {
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var root, cur *xnode
	elements := 0
	depth := 0
	first := true
	for {
		tok, err := d.RawToken()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.ProcInst:
			if t.Target == "xml" && first {
				enc := strings.ToLower(procInstParam(string(t.Inst), "encoding"))
				if enc != "" && enc != "utf-8" {
					return nil, fmt.Errorf("%w: encoding %q", errC14NUnsupported, enc)
				}
				break
			}
			return nil, fmt.Errorf("%w: processing instruction <?%s?>", errC14NUnsupported, t.Target)
		case xml.Directive:
			return nil, fmt.Errorf("%w: <!%s> directive", errC14NUnsupported, firstWord(string(t)))
		case xml.Comment:
			// dropped: the canonical forms used here are "without comments"
		case xml.CharData:
			if cur == nil {
				if len(bytes.TrimSpace(t)) != 0 {
					return nil, errors.New("text outside the document element")
				}
				break
			}
			if n := len(cur.children); n > 0 && !cur.children[n-1].elem {
				cur.children[n-1].text += string(t) // merge adjacent text (e.g. around comments)
			} else {
				cur.children = append(cur.children, &xnode{text: string(t), parent: cur})
			}
		case xml.StartElement:
			if cur == nil && root != nil {
				return nil, errors.New("more than one document element")
			}
			elements++
			depth++
			if elements > maxXMLElements || depth > maxXMLDepth {
				return nil, fmt.Errorf("document exceeds %d elements or depth %d", maxXMLElements, maxXMLDepth)
			}
			n := &xnode{elem: true, prefix: t.Name.Space, local: t.Name.Local, parent: cur, ns: map[string]string{}}
			if cur != nil {
				for k, v := range cur.ns {
					n.ns[k] = v
				}
			}
			seen := map[xml.Name]bool{}
			for _, a := range t.Attr {
				if seen[a.Name] {
					return nil, fmt.Errorf("attribute %s:%s repeated", a.Name.Space, a.Name.Local)
				}
				seen[a.Name] = true
				switch {
				case a.Name.Space == "" && a.Name.Local == "xmlns":
					n.decls = append(n.decls, a)
					n.ns[""] = a.Value
				case a.Name.Space == "xmlns":
					if a.Value == "" {
						return nil, fmt.Errorf("%w: prefix undeclaration xmlns:%s=\"\"", errC14NUnsupported, a.Name.Local)
					}
					if a.Name.Local == "xml" || a.Name.Local == "xmlns" || a.Value == nsXML || a.Value == nsXMLNS {
						return nil, fmt.Errorf("%w: declaration of reserved namespace", errC14NUnsupported)
					}
					n.decls = append(n.decls, a)
					n.ns[a.Name.Local] = a.Value
				case a.Name.Space == "xml":
					return nil, fmt.Errorf("%w: xml:%s attribute", errC14NUnsupported, a.Name.Local)
				default:
					if strings.ContainsAny(a.Value, "\t\n\r") {
						return nil, fmt.Errorf("%w: whitespace character in attribute %s (attribute-value normalization not implemented)",
							errC14NUnsupported, a.Name.Local)
					}
					n.attrs = append(n.attrs, a)
				}
			}
			if len(n.ns) > maxXMLInScope {
				return nil, fmt.Errorf("more than %d namespace bindings in scope", maxXMLInScope)
			}
			if _, ok := n.ns[n.prefix]; n.prefix != "" && !ok {
				return nil, fmt.Errorf("undeclared prefix %q on <%s:%s>", n.prefix, n.prefix, n.local)
			}
			for _, a := range n.attrs {
				if _, ok := n.ns[a.Name.Space]; a.Name.Space != "" && !ok {
					return nil, fmt.Errorf("undeclared prefix %q on attribute %s", a.Name.Space, a.Name.Local)
				}
			}
			if cur == nil {
				root = n
			} else {
				cur.children = append(cur.children, n)
			}
			cur = n
		case xml.EndElement:
			if cur == nil || t.Name.Space != cur.prefix || t.Name.Local != cur.local {
				return nil, fmt.Errorf("mismatched end tag </%s>", t.Name.Local)
			}
			depth--
			cur = cur.parent
		}
		first = false
	}
	if root == nil {
		return nil, errors.New("no document element")
	}
	if cur != nil {
		return nil, errors.New("unclosed element")
	}
	return root, nil
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func procInstParam(inst, name string) string {
	i := strings.Index(inst, name+"=")
	if i < 0 {
		return ""
	}
	v := inst[i+len(name)+1:]
	if len(v) < 2 {
		return ""
	}
	q := v[0]
	if j := strings.IndexByte(v[1:], q); j >= 0 {
		return v[1 : 1+j]
	}
	return ""
}

// canonicalize writes the inclusive canonical form of the subtree at apex,
// omitting the subtree skip (the enveloped signature) when non-nil. The
// apex renders every in-scope namespace, as a document subset must.
func canonicalize(apex, skip *xnode) ([]byte, error) {
	var b bytes.Buffer
	if err := c14nElem(&b, apex, nil, skip); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func c14nElem(b *bytes.Buffer, n *xnode, rendered map[string]string, skip *xnode) error {
	b.WriteByte('<')
	writeQName(b, n.prefix, n.local)

	// Namespace nodes: those in scope whose binding differs from what the
	// nearest rendered ancestor has in scope. The default namespace "" is
	// rendered as xmlns="" only to undo a non-empty rendered default.
	prefixes := make([]string, 0, len(n.ns))
	for p, uri := range n.ns {
		old, had := rendered[p]
		if p == "" {
			if uri == "" && (!had || old == "") {
				continue
			}
		}
		if had && old == uri {
			continue
		}
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes) // "" (default) sorts first
	for _, p := range prefixes {
		if p == "" {
			b.WriteString(` xmlns="`)
		} else {
			b.WriteString(` xmlns:`)
			b.WriteString(p)
			b.WriteString(`="`)
		}
		escapeAttr(b, n.ns[p])
		b.WriteByte('"')
	}

	// Attributes sorted by (namespace URI, local name); unqualified first.
	attrs := make([]xml.Attr, len(n.attrs))
	copy(attrs, n.attrs)
	uriOf := func(a xml.Attr) string {
		if a.Name.Space == "" {
			return ""
		}
		return n.ns[a.Name.Space]
	}
	sort.SliceStable(attrs, func(i, j int) bool {
		ui, uj := uriOf(attrs[i]), uriOf(attrs[j])
		if ui != uj {
			return ui < uj
		}
		return attrs[i].Name.Local < attrs[j].Name.Local
	})
	for i := 1; i < len(attrs); i++ {
		if uriOf(attrs[i]) == uriOf(attrs[i-1]) && attrs[i].Name.Local == attrs[i-1].Name.Local {
			return fmt.Errorf("attribute {%s}%s repeated under two prefixes", uriOf(attrs[i]), attrs[i].Name.Local)
		}
	}
	for _, a := range attrs {
		b.WriteByte(' ')
		writeQName(b, a.Name.Space, a.Name.Local)
		b.WriteString(`="`)
		escapeAttr(b, a.Value)
		b.WriteByte('"')
	}
	b.WriteByte('>')

	for _, c := range n.children {
		if c == skip {
			continue
		}
		if !c.elem {
			escapeText(b, c.text)
			continue
		}
		if err := c14nElem(b, c, n.ns, skip); err != nil {
			return err
		}
	}
	b.WriteString("</")
	writeQName(b, n.prefix, n.local)
	b.WriteByte('>')
	return nil
}

func writeQName(b *bytes.Buffer, prefix, local string) {
	if prefix != "" {
		b.WriteString(prefix)
		b.WriteByte(':')
	}
	b.WriteString(local)
}

func escapeText(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '\r':
			b.WriteString("&#xD;")
		default:
			b.WriteByte(c)
		}
	}
}

func escapeAttr(b *bytes.Buffer, s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '"':
			b.WriteString("&quot;")
		case '\t':
			b.WriteString("&#x9;")
		case '\n':
			b.WriteString("&#xA;")
		case '\r':
			b.WriteString("&#xD;")
		default:
			b.WriteByte(c)
		}
	}
}
