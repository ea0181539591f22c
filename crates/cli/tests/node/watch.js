// A real watcher of DIR, as a dev server or a test runner would use one:
//   node watch.js fswatch DIR    node's fs.watch(DIR, {recursive: true})
//   node watch.js chokidar DIR   chokidar.watch(DIR), its default (not polling)
// Prints "ready" once watching, then one line per event: "KIND PATH",
// PATH relative to DIR.
'use strict';
const path = require('path');
const [mode, dir] = process.argv.slice(2);
const out = (kind, p) => process.stdout.write(`${kind} ${p}\n`);

if (mode === 'fswatch') {
  const fs = require('fs');
  const w = fs.watch(dir, { recursive: true }, (kind, name) => out(kind, name));
  w.on('error', (e) => { console.error(e.message); process.exit(2); });
  // fs.watch sets its watches before it returns; a new directory is
  // added when its creation is seen.
  setTimeout(() => out('ready', ''), 300);
} else if (mode === 'chokidar') {
  const chokidar = require('chokidar');
  const w = chokidar.watch(dir, { ignoreInitial: true, usePolling: false });
  for (const kind of ['add', 'change', 'unlink', 'addDir', 'unlinkDir']) {
    w.on(kind, (p) => out(kind, path.relative(dir, p)));
  }
  w.on('error', (e) => { console.error(String(e)); process.exit(2); });
  w.on('ready', () => out('ready', ''));
} else {
  console.error('usage: watch.js fswatch|chokidar DIR');
  process.exit(2);
}
