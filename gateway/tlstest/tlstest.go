package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made for one test.
type CA struct {
	// CertPEM is the CA's certificate, for a client's --ca-cert file.
	CertPEM []byte
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	serial  atomic.Int64
}

// NewCA makes a CA valid for a day.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tether test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), cert: cert, key: key}
	ca.serial.Store(1)
	return ca
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// ClientConfig trusts only the CA.
func (ca *CA) ClientConfig() *tls.Config { return &tls.Config{RootCAs: ca.Pool()} }

// Leaf signs a new certificate for 127.0.0.1, ::1 and localhost with
// commonName, and returns it and its key as PEM. Each has its own serial
// number, which tells certificates apart.
func (ca *CA) Leaf(tb testing.TB, commonName string) (certPEM, keyPEM []byte) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// WriteLeaf writes a new Leaf to dir/cert.pem and dir/key.pem (replacing
// what is there) and returns the two paths.
func (ca *CA) WriteLeaf(tb testing.TB, dir, commonName string) (certFile, keyFile string) {
	tb.Helper()
	c, k := ca.Leaf(tb, commonName)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	WriteFile(tb, certFile, c)
	WriteFile(tb, keyFile, k)
	return certFile, keyFile
}

// WriteCA writes CertPEM to dir/ca.pem and returns the path.
func (ca *CA) WriteCA(tb testing.TB, dir string) string {
	tb.Helper()
	p := filepath.Join(dir, "ca.pem")
	WriteFile(tb, p, ca.CertPEM)
	return p
}

// WriteFile replaces path's content atomically (a rename), so a server
// reloading it never reads half a file.
func WriteFile(tb testing.TB, path string, b []byte) {
	tb.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// PeerCommonName dials addr with cfg and returns the common name of the
// certificate the server presented.
func PeerCommonName(tb testing.TB, addr string, cfg *tls.Config) string {
	tb.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		tb.Fatalf("TLS dial %s: %v", addr, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}
