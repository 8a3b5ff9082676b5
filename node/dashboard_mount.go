package node

import (
	"fmt"
	"strings"

	"github.com/suanli/suanli/node/client"
	"github.com/suanli/suanli/node/dashboard"
)

// DashboardURL is the address of the dashboard of the daemon running on a
// repo, with a login token in the URL's fragment (which a browser never
// sends to the server, nor in a Referer). With readOnly, a new read-only
// token is issued; otherwise the node's full token is used. The URL opens
// the Markets page; to open another, put its route before the token:
// "…/dashboard/#/lease/ID?token=…" (see package dashboard).
func DashboardURL(repo string, readOnly bool) (string, error) {
	ep, err := client.ReadEndpoint(repo)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(ep.Addr, "unix:") {
		return "", fmt.Errorf("node: the api.API listens on %s: a browser needs a host:port api.API (config \"api\")", ep.Addr)
	}
	tok := ep.Token
	if readOnly {
		if tok, err = IssueReadOnlyToken(repo); err != nil {
			return "", err
		}
	}
	return "http://" + ep.Addr + dashboard.Prefix + "#token=" + tok, nil
}
