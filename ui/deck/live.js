// A live slide of a packed deck (ui/deck/live.py): the slide's checkpoint run in the page on what a student types.
// Text is read as the app reads it (transformer/io/text.py), encoded by the checkpoint's own sentencepiece tables
// (transformer/io/onnx_export.py's tokenizer_table), decoded greedily as transformer/inference/decoding.py does, run by
// ONNX Runtime Web, and the slide's figures redrawn with viz/'s conventions. Everything here is proven equal to the
// Python it mirrors by tests/test_live_pack*.py. Runs in a page and in node (the tests' tokenizer check).
(function (root) {
  "use strict";

  // ----------------------------------------------------------------------------------------- text, as text.py reads it
  const MAX_CHARS_PER_TOKEN = 32;
  // A slide's last line once the page has redrawn its figure (ui/deck/packing.py writes the line it replaces).
  const DRAWN_HERE = "Drawn in this browser from the sentence typed here; the live app has every other head, layer " +
    "and step. Keys: PageDown / PageUp, N for the notes.";
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
    years_out_of_range: (v) => `This model was trained on years ${v.first}-${v.last} only: it cannot write ` +
      `${v.years.join(", ")} and will put a year from its range instead.`,
    unknown_pieces: (v) => `${v.count} piece(s) of the input are unknown to this model's vocabulary and shown as <unk>.`,
    unended: (v) => "The model did not end its output: decoding stopped it after " + v.pieces + " pieces, at " +
      ("src_len" in v ? `twice the input's length plus 10 tokens (the input: ${v.src_len} tokens with </s>)`
        : `max_len (${v.max_len} tokens with <s>)`) + ".",
  };
  WORDINGS.cut_off_chars_by_memory = WORDINGS.cut_off_chars;
  WORDINGS.cut_off_pieces_by_memory = WORDINGS.cut_off_pieces;
  WORDINGS.unended_at_output_limit = WORDINGS.unended_at_max_len = WORDINGS.unended;
  const worded = (code, values) => WORDINGS[code](values);

  // ------------------------------------------------------------- a task's own notices, as data.tasks.INPUT_CAVEATS gives them
  // data.tasks.years_out_of_range: every run of exactly four decimal digits (Python's (?<!\d)\d{4}(?!\d), any script's
  // digits: `digit_zeros` holds each zero's code point, the nine after it its other digits) read as a year; those
  // outside first..last named.
  function yearsOutOfRange(text, table) {
    const digit = (char) => {
      const code = char.codePointAt(0);
      const zero = table.digit_zeros.find((start) => start <= code && code < start + 10);
      return zero === undefined ? -1 : code - zero;
    };
    const years = [];
    let run = [];
    for (const char of [...Array.from(text), ""]) {
      const value = char ? digit(char) : -1;
      if (value >= 0) { run.push(value); continue; }
      if (run.length === 4) years.push(run.reduce((year, next) => 10 * year + next, 0));
      run = [];
    }
    const outside = years.filter((year) => !(table.first <= year && year <= table.last));
    return outside.length ? [["years_out_of_range", { years: outside, first: table.first, last: table.last }]] : [];
  }
  const TASK_NOTICES = { years_out_of_range: yearsOutOfRange };
  const taskCaveats = (notices, text) => Object.entries(notices || {}).flatMap(([code, table]) => TASK_NOTICES[code](text, table));

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
    caveats.push(...taskCaveats(spec.task_notices, read));
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

  // ----------------------------------------------- the Model view as lines, as viz.model_lines draws it (lecture mode)
  const OPACITY_LEVELS = 20, TOP_LINKS = 3, GAP_PX = 18, LABEL_GAP_PX = 16, PANEL_PX = [110, 220];
  const LIST_STEPS_EM = [1.6, 1.3, 1.15];  // viz.head_view's LIST_STEP_EM, TOKEN_STEP_EM, SOLID_STEP_EM
  const roundHalfEven = (x) => { const r = Math.round(x); return Math.abs(x % 1) === 0.5 && r % 2 ? r - 1 : r; };
  const pyFloat = (x) => (Number.isInteger(x) ? x.toFixed(1) : String(x));  // str() of a Python float
  // format(x, ".2f"): the nearest of the exact binary value, a tie to the even digit (toFixed takes the larger)
  function fixed2(x) {
    const scaled = x * 100, floor = Math.floor(scaled);
    if (scaled - floor === 0.5) return ((floor % 2 ? floor + 1 : floor) / 100).toFixed(2);
    return x.toFixed(2);
  }

  // viz.head_view.weight_lines: a trace per opacity level (weights x 20, rounded in float32 as numpy does), each
  // pair of that level a line from its query (x 0, y -i) to its key (x 1, y -j); masked pairs and level 0 none.
  function weightLines(weights, masked, colour, line, meta, fields) {
    const byLevel = new Map();
    weights.forEach((row, i) => row.forEach((weight, j) => {
      const level = roundHalfEven(Math.fround(Math.fround(weight) * OPACITY_LEVELS));
      if (masked[i][j] || level <= 0) return;
      if (!byLevel.has(level)) byLevel.set(level, []);
      byLevel.get(level).push([i, j]);
    }));
    return [...byLevel.keys()].sort((a, b) => a - b).map((level) => {
      const pairs = byLevel.get(level), opacity = level / OPACITY_LEVELS;
      return Object.assign({
        type: "scatter", x: pairs.flatMap(() => [0.0, 1.0, null]), y: pairs.flatMap(([i, j]) => [0 - i, 0 - j, null]),
        mode: "lines", line: Object.assign({ color: `rgba(${colour.join(", ")}, ${pyFloat(opacity)})` }, line),
        hoverinfo: "skip", meta: [...meta, opacity],
      }, fields);
    });
  }

  // viz.head_view._link_summaries of one head: per token of `side`, its TOP_LINKS strongest links (masked ones 0).
  function linkSummaries(side, weights, masked, qTokens, kTokens, name) {
    const [mine, theirs] = side === "query" ? [qTokens, kTokens] : [kTokens, qTokens];
    const arrow = side === "query" ? "→" : "←";
    return mine.map((token, index) => {
      const row = side === "query" ? weights[index].map((w, j) => (masked[index][j] ? 0 : w))
        : weights.map((r, i) => (masked[i][index] ? 0 : r[index]));
      const top = row.map((_, other) => other).sort((a, b) => row[b] - row[a]).slice(0, TOP_LINKS);
      const links = top.filter((other) => row[other] > 0).map((other) => `${escapeLabel(theirs[other])} ${fixed2(row[other])}`).join(", ");
      return `${side} ${escapeLabel(token)} (${index})<br>${escapeLabel(name)} ${arrow} ${links || "nothing"}`;
    });
  }

  // The Model view's lines for new tokens. `template` is the figure the app drew for the slide: its window of layers
  // x heads (the panels' markers carry meta [layer, head]), its traces' and axes' look and its fonts are kept; `head`
  // (layer, head) gives that head's (q_len x k_len) rows. The layout is viz.model_lines's, its text widths measured
  // in the page (as headFigure's): the largest font whose rows fit `room`'s height, panels sharing its width.
  function linesFigure(template, head, qTokens, kTokens, blocked, title, room, headColours) {
    const drawn = template.data.filter((trace) => trace.mode === "markers" && Array.isArray(trace.meta) && trace.meta.length === 2);
    const heads = [...new Set(drawn.map((trace) => trace.meta[1]))];
    const lineTrace = template.data.find((trace) => trace.mode === "lines") || { line: { width: 1 } };
    const thin = Object.assign({}, lineTrace.line);
    delete thin.color;
    const masked = Array.from(qTokens, (_, i) => Array.from(kTokens, (_, j) => Object.values(blocked).some((mask) => mask[i][j])));
    const q = qTokens.length, k = kTokens.length, rows = Math.max(q, k);
    const layout = JSON.parse(JSON.stringify(template.layout));
    const headingFont = ((layout.annotations || [])[0] || {}).font?.size || (layout.font || {}).size || 12;
    const titleFont = ((layout.title || {}).font || {}).size || headingFont;
    const family = (layout.font || {}).family || "sans-serif";
    // viz.head_view.list_font and list_height: the title's band, a heading per row of panels, the token rows.
    const height = (font, step, lists = layers.length) => LINE * titleFont + 24 + 16 + lists * (LINE * headingFont + 6) + lists * rows * step * font;
    // As the Model view pages its layers (viz.fit_model_lines): the template's first layers, as many as keep their
    // rows set solid at MIN_FONT within the room (one at least); the title names that window as the view does.
    const allLayers = [...new Set(drawn.map((trace) => trace.meta[0]))];
    let fitting = allLayers.length;
    while (fitting > 1 && height(MIN_FONT, LIST_STEPS_EM[2], fitting) > room.height) fitting--;
    const layers = allLayers.slice(0, fitting);
    const panels = drawn.filter((trace) => layers.includes(trace.meta[0]));
    if (fitting < allLayers.length) {
      const [layer, head] = [layers[0], heads[0]], [lastLayer, lastHead] = [layers[fitting - 1], heads[heads.length - 1]];
      const named = `L${layer}` + (lastLayer > layer ? `–${lastLayer}` : "") + ` H${head}` + (lastHead > head ? `–${lastHead}` : "");
      title = title.replace(/^(.*?: every layer and head)( \([^)]*\))?/, `$1 (${named})`);
      for (let index = panels.length; index < drawn.length; index++) {  // the panels left out, and their axes
        delete layout[`xaxis${index + 1}`];
        delete layout[`yaxis${index + 1}`];
      }
      layout.annotations = layout.annotations.filter((note) => !drawn.slice(panels.length).some((trace) => note.text === escapeLabel(trace.name)));
    }
    let font = MIN_FONT, stepEm = LIST_STEPS_EM[2];
    search: for (let size = headingFont; size >= MIN_FONT; size--) {
      for (const step of LIST_STEPS_EM) if (height(size, step) <= room.height) { font = size; stepEm = step; break search; }
    }
    const shown = (token) => String(token).replaceAll("\u2581", "\u00b7");
    const column = (tokens, side) => Math.max(0, ...tokens.map((t) => textPx(shown(t), font, family)), textPx(side, headingFont, family)) + LABEL_GAP_PX;
    const [left, right] = [column(qTokens, "query"), column(kTokens, "key")];
    const spare = room.width - left - right - 40 - (heads.length - 1) * GAP_PX;
    const panel = Math.min(Math.max(spare / heads.length, PANEL_PX[0]), PANEL_PX[1]);
    const heading = LINE * headingFont + 6, rowPx = rows * stepEm * font;
    const plotW = heads.length * panel + (heads.length - 1) * GAP_PX, plotH = layers.length * rowPx + (layers.length - 1) * heading;
    const domain = (start, end, total) => [Math.min(Math.max(start / total, 0), 1), Math.min(Math.max(end / total, 0), 1)];
    const yRange = [-(rows - 0.5), 0.5];
    const ticks = (tokens) => ({ tickvals: tokens.map((_, i) => 0 - i), ticktext: tokens.map(escapeLabel), range: yRange, tickfont: { size: font } });
    const markers = [], lines = [], anchors = [];
    panels.forEach((marker, index) => {
      const [layer, model] = marker.meta, row = layers.indexOf(layer), col = heads.indexOf(model);
      const suffix = index ? String(index + 1) : "";
      const weights = head(layer, model), x0 = col * (panel + GAP_PX), top = row * (rowPx + heading);
      Object.assign(layout[`xaxis${suffix}`], { domain: domain(x0, x0 + panel, plotW) });
      const yAxis = layout[`yaxis${suffix}`];
      Object.assign(yAxis, ticks(qTokens), { domain: domain(plotH - top - rowPx, plotH - top, plotH) });
      yAxis.tickfont = Object.assign({}, yAxis.tickfont, { size: font });
      const colour = headColours[model % headColours.length];
      lines.push(...weightLines(weights, masked, colour, thin, [layer, model],
        { name: marker.name, showlegend: false, xaxis: marker.xaxis, yaxis: marker.yaxis }));
      const hover = ["query", "key"].flatMap((side) => linkSummaries(side, weights, masked, qTokens, kTokens, marker.name));
      markers.push(Object.assign({}, marker, {
        x: [...Array(q).fill(0.0), ...Array(k).fill(1.0)], y: [...qTokens.map((_, i) => 0 - i), ...kTokens.map((_, i) => 0 - i)],
        hovertext: hover,
      }));
      const annotation = layout.annotations.find((note) => note.text === escapeLabel(marker.name));
      if (annotation) Object.assign(annotation, { x: (x0 + panel / 2) / plotW, y: 1 - top / plotH });
    });
    // The keys' axes (right of each row's last panel, numbered after the panels' as viz.model_lines numbers them)
    // overlay a panel's: each takes the keys, its anchor trace kept.
    const keyAxes = template.data.filter((trace) => trace.mode === undefined && Array.isArray(trace.x) && trace.x.length === 1 && trace.x[0] === null);
    const keyLayouts = keyAxes.map((trace) => layout[`yaxis${trace.yaxis.slice(1)}`]);
    keyAxes.forEach((trace) => { delete layout[`yaxis${trace.yaxis.slice(1)}`]; });
    keyAxes.slice(0, layers.length).forEach((trace, row) => {
      const id = String(panels.length + row + 1), axis = keyLayouts[row];
      Object.assign(axis, ticks(kTokens));
      axis.tickfont = Object.assign({}, axis.tickfont, { size: font });
      layout[`yaxis${id}`] = axis;
      anchors.push(Object.assign({}, trace, { yaxis: `y${id}` }));
    });
    for (const note of layout.annotations) {
      if (note.text === "query") note.x = -LABEL_GAP_PX / plotW;
      if (note.text === "key") note.x = 1 + LABEL_GAP_PX / plotW;
    }
    layout.margin = Object.assign({}, layout.margin, { l: 20 + left, r: 20 + right, t: LINE * titleFont + 24 + heading });
    layout.width = Math.round(Math.max(layout.margin.l + plotW + layout.margin.r, textPx(title, titleFont, family) + 40));
    layout.height = Math.round(layout.margin.t + plotH + layout.margin.b);
    layout.title = Object.assign({}, layout.title, { text: title });
    layout.datarevision = `${layout.datarevision || ""} live ${++revisions}`;
    return { data: [...markers, ...lines, ...anchors], layout, config: template.config };
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
        line(`Output of ${slide.checkpoint} run in this browser (ONNX Runtime Web, float16 weights), ${config.models[slide.checkpoint].how}.`);
        for (const [code, values] of result.caveats) line(worded(code, values), "notice");
        section.querySelectorAll(".texts > p").forEach((p) => { p.hidden = true; });  // the author's sentence's
        section.querySelector("p.input").textContent = `Input, typed here: ${text}`;  // what the figure now shows
        section.querySelector(".side > p.more:last-of-type").textContent = DRAWN_HERE;  // no longer as the slide is set
        const box = section.querySelector("[data-live-figure]");
        const template = figures[Number(box.dataset.figure)];
        const [qTokens, kTokens] = kindTokens(slide.kind, result);
        const blocked = blockedOf(slide.kind, qTokens.length, kTokens.length);
        const room = { height: box.closest(".panel").clientHeight, width: box.closest(".panel").clientWidth };
        const title = `${(template.layout.title || {}).text || ""} · this browser's run`;
        const figure = slide.view === "model"
          ? linesFigure(template, (layer, head) => headRows(result.patterns[slide.sites[layer]], head), qTokens, kTokens,
            blocked, title, room, config.headColours)
          : headFigure(template, headRows(result.patterns[slide.site], slide.head), qTokens, kTokens, blocked, title, room,
            config.maskColours);
        box.closest(".panel").style.overflowY = figure.layout.height > room.height ? "auto" : "";  // past MIN_FONT
        await root.Plotly.react(box, figure.data, figure.layout, figure.config);
        box.dataset.drawn = "1";
      }
      if (typeof root.fit === "function") root.fit(section.querySelector(".side"));  // the pack's own: its text made to fit
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

  const api = {
    readInput, words, tokenizer, worded, prepare, greedy, explain, headFigure, linesFigure, blockedOf, headRows,
    kindTokens, taskCaveats, startPage,
  };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.AtlasLive = Object.assign(root.AtlasLive || {}, api);
})(typeof globalThis !== "undefined" ? globalThis : this);
