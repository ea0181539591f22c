// node's fs.watch on a directory and the directories given after it, not
// recursive (node 18's recursive watch is not supported on Linux). One line
// per event on stdout: DIR TYPE NAME, DIR relative to the first directory
// ("." for it). "ready" on stderr once every watch is set up. Used by
// scripts/guest-share.sh on the host's export and, in the guest, on the
// walkfs and virtiofs mounts of it.
'use strict';
const fs = require('fs');
const path = require('path');

const dirs = process.argv.slice(2);
if (dirs.length === 0) {
    process.stderr.write('usage: node watch.js DIR [SUBDIR...]\n');
    process.exit(2);
}
const root = dirs[0];
for (const d of dirs) {
    const rel = path.relative(root, d) || '.';
    const w = fs.watch(d, { recursive: false }, (type, name) => {
        fs.writeSync(1, `${rel} ${type} ${name === null ? '-' : name}\n`);
    });
    w.on('error', (e) => fs.writeSync(1, `${rel} error ${e.code || e.message}\n`));
}
fs.writeSync(2, 'ready\n');
for (const s of ['SIGTERM', 'SIGINT']) process.on(s, () => process.exit(0));
