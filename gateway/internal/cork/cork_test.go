package cork

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

// The frames the server frames itself (appendTextFrame) read back through
// gorilla's client as the same messages, at every length encoding: one
// byte, two (126..65535) and eight.
func TestTextFramesReadByGorilla(t *testing.T) {
	sizes := []int{0, 1, 125, 126, 127, 65535, 65536, 200_000}
	payload := func(n int) []byte { return bytes.Repeat([]byte{'a' + byte(n%26)}, n) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer ws.Close()
		var buf []byte
		for _, n := range sizes {
			buf = appendTextFrame(buf, payload(n))
		}
		if _, err := ws.NetConn().Write(buf); err != nil {
			t.Error(err)
		}
		_, _, _ = ws.ReadMessage() // until the client closes
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for _, n := range sizes {
		mt, got, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("reading the %d-byte frame: %v", n, err)
		}
		if mt != websocket.TextMessage || !bytes.Equal(got, payload(n)) {
			t.Fatalf("%d-byte frame: type %d, %d bytes read back", n, mt, len(got))
		}
	}
}
