// Package dashboard is the web dashboard a daemon serves on its local API
// address: hand-written HTML, CSS and JavaScript embedded in the binary,
// which read the same /api/v0 views the CLI reads.
//
// The page takes its token from the URL's fragment and keeps the page the
// fragment names: "#token=T" opens Markets, "#/node?token=T" (or
// "#token=T&/node") This node, "#/lease/ID?token=T" a lease; the token is
// then removed from the address. Routes: #/markets[/KEY], #/offers,
// #/node, #/lease/ID, #/provider.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/dashboard/"

// contentSecurityPolicy allows only the page's own files and API: no inline
// script, nothing fetched from elsewhere, no framing. The one font is the
// dashboard's own (static/fonts, see FONT.md).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Handler serves the dashboard's files under Prefix. The files hold no
// data: the page asks the API for everything with the token the user gives.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
