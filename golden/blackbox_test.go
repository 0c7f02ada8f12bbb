package golden_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

// Labels of the black-box records (approved.<label>.txt in testdata/golden).
const (
	labelJavaLegacy = "blackbox-java-legacy" // testdata/legacy-java LegacyInvoiceEventMdb
	labelJavaAfter  = "blackbox-java-after"  // testdata/legacy-java InvoiceEventConsumer
	labelInboxctl   = "blackbox-inboxctl"    // inboxctl run: the refactored Go consumer
)

// blackBoxCases are the cases recorded black-box for all three consumers.
var blackBoxCases = []string{
	"happy-path", "producer-resend", "crash-during-letter-call", "letter-service-down-then-up",
	"letter-service-down-past-threshold", "unknown-customer", "malformed-json", "two-instances-racing",
}

// blackBoxDefault is the subset `go test` records by default (each
// recording starts real processes and waits for quiet);
// INBOXKIT_BLACKBOX=all records every case of blackBoxCases,
// INBOXKIT_BLACKBOX=case,case the cases named.
var blackBoxDefault = []string{"crash-during-letter-call", "letter-service-down-then-up", "two-instances-racing"}

func blackBoxSelection() []string {
	switch v := os.Getenv("INBOXKIT_BLACKBOX"); v {
	case "all":
		return blackBoxCases
	case "":
		return blackBoxDefault
	default:
		return strings.Split(v, ",")
	}
}

var (
	buildOnce        sync.Once
	javaCP, inboxctl string
	buildErr         error
	repoRoot, _      = filepath.Abs("..")
)

// buildSubjects compiles the Java fixtures (scripts/legacy-java, which
// installs the Debian client jars when missing) and inboxctl, once.
func buildSubjects(t *testing.T) (cp, ctl string) {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "legacy-java"), "classpath").Output()
		if err != nil {
			buildErr = fmt.Errorf("scripts/legacy-java classpath: %v (run it by hand to see why)", err)
			return
		}
		javaCP = strings.TrimSpace(string(out))
		dir, err := os.MkdirTemp("", "inboxkit-blackbox-*")
		if err != nil {
			buildErr = err
			return
		}
		inboxctl = filepath.Join(dir, "inboxctl")
		cmd := exec.Command("go", "build", "-o", inboxctl, "./cmd/inboxctl")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/inboxctl: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return javaCP, inboxctl
}

// javaCommand runs one Java bean; small heap, quick start.
func javaCommand(class string) string {
	return `exec java -Xmx96m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LEGACY_JAVA_CP" ` + class
}

// inboxctlCommand runs the refactored Go consumer the way an operator does.
const inboxctlCommand = `"$INBOXCTL" migrate >/dev/null && exec "$INBOXCTL" run --queue "$INBOXKIT_QUEUE" ` +
	`--max-attempts "$INBOXKIT_MAX_ATTEMPTS" --reject-queue "$INBOXKIT_REJECT_QUEUE" --requeue-delay 200ms`

func blackBoxSubjects(t *testing.T) map[string]golden.BlackBox {
	cp, ctl := buildSubjects(t)
	env := []string{"LEGACY_JAVA_CP=" + cp, "INBOXCTL=" + ctl}
	subjects := map[string]golden.BlackBox{
		labelJavaLegacy: invoicegolden.BlackBox("java LegacyInvoiceEventMdb (legacy, real bean)", javaCommand("LegacyInvoiceEventMdb")),
		labelJavaAfter:  invoicegolden.BlackBox("java InvoiceEventConsumer (the document's \"after\")", javaCommand("InvoiceEventConsumer")),
		labelInboxctl:   invoicegolden.BlackBox("inboxctl run (inboxkit, refactored)", inboxctlCommand),
	}
	for k, bb := range subjects {
		bb.Env = env
		bb.Ready = "listening on" // the Java beans, after Connection.start
		if k == labelInboxctl {
			bb.Ready = "consumer started"
		}
		if testing.Verbose() && os.Getenv("INBOXKIT_BLACKBOX_OUTPUT") != "" {
			bb.Output = os.Stderr
		}
		subjects[k] = bb
	}
	return subjects
}

// TestBlackBox records the real consumers from the outside, on the shared
// ActiveMQ and PostgreSQL, and compares each record with its approved file:
// the Java legacy bean, the Java "after" bean, and `inboxctl run`.
func TestBlackBox(t *testing.T) {
	subjects := blackBoxSubjects(t)
	for _, label := range []string{labelJavaLegacy, labelJavaAfter, labelInboxctl} {
		t.Run(label, func(t *testing.T) {
			t.Parallel()
			golden.RunBlackBox(t, corpus, subjects[label], golden.Label(label), golden.Only(blackBoxSelection()...))
		})
	}
}
