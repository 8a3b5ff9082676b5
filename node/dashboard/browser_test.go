package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/devnet"
)

const h100 = "nvidia-h100-sxm5-80gb"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// chromium finds Debian's chromium (installed by .ci/run). Without it the
// test is skipped on a developer's machine and fails in CI.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and CI is set: .ci/run installs it (apt-get install -y chromium)")
	}
	t.Skip("chromium is not installed: `apt-get install -y chromium` to run the dashboard's browser tests")
	return ""
}

// browser starts one headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshotDir is where pages are saved: the test's temp dir, or
// $SUANLI_SCREENSHOTS when set (to look at them after the test).
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("SUANLI_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// step runs browser actions with their own deadline, so a page that never
// shows what is awaited fails with the step's name.
func step(t *testing.T, ctx context.Context, name string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`document.body.innerText`))
		t.Fatalf("%s: %v\npage text: %s", name, err, body)
	}
}

// into runs an action that returns a value and keeps the value in dst.
func into[T any](dst *T, a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, tg)
		*dst = v
		return chromedp.Void{}, err
	}
}

// eval runs JavaScript for its effect.
func eval(js string) chromedp.Action[chromedp.Void] {
	var ignored any
	return into(&ignored, chromedp.Evaluate[any](js))
}

func shot(t *testing.T, dir, name string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		buf, err := chromedp.FullScreenshot(100)(ctx, tg)
		if err != nil {
			return err
		}
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			return err
		}
		t.Logf("screenshot %s (%d bytes)", p, len(buf))
		return nil
	})
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: gave up waiting (last: %s)", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestDashboardInBrowser drives the dashboard of a two-node devnet in
// headless Chromium: the login page without a token, the markets page
// with the depth chart and a trade after it happens, cancelling an order
// by a click, a lease with its receipts, the provider's GPUs, the offer
// search, and a phone-sized screen.
func TestDashboardInBrowser(t *testing.T) {
	bctx := browser(t)
	dir := screenshotDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	net, err := devnet.Start(ctx, devnet.Config{Providers: 1, Buyers: 1, Dir: t.TempDir(), Logger: quiet,
		NodeOptions: []node.Option{node.WithExecutors(node.ExecReserve, node.ExecProcess)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	if err := net.WaitPublished(ctx); err != nil {
		t.Fatal(err)
	}
	provider, buyer := net.Providers[0], net.Buyers[0]
	buyerURL, err := node.DashboardURL(buyer.Repo(), false)
	if err != nil {
		t.Fatal(err)
	}
	base, tok, _ := strings.Cut(buyerURL, "#token=")

	// Without the token: the login, and no data.
	var viewKids int
	var text string
	step(t, bctx, "login without a token",
		chromedp.Navigate(base),
		chromedp.WaitVisible(chromedp.CSS("#login")),
		into(&viewKids, chromedp.Evaluate[int](`document.getElementById("view").children.length`)),
		into(&text, chromedp.Text(chromedp.CSS("body"))),
		shot(t, dir, "login"))
	if viewKids != 0 || strings.Contains(text, buyer.PeerID().String()) {
		t.Errorf("login page shows data: %d view elements, text %q", viewKids, text)
	}
	var errText string
	step(t, bctx, "login with a wrong token",
		chromedp.Navigate(base+"#token="+strings.Repeat("0", 64)),
		chromedp.WaitVisible(chromedp.CSS("#login")),
		into(new(bool), chromedp.Poll[bool](`document.getElementById("login-error").textContent !== ""`)),
		into(&errText, chromedp.Text(chromedp.CSS("#login-error"))))
	if !strings.Contains(errText, "refused") {
		t.Errorf("login error after a wrong token = %q, want it refused", errText)
	}
	// Typing the token into the form logs in.
	step(t, bctx, "log in by the form",
		chromedp.SendKeys(chromedp.CSS("#token"), tok),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS("#nav")),
		chromedp.WaitNotVisible(chromedp.CSS("#login")),
		// No market joined yet, but the provider's offer is in the DHT:
		// the fresh node lists its market, not joined, and joins nothing.
		chromedp.WaitVisible(chromedp.CSS(`table.markets tr.unjoined[data-market="`+h100+`"]`)),
		into(&text, chromedp.Text(chromedp.CSS(`table.markets tr[data-market="`+h100+`"]`))),
		shot(t, dir, "markets-fresh"))
	if !strings.Contains(text, "not yet") || !strings.Contains(text, "2.") {
		t.Errorf("fresh node's market row = %q, want it not joined, with the offer's price", text)
	}
	if st, err := buyer.Status(ctx); err != nil || len(st.Markets) != 0 {
		t.Errorf("after showing the markets, status = %+v, %v; want no market joined", st.Markets, err)
	}
	// 算力 in the header is drawn with the dashboard's own two glyphs (no
	// CJK font is installed here); a buyer-only node has no Provider tab.
	var brandFont, providerTab bool
	step(t, bctx, "brand font and tabs",
		into(&brandFont, chromedp.Poll[bool](`document.fonts.status === "loaded" && document.fonts.check('700 17px "Suanli Brand"', "算力") &&
			[...document.fonts].some(f => f.family.includes("Suanli Brand") && f.status === "loaded")`)),
		into(&providerTab, chromedp.Evaluate[bool](`document.querySelector('nav a[data-route="provider"]').offsetParent !== null`)))
	if !brandFont || providerTab {
		t.Errorf("brand font loaded %v, Provider tab shown on a buyer-only node %v; want true, false", brandFont, providerTab)
	}

	// A provider asks; the buyer's page shows the ask in the depth chart.
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 4, Price: "2.30", MinDuration: "1s", Expires: "30m"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the ask in the buyer's book", func() (bool, string) {
		bk, err := buyer.Book(ctx, h100, "USD")
		return err == nil && bk.BestAsk == "2.30", fmt.Sprint(bk, err)
	})
	step(t, bctx, "depth chart",
		eval(`location.hash = "#/markets/`+h100+`"`),
		chromedp.WaitVisible(chromedp.CSS(`#depth svg path.asks`)),
		chromedp.WaitVisible(chromedp.CSS(`button[data-market="`+h100+`"]`)))
	// axes is how many ticks the chart at sel has on its shorter axis.
	axes := func(sel string) (n int) {
		step(t, bctx, "axes of "+sel, into(&n, chromedp.Evaluate[int](fmt.Sprintf(`(() => { const s = document.querySelector(%q);
			return s ? Math.min(s.querySelectorAll(".x-tick").length, s.querySelectorAll(".y-tick").length) : -1 })()`, sel))))
		return n
	}

	// A trade happens: the page shows it, and the price history a point.
	// The bid runs a command on the leased GPUs: its output is on the lease page.
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.40", Duration: "1h", Expires: "30m",
		Exec: []string{"/bin/sh", "-c", "echo hello-from-the-lease; echo warn-on-stderr >&2; exec sleep 300"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(bid.Fills) != 1 {
		t.Fatalf("bid = %+v, want one fill", bid)
	}
	fill := bid.Fills[0]
	var spot string
	step(t, bctx, "trade on the markets page",
		chromedp.WaitVisible(chromedp.CSS(`#trades tr[data-fill="`+fill.ID+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#history svg g.series-type[data-lease-type="`+fill.LeaseType+`"] circle.spot-dot`)),
		into(&spot, chromedp.Text(chromedp.CSS(".v-spot"))),
		shot(t, dir, "markets"))
	if spot != fill.Price {
		t.Errorf("spot on the page = %q, want the trade's %s", spot, fill.Price)
	}
	// Both charts have axes with ticks and titles; the history's x axis is time.
	var titles, otherTypes int
	var legend string
	step(t, bctx, "chart axes",
		into(&titles, chromedp.Evaluate[int](`document.querySelectorAll("#depth .axis-title, #history .axis-title").length`)),
		into(&otherTypes, chromedp.Evaluate[int](`document.querySelectorAll('#history g.series-type:not([data-lease-type="`+fill.LeaseType+`"])').length`)),
		into(&legend, chromedp.Text(chromedp.CSS("#history-legend"))))
	if d, h := axes("#depth svg"), axes("#history svg"); d < 2 || h < 2 || titles != 4 {
		t.Errorf("depth chart %d ticks, history %d ticks per axis, %d axis titles; want at least 2 and 4", d, h, titles)
	}
	if otherTypes != 0 || !strings.Contains(legend, fill.LeaseType+" (1)") {
		t.Errorf("history: %d series of other lease types, legend %q; want only %s with one fill", otherTypes, legend, fill.LeaseType)
	}
	// At 1400 px the trades table fits its card.
	var cut bool
	step(t, bctx, "trades at 1400 px",
		chromedp.EmulateViewport(1400, 900),
		chromedp.WaitVisible(chromedp.CSS(`#trades tr[data-fill="`+fill.ID+`"]`)),
		into(&cut, chromedp.Evaluate[bool](`(() => { const w = document.querySelector("#trades .tablewrap"); return w.scrollWidth > w.clientWidth })()`)),
		shot(t, dir, "markets-1400"),
		chromedp.EmulateViewport(1280, 900))
	if cut {
		t.Error("the trades table is cut at 1400 px")
	}

	// A resting bid, cancelled by a click.
	rest, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "1.00", Duration: "1h", Expires: "30m"})
	if err != nil {
		t.Fatal(err)
	}
	row := `#orders tr[data-order="` + rest.ID + `"]`
	step(t, bctx, "cancel by a click",
		eval(`location.hash = "#/node"`),
		chromedp.WaitVisible(chromedp.CSS(row+` button.cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`#leases tr[data-lease="`+fill.Lease+`"]`)),
		shot(t, dir, "node-before-cancel"),
		chromedp.Click(chromedp.CSS(row+` button.cancel`)),
		chromedp.WaitVisible(chromedp.CSS(row+` .pill.cancelled`)),
		shot(t, dir, "node"))
	if o, err := buyer.Order(ctx, rest.ID); err != nil || o.Status != "cancelled" {
		t.Errorf("order after the click = %+v, %v; want cancelled", o, err)
	}

	// The lease and its receipts (the devnet bills every second), what
	// runs and its output, as `suanli lease show` and `suanli logs` print.
	var command, output string
	step(t, bctx, "lease and receipts",
		chromedp.Click(chromedp.CSS(`#leases tr[data-lease="`+fill.Lease+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#lease-detail`)),
		chromedp.WaitVisible(chromedp.CSS(`#receipts tr[data-seq="2"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#log-output span.stderr`)),
		chromedp.WaitVisible(chromedp.CSS(`#endpoints`)),
		into(&command, chromedp.Text(chromedp.CSS(`#lease-workload dd[data-key="command"]`))),
		into(&output, chromedp.Text(chromedp.CSS(`#log-output`))),
		shot(t, dir, "lease"))
	if !strings.Contains(command, "hello-from-the-lease") || !strings.Contains(output, "hello-from-the-lease") || !strings.Contains(output, "warn-on-stderr") {
		t.Errorf("lease page: command %q, output %q; want the bid's command and both streams", command, output)
	}

	// The offer search, sorted by a click on a column.
	step(t, bctx, "offers",
		eval(`location.hash = "#/offers"`),
		chromedp.WaitVisible(chromedp.CSS(`#offers tr[data-provider="`+provider.PeerID().String()+`"]`)),
		chromedp.Click(chromedp.CSS(`#offers th.sortable:nth-child(6)`)),
		chromedp.WaitVisible(chromedp.CSS(`#offers th.sorted-desc`)),
		shot(t, dir, "offers"))

	// The provider's own dashboard: its GPUs, two held by the lease.
	providerURL, err := node.DashboardURL(provider.Repo(), true) // a read-only screen
	if err != nil {
		t.Fatal(err)
	}
	var held int
	step(t, bctx, "provider GPUs",
		chromedp.Navigate(providerURL),
		chromedp.WaitVisible(chromedp.CSS(`#nav`)),
		eval(`location.hash = "#/provider"`),
		chromedp.WaitVisible(chromedp.CSS(`#gpus .card:nth-child(8) .spark svg path.series`)),
		into(&held, chromedp.Evaluate[int](`document.querySelectorAll('#gpus .holder a[href="#/lease/`+fill.Lease+`"]').length`)),
		into(&providerTab, chromedp.Evaluate[bool](`document.querySelector('nav a[data-route="provider"]').offsetParent !== null`)),
		shot(t, dir, "provider"))
	if held != 2 || !providerTab {
		t.Errorf("provider page: %d GPUs shown held by the lease, Provider tab %v; want 2, true", held, providerTab)
	}
	if n := axes("#gpus .card:nth-child(8) .spark svg"); n < 2 {
		t.Errorf("a GPU's utilization chart has %d ticks on an axis, want at least 2", n)
	}
	// Read-only: marked so, and no Cancel button on the provider's resting ask.
	var cancels int
	step(t, bctx, "read-only screen",
		chromedp.WaitVisible(chromedp.CSS("#read-only")),
		eval(`location.hash = "#/node"`),
		chromedp.WaitVisible(chromedp.CSS(`#orders .pill.resting`)),
		into(&cancels, chromedp.Evaluate[int](`document.querySelectorAll("#orders button.cancel").length`)))
	if cancels != 0 {
		t.Errorf("read-only page shows %d Cancel buttons, want none", cancels)
	}

	// Each page opened directly by a link that carries the token (as a
	// fresh browser would: nothing stored), and by the login form on the
	// page's own address.
	for i, pg := range []struct{ url, route, wait string }{
		{buyerURL, "markets", `table.markets tr[data-market="` + h100 + `"]`},
		{buyerURL, "markets/" + h100, `#depth svg path.asks`},
		{buyerURL, "offers", `#offers tr[data-provider="` + provider.PeerID().String() + `"]`},
		{buyerURL, "node", `#leases tr[data-lease="` + fill.Lease + `"]`},
		{buyerURL, "lease/" + fill.Lease, `#log-output span.stderr`},
		{buyerURL, "provider", `#no-gpus`},
		{providerURL, "provider", `#gpus .holder a`},
		{providerURL, "lease/" + fill.Lease, `#receipts tr[data-seq="1"]`},
	} {
		base, tok, _ := strings.Cut(pg.url, "#token=")
		var hash string
		step(t, bctx, "open #/"+pg.route+" by its link",
			chromedp.Navigate(base),
			eval(`localStorage.clear()`),
			chromedp.Navigate("about:blank"),
			chromedp.Navigate(base+"#/"+pg.route+"?token="+tok),
			chromedp.WaitVisible(chromedp.CSS(pg.wait)),
			into(&hash, chromedp.Evaluate[string](`location.hash`)))
		if hash != "#/"+pg.route {
			t.Errorf("after opening #/%s?token=… the address is %q, want #/%s without the token", pg.route, hash, pg.route)
		}
		step(t, bctx, "open #/"+pg.route+" by the login form",
			eval(`localStorage.clear()`),
			chromedp.Reload(),
			chromedp.WaitVisible(chromedp.CSS("#login")),
			chromedp.SendKeys(chromedp.CSS("#token"), tok),
			chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
			chromedp.WaitVisible(chromedp.CSS(pg.wait)),
			shot(t, dir, fmt.Sprintf("direct-%d-%s", i, strings.SplitN(pg.route, "/", 2)[0])))
	}

	// The same markets page on a phone-sized screen.
	step(t, bctx, "phone",
		chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
		chromedp.Navigate(buyerURL),
		chromedp.WaitVisible(chromedp.CSS(`#depth svg path.asks`)),
		shot(t, dir, "markets-phone"))
	var overflow bool
	step(t, bctx, "no sideways scroll on a phone",
		into(&overflow, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth + 1`)))
	if overflow {
		t.Error("the markets page scrolls sideways on a 390 px screen")
	}

	// The buyer's peers gone: its page still shows its own state.
	var statusText string
	// The browser holds connections to the provider's API open: closing
	// must not wait on them, nor fail.
	if err := provider.Close(); err != nil {
		t.Errorf("closing the provider with its dashboard open: %v", err)
	}
	step(t, bctx, "peers gone",
		chromedp.EmulateViewport(1280, 900),
		eval(`location.hash = "#/node"`),
		chromedp.WaitVisible(chromedp.CSS(`#leases tr[data-lease="`+fill.Lease+`"]`)),
		into(new(bool), chromedp.Poll[bool](`document.getElementById("peer-count") !== null && document.getElementById("peer-count").textContent === "0"`)),
		// What the buyer owes the provider, from the countersigned receipts.
		chromedp.WaitVisible(chromedp.CSS(`table.settle tr[data-peer="`+provider.PeerID().String()+`"]`)),
		into(&statusText, chromedp.Text(chromedp.CSS("#status"))),
		shot(t, dir, "node-no-peers"))
	if !strings.HasPrefix(statusText, "updated ") {
		t.Errorf("status line = %q, want it to start with \"updated\"", statusText)
	}
}
