#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (valid files) and the bad-input corpus (invalid ones).

    /usr/bin/python3 tests/data/make_corpus.py

Both are committed; run this again after changing it. The bytes are built here by hand from the
formats' definitions (safetensors: 8-byte little-endian header length, JSON header, data; .npy
version 1-3: magic, version, header length, a Python-dict header, data), not by attograd's
writer, so the files also check the reader against the formats rather than against itself.

tests/data/tiny_gpt.safetensors, the base of the GPT cases, is a real checkpoint written by
    minigpt train --corpus FILE --steps 2 --eval-interval 2 --eval-batches 1 --batch 2 \\
        --block 4 --layers 1 --heads 1 --embd 4
on a text of the characters "\\n", " ", "a", "b", "c" (vocab_size 5, block_size 4, 1 layer,
1 head, n_embd 4).

The bad corpus goes to tests/data/bad/, with MANIFEST.tsv listing for each file the loader that
must reject it (safetensors, npy or gpt) and a piece of the error message it must give.
tests/io/bad_inputs_test.cpp reads the manifest.
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BAD = os.path.join(HERE, "bad")
FUZZ = os.path.join(ROOT, "tests", "fuzz", "corpus")


# --- building files --------------------------------------------------------------------------

def safetensors(header, data=b"", header_len=None):
    """A safetensors file: `header` is a dict (or raw bytes/str used as is)."""
    if isinstance(header, dict):
        text = json.dumps(header, separators=(",", ":")).encode()
    elif isinstance(header, str):
        text = header.encode()
    else:
        text = header
    n = len(text) if header_len is None else header_len
    return struct.pack("<Q", n) + text + data


def pack_tensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return safetensors(header, data)


def f32(*values):
    return struct.pack(f"<{len(values)}f", *values)


def read_safetensors(path):
    """(metadata, [(name, dtype, shape, raw)]) in data order."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    entries = sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0])
    return meta, [(k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in entries]


def npy(descr, shape, data, version=1, fortran="False", raw_header=None, end=b"\n"):
    if raw_header is None:
        raw_header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {tuple(shape)!r}, }}"
    header = raw_header.encode("latin-1")
    prefix_len = 10 if version == 1 else 12
    pad = (64 - (prefix_len + len(header) + 1) % 64) % 64
    header += b" " * pad + end
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header + data


def write(directory, name, blob):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(blob)


# --- seeds: valid files ------------------------------------------------------------------------

def seeds():
    shutil.rmtree(FUZZ, ignore_errors=True)
    d = os.path.join(FUZZ, "safetensors")
    write(d, "one_f32.safetensors", pack_tensors([("a", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))]))
    write(d, "every_dtype.safetensors", pack_tensors([
        ("f32", "F32", [2], f32(1.5, -2)),
        ("f64", "F64", [], struct.pack("<d", 3.25)),
        ("i64", "I64", [3], struct.pack("<3q", 1, -2, 3)),
        ("mask", "BOOL", [2, 2], bytes([1, 0, 0, 1])),
        ("empty", "F32", [0, 4], b""),
    ], metadata={"note": "seed", "config": "{\"x\": 1}"}))
    d = os.path.join(FUZZ, "npy")
    write(d, "f32_2x3.npy", npy("<f4", (2, 3), f32(1, 2, 3, 4, 5, 6)))
    write(d, "f64_scalar.npy", npy("<f8", (), struct.pack("<d", 2.5)))
    write(d, "i64_v2.npy", npy("<i8", (4,), struct.pack("<4q", 0, 1, -1, 7), version=2))
    write(d, "bool.npy", npy("|b1", (3,), bytes([1, 0, 1])))
    write(d, "empty.npy", npy("<f4", (0, 2), b""))
    write(d, "f32_v3.npy", npy("<f4", (1, 1), f32(0.5), version=3))
    # Written differently from NumPy's writer but read the same by it: double quotes, other key
    # order, no trailing comma, tabs and newlines between tokens.
    write(d, "f64_spelled_differently.npy", npy(None, None, struct.pack("<2d", 1, 2),
                                                 raw_header='{"shape":\t( 2 , ),\n "descr": "<f8",'
                                                            ' "fortran_order" : False}'))
    d = os.path.join(FUZZ, "tokenizer")
    write(d, "ascii.txt", b"the cat sat on the mat.\n")
    write(d, "chinese.txt", "床前明月光，疑是地上霜。\n".encode())
    write(d, "mixed.txt", "naïve café — 注意力 😀 \t\n".encode())
    write(d, "overlong.txt", b"ab\xc0\xafcd")
    d = os.path.join(FUZZ, "checkpoint")
    write(d, "tiny_gpt.safetensors", open(os.path.join(HERE, "tiny_gpt.safetensors"), "rb").read())


# --- the bad corpus ------------------------------------------------------------------------------

def bad():
    shutil.rmtree(BAD, ignore_errors=True)
    os.makedirs(BAD)
    manifest = []

    def add(name, loader, blob, expected):
        write(BAD, name, blob)
        manifest.append((name, loader, expected))

    # safetensors: the file's sections, cut short at each.
    base_path = os.path.join(HERE, "tiny_gpt.safetensors")
    base = open(base_path, "rb").read()
    (n,) = struct.unpack("<Q", base[:8])
    meta, tensors = read_safetensors(base_path)
    first = len(tensors[0][3])
    cuts = {
        "empty_file": (0, "too short for the 8-byte header length"),
        "cut_in_length": (5, "too short for the 8-byte header length"),
        "cut_after_length": (8, f"header length {n} is larger than the 0 bytes that follow it"),
        "cut_in_header": (8 + n // 2, f"header length {n} is larger than"),
        "cut_after_header": (8 + n, "fall outside the 0 bytes of data"),
        "cut_in_first_tensor": (8 + n + first // 2, "fall outside the"),
        "cut_after_first_tensor": (8 + n + first, "fall outside the"),
        "cut_last_byte": (len(base) - 1, "fall outside the"),
    }
    for name, (at, expected) in cuts.items():
        add(f"{name}.safetensors", "safetensors", base[:at], expected)

    one = [("a", "F32", [2], f32(1, 2))]
    add("header_len_0.safetensors", "safetensors", safetensors(b"{}", header_len=0), "header length is 0")
    add("header_len_2_63.safetensors", "safetensors", safetensors(b"{}", header_len=1 << 63),
        "header length 9223372036854775808 is larger than the 2 bytes that follow it")
    add("header_len_max.safetensors", "safetensors", safetensors(b"{}", header_len=(1 << 64) - 1),
        "header length 18446744073709551615 is larger than")
    add("header_not_json.safetensors", "safetensors", safetensors("this is not json"), "header is not valid JSON")
    add("header_truncated_json.safetensors", "safetensors", safetensors('{"a": {"dtype": "F32"'),
        "header is not valid JSON")
    add("header_invalid_utf8.safetensors", "safetensors", safetensors(b'{"\xff\xfe": 1}'), "header is not valid JSON")
    add("header_array.safetensors", "safetensors", safetensors("[1, 2, 3]"), "header must be a JSON object")
    add("entry_not_object.safetensors", "safetensors", safetensors({"a": [0, 8]}, f32(1, 2)),
        "entry 'a' must be an object")
    add("entry_missing_offsets.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [2]}}, f32(1, 2)),
        'needs exactly "dtype", "shape" and "data_offsets"')
    add("entry_extra_field.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}}, f32(1, 2)),
        'needs exactly "dtype", "shape" and "data_offsets"')
    add("shape_not_array.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}}, f32(1, 2)), "shape")
    add("shape_negative.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, f32(1, 2)),
        "tensor 'a' has a negative size in its shape")
    add("shape_fraction.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [2.5], "data_offsets": [0, 8]}}, f32(1, 2)), "integer")
    add("shape_overflow.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [1 << 32, 1 << 32], "data_offsets": [0, 8]}}, f32(1, 2)),
        "whose element count overflows")
    add("shape_huge_no_data.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F64", "shape": [1 << 30, 1 << 30], "data_offsets": [0, 8]}}, f32(1, 2)),
        "but its data_offsets span 8 bytes")
    add("shape_bytes_overflow.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F64", "shape": [1 << 31, 1 << 31], "data_offsets": [0, 8]}}, f32(1, 2)),
        "tensor 'a' is float64 [2147483648, 2147483648] (4611686018427387904 elements of 8 bytes, more than 2^64 "
        "bytes) but its data_offsets span 8 bytes")
    add("shape_vs_bytes.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, f32(1, 2)),
        "tensor 'a' is float32 [3] (12 bytes) but its data_offsets span 8 bytes")
    add("dtype_unknown.safetensors", "safetensors",
        safetensors({"a": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)),
        "tensor 'a' has dtype \"Q4\"; supported: F32, F64, I64, BOOL")
    add("dtype_f16.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F16", "shape": [4], "data_offsets": [0, 8]}}, f32(1, 2)), "has dtype \"F16\"")
    add("dtype_not_string.safetensors", "safetensors",
        safetensors({"a": {"dtype": 32, "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)), "dtype")
    add("offsets_past_end.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}, f32(1, 2)),
        "tensor 'a' data_offsets [0, 12] fall outside the 8 bytes of data")
    add("offsets_negative.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}}, f32(1, 2)), "fall outside")
    add("offsets_reversed.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}}, f32(1, 2)),
        "data_offsets [8, 0] fall outside")
    add("offsets_three.safetensors", "safetensors",
        safetensors({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4, 8]}}, f32(1, 2)),
        "data_offsets must be [begin, end]")
    add("offsets_overlap.safetensors", "safetensors", safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, f32(1, 2, 3)),
        "tensor 'b' starts at byte 4 but the previous tensor ends at byte 8 (overlap or gap)")
    add("offsets_gap.safetensors", "safetensors", safetensors({
        "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
        "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}}, f32(1, 2, 3)),
        "tensor 'b' starts at byte 8 but the previous tensor ends at byte 4 (overlap or gap)")
    add("offsets_same_range.safetensors", "safetensors", safetensors({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, f32(1, 2)), "(overlap or gap)")
    add("trailing_data.safetensors", "safetensors", pack_tensors(one)[:] + b"\0\0\0\0",
        "4 bytes of data follow the last tensor")
    add("duplicate_names.safetensors", "safetensors",
        safetensors('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                    '"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)), 'duplicate key "a"')
    add("bool_byte_7.safetensors", "safetensors", pack_tensors([("m", "BOOL", [2], bytes([1, 7]))]),
        "tensor 'm' holds a BOOL byte that is neither 0 nor 1")
    add("metadata_not_string.safetensors", "safetensors",
        safetensors({"__metadata__": {"step": 5}, "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
                    f32(1, 2)), "__metadata__ value")

    # .npy: the magic and version, then the header, a Python dict literal, one mistake each.
    add("npy_bad_magic.npy", "npy", b"\x93NUMPX\x01\x00" + b"\0" * 64, "missing the \\x93NUMPY magic")
    add("npy_short.npy", "npy", b"\x93NUMPY\x01", "missing the \\x93NUMPY magic")
    add("npy_version_9.npy", "npy", npy("<f4", (1,), f32(1), version=1).replace(b"NUMPY\x01", b"NUMPY\x09", 1),
        "unsupported .npy version 9.0")
    add("npy_version_0.npy", "npy", npy("<f4", (1,), f32(1), version=1).replace(b"NUMPY\x01", b"NUMPY\x00", 1),
        "unsupported .npy version 0.0")
    add("npy_version_1_5.npy", "npy",
        npy("<f4", (1,), f32(1), version=1).replace(b"NUMPY\x01\x00", b"NUMPY\x01\x05", 1), "unsupported .npy version 1.5")
    good = npy("<f4", (2,), f32(1, 2))
    add("npy_header_len_past_end.npy", "npy", good[:8] + struct.pack("<H", 60000) + good[10:],
        "header length 60000 is larger than")
    add("npy_v2_truncated.npy", "npy", b"\x93NUMPY\x02\x00\x10\x00\x00", "truncated header")
    long_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }" + " " * 10000
    add("npy_header_too_long.npy", "npy", npy(None, None, f32(1), version=2, raw_header=long_header),
        "is over the 10000 bytes NumPy reads")

    def header(name, text, expected):
        add(f"npy_{name}.npy", "npy", npy(None, None, f32(1, 2), raw_header=text), expected)

    ok = {"descr": "'<f4'", "fortran_order": "False", "shape": "(2,)"}

    def dict_with(**values):
        d = dict(ok, **values)
        return "{" + ", ".join(f"'{k}': {v}" for k, v in d.items() if v is not None) + ", }"

    header("no_descr", dict_with(descr=None), "header has no 'descr' entry")
    header("no_fortran_order", dict_with(fortran_order=None), "header has no 'fortran_order' entry")
    header("no_shape", dict_with(shape=None), "header has no 'shape' entry")
    header("unknown_key", dict_with(extra="1"), "header has an unknown key 'extra'")
    header("key_twice", "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
           "the key 'descr' is given twice")
    header("key_not_string", "{1: 2, 'descr': '<f4', 'fortran_order': False, 'shape': (2,), }",
           "expected a quoted key or '}', found '1'")
    header("not_a_dict", "[('descr', '<f4')]", "the header must start with '{' (a Python dict)")
    header("empty", "", "the header must start with '{'")
    header("leading_space", " " + dict_with(), "the header must start with '{'")
    header("missing_colon", "{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }",
           "expected ':' after the key 'descr'")
    header("missing_comma", "{'descr': '<f4' 'fortran_order': False, 'shape': (2,), }",
           "expected ',' or '}' after a value")
    header("unclosed_dict", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ",
           "expected a quoted key or '}', found the end of the header")
    header("unclosed_string", "{'descr: '<f4', 'fortran_order': False, 'shape': (2,), }",
           "expected ':' after the key 'descr: '")
    header("string_escape", "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,), }",
           "escape sequences in strings are not read")
    header("empty_value", "{'descr':      ", "expected a value")
    add("npy_no_final_newline.npy", "npy", npy("<f4", (2,), f32(1, 2), end=b" "),
        "the header must end with '\\n' after its padding")
    header("text_after_dict", dict_with() + " x", "expected only spaces and a final '\\n' after the dict, found 'x'")
    header("newline_before_padding", dict_with() + "\n  ", "the header must end at its '\\n'")
    header("dtype_f2", dict_with(descr="'<f2'"), "dtype '<f2' is not supported")
    header("big_endian", dict_with(descr="'>f4'"), "dtype '>f4' is not supported")
    header("descr_not_string", dict_with(descr="4"), "'descr' must be a string, got the integer 4")
    header("fortran", dict_with(fortran_order="True"), "Fortran-ordered arrays are not supported")
    header("fortran_int", dict_with(fortran_order="0"), "'fortran_order' must be True or False, got the integer 0")
    header("fortran_string", dict_with(fortran_order="'False'"),
           "'fortran_order' must be True or False, got the string 'False'")
    header("fortran_lowercase", dict_with(fortran_order="false"), "expected a value")
    header("shape_list", dict_with(shape="[2]"), "shape must be a tuple such as (), (3,) or (2, 3), got the list [2]")
    header("shape_int_in_parens", dict_with(shape="(2)"), "shape must be a tuple such as (), (3,) or (2, 3), got the "
           "integer 2")  # (2) is the integer 2 in parentheses; (2,) is the tuple
    header("shape_bare_int", dict_with(shape="2"), "got the integer 2")
    header("shape_string", dict_with(shape="'(2,)'"), "shape must be a tuple such as (), (3,) or (2, 3), got the string")
    header("shape_lone_comma", dict_with(shape="(,)"), "expected an integer, found ','")
    header("shape_double_comma", dict_with(shape="(2,,)"), "expected an integer, found ','")
    header("shape_nested", dict_with(shape="((2,),)"), "expected an integer, found '('")
    header("shape_float", dict_with(shape="(2.0,)"), "an integer written in decimal digits only, found '.'")
    header("shape_hex", dict_with(shape="(0x2,)"), "an integer written in decimal digits only, found 'x'")
    header("shape_leading_zero", dict_with(shape="(02,)"), "an integer with a leading zero")
    header("shape_bool", dict_with(shape="(True,)"), "expected an integer, found 'T'")
    header("shape_beyond_int64", dict_with(shape="(9223372036854775808,)"), "an integer beyond the int64 range")
    header("shape_unclosed", dict_with(shape="(2, 3"), "byte 57: expected an integer, found '}'")
    header("shape_negative", dict_with(shape="(-2,)"), "shape entry -2 is negative")
    add("npy_shape_overflow.npy", "npy", npy("<f4", (1 << 40, 1 << 40), f32(1, 2)),
        "has an element count that overflows")
    add("npy_shape_huge.npy", "npy", npy("<f8", (1 << 30, 1 << 30), f32(1, 2)),
        "needs 9223372036854775808 bytes of data, the file has 8")
    add("npy_data_short.npy", "npy", npy("<f4", (3,), f32(1, 2)), "needs 12 bytes of data, the file has 8")
    add("npy_data_long.npy", "npy", npy("<f4", (1,), f32(1, 2)), "needs 4 bytes of data, the file has 8")
    add("npy_bool_byte_2.npy", "npy", npy("|b1", (2,), bytes([0, 2])), "a bool byte is neither 0 nor 1")

    # GPT checkpoints: a good file made wrong in one way each.
    config = json.loads(meta["config"])

    def gpt(name, expected, tensors=tensors, metadata=None, **config_changes):
        m = dict(meta if metadata is None else metadata)
        if config_changes:
            c = dict(config)
            for k, v in config_changes.items():
                if v is None:
                    c.pop(k)
                else:
                    c[k] = v
            m["config"] = json.dumps(c)
        add(f"gpt_{name}.safetensors", "gpt", pack_tensors(tensors, m), expected)

    def without(name):
        return [t for t in tensors if t[0] != name]

    def replaced(name, dtype=None, shape=None, raw=None):
        out = []
        for t in tensors:
            if t[0] == name:
                t = (name, dtype or t[1], shape or t[2], raw if raw is not None else t[3])
            out.append(t)
        return out

    gpt("no_metadata", 'metadata has no "config" entry', metadata={})
    gpt("config_not_json", "bad metadata: json:", metadata=dict(meta, config="{\"vocab_size\": 5,"))
    gpt("config_missing_n_head", 'missing "n_head"', n_head=None)
    gpt("config_string_size", "config.n_embd must be an integer", n_embd="four")
    gpt("config_vocab_disagrees", "metadata lists 5 vocabulary tokens but config.vocab_size is 6", vocab_size=6)
    gpt("config_embd_disagrees", "tensor 'transformer.wte.weight' has shape [5, 4] but the config says [5, 8]",
        n_embd=8)
    gpt("config_block_disagrees", "tensor 'transformer.wpe.weight' has shape [4, 4] but the config says [64, 4]",
        block_size=64)
    gpt("config_layers_disagree", "the tensors hold 1 layers but config.n_layer is 2", n_layer=2)
    gpt("config_heads_zero", "needs positive sizes and n_embd divisible by n_head", n_head=0)
    gpt("config_heads_indivisible", "needs positive sizes and n_embd divisible by n_head", n_head=3)
    gpt("config_huge", "but the config says [5, 1099511627776]", n_embd=1 << 40, n_head=1)
    gpt("vocab_not_array", "bad metadata", metadata=dict(meta, vocab="\"abcde\""))
    vocab = json.loads(meta["vocab"])  # ["\n", " ", "a", "b", "c"]
    gpt("vocab_duplicated", "bad vocab metadata: CharTokenizer: the vocabulary lists \"a\" (U+0061) twice "
        "(entries 2 and 3)", metadata=dict(meta, vocab=json.dumps(vocab[:3] + ["a", "c"])))
    gpt("vocab_unsorted", "the vocabulary must be sorted by code point; entry 3, \"a\" (U+0061), comes after \"b\"",
        metadata=dict(meta, vocab=json.dumps(vocab[:2] + ["b", "a", "c"])))
    gpt("vocab_multi_character", "bad vocab metadata: CharTokenizer: token \"ab\" is not exactly one character "
        "(entry 2 of the vocabulary)", metadata=dict(meta, vocab=json.dumps(vocab[:2] + ["ab", "b", "c"])))
    gpt("vocab_empty_string", "token \"\" is not exactly one character (entry 4",
        metadata=dict(meta, vocab=json.dumps(vocab[:4] + [""])))
    gpt("missing_bias_of_biased_model", "tensor 'transformer.h.0.attn.c_attn.bias' is missing from the checkpoint "
        "(its config has bias = true", tensors=without("transformer.h.0.attn.c_attn.bias"))
    gpt("nan_weight", "load_gpt: tensor 'transformer.ln_f.weight' holds nan at element 2 (1 non-finite values in all)",
        tensors=replaced("transformer.ln_f.weight", raw=f32(1, 1, float("nan"), 1)))
    gpt("inf_weight", "tensor 'transformer.wpe.weight' holds -inf at element 0",
        tensors=replaced("transformer.wpe.weight", raw=f32(float("-inf"), *range(15))))
    gpt("missing_tensor", "tensor 'transformer.h.0.ln_2.bias' is missing from the checkpoint",
        tensors=without("transformer.h.0.ln_2.bias"))
    gpt("missing_wte", "tensor 'transformer.wte.weight' is missing from the checkpoint",
        tensors=without("transformer.wte.weight"))
    gpt("unexpected_tensor", "unexpected tensor 'transformer.h.0.attn.extra' in the checkpoint",
        tensors=tensors + [("transformer.h.0.attn.extra", "F32", [4], f32(0, 0, 0, 0))])
    gpt("tensor_of_layer_7", "tensor 'transformer.h.7.ln_1.weight' belongs to layer 7 but config.n_layer is 1",
        tensors=tensors + [("transformer.h.7.ln_1.weight", "F32", [4], f32(1, 1, 1, 1))])
    gpt("layer_not_a_number", "has no layer number",
        tensors=tensors + [("transformer.h.x.ln_1.weight", "F32", [4], f32(1, 1, 1, 1))])
    gpt("wrong_shape", "tensor 'transformer.h.0.mlp.c_fc.weight' has shape [8, 8] in the checkpoint, the model "
        "needs [16, 4]", tensors=replaced("transformer.h.0.mlp.c_fc.weight", shape=[8, 8]))
    gpt("integer_weights", "weights must be F32 or F64",
        tensors=replaced("transformer.ln_f.weight", dtype="I64", raw=struct.pack("<4q", 1, 1, 1, 1)))
    gpt("separate_lm_head", "lm_head.weight differs from transformer.wte.weight",
        tensors=tensors + [("lm_head.weight", "F32", [5, 4], f32(*range(20)))])

    with open(os.path.join(BAD, "MANIFEST.tsv"), "w") as f:
        f.write("# file\tloader\ta piece of the error it must give (written by make_corpus.py)\n")
        for name, loader, expected in manifest:
            f.write(f"{name}\t{loader}\t{expected}\n")
    print(f"{len(manifest)} bad files in {os.path.relpath(BAD, ROOT)}")


if __name__ == "__main__":
    seeds()
    bad()
