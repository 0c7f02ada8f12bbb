package golden_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxkit/inboxkit/golden"
	"github.com/inboxkit/inboxkit/invoice/invoicegolden"
)

// privateActiveMQ starts a second ActiveMQ with scripts/activemq on free
// loopback ports (the shared one on 61613/61616 is never touched) and stops
// it by its PID file at the end. It returns the STOMP and OpenWire ports.
func privateActiveMQ(t *testing.T) (stompPort, openWirePort int) {
	t.Helper()
	stompPort, openWirePort = freePort(t), freePort(t)
	env := append(os.Environ(),
		"INBOXKIT_ACTIVEMQ_DIR="+t.TempDir(),
		fmt.Sprintf("INBOXKIT_ACTIVEMQ_STOMP_PORT=%d", stompPort),
		fmt.Sprintf("INBOXKIT_ACTIVEMQ_OPENWIRE_PORT=%d", openWirePort),
		"INBOXKIT_ACTIVEMQ_HEAP=192m")
	script := filepath.Join(repoRoot, "scripts", "activemq")
	run := func(verb string) error {
		cmd := exec.Command(script, verb)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("scripts/activemq %s (STOMP %d, OpenWire %d): %v\n%s", verb, stompPort, openWirePort, err, out)
		}
		return nil
	}
	t.Cleanup(func() {
		if err := run("stop"); err != nil {
			t.Error(err)
		}
	})
	if err := run("start"); err != nil {
		t.Fatal(err)
	}
	return stompPort, openWirePort
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestBlackBoxOnOtherPorts records the Java legacy bean on a broker that is
// not at ActiveMQ's default ports (issue 23 item 7): given its OpenWire
// address the record is the approved one, whatever the recording is
// called; told another broker's OpenWire address (where the bean joins a
// broker that never gets the messages) or a port where nothing listens,
// the recording fails within seconds naming what the bean was told, not
// after Timeout; and nothing derives an OpenWire port beside a STOMP port
// that is not 61613.
func TestBlackBoxOnOtherPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("-short skips the private ActiveMQ broker this test starts; ./scripts/test runs it")
	}
	t.Parallel()
	cp, _ := buildSubjects(t)
	stompPort, openWirePort := privateActiveMQ(t)
	broker := fmt.Sprintf("stomp://127.0.0.1:%d", stompPort)
	bean := func(openWire string) golden.BlackBox {
		bb := invoicegolden.BlackBox("the legacy bean on other ports", javaCommand("LegacyInvoiceEventMdb"))
		bb.Env, bb.Ready, bb.Broker, bb.OpenWire = []string{"LEGACY_JAVA_CP=" + cp}, "listening on", broker, openWire
		bb.Timeout = time.Minute
		return bb
	}
	happy := filepath.Join(corpus, "happy-path")

	t.Run("recorded", func(t *testing.T) {
		bb := bean(fmt.Sprintf("tcp://127.0.0.1:%d", openWirePort))
		var log strings.Builder
		bb.Log = &log
		m, _, err := golden.CheckBlackBoxCase(t.Context(), happy, bb, false, golden.Label(labelJavaLegacy))
		if err != nil {
			t.Fatal(err)
		}
		if m != nil {
			t.Fatalf("the record on other ports differs: %s", m)
		}
		if want := fmt.Sprintf("INBOXKIT_OPENWIRE_URL=tcp://127.0.0.1:%d (given)", openWirePort); !strings.Contains(log.String(), want) {
			t.Errorf("log %q does not say %q", log.String(), want)
		}
	})

	sc, err := golden.ReadScenario(happy)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, openWire string
		want           []string
	}{
		{"joined another broker", "tcp://127.0.0.1:61616", []string{
			"nothing consumed from queue invoices.bb", "on the broker " + broker,
			"INBOXKIT_OPENWIRE_URL=tcp://127.0.0.1:61616 (given)", "INBOXKIT_QUEUE=invoices.bb"}},
		{"nothing listens", fmt.Sprintf("tcp://127.0.0.1:%d", freePort(t)), []string{
			"instance 1 exited before it printed", "INBOXKIT_QUEUE=invoices.bb"}},
		{"not derived", "", []string{
			"instance 1 exited before it printed", "missing environment variable INBOXKIT_OPENWIRE_URL",
			fmt.Sprintf("INBOXKIT_OPENWIRE_URL not set: the broker's STOMP port \"%d\" is not ActiveMQ's default 61613", stompPort)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bb := bean(tt.openWire)
			_, err := golden.PlayBlackBox(t.Context(), sc, bb)
			if err == nil {
				t.Fatal("recorded; want a failure")
			}
			t.Logf("reported: %v", err)
			want := tt.want
			if tt.openWire != "" {
				want = append(want, "INBOXKIT_OPENWIRE_URL="+tt.openWire)
			}
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
		})
	}
}
