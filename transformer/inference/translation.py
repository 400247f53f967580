"""The inference front end of a checkpoint: `Checkpoint` is a loaded folder (io.checkpoint.LoadedCheckpoint) that
reads an input as its model does, warns about what the output cannot be trusted for (io.caveats: as data, for the
app to word), decodes it (greedy or beam search, as its card says, alone or in a batch) and captures one forward pass
over the result: a `Translation`, everything the views show. Running out of memory on an input is a message
(`OutOfMemory`), not a crash."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import torch

from ..data.recipes import JOINED_PAIRS
from ..data.tasks import input_caveats
from ..io.caveats import Caveat
from ..io.checkpoint import LoadedCheckpoint
from ..io.safety import PASS_BUDGET_BYTES
from ..io.text import MAX_CHARS_PER_TOKEN, InputText, input_ids, prompt_ids, read_input, target_ids, words
from ..io.tokenizer import JsonTokenizer
from ..model.capture import capture
from ..model.config import TransformerConfig
from ..model.device import model_device
from ..model.masks import decoder_lengths
from ..model.model import Transformer
from ..model.record import AttentionRecord
from .decoding import beam_search, check_beam_size, greedy, output_limit

CONTINUATION_TOKENS = 20  # a decoder-only model continues its prompt by this many tokens
MASK_PIECES = ("[MASK]", "<mask>")  # what an encoder-only model's tokenizer calls its mask token (BERT, BART/RoBERTa)
T = TypeVar("T")


@dataclass
class Translation:
    """One input translated, with what the views need to explain it."""

    text: str  # the output, detokenised
    src_tokens: list[str]  # pieces fed to the encoder (ending with </s>)
    src_typed: list[str]  # the same pieces as typed: an <unk> of src_tokens shows the text it stands for
    tgt_tokens: list[str]  # decoder input pieces, starting with <s>: the query rows of decoder attention
    output_tokens: list[str]  # the pieces generated, one per decoder input position (ending with </s> if reached)
    output_ids: list[int]  # their ids: the labels the decoder input's positions predict
    probs: list[float]  # probability of each generated piece
    attention: AttentionRecord  # one captured forward pass over (source, decoder input)
    src_ids: list[int]
    tgt_ids: list[int]  # decoder input ids
    warnings: list[Caveat] = field(default_factory=list)


@dataclass(frozen=True)
class Request:
    """One input read, encoded and checked, ready to decode alone or in a batch (Checkpoint.prepare)."""

    read: InputText
    ids: list[int]  # the encoder's ids (ending with </s>)
    warnings: list[Caveat]  # what the user should know about the input
    beam_size: int
    limit: int  # the decoder sequence length (BOS included) to stop at
    default_limit: bool  # the limit is decoding.output_limit's, not the caller's max_len


def decoding_bytes(config: TransformerConfig, requests: list[Request]) -> int:
    """About how many bytes decoding these requests together holds at its longest: per hypothesis (input x beam,
    padded to the longest source and limit), the encoder's memory and every decoder layer's cached keys and values
    (self-attention over the output, cross-attention over the source), and a few rows of scores over the
    vocabulary."""
    rows = len(requests) * max(request.beam_size for request in requests)
    src_len = max(len(request.ids) for request in requests)
    tgt_len = max(request.limit for request in requests)
    cached = config.d_model * (src_len + 2 * config.num_decoder_layers * (src_len + tgt_len))
    return 4 * rows * (cached + 3 * config.tgt_vocab_size)  # float32


class Checkpoint(LoadedCheckpoint):
    """A loaded checkpoint folder (LoadedCheckpoint) and what its model does with an input: read it, warn, decode,
    and capture one pass over the result (translate, or prepare + decode_batch + explain for a batch)."""

    def read(self, text: str) -> InputText:
        """`text` as this model reads it, bounded and normalised once, where it enters: what encoding, the warnings
        and decoding take. TypeError if it is not a string; ValueError (a message for the user) if it is empty."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        read = read_input(self.src_tokenizer, text, self.config.max_len)
        if not read.normalized:
            raise ValueError("The input is empty: type a sentence (spaces alone are not enough).")
        return read

    def _source(self, text: InputText) -> tuple[list[int], int]:
        """The encoder's ids for a read text and how many pieces were cut off to fit max_len; ValueError (a message
        for the user) when nothing of it is left to read."""
        if isinstance(self.src_tokenizer, JsonTokenizer):
            ids, cut = self._with_specials(text)
            readable = len(self.src_tokenizer.encode(text.read)) > 0  # a GPT-2 prompt may be one piece
        elif self.config.stacks == "decoder-only":  # a language model of ours: its prompt starts with <s>
            ids, cut = prompt_ids(self.src_tokenizer, text, self.pass_len, self.config.bos_id)
            readable = len(ids) > 1
        else:
            ids, cut = input_ids(self.src_tokenizer, text, self.pass_len, self.config.eos_id)
            readable = len(ids) > 1  # EOS alone: every character was dropped (zero-width, byte-order mark, U+FFFD)
        if not readable:
            raise ValueError("The input has no characters this model reads, only invisible or formatting ones: "
                             "type a sentence.")
        return ids, cut

    def _with_specials(self, text: InputText) -> tuple[list[int], int]:
        """A converted model's input as its own tokenizer builds it ([CLS] ... [SEP], <s> ... </s>, a Llama prompt's
        <s> ..., or the bare pieces of a GPT-2 prompt), cut to fit (a closing token kept), and how many pieces were
        cut."""
        ids = self.src_tokenizer.encode_with_specials(text.read)
        pieces = self.src_tokenizer.encode(text.read)
        closing = ids[-1:] if ids[-1:] != pieces[-1:] else []  # [SEP], </s>; nothing after a prompt's last piece
        room = self.pass_len - (1 if self.config.stacks == "decoder-only" else 0)  # a prompt leaves room to continue
        kept = ids if len(ids) <= room else ids[: room - len(closing)] + closing
        return kept, len(ids) - len(kept)

    def input_room(self) -> tuple[int, str]:
        """The most pieces of an input this model reads (max_len allowing), and what the tokens around them are (a
        code of io.caveats.AROUND): an encoder's </s>; a language model's <s> (ours) and one token at least to
        continue; a converted tokenizer's own special tokens."""
        max_len = self.config.max_len
        if isinstance(self.src_tokenizer, JsonTokenizer):  # [CLS] ... [SEP], <s> ... </s>, Llama's <s> ...
            specials = len(self.src_tokenizer.encode_with_specials("a")) - len(self.src_tokenizer.encode("a"))
            if self.config.stacks == "decoder-only":
                return max_len - specials - 1, "special_tokens_and_continuation" if specials else "continuation"
            return max_len - specials, "special_tokens"
        if self.config.stacks == "decoder-only":
            return max_len - 2, "bos_and_continuation"
        return max_len - 1, "eos"

    def unseen_words(self, text: str | InputText) -> list[str]:
        """The words of `text` (as this model reads it) that its training sources never contain, each once, in
        order; [] when the checkpoint has no word list."""
        if self.source_words is None:
            return []
        read = text if isinstance(text, InputText) else self.read(text)
        return list(dict.fromkeys(word for word in words(read.normalized) if word not in self.source_words))

    def encode(self, text: str, side: str = "src") -> list[int]:
        """Ids exactly as the model sees them: source = pieces + EOS; target = BOS + pieces + EOS."""
        if side == "src":
            return self._source(self.read(text))[0]
        if side == "tgt":
            self.read(text)  # the same checks as a source
            return target_ids(self.tgt_tokenizer, text, self.pass_len, self.config.bos_id, self.config.eos_id)
        raise ValueError(f"side must be 'src' or 'tgt', got {side!r}")

    def translate(self, text: str, beam_size: int | None = None, max_len: int | None = None,
                  model: Transformer | None = None) -> Translation:
        """Decode `text` (greedy when beam_size is 1; None: as the card's `decoding` says, greedy if it is silent),
        then capture one forward pass over the result.

        `max_len`: the decoder sequence length (BOS included) to stop at; None: decoding.output_limit of the input,
        as `python -m transformer.evaluate` decodes. `model` runs another set of weights with this checkpoint's
        tokenizers (e.g. a training snapshot)."""
        return self.translate_batch([self.prepare(text, beam_size, max_len)], model)[0]

    def prepare(self, text: str, beam_size: int | None = None, max_len: int | None = None) -> Request:
        """`text` read, encoded and checked as translate() takes it, without running the model: what is wrong with
        an input (TypeError, ValueError) is raised here, before it joins anyone else's in a batch."""
        beam_size = self.card.decoding.get("beam_size", 1) if beam_size is None else beam_size
        check_beam_size(beam_size)
        if not self.config.cross_attention:
            beam_size = 1  # beam search translates; a language model's continuation here is greedy
        read = self.read(text)
        ids, cut = self._source(read)
        limit = self.output_limit(len(ids)) if max_len is None else max_len
        if type(limit) is int:  # anything else: greedy and beam_search refuse it with a message
            limit = min(limit, self.pass_len)
        return Request(read, ids, self._input_warnings(read, ids, cut), beam_size, limit, max_len is None)

    def translate_batch(self, requests: list[Request], model: Transformer | None = None) -> list[Translation]:
        """The Translation of each request (all of one beam size), as translate() gives it alone: decode_batch, then
        each input's own explain()."""
        model = model or self.model
        if self.config.stacks == "encoder-only":  # nothing to decode: one captured pass per input
            return [self._filled(model, self._padded([request.ids], model_device(model)), request.read,
                                 list(request.warnings)) for request in requests]
        return [self.explain(request, sequence, model)
                for request, sequence in zip(requests, self.decode_batch(requests, model))]

    def decode_batch(self, requests: list[Request], model: Transformer | None = None) -> list[list[int]]:
        """The decoded sequence (BOS first) of each request (all of one beam size), as translate() decodes it
        alone: the inputs padded into one batch, each stopping at its own limit. Decoding is where batching pays:
        every step reads all the weights, for one row or for forty alike. One input that fails fails the call: run
        each alone to tell whose it is. A language model's prompts of different lengths do not pad (its decoding
        continues each from its last token): they run one by one."""
        model = model or self.model
        if len({request.beam_size for request in requests}) != 1:
            raise ValueError("a batch of translations runs one beam size")
        if len(requests) > 1 and not self.config.cross_attention:
            return [sequence for request in requests for sequence in self.decode_batch([request], model)]
        src = self._padded([request.ids for request in requests], model_device(model))
        return self._decode(model, src, requests[0].beam_size, [request.limit for request in requests])

    def explain(self, request: Request, sequence: list[int], model: Transformer | None = None) -> Translation:
        """The Translation of a request decoded as `sequence` (decode_batch): its warnings, and one captured pass
        over (source, decoder input) of this input alone.

        The captured pass is run per input, exactly the pass translate() runs, so the attention is the same bit for
        bit however the decoding was batched: one pass over a padded batch, cut back to each input, differs from it
        by float32 rounding (a sum over more keys, a product over more rows: up to 1.3e-6 on the weights over 200 of
        eng-fra's dev sentences), and would save little (the capture's cost is writing what it records, per input
        either way)."""
        warnings = list(request.warnings)
        if sequence[-1] != self.config.eos_id and self.config.cross_attention:  # a language model may go on
            warnings.append(self._unended_warning(len(request.ids), len(sequence), request.limit,
                                                  request.default_limit))
        return self._explained(model or self.model, request, sequence, warnings)

    def batch_fits(self, requests: list[Request]) -> bool:
        """Whether decoding these requests together stays within the memory one captured pass may take
        (PASS_BUDGET_BYTES); one request alone always runs, as translate() does."""
        return len(requests) == 1 or decoding_bytes(self.config, requests) <= PASS_BUDGET_BYTES

    def _padded(self, rows: list[list[int]], device: torch.device) -> torch.Tensor:
        """(batch, longest) ids, each row followed by padding."""
        longest = max(len(row) for row in rows)
        return torch.tensor([row + [self.config.pad_id] * (longest - len(row)) for row in rows], device=device)

    def output_limit(self, src_len: int) -> int:
        """The sequence length decoding stops at by default: decoding.output_limit of the input's length; a
        decoder-only model's prompt continued by CONTINUATION_TOKENS."""
        if self.config.stacks == "decoder-only":
            return src_len + CONTINUATION_TOKENS
        return output_limit(src_len)

    def _input_warnings(self, read: InputText, ids: list[int], cut: int) -> list[Caveat]:
        """What the user should know about the input before trusting the output: cut off, longer than anything
        trained on, its task's own (data.tasks.INPUT_CAVEATS), words never seen, pieces the vocabulary lacks."""
        warnings = []
        # Lengths in pieces, as typed; max_len counts tokens, the pieces and the </s> after them (the source axis).
        by_memory = self.pass_len < self.config.max_len  # the memory budget, not the model, sets the limit
        if by_memory:
            reads = {"reads": self.pass_len - 1, "encoder_layers": self.config.num_encoder_layers,
                     "decoder_layers": self.config.num_decoder_layers, "heads": self.config.num_heads}
        else:
            pieces, around = self.input_room()
            reads = {"reads": pieces, "max_len": self.config.max_len, "around": around}
        if read.cut_off:
            warnings.append(Caveat("cut_off_chars_by_memory" if by_memory else "cut_off_chars",
                                   {"chars": self.config.max_len * MAX_CHARS_PER_TOKEN, **reads}))
        elif cut:
            warnings.append(Caveat("cut_off_pieces_by_memory" if by_memory else "cut_off_pieces",
                                   {"pieces": len(ids) - 1 + cut, "cut": cut, **reads}))
        longest = self.card.training.get("longest_source_tokens")
        if type(longest) is int and len(ids) - 1 > longest:
            joined = any(self.card.training.get(setting) for setting in JOINED_PAIRS)
            warnings.append(Caveat("longer_than_trained", {"pieces": len(ids) - 1, "longest": longest,
                                                           "joined": joined}))
        warnings += input_caveats(self.card.task, read.normalized)  # its task's own (the task registry)
        unseen = self.unseen_words(read)
        if unseen:
            warnings.append(Caveat("unseen_words", {"words": unseen}))
        unknown = ids.count(self.src_tokenizer.unk_id)
        if unknown:
            warnings.append(Caveat("unknown_pieces", {"count": unknown}))
        return warnings

    def _decode(self, model: Transformer, src: torch.Tensor, beam_size: int, limits: list[int]) -> list[list[int]]:
        """The decoded sequence (BOS first) of each row of src (batch, src_len), as the card's decoding settings say,
        each stopped at its own limit, without trailing padding."""
        decoding = self.card.decoding
        decoded = within_memory(lambda: greedy(model, src, limits) if beam_size == 1 else beam_search(
            model, src, beam_size, limits, decoding.get("length_penalty", 0.6),
            coverage_penalty=decoding.get("coverage_penalty", 0.0)))
        lengths = decoder_lengths(decoded, self.config.pad_id).tolist()
        return [row[:length] for row, length in zip(decoded.tolist(), lengths)]

    def _unended_warning(self, src_len: int, sequence_len: int, limit: int, default_limit: bool) -> Caveat:
        """Why the output has no </s>: where decoding stopped it."""
        if default_limit and limit < self.pass_len:
            return Caveat("unended_at_output_limit", {"pieces": sequence_len - 1, "src_len": src_len})
        return Caveat("unended_at_max_len", {"pieces": sequence_len - 1, "max_len": min(limit, self.config.max_len)})

    def _explained(self, model: Transformer, request: Request, sequence: list[int], warnings: list[Caveat]
                   ) -> Translation:
        """The Translation of a decoded sequence: one captured forward pass over (source, decoder input), the
        probability of each generated piece, and every token list the views label."""
        decoder_input = sequence[:-1]  # the last token (EOS, or where max_len stopped) is never fed back
        ids = request.ids
        src = torch.tensor([ids], device=model_device(model))

        def captured() -> tuple[torch.Tensor, AttentionRecord]:
            with torch.no_grad(), capture(model) as record:
                return model(src, src.new_tensor([decoder_input])).softmax(dim=-1)[0].cpu(), record  # (tgt_len, vocab)

        probs, record = within_memory(captured)
        if not bool(torch.isfinite(probs).all()):
            first = next((key for key in record if not bool(torch.isfinite(record[key]).all())), None)
            raise ValueError("This model's output is not a number (NaN or infinity) on this input: its weights are "
                             "finite, but what the layers compute from them overflows"
                             + (f" (first in {first})" if first else "") + ". The checkpoint itself is broken.")
        generated = sequence[1:]
        src_pieces = self.src_tokenizer.pieces(ids)
        # A decoder-only model's output is its continuation of the prompt (`generated` also holds, at each prompt
        # position, the prompt's next token: the next-token prediction the views show).
        continuation = sequence[len(ids):] if self.config.stacks == "decoder-only" else generated
        return Translation(
            text=self.tgt_tokenizer.decode(continuation),
            src_tokens=src_pieces,
            src_typed=self._typed(request.read, ids, src_pieces),
            tgt_tokens=self.tgt_tokenizer.pieces(decoder_input),
            output_tokens=self.tgt_tokenizer.pieces(generated),
            output_ids=generated,
            probs=[float(probs[i, token]) for i, token in enumerate(generated)],
            attention=record.cpu(),
            src_ids=ids,
            tgt_ids=decoder_input,
            warnings=warnings,
        )

    def _typed(self, read: InputText, ids: list[int], src_pieces: list[str]) -> list[str]:
        """The source pieces as typed (an <unk> shows its text); a converted tokenizer's pieces are its own."""
        if isinstance(self.src_tokenizer, JsonTokenizer):
            return src_pieces
        typed = self.src_tokenizer.encode_pieces(read.read)
        return typed[: len(ids) - 1] + src_pieces[-1:]

    def _filled(self, model: Transformer, src: torch.Tensor, read: InputText, warnings: list[Caveat]
                ) -> Translation:
        """An encoder-only model's masked-token prediction: one captured pass, the most likely token at every
        position, and the input with each mask token replaced by its prediction."""
        def captured() -> tuple[torch.Tensor, AttentionRecord]:
            with torch.no_grad(), capture(model) as record:
                return model(src).softmax(dim=-1)[0].cpu(), record  # (src_len, vocab)

        probs, record = within_memory(captured)
        ids = src[0].tolist()
        best = probs.argmax(dim=-1).tolist()
        masks = {self.src_tokenizer.token_id(piece) for piece in MASK_PIECES} - {None}
        if not masks & set(ids):
            warnings.append(Caveat("no_mask_token"))
        src_pieces = self.src_tokenizer.pieces(ids)
        return Translation(
            text=self.src_tokenizer.decode([b if i in masks else i for i, b in zip(ids, best)]),
            src_tokens=src_pieces, src_typed=self._typed(read, ids, src_pieces), tgt_tokens=[],
            output_tokens=self.src_tokenizer.pieces(best), output_ids=best,
            probs=[float(probs[i, token]) for i, token in enumerate(best)], attention=record.cpu(), src_ids=ids,
            tgt_ids=[], warnings=warnings)



class OutOfMemory(ValueError):
    """The model ran out of memory on an input; the message is for the user."""

    def __init__(self, failed: str) -> None:
        super().__init__(f"This server ran out of memory running the model on this input ({failed}): try a shorter "
                         "input.")


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is running out of memory: MemoryError, torch.OutOfMemoryError, or the CPU allocator's
    RuntimeError."""
    return isinstance(error, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(error, RuntimeError) and "allocate" in str(error))


def within_memory(call: Callable[[], T]) -> T:
    """call(), with running out of memory turned into OutOfMemory. It is raised once the failed call's exception is
    gone (no __context__), so that the tensors its frames held are freed at once."""
    try:
        return call()
    except (MemoryError, RuntimeError) as error:  # torch.OutOfMemoryError is a RuntimeError
        if not is_out_of_memory(error):
            raise
        failed = type(error).__name__
    raise OutOfMemory(failed)


def load_checkpoint(path: str | Path) -> Checkpoint:
    return Checkpoint(path)
