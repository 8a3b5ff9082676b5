package dashboard

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestAssetsSelfContained: the embedded page names no other site (no CDN,
// nothing fetched at run time) and uses no inline script, which the
// Content-Security-Policy would refuse anyway.
func TestAssetsSelfContained(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	n := 0
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(b), -1) {
			if m != "http://www.w3.org" { // the SVG namespace, an identifier
				t.Errorf("%s names another site: %s", p, m)
			}
		}
		if strings.HasSuffix(p, ".html") && regexp.MustCompile(`<script>|\son[a-z]+="`).Match(b) {
			t.Errorf("%s has inline script", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 3 {
		t.Fatalf("embedded %d files, want index.html, app.js, app.css", n)
	}
}

func TestHandlerServesPage(t *testing.T) {
	for path, ctype := range map[string]string{Prefix: "text/html", Prefix + "app.js": "javascript", Prefix + "app.css": "text/css"} {
		rec := httptest.NewRecorder()
		Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Content-Type"), ctype) {
			t.Errorf("GET %s = %d %q, want 200 %s", path, rec.Code, rec.Header().Get("Content-Type"), ctype)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Prefix+"nothing.js", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("GET a missing file = %d, want 404", rec.Code)
	}
}
