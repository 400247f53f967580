"""config.json and card.json against their JSON Schemas (transformer/model/schemas/): every shipped checkpoint passes,
the schemas keep the loading policy's bounds and document every field, and each kind of problem is a CheckpointError
that names the file, the field, what it must be and what it is."""
import json
import math
import re
import time
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from transformer import CheckpointError, TransformerConfig
from transformer.io import safety as policy
from transformer.io.checkpoint import CARD_FILE, CONFIG_FILE, ModelCard, read_card, read_config
from transformer.model.layers import ACTIVATION_FUNCTIONS
from transformer.model.schema import ERRORS_WEIGHED, schema, schema_problem

SHIPPED = Path(__file__).resolve().parent.parent / "checkpoints"
SHIPPED_FOLDERS = sorted(path.parent for path in SHIPPED.glob(f"*/{CONFIG_FILE}"))
DOCUMENTS = {"config": TransformerConfig, "card": ModelCard}


def test_the_shipped_checkpoints_are_found():
    assert len(SHIPPED_FOLDERS) >= 5  # a glob that found none would leave the test below with nothing to check


@pytest.mark.parametrize("folder", SHIPPED_FOLDERS, ids=lambda folder: folder.name)
def test_every_shipped_checkpoint_matches_both_schemas(folder):
    assert schema_problem(json.loads((folder / CONFIG_FILE).read_text()), "config") is None
    assert schema_problem(json.loads((folder / CARD_FILE).read_text()), "card") is None
    assert read_config(folder).d_model > 0 and read_card(folder).name


@pytest.mark.parametrize("document", DOCUMENTS)
def test_each_schema_is_draft_2020_12(document):
    assert schema(document)["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema(document))


def subschemas(node: dict, path: str = ""):
    """Every (path, schema) below and including `node`, paths written as `properties.history.items`."""
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from subschemas(child, f"{path}.{name}".lstrip("."))
    for keyword in ("items", "additionalProperties", "propertyNames"):
        if isinstance(node.get(keyword), dict):
            yield from subschemas(node[keyword], f"{path}.{keyword}".lstrip("."))


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_schema_documents_every_field_of_the_dataclass_with_its_default(document):
    """The schema is the format's documentation: a field per dataclass field, each described, with its default, and
    required exactly where the dataclass has no default."""
    described = schema(document)
    cls = DOCUMENTS[document]
    assert list(described["properties"]) == [f.name for f in fields(cls)]
    assert described["required"] == [f.name for f in fields(cls) if f.default is MISSING
                                      and f.default_factory is MISSING]
    for f in fields(cls):
        if f.name not in described["required"]:
            default = f.default if f.default is not MISSING else f.default_factory()
            assert described["properties"][f.name]["default"] == default, f.name
    for path, node in subschemas(described):
        assert "type" in node or "enum" in node, path  # what a message says the value must be
        if path.rsplit(".", 1)[-1] not in ("items", "additionalProperties", "propertyNames"):  # every named field
            assert len(node.get("description", "")) > 20, path


def test_the_activations_are_those_the_model_builds():
    assert schema("config")["properties"]["activation"]["enum"] == list(ACTIVATION_FUNCTIONS)


# Every upper bound the schemas hold, and where it comes from: the loading policy's constants
# (transformer/io/safety.py), or a card's own decoding and snapshot rules.
BOUNDS = {
    "config": {
        **{f"{name}.maximum": policy.MAX_VOCAB_SIZE for name in ("src_vocab_size", "tgt_vocab_size")},
        **{f"{name}.maximum": policy.MAX_VOCAB_SIZE - 1 for name in ("pad_id", "bos_id", "eos_id")},
        "d_model.maximum": policy.MAX_D_MODEL,
        "num_heads.maximum": policy.MAX_HEADS,
        "num_encoder_layers.maximum": policy.MAX_LAYERS,
        "num_decoder_layers.maximum": policy.MAX_LAYERS,
        "d_ff.maximum": policy.MAX_D_FF,
        "max_len.maximum": policy.MAX_LEN,
        "position_offset.maximum": policy.MAX_POSITION_OFFSET,
        "type_vocab_size.maximum": policy.MAX_TYPE_VOCAB,
        "num_kv_heads.maximum": policy.MAX_HEADS,
        "sliding_window.maximum": policy.MAX_LEN,
        # Numbers in the rotary formulas, not sizes: bounded so that a config stays finite and meaningful.
        "rope_theta.maximum": 10 ** 10,
        **{f"{name}.maximum": 1024 for name in ("rope_factor", "rope_low_freq_factor", "rope_high_freq_factor")},
        "rope_original_max_len.maximum": 2 ** 20,
        "dropout.exclusiveMaximum": 1,
        "layer_norm_eps.exclusiveMaximum": 1,
    },
    "card": {
        **{f"{name}.maxLength": policy.MAX_NAME_CHARS for name in ("name", "task", "machine", "licence", "weights")},
        **{f"{name}.maxLength": policy.MAX_TEXT_CHARS
           for name in ("description", "data", "training_command", "source", "conversion_command")},
        "metrics.maxProperties": policy.MAX_METRICS,
        "metrics.propertyNames.maxLength": policy.MAX_NAME_CHARS,
        "examples.maxItems": policy.MAX_EXAMPLES,
        "examples.items.maxLength": policy.MAX_EXAMPLE_CHARS,
        "parameters.maximum": policy.MAX_PARAMETERS,
        "history.maxItems": policy.MAX_HISTORY,
        "history.items.maxProperties": policy.MAX_HISTORY_KEYS,
        "history.items.propertyNames.maxLength": policy.MAX_NAME_CHARS,
        "history.items.data.maxLength": policy.MAX_NAME_CHARS,
        "snapshots.maxItems": policy.MAX_SNAPSHOTS,
        "snapshots.items.name.maxLength": policy.MAX_NAME_CHARS,
        "snapshots.items.fraction.maximum": 1,
        "training.maxProperties": 4 * policy.MAX_HISTORY_KEYS,
        "training.propertyNames.maxLength": policy.MAX_NAME_CHARS,
        "decoding.beam_size.maximum": 16,
        "decoding.length_penalty.maximum": 2,
        "decoding.coverage_penalty.maximum": 2,
    },
}


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_schema_bounds_are_the_loading_policy(document):
    upper = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")
    found = {f"{path}.{keyword}": node[keyword] for path, node in subschemas(schema(document)) for keyword in upper
             if keyword in node}
    assert found == BOUNDS[document]


@pytest.fixture
def folder(tmp_path):
    """The shipped reverse model's config.json and card.json, for a test to damage."""
    for file in (CONFIG_FILE, CARD_FILE):
        (tmp_path / file).write_text((SHIPPED / "reverse" / file).read_text())
    return tmp_path


def edit(folder: Path, file: str, change) -> None:
    values = json.loads((folder / file).read_text())
    (folder / file).write_text(json.dumps(change(values)))


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c | {"num_heads": 0}, "num_heads must be an integer from 1 to 256, got 0"),
    (lambda c: c | {"num_heads": "4"}, "num_heads must be an integer from 1 to 256, got '4'"),
    (lambda c: c | {"d_model": 128.0}, "d_model must be an integer from 1 to 4,096, got 128.0"),
    (lambda c: c | {"d_model": 8192}, "d_model must be an integer from 1 to 4,096, got 8,192"),
    (lambda c: c | {"num_decoder_layers": 65}, "num_decoder_layers must be an integer from 0 to 64, got 65"),
    (lambda c: c | {"dropout": 1}, r"dropout must be a number in \[0, 1\), got 1"),
    (lambda c: c | {"layer_norm_eps": 0}, r"layer_norm_eps must be a number in \(0, 1\), got 0"),
    (lambda c: c | {"pad_id": -1}, "pad_id must be an integer from 0 to 511,999, got -1"),
    (lambda c: c | {"norm_first": "no"}, "norm_first must be true or false, got 'no'"),
    (lambda c: c | {"activation": "tanh"}, "activation must be one of 'relu', 'gelu', 'silu', 'gelu_new', got 'tanh'"),
    (lambda c: {k: v for k, v in c.items() if k != "tgt_vocab_size"}, r"missing field\(s\) 'tgt_vocab_size'"),
    (lambda c: c | {"colour": "red", "size": 1}, r"unknown field\(s\) 'colour', 'size'"),
    (lambda c: [c], "the config must be an object, got a list of 1 entry"),
])
def test_a_config_problem_names_the_file_and_the_field(folder, change, message):
    edit(folder, CONFIG_FILE, change)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(folder / CONFIG_FILE))}: {message}$"):
        read_config(folder)


def first_snapshot(change):
    def changed(card: dict) -> dict:
        card["snapshots"][0] = change(card["snapshots"][0])
        return card
    return changed


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c | {"parameters": "many"}, "parameters must be an integer from 0 to 100,000,000,000, got 'many'"),
    (lambda c: c | {"parameters": 10 ** 12},
     "parameters must be an integer from 0 to 100,000,000,000, got 1,000,000,000,000"),
    (lambda c: c | {"wall_time_s": -1}, "wall_time_s must be a number of at least 0, got -1"),
    (lambda c: c | {"task": ["reverse"]}, "task must be a string of at most 200 characters, got a list of 1 entry"),
    (lambda c: c | {"examples": ["x" * 1001]},
     r"examples\[0\] must be a string of at most 1,000 characters, got 'x{40}'\.\.\. \(1,001 characters\)"),
    (lambda c: c | {"metrics": {"bleu": True}}, r"metrics\['bleu'\] must be a number, got True"),
    (lambda c: c | {"history": [{"step": 1, "k" * 201: 2.0}]},
     r"a key of history\[0\] must be a string of at most 200 characters, got 'k{40}'\.\.\. \(201 characters\)"),
    (lambda c: c | {"decoding": {"beam_size": 17}}, r"decoding\['beam_size'\] must be an integer from 1 to 16, got 17"),
    (lambda c: c | {"decoding": {"temperature": 1.0}}, r"decoding: unknown field\(s\) 'temperature'"),
    (lambda c: {k: v for k, v in c.items() if k not in ("name", "data")}, r"missing field\(s\) 'name', 'data'"),
    (lambda c: c | {"notes": "x"}, r"unknown field\(s\) 'notes'"),
    (first_snapshot(lambda s: s | {"name": "../model"}),
     r"snapshots\[0\]\['name'\] must be a string of at most 200 characters matching \^\[A-Za-z0-9_\.-\]\+\$, "
     r"got '\.\./model'"),
    (first_snapshot(lambda s: s | {"step": -1}), r"snapshots\[0\]\['step'\] must be an integer of at least 0, got -1"),
    (first_snapshot(lambda s: s | {"fraction": 1.5}), r"snapshots\[0\]\['fraction'\] must be a number from 0 to 1, "
                                                      r"got 1\.5"),
    (first_snapshot(lambda s: {k: v for k, v in s.items() if k != "fraction"}),
     r"snapshots\[0\]: missing field\(s\) 'fraction'"),
    (first_snapshot(lambda s: s | {"loss": 0.5}), r"snapshots\[0\]: unknown field\(s\) 'loss'"),
    (first_snapshot(lambda s: s["name"]), r"snapshots\[0\] must be an object, got 'step_000000'"),
])
def test_a_card_problem_names_the_file_and_the_field(folder, change, message):
    edit(folder, CARD_FILE, change)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(folder / CARD_FILE))}: {message}$"):
        read_card(folder)


def test_a_config_built_in_code_is_held_to_the_schema_too():
    with pytest.raises(ValueError, match=r"^dropout must be a number in \[0, 1\), got nan$"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, dropout=math.nan)
    with pytest.raises(ValueError, match=r"^d_model must be an integer from 1 to 4,096, got 32\.0$"):
        TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=32.0)


def test_a_message_lists_a_few_unknown_fields_and_counts_the_rest():
    problem = schema_problem({"src_vocab_size": 8, "tgt_vocab_size": 8} | {f"extra{i:02}": 1 for i in range(12)},
                             "config")
    assert problem == "unknown field(s) 'extra00', 'extra01', 'extra02', 'extra03', 'extra04' and 7 more"


def test_a_card_full_of_wrong_values_is_refused_at_once():
    """A 1 MiB card can hold a hundred thousand wrong values; validation stops after ERRORS_WEIGHED of them instead
    of building an exception for each."""
    card = json.loads((SHIPPED / "reverse" / CARD_FILE).read_text())
    card["history"] = [{f"key{i}": "not a number" for i in range(ERRORS_WEIGHED * 2)}] * 4000
    start = time.perf_counter()
    problem = schema_problem(card, "card")
    assert time.perf_counter() - start < 1.0
    assert problem.startswith("history[0]['key") and problem.endswith("must be a number, got 'not a number'")
