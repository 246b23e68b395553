package cluster

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// LinkALPN is the TLS application protocol peers ask for when they dial
// the node link or Raft. The node's listener is shared with clients, so
// the ALPN value is what tells its TLS handshake to present the cluster's
// certificate and ask for the peer's, instead of the certificate clients
// see.
const LinkALPN = "tether-link/1"

// ErrLinkTLS: the node link's TLS settings cannot be used.
var ErrLinkTLS = errors.New("cluster: node link TLS")

// errPeerCert: a peer's TLS certificate is not the cluster's. A dial that
// meets it fails with ErrAuth, as a wrong secret's proof does.
var errPeerCert = errors.New("tether link: the peer's certificate is not the cluster's")

const linkTLSKeyLabel = "tether/cluster/link-tls-ed25519/v1"

// LinkTLSConfig says how the node link is encrypted. Give either Secret or
// the three files.
type LinkTLSConfig struct {
	// Secret is the cluster secret. Every node derives the same Ed25519
	// key from it and presents a certificate of that key; a peer is
	// accepted when its certificate carries the same key, which only a
	// holder of the secret can have. No files to distribute, and the
	// key changes with the secret.
	Secret string
	// CertFile and KeyFile are this node's certificate and key (PEM);
	// CAFile holds the CA certificates peers' certificates must chain to.
	// Both sides of every connection present and check a certificate.
	// Host names are not checked: peers dial addresses learned from
	// gossip and Raft, and what admits a peer is the CA and the secret's
	// proof that follows the handshake.
	CertFile, KeyFile, CAFile string
}

// LinkTLS holds the two TLS configurations of the node link: the one its
// listener uses for peers (Server) and the one it dials with (Client).
type LinkTLS struct {
	Server, Client *tls.Config
}

// NewLinkTLS builds the configurations.
func NewLinkTLS(cfg LinkTLSConfig) (*LinkTLS, error) {
	files := cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CAFile != ""
	switch {
	case files && (cfg.CertFile == "" || cfg.KeyFile == "" || cfg.CAFile == ""):
		return nil, fmt.Errorf("%w: a certificate, its key and a CA go together", ErrLinkTLS)
	case files:
		return linkTLSFromFiles(cfg.CertFile, cfg.KeyFile, cfg.CAFile)
	case cfg.Secret == "":
		return nil, fmt.Errorf("%w: needs the cluster secret or certificate files", ErrLinkTLS)
	}
	return linkTLSFromSecret(cfg.Secret)
}

func linkTLSFromSecret(secret string) (*LinkTLS, error) {
	key := ed25519.NewKeyFromSeed(deriveKey(linkTLSKeyLabel, secret))
	pub := key.Public().(ed25519.PublicKey)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLinkTLS, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "tether node"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour), // the key, not the dates, is checked
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLinkTLS, err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return fmt.Errorf("%w: none presented", errPeerCert)
		}
		leaf, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("%w: %w", errPeerCert, err)
		}
		if k, ok := leaf.PublicKey.(ed25519.PublicKey); !ok || !k.Equal(pub) {
			return fmt.Errorf("%w: its key is not the cluster secret's (another secret?)", errPeerCert)
		}
		return nil
	}
	return mutual(cert, verify), nil
}

func linkTLSFromFiles(certFile, keyFile, caFile string) (*LinkTLS, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %s, %s: %w", ErrLinkTLS, certFile, keyFile, err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLinkTLS, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrLinkTLS, caFile)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		certs := make([]*x509.Certificate, 0, len(raw))
		for _, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("%w: %w", errPeerCert, err)
			}
			certs = append(certs, c)
		}
		if len(certs) == 0 {
			return fmt.Errorf("%w: none presented", errPeerCert)
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("%w: %w", errPeerCert, err)
		}
		return nil
	}
	return mutual(cert, verify), nil
}

// mutual is the pair of configurations in which both sides present cert
// and check the other's with verify. Go's own checks are off on the
// client side (InsecureSkipVerify) only because verify replaces them: a
// peer is named by its key or its CA, not by the address dialed.
func mutual(cert tls.Certificate, verify func([][]byte, [][]*x509.Certificate) error) *LinkTLS {
	base := tls.Config{
		MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, NextProtos: []string{LinkALPN},
		VerifyPeerCertificate: verify,
	}
	server, client := base.Clone(), base.Clone()
	server.ClientAuth = tls.RequireAnyClientCert
	client.InsecureSkipVerify = true
	return &LinkTLS{Server: server, Client: client}
}

// dialTLS connects to addr and handshakes with cfg, both within ctx.
func dialTLS(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}
