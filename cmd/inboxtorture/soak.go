package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/inboxkit/inboxkit/broker/brokerurl"
	"github.com/inboxkit/inboxkit/internal/tcpproxy"
)

// The soak (issue 29, item 4): --soak gives the long run's defaults, --cluster
// puts the run on one of the private broker clusters of scripts/ with that
// cluster's node kills, and --db-outage / --broker-outage turn the
// mid-run restarts into outages of a given length (docs/torture.md, Soak).

// fault is one service fault of a run: begun once the progress reaches at,
// one at a time in the order of at, each finished before the next begins.
type fault struct {
	at   float64
	name string
	run  func() error
}

// shell is a fault's step: a bash command run from the repository root.
func shell(command string) error {
	out, err := exec.Command("bash", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", command, err, bytes.TrimSpace(out))
	}
	return nil
}

// cluster is a private broker cluster of scripts/: its URL, the commands
// that stop and start it as a whole, and the node kills of a run on it.
type cluster struct {
	kind        string // the rig's broker: rabbitmq, nats, stomp
	url         string
	stop, start string
	nodeFaults  func(r *rig) []fault
}

func envPort(env string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return v
	}
	return def
}

// clusters are the setups of issue 29, item 1, on the scripts' ports
// (the same environment variables choose them).
func clusters(name string) (cluster, bool) {
	switch name {
	case "rabbitmq":
		p := envPort("INBOXKIT_RABBITC_PORT", 5691)
		s := "scripts/rabbit-cluster"
		return cluster{
			kind: "rabbitmq",
			url:  fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d/?queue-type=quorum", p, p+1, p+2),
			stop: s + " stop", start: s + " start",
			nodeFaults: func(r *rig) []fault {
				return []fault{{at: 0.25, name: "kill -9 of the quorum queue leader's node", run: func() error {
					return killAndRestart(fmt.Sprintf("%s kill $(%s leader %s)", s, s, r.queue), s+" start")
				}}}
			},
		}, true
	case "nats", "jetstream":
		p := envPort("INBOXKIT_NATSC_PORT", 14222)
		s := "scripts/nats-cluster"
		u := fmt.Sprintf("nats://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d?replicas=3", p+1, p+2, p+3)
		kill := func(r *rig, leader bool) func() error {
			return func() error {
				parsed, err := brokerurl.Parse(u)
				if err != nil {
					return err
				}
				node, err := streamNode(u, (&brokerurl.Broker{URL: parsed}).StreamName(r.queue), leader)
				if err != nil {
					return err
				}
				r.log("kill -9 of nats node %s (stream leader: %v)", node, leader)
				return killAndRestart(s+" kill "+node, s+" start")
			}
		}
		return cluster{
			kind: "nats", url: u, stop: s + " stop", start: s + " start",
			nodeFaults: func(r *rig) []fault {
				return []fault{{at: 0.2, name: "kill -9 of the stream leader's node", run: kill(r, true)},
					{at: 0.5, name: "kill -9 of a stream follower's node", run: kill(r, false)}}
			},
		}, true
	case "activemq", "stomp":
		p := envPort("INBOXKIT_AMQPAIR_PORT", 61713)
		s := "scripts/activemq-pair"
		return cluster{
			kind: "stomp", url: fmt.Sprintf("stomp://127.0.0.1:%d,127.0.0.1:%d?heartbeat=2s", p, p+2),
			// A JVM's start took over 60 s (scripts/activemq's default wait)
			// on the loaded machine: the rig waits up to 5 minutes.
			stop: s + " stop", start: "INBOXKIT_ACTIVEMQ_TIMEOUT=300 " + s + " start",
			nodeFaults: func(*rig) []fault {
				return []fault{{at: 0.3, name: "kill -9 of the ActiveMQ master", run: func() error {
					return killAndRestart(s+" kill master", s+" start")
				}}}
			},
		}, true
	}
	return cluster{}, false
}

// killAndRestart runs kill, waits 10 s (the cluster runs without the
// node), then start, which brings the node back.
func killAndRestart(kill, start string) error {
	if err := shell(kill); err != nil {
		return err
	}
	time.Sleep(10 * time.Second)
	return shell(start)
}

// streamNode is the name of the node leading stream (leader), or of one
// of its followers, asked of the cluster at u.
func streamNode(u, stream string, leader bool) (string, error) {
	nc, err := nats.Connect(strings.Split(u, "?")[0], nats.Timeout(5*time.Second))
	if err != nil {
		return "", fmt.Errorf("stream %s's nodes: %v", stream, err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("stream %s: %v", stream, err)
	}
	c := s.CachedInfo().Cluster
	switch {
	case c == nil || c.Leader == "":
		return "", fmt.Errorf("stream %s has no leader", stream)
	case leader:
		return c.Leader, nil
	case len(c.Replicas) == 0:
		return "", fmt.Errorf("stream %s has no follower", stream)
	}
	return c.Replicas[0].Name, nil
}

// outage is a command that stops a service, keeps it down for d and starts
// it again.
func outage(stop, start string, d time.Duration) string {
	return fmt.Sprintf("%s && sleep %g && %s", stop, d.Seconds(), start)
}

// hostile is the hostile STOMP peer: a tcpproxy in front of each broker
// address of consumer 0, turning each of its connections to garbage after
// a number of frames while switched on.
type hostile struct {
	proxies []*tcpproxy.Proxy
	url     string // the broker URL through the proxies
}

// newHostile puts a proxy in front of every address of the STOMP URL raw.
func newHostile(raw string) (*hostile, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "stomp" {
		return nil, fmt.Errorf("--garble-after needs a stomp:// broker, not %q", raw)
	}
	h := &hostile{}
	var hosts []string
	for _, addr := range strings.Split(u.Host, ",") {
		p, err := tcpproxy.New(addr)
		if err != nil {
			h.close()
			return nil, err
		}
		h.proxies = append(h.proxies, p)
		hosts = append(hosts, p.Addr())
	}
	u.Host = strings.Join(hosts, ",")
	h.url = u.String()
	return h, nil
}

func (h *hostile) garbleAfter(frames int) {
	for _, p := range h.proxies {
		p.GarbleAfter(tcpproxy.ToClient, 0, frames) // a STOMP frame ends with NUL
	}
}

func (h *hostile) restore() {
	for _, p := range h.proxies {
		p.Restore()
	}
}

// garbled is the number of bytes the peer turned to garbage so far.
func (h *hostile) garbled() int64 {
	var n int64
	for _, p := range h.proxies {
		n += p.GarbledAfter()
	}
	return n
}

// hostileMaxWait bounds how long the hostile peer stays on past 45 % of
// the run while it has garbled nothing yet.
const hostileMaxWait = 30 * time.Second

// waitGarbled returns once the peer has garbled a byte, or after limit. In
// a short run consumer 0 may not pass its frames inside the 30–45 %
// window (killed, stopped, or the window is a few seconds long); the
// window then stays open until the garbage has reached it, so every run
// with the peer shows the consumer refusing garbage.
func (h *hostile) waitGarbled(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for h.garbled() == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
}

func (h *hostile) close() {
	for _, p := range h.proxies {
		p.Close()
	}
}

// soakFaults are the invoice scenario's service faults beyond the
// database and broker restarts: the cluster's node kills and the hostile
// STOMP peer's window (30 % to 45 %).
func (r *rig) soakFaults(h *hostile) []fault {
	var fs []fault
	if c, ok := clusters(r.cfg.cluster); ok {
		fs = append(fs, c.nodeFaults(r)...)
	}
	if h != nil {
		n := r.cfg.garbleAfter
		fs = append(fs,
			fault{at: 0.3, name: fmt.Sprintf("hostile STOMP peer on (garbage after %d frames)", n), run: func() error { h.garbleAfter(n); return nil }},
			fault{at: 0.45, name: "hostile STOMP peer off", run: func() error { h.waitGarbled(hostileMaxWait); h.restore(); return nil }})
	}
	return fs
}

// applySoak sets the soak's and the cluster's defaults for the flags not
// given (set: the flags given).
func applySoak(c *config, set map[string]bool) error {
	if c.soak {
		for name, apply := range map[string]func(){
			"messages": func() { c.messages = 100000 }, "kills": func() { c.kills = 50 },
			"db-outage": func() { c.dbOutage = time.Minute }, "broker-outage": func() { c.brokerOutage = time.Minute },
			"stops": func() { c.stops = 2 }, "timeout": func() { c.timeout = 3 * time.Hour },
		} {
			if !set[name] {
				apply()
			}
		}
		// --stop-for's default (45s) is past the store-then-process lease
		// and JetStream's AckWait (30 s each) and every heartbeat timeout.
	}
	if c.cluster != "" {
		cl, ok := clusters(c.cluster)
		if !ok {
			return fmt.Errorf("--cluster %q: use rabbitmq, nats or activemq (the clusters of scripts/rabbit-cluster, scripts/nats-cluster, scripts/activemq-pair)", c.cluster)
		}
		if set["broker"] {
			return errors.New("--cluster sets the broker: give one of the two")
		}
		c.broker, c.brokerURL = cl.kind, cl.url
		if !set["broker-restart-cmd"] {
			c.brkRestart = cl.stop + " && " + cl.start
		}
		if c.brokerOutage > 0 {
			c.brkRestart = outage(cl.stop, cl.start, c.brokerOutage)
		}
		if c.soak && !set["garble-after"] && cl.kind == "stomp" {
			c.garbleAfter = 50
		}
	} else if c.brokerOutage > 0 {
		if !c.private {
			return errors.New("--broker-outage needs --private or --cluster (or --restart-broker with a --broker-restart-cmd that pauses)")
		}
		svc := "scripts/torture-services "
		name := map[string]string{"stomp": "activemq", "activemq": "activemq", "rabbitmq": "rabbitmq", "nats": "nats", "jetstream": "nats"}[c.broker]
		if name == "" {
			return fmt.Errorf("--broker-outage: no private broker for --broker %q", c.broker)
		}
		c.brkRestart = outage(svc+"stop "+name, svc+"start "+name, c.brokerOutage)
	}
	if c.dbOutage > 0 {
		if !c.private && c.cluster == "" {
			return errors.New("--db-outage needs --private or --cluster (the private PostgreSQL of scripts/torture-services)")
		}
		c.dbRestart = outage("scripts/torture-services stop pg", "scripts/torture-services start pg", c.dbOutage)
	}
	c.restartDB = c.restartDB || c.dbOutage > 0
	c.restartBrk = c.restartBrk || c.brokerOutage > 0
	if c.garbleAfter > 0 && !strings.HasPrefix(c.brokerURL, "stomp://") {
		return errors.New("--garble-after: the hostile peer speaks STOMP: use it with --broker stomp or --cluster activemq")
	}
	if c.stops < 0 || c.garbleAfter < 0 {
		return errors.New("--stops and --garble-after must not be negative")
	}
	return nil
}
