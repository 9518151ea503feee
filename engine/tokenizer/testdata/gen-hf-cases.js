// Generates hf-random-cases.json: seeded random strings encoded by Hugging
// Face tokenizers (the npm binding "tokenizers", the same Rust library as
// the Python one), and random id sequences decoded by it.
//
//   mkdir /tmp/hf && cd /tmp/hf && npm install tokenizers@0.23.2
//   NODE_PATH=/tmp/hf/node_modules node gen-hf-cases.js TOKENIZER_JSON > hf-random-cases.json
'use strict';
const { Tokenizer } = require('tokenizers');

let seed = 0x5eed7011;
function rnd() { // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rnd() * a.length)];
const int = (n) => Math.floor(rnd() * n);

const frags = {
  ascii: ['Hello', 'world', 'the', 'tokenization', 'JSON', 'a', 'I', "don't", 'x', 'priority', 'refund', 'http://example.com/a?b=c', 'foo_bar', 'CamelCase', 'ALLCAPS', 'e.g.', '...', '!?', '#', '$5.00', '100%', '--', '==>', '@user', 'C++', '3.14159', '-42', '1e-9', '2024-01-02'],
  space: [' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', '\n\n\n', ' \n ', '\t\t', '\u00a0', '\u3000', '\u2009', '\u200b', '\ufeff', ' '.repeat(40), '\n'.repeat(35), '\t'.repeat(33), '\r', '\v', '\f'],
  ctrl: ['\x00', '\x01', '\x07', '\x1b', '\x1c', '\x1f', '\x7f', '\x85', '\u2028', '\u2029'],
  emoji: ['😀', '🚀', '👍🏽', '👩‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '❤️', '🫠', '🦀', '🧑🏿‍💻'],
  script: ['漢字', 'かな', 'カナ', '한국어', 'Привет', 'мир', 'مرحبا', 'بالعالم', 'שלום', 'नमस्ते', 'สวัสดี', 'Ελληνικά', 'Ünïcödé', 'café', 'naïve', 'e\u0301', 'ﬁ', 'Å', 'ß', 'İ'],
  rare: ['𠀀', '𪚥', '\ue000', '\u{10fffd}', '𝔘𝔫𝔦', '𐀀', '\u{1f9ff}', '\u0378', '\ufffd', '\u{e0041}', '߷', '᠎'],
  added: ['<start_of_turn>', '<end_of_turn>', '<bos>', '<eos>', '<pad>', '<unk>', '<mask>', '[multimodal]', '<unused7>', '<unused123>', '<image_soft_token>', '<start_of_image>', '<end_of_image>', '<start_of', '<unused', '<0x41>', '<0xZZ>', '▁', '▁▁▁', '<', '>', '<<bos>>', '<start_of_turn><end_of_turn>'],
  json: ['{"priority": "high"}', '{"a":', ' true', ' false', ' 3', '[1, 2, 3]', '"""', "''", '\\n', '\\u0041', 'null', '"technical support"'],
  code: ['def f(x):\n    return x ** 2', 'for (int i = 0; i < n; i++) {', '    ', '}\n', '<div class="a">', '</div>', '&amp;', 'SELECT * FROM t;'],
};
const cats = Object.keys(frags);

function randomText() {
  const n = 1 + int(rnd() < 0.1 ? 60 : 12);
  let s = '';
  for (let i = 0; i < n; i++) {
    const c = pick(cats);
    if (c === 'ascii' && rnd() < 0.3) { s += String(int(100000)); continue; }
    if (c === 'rare' && rnd() < 0.5) { s += String.fromCodePoint(0x20000 + int(0x2a6df - 0x20000)); continue; }
    s += pick(frags[c]);
    if (rnd() < 0.5) s += ' ';
  }
  return s;
}

(async () => {
  const tok = Tokenizer.fromFile(process.argv[2]);
  const encode = [];
  for (let i = 0; i < 800; i++) {
    const text = randomText();
    const e = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(e.getIds());
    encode.push({ text, ids });
  }
  const byteID = (b) => tok.tokenToId('<0x' + b.toString(16).toUpperCase().padStart(2, '0') + '>');
  const decode = [];
  for (let i = 0; i < 300; i++) {
    const ids = [];
    const n = 1 + int(20);
    for (let j = 0; j < n; j++) {
      const r = rnd();
      if (r < 0.35) ids.push(int(262145));
      else if (r < 0.55) ids.push(byteID(int(256)));
      else if (r < 0.75) { // a whole character as byte tokens
        for (const b of Buffer.from(pick(frags.emoji.concat(frags.rare, frags.script)))) ids.push(byteID(b));
      } else if (r < 0.85) ids.push(pick([0, 1, 2, 3, 105, 106, 107, 108, 138, 255999, 256000, 262144]));
      else if (r < 0.9) ids.push(262145 + int(1000)); // unknown: dropped
      else ids.push(int(300));
    }
    decode.push({ ids, text: await tok.decode(ids, false) });
  }
  process.stdout.write(JSON.stringify({
    generator: 'gen-hf-cases.js', tokenizers: require('tokenizers/package.json').version,
    add_special_tokens: false, skip_special_tokens: false, encode, decode,
  }) + '\n');
})();
