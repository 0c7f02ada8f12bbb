package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// envDatabaseURL is read when neither --db nor INBOXKIT_DB is given (the
// name Heroku, Render and most tools use).
const envDatabaseURL = "DATABASE_URL"

// versionInfo is what `inboxctl version` reports.
type versionInfo struct {
	Version   string `json:"version"`
	Revision  string `json:"revision"`
	Time      string `json:"time"`
	Modified  bool   `json:"modified"`
	GoVersion string `json:"goVersion"`
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Revision: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	v.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func (v versionInfo) String() string {
	s := "inboxctl " + v.Version + " (revision " + v.Revision
	if v.Modified {
		s += ", modified"
	}
	if v.Time != "" {
		s += ", " + v.Time
	}
	return s + ", " + v.GoVersion + ")"
}

func newVersionCmd() *cobra.Command {
	var o outputFlags
	c := &cobra.Command{
		Use:     "version [--json]",
		Short:   "Print the module version and VCS revision",
		Example: "  inboxctl version\n  inboxctl version -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			j, err := o.json()
			if err != nil {
				return err
			}
			if j {
				return writeJSON(cmd.OutOrStdout(), buildVersion())
			}
			fmt.Fprintln(cmd.OutOrStdout(), buildVersion())
			return nil
		},
	}
	o.register(c)
	return c
}

// outputFlags are -o/--output and its alias --json, on every command that
// reports something; the JSON goes through writeJSON.
type outputFlags struct {
	asJSON bool
	output string
}

func (o *outputFlags) register(c *cobra.Command) {
	c.Flags().BoolVar(&o.asJSON, "json", false, "print JSON (same as -o json)")
	c.Flags().StringVarP(&o.output, "output", "o", "text", "output format: text or json")
}

// json tells whether JSON was asked for; an unknown -o is a usage error.
func (o *outputFlags) json() (bool, error) { return jsonOutput(o.asJSON, o.output) }

// jsonOutput combines --json and -o/--output.
func jsonOutput(asJSON bool, output string) (bool, error) {
	switch output {
	case "json":
		return true, nil
	case "text", "":
		return asJSON, nil
	}
	return false, usageErr("-o %q: use text or json", output)
}

// dayDuration is a duration flag that also accepts days ("30d", "1d12h").
type dayDuration struct{ d *time.Duration }

func (f dayDuration) String() string {
	if f.d == nil {
		return "0s"
	}
	return f.d.String()
}

func (f dayDuration) Type() string { return "duration" }

func (f dayDuration) Set(s string) error {
	d, err := parseDays(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// parseDays parses a Go duration with an optional leading number of days:
// "30d", "1d12h", "720h".
func parseDays(s string) (time.Duration, error) {
	days := time.Duration(0)
	rest := s
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid duration %q: use e.g. 30d, 1d12h or 720h", s)
		}
		days, rest = time.Duration(n)*24*time.Hour, s[i+1:]
		if rest == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(rest)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: use e.g. 30d, 1d12h or 720h", s)
	}
	return days + d, nil
}
