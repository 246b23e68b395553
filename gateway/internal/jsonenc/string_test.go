package jsonenc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// wantString is s as encoding/json writes it (without its HTML escapes,
// which AppendString leaves out too).
func wantString(t testing.TB, s string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// TestAppendStringEveryByteEverywhere: every byte value, at every place
// of strings around the eight-byte steps, is written as encoding/json
// writes it; so are runes that straddle a step.
func TestAppendStringEveryByteEverywhere(t *testing.T) {
	for c := range 256 {
		for n := 1; n <= 19; n++ {
			for at := range n {
				p := []byte(strings.Repeat("a", n))
				p[at] = byte(c)
				if got, want := AppendString(nil, string(p)), wantString(t, string(p)); !bytes.Equal(got, want) {
					t.Fatalf("%q: got %s, want %s", p, got, want)
				}
			}
		}
	}
	for _, s := range []string{"abcdefgé", "abcdefg漢字", "abcdefgh\u2028", "abcdef\u2029xy", "1234567\xff\xfe", strings.Repeat("plain text ", 20) + "\n"} {
		if got, want := AppendString(nil, s), wantString(t, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	}
}

// TestSpecialIsExact: special is true exactly when one of the eight
// bytes needs escaping or is not ASCII.
func TestSpecialIsExact(t *testing.T) {
	naive := func(x uint64) bool {
		var p [8]byte
		binary.LittleEndian.PutUint64(p[:], x)
		for _, c := range p {
			if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
				return true
			}
		}
		return false
	}
	r := rand.New(rand.NewPCG(1, 2))
	check := func(x uint64) {
		if special(x) != naive(x) {
			t.Fatalf("special(%#016x) = %v", x, special(x))
		}
	}
	for range 200000 {
		check(r.Uint64())
		// Mostly plain bytes, with edge values mixed in.
		var p [8]byte
		for i := range p {
			p[i] = byte(0x20 + r.IntN(0x5f))
			if r.IntN(8) == 0 {
				p[i] = []byte{0x00, 0x1f, 0x20, 0x21, '"', '\\', 0x5b, 0x5d, 0x7f, 0x80, 0xff}[r.IntN(11)]
			}
		}
		check(binary.LittleEndian.Uint64(p[:]))
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("hello")
	f.Add("quote \" \\ \n\t \x00 \u2028 \xff é 漢字")
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := AppendString(nil, s), wantString(t, s); !bytes.Equal(got, want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}
