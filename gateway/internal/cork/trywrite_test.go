//go:build linux

package cork

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestTryWrite: to a socket with room, TryWrite writes the whole frame
// at once (a heartbeat needs no writer goroutine); while a batch is corked
// it writes nothing; a frame the socket takes only part of is torn, as a
// failed Uncork's is, and Finish writes the rest, so the peer reads every
// byte in order.
func TestTryWrite(t *testing.T) {
	p, err := NewPoller()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, client := parkedPair(t, ln, p)

	ping := []byte{0x89, 0x00}
	if ok, err := c.TryWrite(ping); !ok || err != nil {
		t.Fatalf("TryWrite to an idle socket = %v, %v; want true, nil", ok, err)
	}
	got := make([]byte, 2)
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil || !bytes.Equal(got, ping) {
		t.Fatalf("client read %x, %v; want %x", got, err, ping)
	}

	c.Cork()
	if ok, err := c.TryWrite(ping); ok || err != nil {
		t.Fatalf("TryWrite while corked = %v, %v; want false, nil", ok, err)
	}
	if err := c.Uncork(); err != nil {
		t.Fatal(err)
	}

	// A client that does not read, a small send buffer: a large frame goes
	// out only in part.
	if err := Unwrap(c).(*net.TCPConn).SetWriteBuffer(4096); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	ok, err := c.TryWrite(big)
	if ok || !errors.Is(err, ErrTorn) {
		t.Fatalf("TryWrite of 1 MiB to a client that does not read = %v, %v; want false, ErrTorn", ok, err)
	}
	if ok, err := c.TryWrite(ping); ok || err != nil {
		t.Fatalf("TryWrite after a torn frame = %v, %v; want false, nil (the rest goes first)", ok, err)
	}
	read := make(chan []byte)
	go func() {
		_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(io.LimitReader(client, int64(len(big))))
		read <- b
	}()
	if err := c.Finish(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if b := <-read; !bytes.Equal(b, big) {
		t.Fatalf("the client read %d bytes of the torn frame, want all %d in order", len(b), len(big))
	}
}
