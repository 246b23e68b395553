// tether.js — the Tether browser client (ES module). See README.md.
export {};
