package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/inboxkit/inboxkit/internal/dbtest"
)

// chromium is the path of Debian's chromium; the test fails loudly, with
// the command that installs it, when it is missing (scripts/test installs
// it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("chromium is not installed: install it with 'apt-get install -y chromium' (scripts/test does it)")
	return ""
}

// A real browser loads the overview, opens the largest failure group,
// replays it at a rate after the confirmation, and sees the counts change
// (after the replay, and live on the overview while another replay runs),
// archives a new failure's group, finds it among the archived ones and
// restores it; a screenshot of each page goes to t.ArtifactDir (kept with
// go test -artifacts -outputdir DIR).
func TestConsoleBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("a real browser: skipped under -short")
	}
	t.Parallel()
	bin := chromium(t)
	db := dbtest.New(t, dbtest.SQLite)
	c := newConsoleCase(t, db, "ui", 3)
	failedTwiceThenProcessed(t, db, "hist-ui")
	base := startConsole(t, "--db", c.url, "--broker", rabbitURL, "--dlq", c.dlqName, "--operator", "browser-tester")
	dir := t.ArtifactDir()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox,                           // a container has no user namespaces for the sandbox
		chromedp.Flag("disable-dev-shm-usage", true), // a container's /dev/shm is small
		chromedp.Flag("renderer-process-limit", "1"), // 2 shared cores: one renderer
		chromedp.Flag("js-flags", "--max-old-space-size=128"),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	start := time.Now()
	// The first call starts the browser, under a context without a
	// timeout (its timeout would end the browser).
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium (%s): %v\n\tinstall it with 'apt-get install -y chromium'", bin, err)
	}
	// The whole walk's deadline: it ends a hung step (run names it), not
	// a slow machine's walk (about 20 s quiet, over 40 s with -race and
	// other tests beside it).
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	t.Logf("chromium started in %s", time.Since(start).Round(time.Millisecond))

	var shots []string
	shot := func(name string) {
		t.Helper()
		// A page that has just loaded can have no layout yet ("Cannot take
		// screenshot with 0 width"): try again for a few seconds.
		var png []byte
		var err error
		for try := 0; try < 25; try++ {
			if png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil { // 100: PNG
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		shots = append(shots, p)
		t.Logf("screenshot %s (%d bytes, %s since start)", p, len(png), time.Since(start).Round(time.Millisecond))
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			where, _ := chromedp.Run(bctx, chromedp.Location())
			body, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v\n\tthe browser is at %s, showing:\n%s", what, err, where, body)
		}
	}
	// text is the text of the first element sel matches ("" when none).
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](textOf(sel)))
		if err != nil {
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}
	// waitText polls until sel's text is want: the page may reload
	// (the replay page refreshes) or a script may change it (live.js).
	waitText := func(what, sel, want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			s, err := chromedp.Run(ctx, chromedp.Evaluate[string](textOf(sel)))
			if err == nil && s == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s shows %q, want %q (err %v)", what, sel, s, want, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	dead := `#counts tr[data-key="invoice-consumer/DEAD_LETTERED"] [data-field="rows"]`
	failed := `#counts tr[data-key="invoice-consumer/TECHNICAL_FAILURE"] [data-field="rows"]`

	run("load the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#counts"))
	if got, depth := text(dead), text("#dlq-depth"); got != "4" || depth != "4" {
		t.Fatalf("overview before the replay: %s DEAD_LETTERED rows and DLQ depth %s, want 4 and 4", got, depth)
	}
	shot("1-overview")

	run("open the failure groups", chromedp.Click(`nav a[href="/failures"]`), chromedp.WaitVisible("#groups"))
	shot("2-failure-groups")
	run("open the largest group", chromedp.Click("#groups a.group"), chromedp.WaitVisible("#replay-group"))
	if got := text("#group-rows"); got != "3" {
		t.Fatalf("the group page shows %s rows, want 3", got)
	}
	shot("3-failure-group")

	run("ask to replay at 2/s", chromedp.SetValue(`input[name="rate"]`, "2/s"), chromedp.Click("#replay-group"), chromedp.WaitVisible("#confirm"))
	shot("4-confirm-replay")
	run("confirm", chromedp.Click("#confirm"))
	waitText("the replay", "#replay-state.done #replayed", "3")
	shot("5-replay-done")

	run("back to the overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#counts"))
	if got, fails, depth := text(dead), text(failed), text("#dlq-depth"); got != "1" || fails != "3" || depth != "1" {
		t.Fatalf("overview after the replay: %s DEAD_LETTERED, %s TECHNICAL_FAILURE, DLQ depth %s; want 1, 3, 1", got, fails, depth)
	}
	shot("6-overview-after-replay")

	// The last dead letter replayed through the API while the overview
	// is open: its script shows the new counts without a reload.
	var sess struct{ CSRFToken string }
	code, body, _ := call(t, "GET", base+"/api/session", nil, "")
	wantStatus(t, "session", code, 200, body)
	if err := jsonUnmarshal(body, &sess); err != nil {
		t.Fatal(err)
	}
	code, body, _ = call(t, "POST", base+"/api/dlq/replay", http.Header{"X-Csrf-Token": {sess.CSRFToken}, "Content-Type": {"application/json"}}, `{"eventId":"`+c.other+`"}`)
	wantStatus(t, "replay the last one", code, 200, body)
	waitText("the live counts", dead, "0")
	waitText("the live counts", failed, "4")
	waitText("the live DLQ depth", "#dlq-depth", "0")
	shot("7-overview-live")

	run("open a message", chromedp.Navigate(base+"/messages/"+c.groupA[0]), chromedp.WaitVisible("main h1"))
	if s := text("main table tbody td:nth-child(2)"); s != "TECHNICAL_FAILURE" {
		t.Errorf("the message page shows status %q, want TECHNICAL_FAILURE", s)
	}
	page, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dlq-replay", "browser-tester", "replayed from the DLQ"} {
		if !strings.Contains(page, want) {
			t.Errorf("the message page lacks %q:\n%s", want, page)
		}
	}
	shot("8-message")
	run("search by business key", chromedp.Navigate(base+"/search?q=K-ui"), chromedp.WaitVisible("main table"))
	if !strings.Contains(text("main"), "order key K-ui: 4 row(s)") {
		t.Errorf("the search by business key does not find the 4 rows:\n%s", text("main"))
	}
	shot("9-search")

	run("open a message that failed twice", chromedp.Navigate(base+"/messages/hist-ui"), chromedp.WaitVisible("table.attempts"))
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table.attempts tbody tr")).map(function(r){`+
		`return Array.from(r.cells).map(function(c){return c.textContent.trim()}).join(" | ")})`))
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "1 | 0 | ") || !strings.Contains(lines[0], "| TECHNICAL_FAILURE | TECHNICAL | - | letter service: HTTP 503") ||
		!strings.Contains(lines[1], "| TECHNICAL_FAILURE | TECHNICAL | - | letter service: timeout") || !strings.HasPrefix(lines[2], "3 | 0 | ") || !strings.Contains(lines[2], "| PROCESSED | - | - | -") {
		t.Errorf("the history of attempts shows:\n%s\nwant two failures, then the success", strings.Join(lines, "\n"))
	}
	shot("10-message-history")

	// A new failure archived from its group's page: gone from the
	// groups, in the archived ones; restored from there, back.
	ts := time.Now().UTC().Format("2006-01-02 15:04:05.000000")
	execSQL(t, db, deadLetteredRow, "arch-ui", "corr-arch-ui", "archive service: gone for good", ts, ts, ts, ts, "K-arch-ui")
	run("open the failure groups", chromedp.Navigate(base+"/failures"), chromedp.WaitVisible("#archived-link"))
	group := text("#groups a.group")
	if group == "" || text("#failed-rows") != "1" {
		t.Fatalf("the failure groups show %q and %s failed rows, want the new group's 1:\n%s", group, text("#failed-rows"), text("main"))
	}
	run("open the group", chromedp.Click("#groups a.group"), chromedp.WaitVisible("#archive-group"))
	run("ask to archive it", chromedp.Click("#archive-group"), chromedp.WaitVisible("#confirm"))
	shot("11-confirm-archive")
	run("confirm the archive", chromedp.Click("#confirm"), chromedp.WaitVisible("#archive-rows"))
	if got := text("#archive-rows"); got != "1" {
		t.Fatalf("the archive's page says %s rows archived, want 1", got)
	}
	shot("12-archive-done")
	run("open the failure groups", chromedp.Navigate(base+"/failures"), chromedp.WaitVisible("#archived-link"))
	if s := text("#groups"); strings.Contains(s, group) || text("#failed-rows") != "0" {
		t.Fatalf("the failure groups still list archived group %s:\n%s", group, s)
	}
	run("open the archived groups", chromedp.Click("#archived-link"), chromedp.WaitVisible("#groups-link"))
	if s := text("#groups a.group"); s != group {
		t.Fatalf("the archived groups show %q, want %s:\n%s", s, group, text("main"))
	}
	shot("13-archived-groups")
	run("ask to restore it", chromedp.Click("#groups a.restore"), chromedp.WaitVisible("#confirm"))
	shot("14-confirm-restore")
	run("confirm the restore", chromedp.Click("#confirm"), chromedp.WaitVisible("#archive-rows"))
	if got := text("#archive-rows"); got != "1" {
		t.Fatalf("the restore's page says %s rows restored, want 1", got)
	}
	run("back to the failure groups", chromedp.Click("#group-list"), chromedp.WaitVisible("#archived-link"))
	if s := text("#groups a.group"); s != group {
		t.Fatalf("the failure groups show %q after the restore, want %s:\n%s", s, group, text("main"))
	}
	shot("15-failure-groups-restored")
	run("open the archived groups", chromedp.Navigate(base+"/failures?archived=1"), chromedp.WaitVisible("#groups-link"))
	if s := text("#failed-rows"); s != "0" {
		t.Fatalf("the archived groups show %s rows after the restore, want 0", s)
	}
	run("the event's page", chromedp.Navigate(base+"/messages/arch-ui"), chromedp.WaitVisible("main h1"))
	for _, want := range []string{"failures-archive", "failures-restore", "browser-tester"} {
		if s := text("main"); !strings.Contains(s, want) {
			t.Errorf("the message page of arch-ui lacks %q:\n%s", want, s)
		}
	}
	t.Logf("%d screenshots in %s (browser part %s):\n\t%s", len(shots), dir, time.Since(start).Round(time.Millisecond), strings.Join(shots, "\n\t"))
}

// textOf is a script whose value is the trimmed text of the first element
// sel matches, "" when none does.
func textOf(sel string) string {
	return fmt.Sprintf(`(function(){var e=document.querySelector(%q);return e?e.textContent.trim():""})()`, sel)
}
