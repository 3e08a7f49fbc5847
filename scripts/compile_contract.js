// Compile cvmvm's Solidity sources with the pinned compiler (package-lock.json: `npm ci`)
// and print one JSON artifact on stdout: the compiler version, the settings, and for every
// contract its ABI, creation bytecode and runtime bytecode.  Deterministic: the same
// sources and compiler give the same bytes (no metadata hash is appended).
//
//   node scripts/compile_contract.js cvmvm/tx/solidity > cvmvm/tx/solidity/artifact.json
"use strict";
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const SETTINGS = {
  evmVersion: "prague",
  optimizer: { enabled: true, runs: 200 },
  metadata: { appendCBOR: false, bytecodeHash: "none" },
  outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
};

function main(dirs) {
  if (dirs.length === 0) {
    process.stderr.write("usage: node scripts/compile_contract.js DIR [DIR ...]\n");
    process.exit(2);
  }
  const sources = {};
  for (const dir of dirs) {
    for (const name of fs.readdirSync(dir).filter((n) => n.endsWith(".sol")).sort()) {
      sources[name] = { content: fs.readFileSync(path.join(dir, name), "utf8") };
    }
  }
  const input = { language: "Solidity", sources, settings: SETTINGS };
  const output = JSON.parse(solc.compile(JSON.stringify(input)));
  const errors = (output.errors || []).filter((e) => e.severity === "error");
  for (const e of output.errors || []) process.stderr.write(e.formattedMessage + "\n");
  if (errors.length) process.exit(1);
  const contracts = {};
  for (const file of Object.keys(output.contracts).sort()) {
    for (const name of Object.keys(output.contracts[file]).sort()) {
      const c = output.contracts[file][name];
      if (!c.evm.bytecode.object) continue;  // an interface
      contracts[name] = { source: file, abi: c.abi, bytecode: c.evm.bytecode.object,
                          deployedBytecode: c.evm.deployedBytecode.object };
    }
  }
  const artifact = { compiler: solc.version(), settings: SETTINGS, contracts };
  process.stdout.write(JSON.stringify(artifact, null, 1) + "\n");
}

main(process.argv.slice(2));
