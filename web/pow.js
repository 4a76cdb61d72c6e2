/* pow.js -- the bot gate's solver for pages (docs/bot-gate.md): find a decimal string s
 * such that SHA-256(challenge + ":" + s) starts with at least `difficulty` zero bits.
 *
 * Plain JavaScript over the Web Crypto API (crypto.subtle.digest), in a browser or in
 * Node >= 19 (globalThis.crypto). A digest is a promise, so tries go in batches of
 * BATCH promises at once: the per-call overhead of the API, not SHA-256, is the cost.
 * 2^difficulty tries on average; onProgress(tries) is called after each batch.
 *
 * Use on a page:
 *   const c = await (await fetch("/api/seckill/challenge/" + id, {headers})).json();
 *   const s = await seckillPow.solve(c.data.challenge, c.data.difficulty);
 *   fetch("/api/seckill/queue/" + id, {method: "POST", headers,
 *         body: JSON.stringify({challenge: c.data.challenge, solution: s})});
 * The same call in Node: const {solve} = require("./pow.js"). */
"use strict";

(function (root) {
  const BATCH = 512;

  /* Leading zero bits of a digest (ArrayBuffer). */
  function zeroBits(buf) {
    const b = new Uint8Array(buf);
    let bits = 0;
    for (let i = 0; i < b.length; i++) {
      if (b[i] === 0) { bits += 8; continue; }
      return bits + Math.clz32(b[i]) - 24;
    }
    return bits;
  }

  /* Resolves to the solution as a string (the smallest number >= start that solves it
   * within maxTries, or null). */
  async function solve(challenge, difficulty, opts) {
    const o = opts || {};
    const subtle = (root.crypto && root.crypto.subtle) || null;
    if (!subtle) throw new Error("no Web Crypto (crypto.subtle): a secure context is needed");
    const enc = new TextEncoder();
    const prefix = enc.encode(challenge + ":");
    let n = o.start || 0;
    const end = n + (o.maxTries || Number.MAX_SAFE_INTEGER);
    while (n < end) {
      const count = Math.min(BATCH, end - n);
      const jobs = new Array(count);
      for (let i = 0; i < count; i++) {
        const digits = enc.encode(String(n + i));
        const msg = new Uint8Array(prefix.length + digits.length);
        msg.set(prefix, 0);
        msg.set(digits, prefix.length);
        jobs[i] = subtle.digest("SHA-256", msg);
      }
      const done = await Promise.all(jobs);
      for (let i = 0; i < count; i++) {
        if (zeroBits(done[i]) >= difficulty) return String(n + i);
      }
      n += count;
      if (o.onProgress) o.onProgress(n);
    }
    return null;
  }

  const api = { solve, zeroBits };
  if (typeof module === "object" && module.exports) module.exports = api;
  else root.seckillPow = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
