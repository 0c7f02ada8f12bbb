package inbox

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxFingerprint bounds a fingerprint's length in bytes.
const maxFingerprint = 200

// Fingerprint is the shape of an error text: what stays the same when the
// same failure happens to another message. Quoted values ('x', "x", `x`
// whose quote opens at the start, after white space or after one of
// ( [ { = : , — so an apostrophe stays) become <q>, words of digits
// (numbers, 1.5, 2026-03-01) <n>, and words mixing digits with letters
// (ids: ev-1003, INV-2026-0042, a UUID) <id>; runs of white space become
// one space. The result is at most 200 bytes, valid UTF-8 when s is, and
// a fixed point: Fingerprint(Fingerprint(s)) == Fingerprint(s).
func Fingerprint(s string) string {
	var b strings.Builder
	b.Grow(min(len(s), maxFingerprint+8))
	space := false
	opens := true // a quote at i opens a value: at the start, after white space or one of ( [ { = : ,
	for i := 0; i < len(s) && b.Len() < maxFingerprint; {
		c := s[i]
		switch {
		case (c == '\'' || c == '"' || c == '`') && opens:
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteString("<q>")
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				i = len(s) // unterminated: the rest is the value
			} else {
				i += j + 2
			}
			opens = false
		case wordByte(c):
			j := i
			for j < len(s) && wordByte(s[j]) {
				j++
			}
			for j > i+1 && (s[j-1] == '.' || s[j-1] == '-') {
				j-- // a sentence's full stop, a trailing dash: not the word's
			}
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteString(scrubWord(s[i:j]))
			i = j
			opens = false
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space = true
			i++
			opens = true
		default:
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteByte(c)
			i++
			opens = strings.IndexByte("([{=:,", c) >= 0
		}
	}
	return strings.TrimRight(cut(b.String(), maxFingerprint), " ")
}

// wordByte: a byte of a word (an id may hold '-', '_', '.'; every byte of
// a multi-byte character counts, so a character is never split).
func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c >= 0x80
}

func scrubWord(w string) string {
	digits, letters := false, false
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case c >= '0' && c <= '9':
			digits = true
		case c == '.' || c == '-' || c == '_':
		default:
			letters = true
		}
	}
	switch {
	case !digits:
		return w
	case letters:
		return "<id>"
	}
	return "<n>"
}

// GroupID names a failure group: the first 12 hex digits of the SHA-256
// of its consumer, status, reason, class and fingerprint. It is stable
// across runs and databases, so `inboxctl replay --group` takes it.
func GroupID(consumer, status, reason, class, fingerprint string) string {
	h := sha256.Sum256([]byte(consumer + "\x00" + status + "\x00" + reason + "\x00" + class + "\x00" + fingerprint))
	return hex.EncodeToString(h[:6])
}
