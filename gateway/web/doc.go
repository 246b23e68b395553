// Package web holds the files every node serves to browsers: the demo
// chat page (index.html, at /), the browser client module (tether.js,
// at /tether.js) and the Vercel AI SDK transport built on it (tether-ai.js,
// at /tether-ai.js), embedded in the binary. There is no build step: what is
// in this folder is what a browser gets.
//
// The exported surface:
//
//   - Files: the embedded files, by name.
package web
