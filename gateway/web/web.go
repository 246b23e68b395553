// Package web holds the files every node serves to browsers: the demo
// chat page (index.html, at /), the browser client module (tether.js,
// at /tether.js) and the Vercel AI SDK transport built on it (tether-ai.js,
// at /tether-ai.js), embedded in the binary. There is no build step: what is
// in this folder is what a browser gets.
package web

import "embed"

// Files are the embedded browser files, by name.
//
//go:embed index.html tether.js tether-ai.js
var Files embed.FS
