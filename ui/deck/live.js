// A live slide of a packed deck (ui/deck/live.py): the slide's checkpoint run in the page on what a student types.
// Text is read as the app reads it (transformer/io/text.py), encoded by the checkpoint's own sentencepiece tables
// (transformer/io/onnx_export.py's tokenizer_table), decoded greedily as transformer/inference/decoding.py does, run by
// ONNX Runtime Web, and the slide's figures redrawn with viz/'s conventions. Everything here is proven equal to the
// Python it mirrors by tests/test_live_pack*.py. Runs in a page and in node (the tests' tokenizer check).
(function (root) {
  "use strict";

  // ----------------------------------------------------------------------------------------- text, as text.py reads it
  const MAX_CHARS_PER_TOKEN = 32;
  const SPACE = "[\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
  const SPACE_RUN = new RegExp(SPACE + "+", "g");  // Python's str.isspace() characters
  const APOSTROPHES = /[\u2019\u2018\u02bc\u2032`]/g;
  const WORD = /[\p{L}\p{Nl}\p{No}]+/gu;  // Python's [^\W\d_]: letters and the numerics that are not digits

  function wellFormed(text) {  // a lone surrogate becomes U+FFFD, as text.normalize does
    return text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
  }

  // text.bounded then text.normalize: [what the tokenizer reads, whether characters past max_chars were cut off]
  function readInput(text, maxChars) {
    const window = wellFormed(text).slice(0, 64 * maxChars * 2);
    const collapsed = Array.from(window.replace(SPACE_RUN, " ").replace(new RegExp("^ | $", "g"), ""));
    const kept = collapsed.slice(0, maxChars).join("");
    const cut = collapsed.length > maxChars || Array.from(window).length < Array.from(text).length;
    const normalized = kept.normalize("NFKC").replace(APOSTROPHES, "'").split(SPACE_RUN).filter(Boolean).join(" ");
    return [normalized, cut];
  }

  function words(text) {
    return text.toLowerCase().match(WORD) || [];
  }

  // ------------------------------------------------------------------------------- sentencepiece, BPE and char models
  function tokenizer(table) {
    const ids = new Map(table.pieces.map((piece, id) => [piece, id]));
    const control = new Set(table.control);
    const mergeable = (piece) => ids.has(piece) && !control.has(ids.get(piece)) && ids.get(piece) !== table.unk;

    // sentencepiece's normaliser after text.normalize: its nmt_nfkc changes (charmap), extra spaces removed,
    // spaces written ▁, and a ▁ before the text where the model adds one.
    function normalized(text) {
      const mapped = Array.from(text, (char) => table.charmap[char] ?? char).join("");
      const trimmed = mapped.split(" ").filter(Boolean).join(" ");
      return trimmed ? (table.dummy_prefix ? "\u2581" : "") + trimmed.replaceAll(" ", "\u2581") : "";
    }

    // BPE: the adjacent pair whose join is a piece of the highest score merges first (the leftmost of a tie), until
    // no join is a piece (sentencepiece's bpe_model.cc). No piece holds a ▁ but at its start (tokenizer_table checks),
    // so each word (from one ▁ to the next) merges alone. A char model keeps every character.
    function symbols(text) {
      const all = Array.from(normalized(text));
      if (table.type !== "bpe") return all;
      const words = [];
      for (const char of all) {
        if (char === "\u2581" || !words.length) words.push([]);
        words[words.length - 1].push(char);
      }
      return words.flatMap(merged);
    }

    function merged(parts) {
      for (;;) {
        let best = -1, bestScore = -Infinity;
        for (let i = 0; i + 1 < parts.length; i++) {
          const joined = parts[i] + parts[i + 1];
          if (mergeable(joined) && table.scores[ids.get(joined)] > bestScore) {
            best = i; bestScore = table.scores[ids.get(joined)];
          }
        }
        if (best < 0) return parts;
        parts.splice(best, 2, parts[best] + parts[best + 1]);
      }
    }

    // [ids, pieces as typed]: a run of pieces the vocabulary lacks is one <unk>, as sentencepiece encodes it.
    function encodeTyped(text) {
      const out = [], typed = [];
      for (const part of symbols(text)) {
        const id = mergeable(part) ? ids.get(part) : table.unk;
        if (id === table.unk && out.length && out[out.length - 1] === table.unk) {
          typed[typed.length - 1] += part;
        } else {
          out.push(id); typed.push(part);
        }
      }
      return [out, typed];
    }

    // Tokenizer.decode: control ids dropped, <unk> written " ⁇ ", ▁ a space, the dummy prefix's ▁ left out.
    function decode(list) {
      let text = "", first = true;
      for (const id of list) {
        if (control.has(id)) continue;
        let piece = id === table.unk ? " \u2047 " : table.pieces[id];
        if (first && table.dummy_prefix && piece.startsWith("\u2581")) piece = piece.slice(1);
        first = false;
        text += piece.replaceAll("\u2581", " ");
      }
      return text;
    }

    return {
      encode: (text) => encodeTyped(text)[0], encodeTyped, decode,
      pieces: (list) => list.map((id) => table.pieces[id] ?? "<unk>"), unk: table.unk,
    };
  }

  const api = { readInput, words, tokenizer };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.AtlasLive = Object.assign(root.AtlasLive || {}, api);
})(typeof globalThis !== "undefined" ? globalThis : this);
