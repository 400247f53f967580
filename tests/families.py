"""Random small GPT-2, BERT, BART, Llama, Qwen2 and Mistral models of transformers, with tokenizers trained here by the
`tokenizers` library, written as `save_pretrained` writes them: what the converters' and the app's tests read. Nothing
is downloaded."""
from __future__ import annotations

from pathlib import Path

import tokenizers
import torch
import transformers

CORPUS = ["Paris is the capital of France.", "The children are playing in the garden.", "She is reading a book.",
          "Where is the station?", "We will go to the beach tomorrow.", "He bought a red car.",
          "Berlin is the capital of Germany.", "It is raining today.", "Tom is taller than Mary.",
          "The cat sat on the mat.", "I don't like cats at all.", "Rome is the capital of Italy."] * 3
TEXTS = ["Paris is the capital of France.", "The cat is reading in the garden!", "Zebras? Quixotic jazz ~ 42 %",
         "ünïcödé naïve café"]
WEIGHT_STD = 0.3  # random weights this large give sharp, distinct attention patterns (the init's are near-uniform)
NEW_TOKENS = 12


def byte_level_bpe(specials: list[str]) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer)
    return tokenizer


def metaspace_bpe(specials: list[str]) -> tokenizers.Tokenizer:
    """A sentencepiece-like BPE (Llama 2's and Mistral's): words start with "▁", unknown characters are <unk>."""
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    tokenizer.decoder = tokenizers.decoders.Metaspace()
    tokenizer.train_from_iterator(CORPUS, tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=specials))
    return tokenizer


def with_bos(backend: tokenizers.Tokenizer, *processors) -> tokenizers.Tokenizer:
    """`backend` with a post-processor that puts <s> before every text (Llama's), after `processors`."""
    template = tokenizers.processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                        special_tokens=[("<s>", backend.token_to_id("<s>"))])
    backend.post_processor = tokenizers.processors.Sequence([*processors, template])
    return backend


def wordpiece() -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tokenizers.decoders.WordPiece()
    trainer = tokenizers.trainers.WordPieceTrainer(vocab_size=200,
                                                   special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
        special_tokens=[("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))])
    return tokenizer


def make_gpt2(folder: Path, n_positions: int = 64, n_embd: int = 32, n_layer: int = 3, n_head: int = 4):
    backend = byte_level_bpe(["<|endoftext|>"])
    end = backend.token_to_id("<|endoftext|>")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                                     bos_token="<|endoftext|>")
    config = transformers.GPT2Config(vocab_size=backend.get_vocab_size(), n_positions=n_positions, n_embd=n_embd,
                                     n_layer=n_layer, n_head=n_head, bos_token_id=end, eos_token_id=end)
    return transformers.GPT2LMHeadModel(config), tokenizer


def make_bert(folder: Path):
    backend = wordpiece()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]")
    config = transformers.BertConfig(vocab_size=backend.get_vocab_size(), hidden_size=32, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=48, max_position_embeddings=64,
                                     pad_token_id=0)
    return transformers.BertForMaskedLM(config), tokenizer


def make_bart(folder: Path):
    backend = byte_level_bpe(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])  # BART's ids: 0, 1, 2, 3, then the rest
    backend.post_processor = tokenizers.processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
        mask_token="<mask>")
    config = transformers.BartConfig(
        vocab_size=backend.get_vocab_size(), d_model=32, encoder_layers=2, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
        max_position_embeddings=64, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        forced_bos_token_id=None, forced_eos_token_id=None)
    return transformers.BartForConditionalGeneration(config), tokenizer


def make_llama(folder: Path, **shape):
    """Llama 3's tokenizer layout (byte-level BPE, <s> before every text) and a LlamaForCausalLM of `shape`."""
    backend = with_bos(byte_level_bpe(["<unk>", "<s>", "</s>"]), tokenizers.processors.ByteLevel(trim_offsets=False))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                                     unk_token="<unk>")
    config = transformers.LlamaConfig(vocab_size=backend.get_vocab_size(), bos_token_id=1, eos_token_id=2,
                                      **{"max_position_embeddings": 64} | shape)
    return transformers.LlamaForCausalLM(config), tokenizer


def make_qwen2(folder: Path, **shape):
    """Qwen2's tokenizer layout (byte-level BPE, nothing added around a text) and a Qwen2ForCausalLM of `shape`."""
    backend = byte_level_bpe(["<|endoftext|>"])
    backend.post_processor = tokenizers.processors.ByteLevel(trim_offsets=False)
    end = backend.token_to_id("<|endoftext|>")
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>",
                                                     pad_token="<|endoftext|>")
    config = transformers.Qwen2Config(vocab_size=backend.get_vocab_size(), bos_token_id=end, eos_token_id=end,
                                      **{"max_position_embeddings": 64} | shape)
    return transformers.Qwen2ForCausalLM(config), tokenizer


def make_mistral(folder: Path, **shape):
    """Mistral's tokenizer layout (sentencepiece-like BPE, <s> before every text) and a MistralForCausalLM of
    `shape`."""
    backend = with_bos(metaspace_bpe(["<unk>", "<s>", "</s>"]))
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>",
                                                     unk_token="<unk>")
    config = transformers.MistralConfig(vocab_size=backend.get_vocab_size(), bos_token_id=1, eos_token_id=2,
                                        **{"max_position_embeddings": 64} | shape)
    return transformers.MistralForCausalLM(config), tokenizer


MAKERS = {"gpt2": make_gpt2, "bert": make_bert, "bart": make_bart, "llama": make_llama, "qwen2": make_qwen2,
          "mistral": make_mistral}
SMALL = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
# d_head 8: one wavelength kept, one blended, two stretched; pretrained at 256 positions, stretched to 512
LLAMA3 = dict(max_position_embeddings=512, rope_parameters={
    "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 256})
# Each family's shapes: the Llama family's differ in query and key/value heads, rotary settings, tied or untied
# output, biases (Qwen2's always on q, k and v) and Mistral's window, always shorter than the inputs.
SHAPES = {
    "gpt2": [{}], "bert": [{}], "bart": [{}],
    "llama": [SMALL | dict(num_key_value_heads=4, tie_word_embeddings=True),
              SMALL | LLAMA3 | dict(num_key_value_heads=2, attention_bias=True, mlp_bias=True),
              SMALL | dict(hidden_size=48, num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=1,
                           rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})],
    "qwen2": [SMALL | dict(num_key_value_heads=2, tie_word_embeddings=True,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
              SMALL | dict(num_key_value_heads=4, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                                   "factor": 4.0}),
              SMALL | LLAMA3 | dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=8,
                                    num_key_value_heads=2)],
    "mistral": [SMALL | dict(num_key_value_heads=2, sliding_window=4),
                SMALL | dict(num_key_value_heads=1, sliding_window=3, tie_word_embeddings=True,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
                SMALL | dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=4,
                             sliding_window=6)],
}


def save_family(family: str, folder: Path, seed: int = 0, **sizes):
    """Write a random `family` model (its maker's `sizes` if given) and its tokenizer into `folder`; returns (model,
    tokenizer)."""
    torch.manual_seed(seed)
    model, tokenizer = MAKERS[family](folder, **sizes)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name.lower() or "ln_" in name:
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
            else:
                parameter.normal_(0.0, WEIGHT_STD)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer
