'use strict';
// Module-resolution workload for walkfs benchmarks.
// Run as `node require.js` with cwd = the directory containing node_modules.
// Requires each dependency from package.json (fixed order) and touches a few
// members so the module graphs really load. No servers, no network, no writes.

const path = require('path');
const { createRequire } = require('module');

// Resolve packages from the cwd's node_modules, not from this script's location.
const req = createRequire(path.join(process.cwd(), 'package.json'));

const packages = [
  ['lodash', (_) => _.chunk([1, 2, 3, 4], 2).length === 2 && typeof _.debounce === 'function'],
  ['moment', (moment) => {
    moment.locale('de'); // loads moment/locale/de.js via a dynamic require
    const ok = moment.utc(0).format('YYYY') === '1970';
    moment.locale('en');
    return ok;
  }],
  ['react', (React) => typeof React.createElement === 'function' && typeof React.useState === 'function'],
  ['react-dom', (ReactDOM) => {
    const React = req('react');
    const server = req('react-dom/server');
    return typeof ReactDOM.createPortal === 'function' &&
      server.renderToString(React.createElement('b', null, 'x')) === '<b>x</b>';
  }],
  ['rxjs', (rx) => {
    let sum = 0;
    rx.of(1, 2, 3).pipe(rx.map((x) => x * 2)).subscribe((x) => { sum += x; });
    return sum === 12;
  }],
  ['express', (express) => typeof express.Router === 'function' && typeof express().use === 'function'],
  ['typescript', (ts) => typeof ts.createProgram === 'function' &&
    ts.createSourceFile('a.ts', 'let x: number = 1;', ts.ScriptTarget.Latest).statements.length === 1],
  ['@babel/core', (babel) => babel.transformSync('const x = 1;', {
    configFile: false,
    babelrc: false,
    browserslistConfigFile: false,
  }).code === 'const x = 1;'],
  ['eslint', (eslint) => {
    const messages = new eslint.Linter().verify('var x = 1', { rules: { 'no-unused-vars': 'error' } });
    return messages.length === 1 && typeof eslint.ESLint === 'function';
  }],
  ['webpack', (webpack) => {
    // Creating (not running) a compiler applies the default plugin set.
    const compiler = webpack({
      mode: 'production',
      context: process.cwd(),
      entry: './index.js',
      infrastructureLogging: { level: 'none' },
    });
    return typeof compiler.run === 'function';
  }],
];

for (const [name, touch] of packages) {
  if (!touch(req(name))) {
    console.error(`require.js: unexpected result from ${name}`);
    process.exit(1);
  }
}

console.log(`required ${packages.length} packages, ${Object.keys(require.cache).length} modules`);
