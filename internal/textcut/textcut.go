// Package textcut shortens text that is kept with a message (a nack
// reason, an attempt's error) to a byte budget without splitting a
// character.
package textcut

import "unicode/utf8"

// ellipsis ends a cut text.
const ellipsis = "…"

// Cut returns s when it is at most n bytes long, else its longest prefix
// that ends at a character boundary and, followed by "…", fits in n bytes.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
