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

    // Tokenizer.decode: control ids dropped, <unk> written " ⁇ ", ▁ a space, but the ▁s before anything else is written.
    function decode(list) {
      let text = "", start = true;
      for (const id of list) {
        if (control.has(id)) continue;
        let piece = id === table.unk ? " \u2047 " : table.pieces[id];
        if (start && id !== table.unk) piece = piece.replace(/^\u2581+/, "");
        start = start && !piece;
        text += piece.replaceAll("\u2581", " ");
      }
      return text;
    }

    return {
      encode: (text) => encodeTyped(text)[0], encodeTyped, decode,
      pieces: (list) => list.map((id) => table.pieces[id] ?? "<unk>"), unk: table.unk,
    };
  }

  // ------------------------------------------------------------------------- notices, worded as ui/warnings.py words them
  const AROUND = { eos: "with </s>", bos_and_continuation: "with <s> and one to continue" };
  const MAX_UNSEEN_NAMED = 5;

  function readLimit(v) {
    if ("heads" in v) {
      return `at most ${v.reads} pieces here: a pass over more would record more attention (${v.encoder_layers} + ` +
        `${v.decoder_layers} layers x ${v.heads} heads x length²) than this server allows`;
    }
    return `at most ${v.reads} pieces (max_len ${v.max_len} tokens ${AROUND[v.around]})`;
  }

  const WORDINGS = {
    cut_off_chars: (v) => `The input is longer than this model reads (${readLimit(v)}): the characters after the ` +
      `first ${v.chars.toLocaleString("en-US")} were cut off.`,
    cut_off_pieces: (v) => `The input is ${v.pieces} pieces long but this model reads ${readLimit(v)}: the last ` +
      `${v.cut} were cut off.`,
    longer_than_trained: (v) => `The input is ${v.pieces} pieces long, longer ` + (v.joined
      ? `than any sentence of its training corpus (at most ${v.longest} pieces; its longer training inputs were ` +
        "those sentences joined)" : `than anything this model trained on (at most ${v.longest} pieces)`) +
      ": expect dropped or invented words.",
    unseen_words: (v) => {
      const named = v.words.slice(0, MAX_UNSEEN_NAMED).map((word) => `“${word}”`).join(", ");
      const more = v.words.length > MAX_UNSEEN_NAMED ? ` and ${v.words.length - MAX_UNSEEN_NAMED} more` : "";
      return `Never in this model's training data: ${named}${more}. It can only guess ` +
        `${v.words.length === 1 ? "this word" : "these words"} from the pieces, so expect an invented or missing word there.`;
    },
    unknown_pieces: (v) => `${v.count} piece(s) of the input are unknown to this model's vocabulary and shown as <unk>.`,
    unended: (v) => "The model did not end its output: decoding stopped it after " + v.pieces + " pieces, at " +
      ("src_len" in v ? `twice the input's length plus 10 tokens (the input: ${v.src_len} tokens with </s>)`
        : `max_len (${v.max_len} tokens with <s>)`) + ".",
  };
  WORDINGS.cut_off_chars_by_memory = WORDINGS.cut_off_chars;
  WORDINGS.cut_off_pieces_by_memory = WORDINGS.cut_off_pieces;
  WORDINGS.unended_at_output_limit = WORDINGS.unended_at_max_len = WORDINGS.unended;
  const worded = (code, values) => WORDINGS[code](values);

  // --------------------------------------------------------------------------- one input, as Checkpoint.prepare reads it
  const CONTINUATION_TOKENS = 20;

  // {ids, limit, caveats, typed} for `text`, or {error} (the app's messages for an empty or unreadable input).
  function prepare(spec, src, text) {
    const [read, cutOff] = readInput(text, spec.max_chars);
    if (!read) return { error: "The input is empty: type a sentence (spaces alone are not enough)." };
    const pieces = src.encode(read);
    const lm = spec.stacks === "decoder-only";
    const room = spec.pass_len - (lm ? 2 : 1);
    const kept = pieces.slice(0, room);
    const ids = lm ? [spec.bos, ...kept] : [...kept, spec.eos];
    if (ids.length <= 1) {
      return { error: "The input has no characters this model reads, only invisible or formatting ones: type a sentence." };
    }
    const byMemory = spec.pass_len < spec.max_len;
    const reads = byMemory
      ? { reads: spec.pass_len - 1, encoder_layers: spec.layers.encoder, decoder_layers: spec.layers.decoder, heads: spec.num_heads }
      : { reads: spec.max_len - (lm ? 2 : 1), max_len: spec.max_len, around: lm ? "bos_and_continuation" : "eos" };
    const caveats = [];
    const cut = pieces.length - kept.length;
    if (cutOff) caveats.push([byMemory ? "cut_off_chars_by_memory" : "cut_off_chars", { chars: spec.max_chars, ...reads }]);
    else if (cut) caveats.push([byMemory ? "cut_off_pieces_by_memory" : "cut_off_pieces", { pieces: ids.length - 1 + cut, cut, ...reads }]);
    if (spec.longest_source_tokens !== null && ids.length - 1 > spec.longest_source_tokens) {
      caveats.push(["longer_than_trained", { pieces: ids.length - 1, longest: spec.longest_source_tokens, joined: spec.joined }]);
    }
    if (spec.source_words) {
      const known = spec.knownWords || (spec.knownWords = new Set(spec.source_words));
      const unseen = [...new Set(words(read).filter((word) => !known.has(word)))];
      if (unseen.length) caveats.push(["unseen_words", { words: unseen }]);
    }
    const unknown = ids.filter((id) => id === src.unk).length;
    if (unknown) caveats.push(["unknown_pieces", { count: unknown }]);
    const limit = Math.min(lm ? ids.length + CONTINUATION_TOKENS : 2 * ids.length + 10, spec.pass_len);
    return { ids, limit, caveats };
  }

  // ------------------------------------------------------------------- the model: greedy decoding, then one captured pass
  // `run(ids_by_input) -> {logits: Float32Array (1, len, vocab), site: Float32Array (1, heads, q, k), ...}` is one pass
  // of the exported graph (onnx_export: forward(src, tgt) -> logits, patterns).

  function lastArgmax(logits, dims) {
    const [, length, vocab] = dims, start = (length - 1) * vocab;
    let best = 0;
    for (let i = 1; i < vocab; i++) if (logits[start + i] > logits[start + best]) best = i;
    return best;
  }

  // The decoded sequence (BOS first, or the prompt first for a decoder-only model), as decoding.greedy gives it: the
  // most likely token each step, until </s> or `limit` tokens.
  async function greedy(spec, run, prepared) {
    const lm = spec.stacks === "decoder-only";
    const sequence = lm ? [...prepared.ids] : [spec.bos];
    while (sequence.length < prepared.limit) {
      const out = await run(lm ? { tgt: sequence } : { src: prepared.ids, tgt: sequence });
      const next = lastArgmax(out.logits.data, out.logits.dims);
      sequence.push(next);
      if (next === spec.eos) break;
    }
    return sequence;
  }

  // What Checkpoint.explain gives the views: the output's text and pieces, the decoder's input, every site's pattern
  // over (source, decoder input), and the unended notice where decoding stopped the output.
  async function explain(spec, run, tokenizers, prepared, sequence) {
    const lm = spec.stacks === "decoder-only";
    const decoderInput = sequence.slice(0, -1);
    const out = await run(lm ? { tgt: decoderInput } : { src: prepared.ids, tgt: decoderInput });
    const caveats = [...prepared.caveats];
    if (!lm && sequence[sequence.length - 1] !== spec.eos) {
      caveats.push(prepared.limit < spec.pass_len
        ? ["unended_at_output_limit", { pieces: sequence.length - 1, src_len: prepared.ids.length }]
        : ["unended_at_max_len", { pieces: sequence.length - 1, max_len: Math.min(prepared.limit, spec.max_len) }]);
    }
    const generated = sequence.slice(1);
    const patterns = {};
    for (const site of spec.sites) patterns[site] = out[site];
    return {
      text: tokenizers.tgt.decode(lm ? sequence.slice(prepared.ids.length) : generated),
      srcTokens: tokenizers.src.pieces(prepared.ids), tgtTokens: tokenizers.tgt.pieces(decoderInput),
      outputTokens: tokenizers.tgt.pieces(generated), srcIds: prepared.ids, tgtIds: decoderInput,
      outputIds: generated, sequence, patterns, caveats,
    };
  }

  // --------------------------------------------------------- the head heatmap, as viz.head_heatmap draws it (no scores)
  const escapeLabel = (text) => String(text).replaceAll("\u2581", "\u00b7").replaceAll("&", "&amp;")
    .replaceAll("<", "&lt;").replaceAll(">", "&gt;");  // viz.labels.safe_label
  // One head's weights (q_len x k_len rows) as head_heatmap draws them: z, hover data (query, key, mask reasons),
  // one tick per token at its position (labels escaped, ▁ as ·), the fixed range, one translucent overlay per mask
  // reason over exactly its cells in its colour (`maskColours`: viz.theme's). `template` is the figure the app drew for
  // the slide: its layout (title, colour scale, fonts) is kept, its size grown with the tokens as far as `room` allows.
  function headFigure(template, weights, qTokens, kTokens, blocked, title, room, maskColours) {
    const q = qTokens.length, k = kTokens.length;
    const notes = weights.map((row, i) => row.map((_, j) => Object.entries(blocked)
      .filter(([, mask]) => mask[i][j]).map(([reason]) => escapeLabel(reason)).join(", ")))
      .map((row) => row.map((note) => (note ? "<br>mask: " + note : "")));
    const customdata = weights.map((row, i) => row.map((_, j) => [escapeLabel(qTokens[i]), escapeLabel(kTokens[j]), notes[i][j]]));
    const base = template.data[0];
    const heatmap = Object.assign({}, base, {
      z: weights, customdata,
      hovertemplate: "query: %{customdata[0]} (%{y:d})<br>key: %{customdata[1]} (%{x:d})<br>weight: %{z:.4g}%{customdata[2]}<extra></extra>",
    });
    delete heatmap.texttemplate;
    const overlays = Object.entries(blocked).filter(([, mask]) => mask.some((row) => row.some(Boolean)))
      .map(([reason, mask]) => ({
        type: "heatmap", z: mask.map((row) => row.map((cell) => (cell ? 1.0 : null))),
        colorscale: [[0, maskColours[reason]], [1, maskColours[reason]]],
        showscale: false, name: escapeLabel(reason), legendgroup: reason, showlegend: true, hoverinfo: "skip",
        xaxis: base.xaxis, yaxis: base.yaxis,
      }));
    const axis = (tokens) => ({ tickmode: "array", tickvals: tokens.map((_, i) => i), ticktext: tokens.map(escapeLabel), ticklabeloverflow: "allow" });
    const layout = JSON.parse(JSON.stringify(template.layout));
    const [templateQ, templateK] = [layout.yaxis.tickvals.length, layout.xaxis.tickvals.length];
    Object.assign(layout.xaxis, axis(kTokens), { range: [-0.5, k - 0.5], autorange: false });
    Object.assign(layout.yaxis, axis(qTokens), { range: [q - 0.5, -0.5], autorange: false });
    layout.title = Object.assign({}, layout.title, { text: title });
    layout.showlegend = overlays.length > 0;
    const margin = Object.assign({ l: 0, r: 0, t: 0, b: 0 }, layout.margin);
    // Each label whole and readable at every length, as viz.layout sizes the app's: room for the longest label of each
    // axis (the x labels are written upwards); the cells keep the app's size while the stage has room, then shrink,
    // with the labels' font, down to MIN_FONT; past that the figure grows beyond the stage, which then scrolls.
    const family = (layout.font || {}).family || "sans-serif";
    const shownText = (token) => String(token).replaceAll("\u2581", "\u00b7");
    const longest = (tokens, font) => Math.max(0, ...tokens.map((token) => textPx(shownText(token), font, family)));
    const appFont = (layout.yaxis.tickfont || {}).size || (layout.font || {}).size || 12;
    const appRow = ((layout.height || 450) - margin.t - margin.b) / templateQ;
    const appColumn = ((layout.width || 700) - margin.l - margin.r) / templateK;
    let font = appFont, left = 0, bottom = 0, rowPx = appRow, columnPx = appColumn;
    for (let pass = 0; pass < 2; pass++) {  // the margins follow the font, the font the cells
      left = Math.max(margin.l, longest(qTokens, font) + 16);
      bottom = Math.max(margin.b, longest(kTokens, font) + 16);
      rowPx = Math.max(Math.min(appRow, (room.height - margin.t - bottom) / q), LINE * MIN_FONT);
      columnPx = Math.max(Math.min(appColumn, (room.width - left - margin.r) / k), LINE * MIN_FONT);
      font = Math.max(MIN_FONT, Math.min(appFont, Math.floor(Math.min(rowPx, columnPx) / LINE)));
    }
    for (const axis of [layout.xaxis, layout.yaxis]) axis.tickfont = Object.assign({}, axis.tickfont, { size: font });
    layout.height = Math.round(margin.t + bottom + rowPx * q);
    layout.width = Math.round(left + margin.r + columnPx * k);
    layout.margin = Object.assign({}, layout.margin, { l: left, b: bottom });
    layout.datarevision = `${layout.datarevision || ""} live ${++revisions}`;  // new data: Plotly.react redraws it
    return { data: [heatmap, ...overlays], layout, config: template.config };
  }

  let revisions = 0;
  // The smallest label lecture mode draws (viz.theme's min_font_size) and a line's height in font sizes (viz.layout's
  // LINE_EM).
  const MIN_FONT = 12, LINE = 1.3;
  function textPx(text, size, family) {
    const context = textPx.context || (textPx.context = document.createElement("canvas").getContext("2d"));
    context.font = `${size}px ${family}`;
    return context.measureText(text).width;
  }

  // The masks of one kind as viz.mask_reasons gives them for a single sentence: decoder self-attention is causal.
  function blockedOf(kind, q, k) {
    if (kind !== "decoder.self_attn") return {};
    return { causal: Array.from({ length: q }, (_, i) => Array.from({ length: k }, (_, j) => j > i)) };
  }

  // (q_len x k_len) rows of one head out of a site's pattern (1, heads, q, k).
  function headRows(pattern, head) {
    const [, , q, k] = pattern.dims, rows = [];
    for (let i = 0; i < q; i++) rows.push(Array.from(pattern.data.subarray((head * q + i) * k, (head * q + i + 1) * k)));
    return rows;
  }

  // Query and key labels of `kind` as the Attention view gives them: decoder rows "input → output"
  // (viz.produces_labels).
  function kindTokens(kind, result) {
    if (kind === "encoder.self_attn") return [result.srcTokens, result.srcTokens];
    const rows = result.tgtTokens.map((piece, row) => (row < result.outputTokens.length ? `${piece} → ${result.outputTokens[row]}` : piece));
    return [rows, kind === "decoder.cross_attn" ? result.srcTokens : result.tgtTokens];
  }

  // ----------------------------------------------------------------------------------------------- the page's side
  // Every byte the page needs is in it: ONNX Runtime's WebAssembly and each model, gzipped and base64-written into a
  // <script type="application/octet-stream">, unpacked with the browser's own DecompressionStream. Nothing is fetched.
  async function inlined(id) {
    const text = document.getElementById(id).textContent;
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  function startPage(config) {
    const ort = root.ort;
    let runtime = null;
    const sessions = {};
    const ready = () => runtime || (runtime = (async () => {
      ort.env.wasm.numThreads = 1;  // threads need a worker script of their own: from file:// it cannot load
      ort.env.wasm.proxy = false;
      ort.env.wasm.wasmBinary = await inlined("live-ort-wasm");
    })());
    const session = (name) => sessions[name] || (sessions[name] = (async () => {
      await ready();
      return ort.InferenceSession.create(await inlined(`live-onnx-${name}`), { executionProviders: ["wasm"] });
    })());
    const figures = JSON.parse(document.getElementById("figures").textContent);  // the figures the app drew
    const tokenizers = {};
    for (const [name, spec] of Object.entries(config.models)) {
      const src = tokenizer(spec.src);
      tokenizers[name] = { src, tgt: spec.tgt === "src" ? src : tokenizer(spec.tgt) };
    }

    async function runText(number, text) {
      const slide = config.slides[number], spec = config.models[slide.checkpoint];
      const model = await session(slide.checkpoint);
      const run = async (ids) => {
        const feeds = {};
        for (const [name, list] of Object.entries(ids)) {
          feeds[name] = new ort.Tensor("int64", BigInt64Array.from(list.map(BigInt)), [1, list.length]);
        }
        return model.run(feeds);
      };
      const prepared = prepare(spec, tokenizers[slide.checkpoint].src, text);
      if (prepared.error) return prepared;
      const sequence = await greedy(spec, run, prepared);
      return explain(spec, run, tokenizers[slide.checkpoint], prepared, sequence);
    }

    async function onSubmit(event) {
      event.preventDefault();
      const form = event.target, number = Number(form.dataset.slide), slide = config.slides[number];
      const section = form.closest("section.slide"), out = section.querySelector(".live-out");
      const text = form.querySelector("input").value;
      out.hidden = false;
      out.innerHTML = "<p>Running the model in this browser…</p>";
      form.dataset.state = "running";
      const started = performance.now();
      const result = await runText(number, text);
      form.dataset.modelMs = String(Math.round(performance.now() - started));  // reading, decoding, the captured pass
      (root.AtlasLive.results || (root.AtlasLive.results = {}))[number] = result;
      out.innerHTML = "";
      const line = (text, kind) => {
        const p = document.createElement("p");
        p.textContent = text;
        if (kind) p.className = kind;
        out.appendChild(p);
      };
      if (result.error) {
        line(result.error, "notice");
      } else {
        line("→  " + result.text, "live-output");
        line(`Output of ${slide.checkpoint} run in this browser (ONNX Runtime Web, float16 weights), ${config.models[slide.checkpoint].how}. ` +
          `Typed here: “${text}”.`);
        for (const [code, values] of result.caveats) line(worded(code, values), "notice");
        section.querySelectorAll(".texts > p").forEach((p) => { p.hidden = true; });  // the author's sentence's
        section.querySelector("p.input").textContent = `Input, typed here: ${text}`;  // what the figure now shows
        const box = section.querySelector("[data-live-figure]");
        const template = figures[Number(box.dataset.figure)];
        const [qTokens, kTokens] = kindTokens(slide.kind, result);
        const weights = headRows(result.patterns[slide.site], slide.head);
        const room = { height: box.closest(".panel").clientHeight, width: box.closest(".panel").clientWidth };
        const figure = headFigure(template, weights, qTokens, kTokens, blockedOf(slide.kind, qTokens.length, kTokens.length),
          `${(template.layout.title || {}).text || ""} · this browser's run`, room, config.maskColours);
        box.closest(".panel").style.overflowY = figure.layout.height > room.height ? "auto" : "";  // past MIN_FONT
        await root.Plotly.react(box, figure.data, figure.layout, figure.config);
        box.dataset.drawn = "1";
      }
      form.dataset.ms = String(Math.round(performance.now() - started));
      form.dataset.runs = String(Number(form.dataset.runs || 0) + 1);  // what a test or benchmark waits for
      form.dataset.state = "done";
    }

    document.querySelectorAll("form.live").forEach((form) => form.addEventListener("submit", (event) => {
      onSubmit(event).catch((error) => {
        const out = form.closest("section.slide").querySelector(".live-out");
        out.innerHTML = "";
        const p = document.createElement("p");
        p.className = "notice";
        p.textContent = "The model could not run in this browser: " + error.message;
        out.appendChild(p);
        form.dataset.state = "failed";
      });
    }));
    // Keys typed into the box are the box's: the deck's own keys (PageDown, N) stay with the slides.
    document.querySelectorAll("form.live input").forEach((input) => input.addEventListener("keydown", (event) => event.stopPropagation()));
    // Once the first figure is drawn, the runtime and every live slide's model are made ready, off the way: each
    // model decodes two sentences' worth of steps (a 20-token source, the decoder growing to 20 tokens), so that the
    // WebAssembly reaches its fast tier, at the sizes a typed sentence has, before a student types.
    setTimeout(async () => {
      for (const [name, spec] of Object.entries(config.models)) {
        const model = await session(name);
        const length = Math.min(20, spec.pass_len - 1);
        for (let step = 1; step <= 2 * length; step++) {
          const ids = { src: Array(length).fill(spec.eos), tgt: Array(1 + ((step - 1) % length)).fill(spec.bos) };
          const feeds = {};
          for (const input of spec.inputs) {
            feeds[input] = new ort.Tensor("int64", BigInt64Array.from(ids[input].map(BigInt)), [1, ids[input].length]);
          }
          await model.run(feeds);
        }
      }
      document.body.dataset.liveReady = "1";
    }, 0);
    root.AtlasLive.ready = ready;
    root.AtlasLive.session = session;
  }

  const api = { readInput, words, tokenizer, worded, prepare, greedy, explain, headFigure, blockedOf, headRows, kindTokens, startPage };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.AtlasLive = Object.assign(root.AtlasLive || {}, api);
})(typeof globalThis !== "undefined" ? globalThis : this);
