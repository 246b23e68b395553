// Package tlstest makes certificates for tests, the way net/http/httptest
// makes servers: a throwaway certificate authority (crypto/x509,
// self-signed) that signs leaf certificates for 127.0.0.1 and localhost,
// written to PEM files a real `tether serve --tls-cert/--tls-key` reads.
// It is for tests only.
//
// The exported surface:
//
//   - CA, NewCA: a CA made for one test (Leaf, WriteLeaf, WriteCA, Pool,
//     ClientConfig; CertPEM).
//   - WriteFile: replace a file atomically, as a certificate renewal
//     would, so a server reloading it never reads half a file.
//   - PeerCommonName: the common name of the certificate a server
//     presents.
package tlstest
