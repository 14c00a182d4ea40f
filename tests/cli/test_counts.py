"""Counts and sizes on the command line (autopar/cli/common.py parse_count): K/M/G/T and B
(billion, as in "4B tokens") for counts, powers of two for token batches, a trailing B as bytes
for byte sizes, and an unknown suffix refused by name."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from autopar.cli import main
from autopar.cli.common import parse_count
from autopar.cli.plan import parse_batch_bound
from autopar.errors import InputError


@pytest.mark.parametrize("text, kwargs, expected", [
    ("4B", {}, 4_000_000_000),                                    # B = billion = G, decimal
    ("4G", {}, 4_000_000_000),
    ("16M", {}, 16_000_000),
    ("4B", {"binary": True}, 4 * 2**30),                          # batch tokens: B = G = 2**30
    ("16M", {"binary": True}, 16_777_216),
    ("1Gi", {}, 2**30),
    ("16MB", {"binary": True, "size_bytes": True}, 16 * 2**20),  # a byte size: the B is bytes
    ("4B", {"binary": True, "size_bytes": True}, 4),
    ("1e3", {}, 1000),
    ("2P", {}, 2 * 10**15),                                       # P: plan --tokens read it before it used this parser
    ("1P", {"binary": True}, 2**50),
    ("1Pi", {}, 2**50),
])
def test_suffixes(text, kwargs, expected):
    assert parse_count(text, "f", **kwargs) == expected


@pytest.mark.parametrize("text, message", [
    ("16Q", "f='16Q': unknown suffix 'Q'; use K/M/G/T/P or B (= G, powers of two) or Ki/Mi/Gi/Ti/Pi"),
    ("16MB", "f='16MB': unknown suffix 'MB'; use K/M/G/T/P or B (= G, powers of two) or Ki/Mi/Gi/Ti/Pi"),
    ("nan", "f='nan': must be a positive, finite number"),
    ("abc", "f='abc': must be a number with an optional K/M/G/T/P or B (= G, powers of two) or Ki/Mi/Gi/Ti/Pi suffix"),
])
def test_bad_counts_name_the_rule(text, message):
    with pytest.raises(InputError) as err:
        parse_count(text, "f", binary=True)
    assert str(err.value) == message


def test_plan_batch_bound_reads_b_as_g():
    assert parse_batch_bound("4B", "critical-batch-tokens") == 4 * 2**30
    with pytest.raises(InputError, match=r"critical-batch-tokens='16MB': unknown suffix 'MB'"):
        parse_batch_bound("16MB", "critical-batch-tokens")


def test_global_batch_tokens_4b_is_four_billion_tokens():
    # '4B' was read as 4 tokens ("must be a multiple of seq-len=4096"); now 2**32 tokens = 2**20 sequences
    r = CliRunner().invoke(main, ["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "4096",
                                  "--global-batch-tokens", "4B", "--plan", "tp=8", "--json"])
    assert r.exit_code == 0, r.output
    assert '"num_microbatches": 1048576' in r.stdout  # tp=8 on 8 GPUs: dp=1, mbs=1


@pytest.mark.parametrize("text", ["1_000", "1,000", "4_096K"])
def test_digit_separators_are_named(text):
    # float('1_000') is 1000.0, so this fell through to "must be a positive, finite number" -- a
    # rule 1,000 keeps; the rule it breaks is the count syntax (parse_quantity's separator check)
    with pytest.raises(InputError) as err:
        parse_count(text, "f", binary=True)
    assert str(err.value) == (f"f={text!r}: must be a number without '_' or ',' between digits (1000 or 1K, not 1_000), "
                              "with an optional K/M/G/T/P or B (= G, powers of two) or Ki/Mi/Gi/Ti/Pi suffix")


def test_global_batch_tokens_with_underscores_names_the_syntax():
    r = CliRunner().invoke(main, ["estimate", "--model", "llama3-8b", "--cluster", "dgx-h100", "--seq-len", "4096",
                                  "--global-batch-tokens", "1_000", "--plan", "tp=8"])
    # one line, exit 1, the rule from parse_quantity (was "must be a positive, finite number")
    assert r.exit_code == 1
    assert r.stderr == ("Error: global-batch-tokens='1_000': must be a number without '_' or ',' between digits (1000 or 1K, "
                        "not 1_000), with an optional K/M/G/T/P or B (= G, powers of two) or Ki/Mi/Gi/Ti/Pi suffix\n")


@pytest.mark.parametrize("text, suffix", [("4BB", "BB"), ("4bb", "BB"), ("4GiBB", "GIBB"), ("16MBB", "MBB")])
def test_a_byte_size_has_one_b(text, suffix):
    # the trailing B is bytes; what is left ('4B') was read as 4 billion (4 x 2**30 with binary)
    with pytest.raises(InputError) as err:
        parse_count(text, "bytes", binary=True, size_bytes=True)
    assert str(err.value) == f"bytes={text!r}: unknown suffix {suffix!r}; use K/M/G/T/P or Ki/Mi/Gi/Ti/Pi (a trailing B is bytes)"


def test_comm_refuses_4bb():
    # `autopar comm --bytes 4BB` costed a 4,294,967,296-byte all-reduce; 4B alone is 4 bytes
    r = CliRunner().invoke(main, ["comm", "--cluster", "dgx-h100", "--op", "all_reduce", "--bytes", "4BB"])
    assert r.exit_code == 1
    assert r.stderr == "Error: bytes='4BB': unknown suffix 'BB'; use K/M/G/T/P or Ki/Mi/Gi/Ti/Pi (a trailing B is bytes)\n"
    r = CliRunner().invoke(main, ["comm", "--cluster", "dgx-h100", "--op", "all_reduce", "--bytes", "4B", "--json"])
    assert r.exit_code == 0 and '"size_bytes": 4,' in r.stdout


@pytest.mark.parametrize("value, text", [(1e15, "1P"), (2.5e15, "2.5P"), (1.5e13, "15T")])
def test_what_human_count_writes_reads_back(value, text):
    # autopar.report.COUNT_UNITS: "the suffixes autopar reads back"; P was written but refused
    from autopar.report import human_count

    assert human_count(value) == text
    assert parse_count(text, "tokens") == value
