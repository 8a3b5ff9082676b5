package node

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/suanli/suanli/node/internal/httpapi"
)

// startAPI serves the node's API on addr (see node/internal/httpapi).
func startAPI(n *Node, addr string) (*httpapi.Server, error) {
	return httpapi.Start(httpapi.Config{
		API: n, Repo: n.repo, Addr: addr,
		Metrics:  promhttp.HandlerFor(n.metrics.Gatherer(), promhttp.HandlerOpts{}),
		OnReject: func(reason string) { n.metrics.Rejects.WithLabelValues("api", reason).Inc() },
	})
}

// IssueReadOnlyToken adds a read-only API token to a repo and returns it.
// A running daemon accepts it from its next request on.
func IssueReadOnlyToken(repo string) (string, error) {
	if !IsInitialized(repo) {
		return "", fmt.Errorf("%w at %s: run `suanli init`", ErrNotInitialized, repo)
	}
	return httpapi.IssueReadOnlyToken(repo)
}

// RevokeReadOnlyTokens removes every read-only token of a repo.
func RevokeReadOnlyTokens(repo string) error { return httpapi.RevokeReadOnlyTokens(repo) }
