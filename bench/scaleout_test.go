package main

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestInvoicePlan: every message of the scale-out plan is an invoice the
// invoice handler accepts for a seeded customer, a resend carries its
// original's body, and the ids and resends are the plan's.
func TestInvoicePlan(t *testing.T) {
	base := newPlan(500, 0.2, 3)
	p := invoicePlan(base)
	if p.Distinct != base.Distinct || p.Resends != base.Resends || len(p.Messages) != len(base.Messages) {
		t.Fatalf("plan %d/%d/%d, want %d/%d/%d", len(p.Messages), p.Distinct, p.Resends, len(base.Messages), base.Distinct, base.Resends)
	}
	bodies := map[string]string{}
	invoices := map[string]string{}
	for i, m := range p.Messages {
		if m.ID != base.Messages[i].ID || m.Correlation != base.Messages[i].Correlation {
			t.Fatalf("message %d: id %s/%s, want the plan's %s/%s", i, m.ID, m.Correlation, base.Messages[i].ID, base.Messages[i].Correlation)
		}
		if b, ok := bodies[m.ID]; ok && b != string(m.Body) {
			t.Fatalf("resend of %s has body %s, its original %s", m.ID, m.Body, b)
		}
		bodies[m.ID] = string(m.Body)
		var v struct{ InvoiceNo, CustomerNo, Amount, Currency, IssuedAt string }
		if err := json.Unmarshal(m.Body, &v); err != nil {
			t.Fatal(err)
		}
		if v.CustomerNo != "K-100" && v.CustomerNo != "K-200" {
			t.Fatalf("%s: customer %q is not one `inboxctl migrate --seed-customers` inserts", m.Body, v.CustomerNo)
		}
		if v.Amount == "" || v.Amount[0] == '0' || v.Currency != "EUR" || v.IssuedAt == "" {
			t.Fatalf("%s: not an invoice the handler accepts", m.Body)
		}
		if id, ok := invoices[v.InvoiceNo]; ok && id != m.ID {
			t.Fatalf("invoice %s is events %s and %s", v.InvoiceNo, id, m.ID)
		}
		invoices[v.InvoiceNo] = m.ID
	}
	if len(invoices) != p.Distinct {
		t.Fatalf("%d invoices for %d distinct events", len(invoices), p.Distinct)
	}
}

func TestClusterHosts(t *testing.T) {
	for url, want := range map[string][]string{
		"amqp://guest:guest@127.0.0.1:5791,127.0.0.1:5792,127.0.0.1:5793/?queue-type=quorum": {"127.0.0.1:5791", "127.0.0.1:5792", "127.0.0.1:5793"},
		"nats://127.0.0.1:24223,127.0.0.1:24224,127.0.0.1:24225?replicas=3":                  {"127.0.0.1:24223", "127.0.0.1:24224", "127.0.0.1:24225"},
		"nats://u:p@h1:1,h2:2": {"h1:1", "h2:2"},
	} {
		if got := clusterHosts(url); !reflect.DeepEqual(got, want) {
			t.Errorf("clusterHosts(%q) = %q, want %q", url, got, want)
		}
	}
}
