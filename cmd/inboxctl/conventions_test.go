package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	wantCode(t, inboxctl(t, "", "--version"), 0, "inboxctl ", "revision ")
	wantCode(t, inboxctl(t, "", "version"), 0, "inboxctl ", "revision ")
	wantCode(t, inboxctl(t, "", "version", "-o", "json"), 0, `"version":`, `"revision":`)
	wantCode(t, inboxctl(t, "", "version", "-o", "yaml"), 2, `use text or json`)
}

func TestParseDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"30d": 30 * 24 * time.Hour, "1d12h": 36 * time.Hour, "720h": 720 * time.Hour, "0d": 0, "90m": 90 * time.Minute,
	} {
		if got, err := parseDays(in); err != nil || got != want {
			t.Errorf("parseDays(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "-1d", "3x", "1d3x", "1.5d"} {
		if _, err := parseDays(in); err == nil {
			t.Errorf("parseDays(%q) accepted", in)
		}
	}
}

// DATABASE_URL is used when neither --db nor INBOXKIT_DB is given, and
// purge takes days.
func TestDatabaseURLAndDays(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "inbox.db")
	run := func(env []string, args ...string) result { return inboxctlEnv(t, env, "", args...) }
	wantCode(t, run([]string{"DATABASE_URL=" + url}, "migrate"), 0, "migrated")
	r := run([]string{"DATABASE_URL=" + url}, "purge", "--older-than", "30d", "--dry-run")
	wantCode(t, r, 0, "older than 720h0m0s")
	r = run([]string{"DATABASE_URL=sqlite:/nonexistent/dir/x.db", "INBOXKIT_DB=" + url}, "purge", "--older-than", "30d", "--dry-run")
	wantCode(t, r, 0, "would be deleted") // INBOXKIT_DB wins
	if !strings.Contains(inboxctl(t, "", "purge", "--help").stdout, "30d") {
		t.Error("purge --help does not mention days")
	}
}
