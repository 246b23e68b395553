package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrBadCA is a CA file that holds no usable certificate.
var ErrBadCA = errors.New("client: bad CA certificate file")

// LoadCA reads PEM certificates from file and returns a TLS configuration
// that trusts them alone: for nodes whose certificate a private CA
// signed (Config.TLS; `tether chat --ca-cert`, `tether bench --ca-cert`).
func LoadCA(file string) (*tls.Config, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrBadCA, file)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
