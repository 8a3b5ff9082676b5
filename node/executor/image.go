package executor

import (
	"fmt"
	"path"
	"strings"

	"github.com/distribution/reference"
)

// ImagePolicy is the provider's allow-list of images, by pattern or
// digest. The zero ImagePolicy allows nothing: a provider that enables
// docker chooses what may run on its machines.
//
// A pattern is matched (path.Match) against the reference's familiar name
// ("suanli-test/echo", "ghcr.io/org/app") and its full name
// ("docker.io/suanli-test/echo"), tags and digests left out, so
// "ghcr.io/org/*" allows every image of that organisation. A pattern that
// is a digest ("sha256:…") allows only references pinned to that digest
// (any/name@sha256:…), whose image the engine then proves to have it.
// Either is checked on the reference before the engine pulls anything.
type ImagePolicy struct {
	Patterns []string
}

// ParseImagePolicy checks patterns and returns the policy.
func ParseImagePolicy(patterns []string) (ImagePolicy, error) {
	for _, p := range patterns {
		if p == "" {
			return ImagePolicy{}, fmt.Errorf("executor: empty image pattern")
		}
		if strings.HasPrefix(p, "sha256:") {
			if len(p) != len("sha256:")+64 {
				return ImagePolicy{}, fmt.Errorf("executor: image digest %q: want sha256: and 64 hex digits", p)
			}
			continue
		}
		if _, err := path.Match(p, ""); err != nil {
			return ImagePolicy{}, fmt.Errorf("executor: image pattern %q: %v", p, err)
		}
	}
	return ImagePolicy{Patterns: patterns}, nil
}

// ParseImage checks that ref is a well-formed image reference and returns
// it normalized (docker.io/library/… for short names).
func ParseImage(ref string) (reference.Named, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: no image", ErrRefused)
	}
	n, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: image %q: %v", ErrRefused, ref, err)
	}
	return n, nil
}

// AllowsName reports whether the reference's name matches a pattern.
func (p ImagePolicy) AllowsName(n reference.Named) bool {
	names := []string{reference.FamiliarName(n), n.Name()}
	for _, pat := range p.Patterns {
		for _, name := range names {
			if ok, _ := path.Match(pat, name); ok {
				return true
			}
		}
	}
	return false
}

// AllowsDigest reports whether one of the image's IDs or digests is
// allowed by a digest pattern.
func (p ImagePolicy) AllowsDigest(ids ...string) bool {
	for _, pat := range p.Patterns {
		if !strings.HasPrefix(pat, "sha256:") {
			continue
		}
		for _, id := range ids {
			if id == pat || strings.HasSuffix(id, "@"+pat) {
				return true
			}
		}
	}
	return false
}

// AllowsRef reports whether the reference may run, by name or by the
// digest it is pinned to, and whether it is allowed by that digest only
// (the image must then prove to have it).
func (p ImagePolicy) AllowsRef(n reference.Named) (ok, byDigest bool) {
	if p.AllowsName(n) {
		return true, false
	}
	if c, pinned := n.(reference.Canonical); pinned && p.AllowsDigest(c.Digest().String()) {
		return true, true
	}
	return false, false
}
