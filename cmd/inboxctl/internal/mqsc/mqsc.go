// Package mqsc reads IBM MQ queue definitions from MQSC text, for
// `inboxctl mq lint`: the saved output of runmqsc's DISPLAY QLOCAL(*) ALL
// (or DISPLAY QUEUE(*) ALL; on z/OS the CSQM401I lines), and scripts of
// DEFINE commands such as dmpmqcfg writes.
//
// # What is read
//
// The text is read line by line. A line that ends in '+' or '-' continues
// on the next one, as in an MQSC script (also inside a quoted value): after
// '+' the next line's leading blanks are dropped, after '-' they are kept. A line
// whose first non-blank character is '*' is a comment. On every other line
// the attributes are the words directly followed by a parenthesised value,
// KEYWORD(value). A value in single quotes may hold any character, a quote
// in it being written twice:
//
//	DESCR('O''Brien''s orders')
//
// An unquoted value runs to its matching parenthesis and is trimmed of
// blanks (MQ pads some). Bare keywords (NOTRIGGER, REPLACE), message
// numbers (AMQ8409I) and other words carry nothing for the lint and are
// skipped.
//
// A queue starts at QUEUE(name) (DISPLAY output, whose TYPE attribute
// follows) or at QLOCAL, QALIAS, QREMOTE, QMODEL or QCLUSTER(name) (a
// DEFINE or a DISPLAY of that type); a generic name (one with '*', as in
// the DISPLAY command echoed at the top of runmqsc's output) starts none.
// Every attribute until the next queue belongs to it.
package mqsc

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Queue is one queue definition.
type Queue struct {
	// Name is the queue name, as MQ keeps it (case kept).
	Name string
	// Type is QLOCAL, QALIAS, QREMOTE, QMODEL or QCLUSTER; "" when the text
	// does not say (a DISPLAY output line without its TYPE).
	Type string
	// Attrs are the attributes, by keyword in upper case, with the value
	// unquoted and trimmed.
	Attrs map[string]string
	// Line is the line on which the queue starts (1-based).
	Line int
}

// Attr returns the value of an attribute and whether it was given.
func (q Queue) Attr(keyword string) (string, bool) {
	v, ok := q.Attrs[keyword]
	return v, ok
}

// ParseError is an MQSC text that cannot be read.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// queueKeywords start a queue definition.
var queueKeywords = map[string]bool{"QUEUE": true, "QLOCAL": true, "QALIAS": true, "QREMOTE": true, "QMODEL": true, "QCLUSTER": true}

// maxLine bounds a logical line (continuations joined): 1 MiB.
const maxLine = 1 << 20

// Parse reads the queue definitions of an MQSC text.
func Parse(r io.Reader) ([]Queue, error) {
	var queues []Queue
	cur := -1 // index of the queue attributes go to
	err := logicalLines(r, func(n int, line string) error {
		return attributes(n, line, func(key, val string) {
			if queueKeywords[key] {
				if strings.Contains(val, "*") || val == "" {
					return // a generic name: the DISPLAY command itself
				}
				q := Queue{Name: val, Attrs: map[string]string{}, Line: n}
				if key != "QUEUE" {
					q.Type = key
				}
				queues = append(queues, q)
				cur = len(queues) - 1
				return
			}
			if cur < 0 {
				return
			}
			if key == "TYPE" && queues[cur].Type == "" {
				queues[cur].Type = val
			}
			queues[cur].Attrs[key] = val
		})
	})
	return queues, err
}

// logicalLines calls f with each logical line (continuations joined, comment
// lines left out) and the number of the physical line it starts on.
func logicalLines(r io.Reader, f func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var b strings.Builder
	start, n := 0, 0
	keepBlanks := true
	for sc.Scan() {
		n++
		raw := strings.TrimRight(sc.Text(), " \t\r")
		if b.Len() == 0 {
			start = n
			if strings.HasPrefix(strings.TrimLeft(raw, " \t"), "*") {
				continue
			}
		}
		if !keepBlanks {
			raw = strings.TrimLeft(raw, " \t")
		}
		cont := continuation(raw)
		if cont != 0 {
			raw = raw[:len(raw)-1]
		}
		if b.Len()+len(raw) > maxLine {
			return &ParseError{Line: start, Msg: fmt.Sprintf("a line continued past %d bytes", maxLine)}
		}
		b.WriteString(raw)
		if cont != 0 {
			keepBlanks = cont == '-'
			continue
		}
		keepBlanks = true
		if err := f(start, b.String()); err != nil {
			return err
		}
		b.Reset()
	}
	if err := sc.Err(); err != nil {
		return &ParseError{Line: n + 1, Msg: err.Error()}
	}
	if b.Len() > 0 {
		return &ParseError{Line: start, Msg: "the last line ends in a continuation ('+' or '-') with nothing after it"}
	}
	return nil
}

// continuation returns '+' or '-' when line (trailing blanks removed) ends
// in that continuation character, else 0. As in MQSC, it continues also
// inside a quoted value.
func continuation(line string) byte {
	if line == "" {
		return 0
	}
	if last := line[len(line)-1]; last == '+' || last == '-' {
		return last
	}
	return 0
}

// attributes calls f for each KEYWORD(value) of one logical line.
func attributes(n int, line string, f func(key, val string)) error {
	for i := 0; i < len(line); {
		if !isKeyStart(line[i]) || (i > 0 && isKeyByte(line[i-1])) {
			i++
			continue
		}
		j := i
		for j < len(line) && isKeyByte(line[j]) {
			j++
		}
		if j == len(line) || line[j] != '(' {
			i = j
			continue
		}
		val, end, err := value(line, j+1)
		if err != nil {
			return &ParseError{Line: n, Msg: fmt.Sprintf("%s(: %v", line[i:j], err)}
		}
		f(strings.ToUpper(line[i:j]), val)
		i = end
	}
	return nil
}

// value reads a value that starts at line[i] (after the opening
// parenthesis) and returns it with the index after its closing
// parenthesis.
func value(line string, i int) (string, int, error) {
	k := i
	for k < len(line) && line[k] == ' ' {
		k++
	}
	if k < len(line) && line[k] == '\'' {
		var b strings.Builder
		for k++; k < len(line); k++ {
			if line[k] != '\'' {
				b.WriteByte(line[k])
				continue
			}
			if k+1 < len(line) && line[k+1] == '\'' {
				b.WriteByte('\'')
				k++
				continue
			}
			// The closing quote: blanks, then the parenthesis.
			k++
			for k < len(line) && line[k] == ' ' {
				k++
			}
			if k == len(line) || line[k] != ')' {
				return "", 0, fmt.Errorf("a quoted value is not followed by ')'")
			}
			return b.String(), k + 1, nil
		}
		return "", 0, fmt.Errorf("a quoted value has no closing quote")
	}
	depth := 1
	for k = i; k < len(line); k++ {
		switch line[k] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return strings.TrimSpace(line[i:k]), k + 1, nil
			}
		}
	}
	return "", 0, fmt.Errorf("no closing ')' on the line")
}

func isKeyStart(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }

func isKeyByte(c byte) bool { return isKeyStart(c) || c >= '0' && c <= '9' }
