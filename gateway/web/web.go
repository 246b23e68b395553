package web

import "embed"

// Files are the embedded browser files, by name.
//
//go:embed index.html tether.js tether-ai.js
var Files embed.FS
