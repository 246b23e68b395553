// Package web holds the files every node serves to browsers: the demo
// chat page (index.html, at /) and the browser client module (tether.js,
// at /tether.js), embedded in the binary. There is no build step: what is
// in this folder is what a browser gets.
package web

import "embed"

// Files are the embedded browser files, by name.
//
//go:embed index.html tether.js
var Files embed.FS
