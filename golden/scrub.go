package golden

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

var (
	idRe   = regexp.MustCompile(`golden-id-\d{6}`)
	timeRe = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:Z|[+-]\d{2}:\d{2})?`)
)

var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
}

// Scrub replaces what differs between runs or databases with labeled
// placeholders, numbered in order of first appearance so that links between
// values stay visible: ids of Env.IDFunc become <id_1>, <id_2>, ...;
// timestamps (RFC 3339, or SQL "2006-01-02 15:04:05.000000", read as UTC)
// become <time_1>, <time_2>, ..., the same instant always the same label
// whatever its spelling.
func Scrub(text string) string {
	ids := map[string]string{}
	text = idRe.ReplaceAllStringFunc(text, func(s string) string {
		if l, ok := ids[s]; ok {
			return l
		}
		l := fmt.Sprintf("<id_%d>", len(ids)+1)
		ids[s] = l
		return l
	})
	times := map[int64]string{}
	return timeRe.ReplaceAllStringFunc(text, func(s string) string {
		var t time.Time
		var err error
		for _, layout := range timeLayouts {
			if t, err = time.Parse(layout, strings.Replace(s, " ", "T", 1)); err == nil {
				break
			}
			if t, err = time.Parse(layout, s); err == nil {
				break
			}
		}
		if err != nil {
			return s
		}
		k := t.UnixNano()
		if l, ok := times[k]; ok {
			return l
		}
		l := fmt.Sprintf("<time_%d>", len(times)+1)
		times[k] = l
		return l
	})
}
