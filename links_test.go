package inboxkit_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// What a program links when it imports a package of the toolkit, as
// ARCHITECTURE.md promises: no database driver, no broker client or
// server, no gobreaker and no package testing that it did not import
// itself. depguard (.golangci.yml) checks each import of the table; this
// checks what the imports add up to, dependencies of dependencies
// included.
const module = "github.com/inboxkit/inboxkit"

var (
	drivers = []string{
		module + "/driver",
		"github.com/jackc/pgx",
		"github.com/go-sql-driver/mysql",
		"modernc.org/sqlite",
		"github.com/sijms/go-ora",
		"github.com/godror/godror",
	}
	brokers = []string{
		module + "/broker",
		"github.com/nats-io",
		"github.com/rabbitmq/amqp091-go",
		"github.com/Azure/go-amqp",
	}
	natsServer = "github.com/nats-io/nats-server"
	gobreaker  = "github.com/sony/gobreaker"
)

// TestLinks fails when a package links what its row in ARCHITECTURE.md
// says it does not, and names the chain of imports that brings it in.
func TestLinks(t *testing.T) {
	core := slices.Concat(drivers, brokers, []string{gobreaker, "testing"})
	// An adapter links its own client only: every other broker's client,
	// every other adapter and the embedded NATS server are refused.
	adapter := func(own string) []string {
		refused := slices.Concat(drivers, []string{module + "/broker", natsServer, gobreaker, "testing"})
		for _, c := range brokers[1:] {
			if c != own {
				refused = append(refused, c)
			}
		}
		return refused
	}
	rules := map[string][]string{
		module:                       core,
		module + "/schema":           core,
		module + "/dberr":            core,
		module + "/dlq":              core,
		module + "/classify":         core,
		module + "/inbox":            core,
		module + "/outbox":           core,
		module + "/consumer":         core,
		module + "/observe":          core,
		module + "/observe/otlp":     core,
		module + "/classify/breaker": slices.Concat(drivers, brokers, []string{"testing"}),
		module + "/broker/stomp":     adapter(""),
		module + "/broker/rabbitmq":  adapter("github.com/rabbitmq/amqp091-go"),
		module + "/broker/amqp10":    adapter("github.com/Azure/go-amqp"),
		module + "/broker/jetstream": adapter("github.com/nats-io"),
		// Its one exception: nats-server is fine here, nats.go is not.
		module + "/broker/jetstream/embedded": slices.Concat(drivers, []string{module + "/broker", "github.com/nats-io/nats.go", gobreaker, "testing"}),
		module + "/golden":                    {natsServer, gobreaker, "testing"},
		module + "/cmd/inboxctl":              {"testing"},
	}
	var pkgs []string
	for p := range rules {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	imports := importGraph(t, pkgs)
	for _, pkg := range pkgs {
		linked := reach(imports, pkg)
		for _, refused := range rules[pkg] {
			// One error per refused module: the package of it that is
			// reached first, with its import chain.
			first := ""
			for dep := range linked {
				if dep != refused && !strings.HasPrefix(dep, refused+"/") {
					continue
				}
				if first == "" || len(linked[dep]) < len(linked[first]) || len(linked[dep]) == len(linked[first]) && dep < first {
					first = dep
				}
			}
			if first != "" {
				t.Errorf("%s links %s, which ARCHITECTURE.md says it does not (imports: %s); "+
					"move the part that needs it into a package of its own, as classify/breaker and broker/jetstream/embedded are",
					pkg, first, strings.Join(append(linked[first], first), " -> "))
			}
		}
	}
}

// importGraph returns the non-test imports of pkgs and of everything they
// import, from go list.
func importGraph(t *testing.T, pkgs []string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}, pkgs...)...).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	g := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			g[f[0]] = f[1:]
		}
	}
	return g
}

// reach returns every package pkg links, each with the import chain from
// pkg that reaches it first (breadth first, so the shortest).
func reach(imports map[string][]string, pkg string) map[string][]string {
	via := map[string][]string{pkg: nil}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, d := range imports[p] {
			if _, seen := via[d]; !seen {
				via[d] = append(slices.Clone(via[p]), p)
				queue = append(queue, d)
			}
		}
	}
	delete(via, pkg)
	return via
}
